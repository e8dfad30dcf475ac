package gen

import (
	"flag"
	"os"
	"path/filepath"
	"testing"

	gengo "google.golang.org/protobuf/cmd/protoc-gen-go/internal_gengo"
	"google.golang.org/protobuf/compiler/protogen"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/descriptorpb"
	"google.golang.org/protobuf/types/pluginpb"
)

var update = flag.Bool("update", false, "rewrite internal/kvpb from the generators")

// generated runs protoc-gen-go and this generator on examples/proto/kv.proto
// (its descriptors as tram-build writes them, testdata/examples.binpb, kept
// current by examples/tests/go_client.rs) as protoc would: one
// CodeGeneratorRequest, no protoc needed.
func generated(t *testing.T) map[string]string {
	t.Helper()
	raw, err := os.ReadFile("testdata/examples.binpb")
	if err != nil {
		t.Fatal(err)
	}
	var set descriptorpb.FileDescriptorSet
	if err := proto.Unmarshal(raw, &set); err != nil {
		t.Fatal(err)
	}
	req := &pluginpb.CodeGeneratorRequest{
		FileToGenerate: []string{"kv.proto"},
		Parameter:      proto.String("paths=source_relative,Mkv.proto=github.com/tram-rpc/tram/go/gen/internal/kvpb"),
		ProtoFile:      set.File,
	}
	plugin, err := protogen.Options{}.New(req)
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range plugin.Files {
		if f.Generate {
			gengo.GenerateFile(plugin, f)
			GenerateFile(plugin, f)
		}
	}
	resp := plugin.Response()
	if resp.Error != nil {
		t.Fatal(*resp.Error)
	}
	out := map[string]string{}
	for _, f := range resp.File {
		out[f.GetName()] = f.GetContent()
	}
	return out
}

func TestGeneratedCodeIsCurrent(t *testing.T) {
	files := generated(t)
	if len(files) != 2 {
		t.Fatalf("generated %d files, want kv.pb.go and kv_tram.pb.go", len(files))
	}
	for name, content := range files {
		path := filepath.Join("internal/kvpb", name)
		if *update {
			if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
				t.Fatal(err)
			}
			continue
		}
		have, err := os.ReadFile(path)
		if err != nil || string(have) != content {
			t.Errorf("%s is not what the generators write: go test ./... -run TestGeneratedCodeIsCurrent -update", path)
		}
	}
}
