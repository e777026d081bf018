package testwasm

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// Rustc is the compiler of the Rust guests: Debian's rustc, whose std includes the
// wasm32-unknown-unknown target (a rustup toolchain earlier in PATH usually lacks it).
const Rustc = "/usr/bin/rustc"

// rustPackages are the Debian packages Rust guests need (.ci/run installs them).
const rustPackages = "rustc libstd-rust-dev-wasm32 lld-14"

// RustPath builds examples/wasm/NAME/lib.rs, a Rust entity, into a cdylib for
// wasm32-unknown-unknown with the Rust guest SDK, as the Makefile does, and returns the
// .wasm file's path. The SDK's rlib and each module are built once per test process.
// Without /usr/bin/rustc the test fails and says what to install.
func RustPath(tb testing.TB, name string) string {
	tb.Helper()
	return RustPathWith(tb, name)
}

// RustPathWith is RustPath with more rustc flags (for example --cfg bank_limit, a
// variant of an example).
func RustPathWith(tb testing.TB, name string, flags ...string) string {
	tb.Helper()
	mu.Lock()
	defer mu.Unlock()
	key := strings.Join(append([]string{"rust/" + name}, flags...), " ")
	if p, ok := built[key]; ok {
		return p
	}
	if _, err := os.Stat(Rustc); err != nil {
		tb.Fatalf("testwasm: %s not found: Rust guests need Debian's Rust toolchain for wasm32: "+
			"apt-get update && apt-get install -y --no-install-recommends %s (.ci/run installs it)", Rustc, rustPackages)
	}
	rdir := filepath.Join(tempDir(tb), "rust")
	sdk := filepath.Join(rdir, "libshardhost.rlib")
	if _, ok := built["rust-sdk"]; !ok {
		if err := os.MkdirAll(rdir, 0o755); err != nil {
			tb.Fatal(err)
		}
		rustc(tb, "the Rust guest SDK", "--edition", "2021", "--crate-type", "rlib", "--crate-name", "shardhost",
			"--target", "wasm32-unknown-unknown", "-C", "opt-level=3", "-C", "panic=abort",
			"-o", sdk, filepath.Join("guest-sdk", "rust", "src", "lib.rs"))
		built["rust-sdk"] = sdk
	}
	out := filepath.Join(rdir, name+".wasm")
	if len(flags) > 0 {
		d, err := os.MkdirTemp(rdir, "variant-")
		if err != nil {
			tb.Fatal(err)
		}
		out = filepath.Join(d, name+".wasm")
	}
	// Relative source paths keep the build directory out of panic locations.
	args := append([]string{"--edition", "2021", "--crate-type", "cdylib", "--crate-name", strings.ReplaceAll(name, "-", "_"),
		"--target", "wasm32-unknown-unknown", "-C", "opt-level=3", "-C", "lto=yes", "-C", "panic=abort",
		"-C", "strip=symbols", "-C", "link-arg=-zstack-size=65536",
		"--extern", "shardhost=" + sdk, "-L", rdir}, flags...)
	rustc(tb, name+".wasm", append(args, "-o", out, filepath.Join("examples", "wasm", name, "lib.rs"))...)
	built[key] = out
	return out
}

// RustBytes returns the bytes of the module RustPath builds.
func RustBytes(tb testing.TB, name string) []byte {
	tb.Helper()
	return RustBytesWith(tb, name)
}

// RustBytesWith returns the bytes of the module RustPathWith builds.
func RustBytesWith(tb testing.TB, name string, flags ...string) []byte {
	tb.Helper()
	b, err := os.ReadFile(RustPathWith(tb, name, flags...))
	if err != nil {
		tb.Fatal(err)
	}
	return b
}

// rustc runs Rustc in the repository's root with args.
func rustc(tb testing.TB, what string, args ...string) {
	tb.Helper()
	cmd := exec.Command(Rustc, args...)
	cmd.Dir = RepoRoot()
	if b, err := cmd.CombinedOutput(); err != nil {
		tb.Fatalf("building %s: %s %v: %v\n%s", what, Rustc, args, err, b)
	}
}
