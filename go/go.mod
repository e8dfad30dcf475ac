module github.com/tram-rpc/tram/go

go 1.22
