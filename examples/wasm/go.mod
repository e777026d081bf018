module github.com/shardhost/shardhost/examples/wasm

go 1.24

require github.com/shardhost/shardhost/guest-sdk/go v0.0.0

replace github.com/shardhost/shardhost/guest-sdk/go => ../../guest-sdk/go
