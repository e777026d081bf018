module github.com/shardhost/shardhost/examples/wasm

// go 1.23, not higher: TinyGo 0.34 builds with a Go 1.19-1.23 standard library and refuses
// a module that asks for a newer language version. Go's own wasip1 port builds it too.
go 1.23

require github.com/shardhost/shardhost/guest-sdk/go v0.0.0

replace github.com/shardhost/shardhost/guest-sdk/go => ../../guest-sdk/go
