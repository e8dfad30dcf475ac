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

// scriptedServer accepts one client, says hello, waits for its first CALL
// and writes what script returns for that call's id; it then reads until the
// client closes and reports whether a GOAWAY with PROTOCOL_ERROR came.
func scriptedServer(t *testing.T, script func(call uint32) []byte) (string, <-chan bool) {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	goaway := make(chan bool, 1)
	go func() {
		defer l.Close()
		nc, err := l.Accept()
		if err != nil {
			goaway <- false
			return
		}
		defer nc.Close()
		nc.Write(wire.DefaultSettings().Append(append([]byte{}, wire.Preface[:]...)))
		var in []byte
		buf := make([]byte, 4096)
		sent, protocolError := false, false
		for {
			n, err := nc.Read(buf)
			if err != nil {
				goaway <- protocolError
				return
			}
			in = append(in, buf[:n]...)
			if !sent && len(in) >= len(wire.Preface) {
				in = in[len(wire.Preface):]
				sent = true
			}
			for sent {
				f, used, err := wire.Decode(in, 1<<20)
				if err != nil || used == 0 {
					break
				}
				in = in[used:]
				switch f := f.(type) {
				case wire.Call:
					nc.Write(script(f.Call))
				case wire.GoAway:
					protocolError = protocolError || f.Reason == wire.ProtocolError
				}
			}
		}
	}()
	return l.Addr().String(), goaway
}

// A server that breaks the credit rules fails the call with INTERNAL and
// gets GOAWAY PROTOCOL_ERROR, rather than fill the client's memory.
func TestClientRefusesAServerBreakingCredit(t *testing.T) {
	cases := map[string]func(call uint32) []byte{
		"messages beyond the credit granted": func(call uint32) []byte {
			var out []byte
			for i := 0; i <= int(wire.DefaultSettings().InitialCredit); i++ {
				out = wire.Message{Call: call, Payload: []byte("x")}.Append(out)
			}
			return out
		},
		"credit past the maximum": func(call uint32) []byte {
			var out []byte
			for i := 0; i < 3; i++ {
				out = wire.Credit{Call: call, N: wire.MaxCredit}.Append(out)
			}
			return out
		},
	}
	for name, script := range cases {
		t.Run(name, func(t *testing.T) {
			addr, goaway := scriptedServer(t, script)
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			conn, err := tram.Dial(ctx, addr)
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			// A bidi call, which neither reads nor sends: it only waits.
			s, err := conn.NewStream(ctx, "/t.T/Chat", nil)
			if err != nil {
				t.Fatal(err)
			}
			select {
			case <-conn.Done():
			case <-ctx.Done():
				t.Fatal("the connection stayed up")
			}
			if code := tram.StatusOf(conn.Err()).Code; code != tram.Internal {
				t.Fatalf("connection ended with %v", conn.Err())
			}
			for {
				if _, err := s.Recv(); err != nil {
					if code := tram.StatusOf(err).Code; code != tram.Internal {
						t.Fatalf("call ended with %v", err)
					}
					break
				}
			}
			if !<-goaway {
				t.Fatal("no GOAWAY PROTOCOL_ERROR reached the server")
			}
		})
	}
}
