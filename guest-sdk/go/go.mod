module github.com/shardhost/shardhost/guest-sdk/go

go 1.24
