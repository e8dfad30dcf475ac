package tram_test

// The Go server's limits and its treatment of bad peers, over loopback.

import (
	"bytes"
	"context"
	"io"
	"net"
	"testing"
	"time"

	"github.com/tram-rpc/tram/go/tram"
	"github.com/tram-rpc/tram/go/wire"
)

func serve(t *testing.T, srv *tram.Server) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go srv.Serve(l)
	t.Cleanup(func() {
		srv.Shutdown(context.Background())
		l.Close()
	})
	return l.Addr().String()
}

// rawRead is everything the server writes on a raw connection after
// `send`, until it closes (or 5 s pass: a failure).
func rawRead(t *testing.T, addr string, send []byte) []byte {
	t.Helper()
	nc, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	if _, err := nc.Write(send); err != nil {
		t.Fatal(err)
	}
	_ = nc.SetReadDeadline(time.Now().Add(5 * time.Second))
	got, err := io.ReadAll(nc)
	if ne, ok := err.(net.Error); ok && ne.Timeout() {
		t.Fatal("the server did not close the connection")
	}
	return got
}

// frames decodes what the server sent after its preface.
func frames(t *testing.T, b []byte) []wire.Frame {
	t.Helper()
	if !bytes.HasPrefix(b, wire.Preface[:]) {
		t.Fatalf("no preface: %x", b)
	}
	b = b[len(wire.Preface):]
	var out []wire.Frame
	for len(b) > 0 {
		f, n, err := wire.Decode(b, 1<<20)
		if err != nil || n == 0 {
			t.Fatalf("server sent %x: %v", b, err)
		}
		out = append(out, f)
		b = b[n:]
	}
	return out
}

func clientStart() []byte {
	return wire.DefaultSettings().Append(append([]byte{}, wire.Preface[:]...))
}

func TestHostilePeersAreClosedAlone(t *testing.T) {
	srv := tram.NewServerOptions(tram.ServerOptions{Settings: wire.DefaultSettings(), HandshakeTimeout: 300 * time.Millisecond})
	srv.HandleUnary("/t.T/Echo", func(ctx context.Context, req []byte, md wire.Metadata) ([]byte, error) { return req, nil })
	addr := serve(t, srv)
	good, err := tram.Dial(context.Background(), addr)
	if err != nil {
		t.Fatal(err)
	}
	defer good.Close()

	// Not tram at all: closed without a GOAWAY.
	for _, garbage := range [][]byte{bytes.Repeat([]byte{0xff}, 64), []byte("GET / HTTP/1.1\r\n\r\n")} {
		fs := frames(t, rawRead(t, addr, garbage))
		if len(fs) != 1 {
			t.Fatalf("%q: server sent %v, want its SETTINGS only", garbage, fs)
		}
	}
	// A frame announcing 4 GiB: GOAWAY FRAME_TOO_LARGE.
	fs := frames(t, rawRead(t, addr, append(clientStart(), 0x30, 0xff, 0xff, 0xff, 0xff, 0x0f)))
	if g, ok := fs[len(fs)-1].(wire.GoAway); !ok || g.Reason != wire.FrameTooLargeR {
		t.Fatalf("oversized frame: %v", fs)
	}
	// A CALL on a method never bound: GOAWAY PROTOCOL_ERROR.
	call := wire.Call{Call: 0, Method: 7, EndStream: true, HasMessage: true}.Append(clientStart())
	fs = frames(t, rawRead(t, addr, call))
	if g, ok := fs[len(fs)-1].(wire.GoAway); !ok || g.Reason != wire.ProtocolError {
		t.Fatalf("unbound method: %v", fs)
	}
	// Silence after connecting: GOAWAY TIMEOUT at the handshake timeout.
	start := time.Now()
	fs = frames(t, rawRead(t, addr, nil))
	if g, ok := fs[len(fs)-1].(wire.GoAway); !ok || g.Reason != wire.Timeout || time.Since(start) > 3*time.Second {
		t.Fatalf("silent peer: %v after %v", fs, time.Since(start))
	}
	// Through all of it the good client is served.
	resp, err := good.Unary(context.Background(), "/t.T/Echo", []byte("ok"), nil)
	if err != nil || string(resp) != "ok" {
		t.Fatalf("good client: %q %v", resp, err)
	}
}

func TestLimitsCancellationAndDrain(t *testing.T) {
	settings := wire.DefaultSettings()
	settings.MaxConcurrentCalls = 2
	srv := tram.NewServerOptions(tram.ServerOptions{Settings: settings})
	release := make(chan struct{})
	cancelled := make(chan struct{}, 8)
	srv.HandleUnary("/t.T/Wait", func(ctx context.Context, req []byte, md wire.Metadata) ([]byte, error) {
		select {
		case <-release:
			return []byte("done"), nil
		case <-ctx.Done():
			cancelled <- struct{}{}
			return nil, ctx.Err()
		}
	})
	addr := serve(t, srv)
	c, err := tram.Dial(context.Background(), addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	// Let the server's SETTINGS arrive.
	time.Sleep(100 * time.Millisecond)

	// A cancelled call stops its handler.
	ctx, cancel := context.WithCancel(context.Background())
	go func() { time.Sleep(100 * time.Millisecond); cancel() }()
	if _, err := c.Unary(ctx, "/t.T/Wait", nil, nil); tram.StatusOf(err).Code != tram.Canceled {
		t.Fatalf("cancelled call: %v", err)
	}
	select {
	case <-cancelled:
	case <-time.After(5 * time.Second):
		t.Fatal("the handler was not cancelled")
	}

	// The server's END for the cancelled call frees its id.
	time.Sleep(100 * time.Millisecond)

	// Two calls fill the server; a third is refused, unstarted.
	results := make(chan error, 2)
	for i := 0; i < 2; i++ {
		go func() {
			_, err := c.Unary(context.Background(), "/t.T/Wait", nil, nil)
			results <- err
		}()
	}
	time.Sleep(200 * time.Millisecond)
	short, cancelShort := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancelShort()
	if _, err := c.Unary(short, "/t.T/Wait", nil, nil); tram.StatusOf(err).Code != tram.ResourceExhausted {
		t.Fatalf("third call: %v", err)
	}
	// Draining: the calls in flight finish OK.
	drained := make(chan struct{})
	go func() { srv.Shutdown(context.Background()); close(drained) }()
	time.Sleep(100 * time.Millisecond)
	close(release)
	for i := 0; i < 2; i++ {
		if err := <-results; err != nil {
			t.Fatalf("call in flight during drain: %v", err)
		}
	}
	select {
	case <-drained:
	case <-time.After(5 * time.Second):
		t.Fatal("Shutdown did not return")
	}
	if _, err := c.Unary(context.Background(), "/t.T/Wait", nil, nil); tram.StatusOf(err).Code != tram.Unavailable {
		t.Fatalf("after drain: %v", err)
	}
}
