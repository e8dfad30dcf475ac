// Command protoc-gen-go-tram is a protoc (and buf) plugin: typed tram
// clients and servers for Go next to protoc-gen-go's messages.
//
//	protoc --go_out=. --go-tram_out=. kv.proto
package main

import (
	"google.golang.org/protobuf/compiler/protogen"
	"google.golang.org/protobuf/types/pluginpb"

	"github.com/tram-rpc/tram/go/gen"
)

func main() {
	protogen.Options{}.Run(func(p *protogen.Plugin) error {
		p.SupportedFeatures = uint64(pluginpb.CodeGeneratorResponse_FEATURE_PROTO3_OPTIONAL)
		for _, f := range p.Files {
			if f.Generate {
				gen.GenerateFile(p, f)
			}
		}
		return nil
	})
}
