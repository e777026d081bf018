//go:build !(tinygo && wasm)

package shardhost

// canRecover says whether recover stops a panic. TinyGo's WebAssembly targets abort on a
// panic (on a host, the message traps), so tests that check a panic with recover pass
// without it there. (TinyGo's testing package cannot stop a test early: Skip and Fatal
// go on with the test, so such tests return instead.)
const canRecover = true
