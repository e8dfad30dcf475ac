package tram_test

import (
	"context"
	"net"
	"testing"
	"time"

	"github.com/tram-rpc/tram/go/tram"
	"github.com/tram-rpc/tram/go/wire"
)

func echoServer(t *testing.T, l net.Listener) *tram.Server {
	t.Helper()
	srv := tram.NewServer()
	srv.HandleUnary("/t.T/Echo", func(ctx context.Context, req []byte, md wire.Metadata) ([]byte, error) { return req, nil })
	go srv.Serve(l)
	return srv
}

func TestClientReconnectsToARestartedServer(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	srv := echoServer(t, l)
	c := tram.NewClient(addr, tram.ClientOptions{MinBackoff: 20 * time.Millisecond, MaxBackoff: 100 * time.Millisecond})
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if resp, err := c.Unary(ctx, "/t.T/Echo", []byte("one"), nil); err != nil || string(resp) != "one" {
		t.Fatalf("first call: %q %v", resp, err)
	}
	srv.Shutdown(context.Background())
	l.Close()
	// While the server is down, calls fail within their deadline.
	short, cancelShort := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancelShort()
	if _, err := c.Unary(short, "/t.T/Echo", []byte("x"), nil); err == nil {
		t.Fatal("a call succeeded with no server")
	}
	// The server comes back on the same port: the client reconnects.
	l2, err := net.Listen("tcp", addr)
	if err != nil {
		t.Skipf("port %s was taken meanwhile: %v", addr, err)
	}
	srv2 := echoServer(t, l2)
	defer func() { srv2.Shutdown(context.Background()); l2.Close() }()
	if resp, err := c.Unary(ctx, "/t.T/Echo", []byte("two"), nil); err != nil || string(resp) != "two" {
		t.Fatalf("after restart: %q %v", resp, err)
	}
}

func TestKeepaliveClosesASilentConnection(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	// A server that says hello and then nothing, ever (a dead peer).
	go func() {
		nc, err := l.Accept()
		if err != nil {
			return
		}
		defer nc.Close()
		nc.Write(wire.DefaultSettings().Append(append([]byte{}, wire.Preface[:]...)))
		buf := make([]byte, 1024)
		for {
			if _, err := nc.Read(buf); err != nil {
				return
			}
		}
	}()
	conn, err := tram.DialOptions(context.Background(), l.Addr().String(), tram.Options{
		Settings:          wire.DefaultSettings(),
		KeepaliveInterval: 200 * time.Millisecond,
		KeepaliveTimeout:  200 * time.Millisecond,
	})
	if err != nil {
		t.Fatal(err)
	}
	select {
	case <-conn.Done():
		if tram.StatusOf(conn.Err()).Code != tram.Unavailable {
			t.Fatalf("ended with %v", conn.Err())
		}
	case <-time.After(5 * time.Second):
		t.Fatal("keepalive did not close the silent connection")
	}
}

func TestKeepaliveKeepsAnAnsweringConnection(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := echoServer(t, l)
	defer func() { srv.Shutdown(context.Background()); l.Close() }()
	conn, err := tram.DialOptions(context.Background(), l.Addr().String(), tram.Options{
		Settings:          wire.DefaultSettings(),
		KeepaliveInterval: 100 * time.Millisecond,
		KeepaliveTimeout:  100 * time.Millisecond,
	})
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	time.Sleep(700 * time.Millisecond) // several idle intervals, pings answered
	if _, err := conn.Unary(context.Background(), "/t.T/Echo", []byte("x"), nil); err != nil {
		t.Fatalf("after idling: %v", err)
	}
}
