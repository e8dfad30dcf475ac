// Command kv-server serves the kv service of examples/proto/kv.proto
// (internal/kvservice) on the Go server: the Rust client calls it in
// examples/tests/go_server.rs.
//
//	go run ./cmd/kv-server -listen 127.0.0.1:7000
//
// It prints "PORT <n>" once listening.
package main

import (
	"context"
	"flag"
	"fmt"
	"log"
	"net"
	"os"
	"os/signal"

	"github.com/tram-rpc/tram/go/internal/kvservice"
	"github.com/tram-rpc/tram/go/tram"
)

func main() {
	listen := flag.String("listen", "127.0.0.1:7000", "address to listen on")
	flag.Parse()
	srv := tram.NewServer()
	kvservice.Register(srv)
	l, err := net.Listen("tcp", *listen)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("PORT %d\n", l.Addr().(*net.TCPAddr).Port)
	go func() {
		sig := make(chan os.Signal, 1)
		signal.Notify(sig, os.Interrupt)
		<-sig
		srv.Shutdown(context.Background())
		l.Close()
	}()
	if err := srv.Serve(l); err != nil {
		log.Fatal(err)
	}
}
