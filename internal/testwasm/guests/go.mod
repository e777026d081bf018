module github.com/shardhost/shardhost/internal/testwasm/guests

// Test guests of the host's tests (built by testwasm.GuestPath). go 1.23 as the
// examples' module: TinyGo builds it too.
go 1.23

require github.com/shardhost/shardhost/guest-sdk/go v0.0.0

replace github.com/shardhost/shardhost/guest-sdk/go => ../../../guest-sdk/go
