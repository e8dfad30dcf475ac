module github.com/tram-rpc/tram/go/gen

go 1.24

require (
	github.com/tram-rpc/tram/go v0.0.0-00010101000000-000000000000
	google.golang.org/protobuf v1.36.12
)

replace github.com/tram-rpc/tram/go => ../
