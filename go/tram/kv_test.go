package tram_test

// The Go client against a kv server: every call kind, errors, deadlines,
// cancellation. With TRAM_KV_ADDR set (examples/tests/go_client.rs sets it
// to the Rust kv server), against that server; otherwise against the Go
// server (internal/kvservice) in this process.

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/tram-rpc/tram/go/internal/kvservice"
	pbw "github.com/tram-rpc/tram/go/internal/pb"
	"github.com/tram-rpc/tram/go/tram"
	"github.com/tram-rpc/tram/go/wire"
)

func pb(fields ...any) []byte { return pbw.Append(nil, fields...) }

func fields(t *testing.T, b []byte) pbw.Fields {
	t.Helper()
	f, err := pbw.Decode(b)
	if err != nil {
		t.Fatal(err)
	}
	return f
}

func str(m pbw.Fields, f int) string { return m.String(f) }

func num(m pbw.Fields, f int) uint64 { return m.Uint(f) }

func kv(t *testing.T) *tram.Conn {
	t.Helper()
	addr := os.Getenv("TRAM_KV_ADDR")
	if addr == "" {
		addr = goServer(t)
	}
	c, err := tram.Dial(context.Background(), addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// goServer serves the kv service on the Go server, on a loopback port.
func goServer(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := tram.NewServer()
	kvservice.Register(srv)
	go srv.Serve(l)
	t.Cleanup(func() {
		srv.Shutdown(context.Background())
		l.Close()
	})
	return l.Addr().String()
}

func ctx(t *testing.T) context.Context {
	c, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	t.Cleanup(cancel)
	return c
}

func TestKvUnary(t *testing.T) {
	c := kv(t)
	md := wire.Metadata{{Key: "x-request-id", Value: []byte("go-1")}, {Key: "trace-bin", Value: []byte{0, 0xff}}}
	if _, err := c.Unary(ctx(t), "/kv.Kv/Set", pb(1, "go/a", 2, []byte("hello")), md); err != nil {
		t.Fatal(err)
	}
	resp, err := c.Unary(ctx(t), "/kv.Kv/Get", pb(1, "go/a"), nil)
	if err != nil {
		t.Fatal(err)
	}
	got := fields(t, resp)
	if num(got, 1) != 1 || str(got, 2) != "hello" {
		t.Fatalf("get: %v", got)
	}
	// Many at once on the one connection: ids reused, writes batched.
	var wg sync.WaitGroup
	errs := make(chan error, 200)
	for i := 0; i < 200; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			key := fmt.Sprintf("go/many/%d", i)
			if _, err := c.Unary(ctx(t), "/kv.Kv/Set", pb(1, key, 2, []byte(key)), nil); err != nil {
				errs <- err
				return
			}
			resp, err := c.Unary(ctx(t), "/kv.Kv/Get", pb(1, key), nil)
			if err == nil && str(fields(t, resp), 2) != key {
				err = fmt.Errorf("%s: got %q", key, resp)
			}
			if err != nil {
				errs <- err
			}
		}(i)
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}

func TestKvErrors(t *testing.T) {
	c := kv(t)
	_, err := c.Unary(ctx(t), "/kv.Kv/Get", pb(1, ""), nil)
	var st *tram.Status
	if !errors.As(err, &st) || st.Code != tram.InvalidArgument || st.Message != "empty key" {
		t.Fatalf("empty key: %v", err)
	}
	_, err = c.Unary(ctx(t), "/kv.Kv/Nope", nil, nil)
	if tram.StatusOf(err).Code != tram.Unimplemented {
		t.Fatalf("unknown method: %v", err)
	}
	// A message that does not decode as the method's type.
	_, err = c.Unary(ctx(t), "/kv.Kv/Get", []byte{0xff, 0xff, 0xff}, nil)
	if tram.StatusOf(err).Code != tram.Internal {
		t.Fatalf("bad message: %v", err)
	}
	// The connection is fine after all of that.
	if _, err := c.Unary(ctx(t), "/kv.Kv/Get", pb(1, "go/x"), nil); err != nil {
		t.Fatal(err)
	}
}

func TestKvServerStreamDeadlineAndCancel(t *testing.T) {
	c := kv(t)
	w, err := c.ServerStream(ctx(t), "/kv.Kv/Watch", pb(1, "go/w/"), nil)
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(200 * time.Millisecond) // the watch subscribes on arrival
	for i := 0; i < 3; i++ {
		if _, err := c.Unary(ctx(t), "/kv.Kv/Set", pb(1, fmt.Sprintf("go/w/%d", i), 2, []byte("v")), nil); err != nil {
			t.Fatal(err)
		}
	}
	for i := 0; i < 3; i++ {
		ev, err := w.Recv()
		if err != nil {
			t.Fatal(err)
		}
		if k := str(fields(t, ev), 1); k != fmt.Sprintf("go/w/%d", i) {
			t.Fatalf("event %d: %q", i, k)
		}
	}
	w.Cancel()
	if _, err := w.Recv(); tram.StatusOf(err).Code != tram.Canceled {
		t.Fatalf("after cancel: %v", err)
	}

	// A deadline the server enforces too.
	short, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	q, err := c.ServerStream(short, "/kv.Kv/Watch", pb(1, "go/quiet/"), nil)
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	if _, err := q.Recv(); tram.StatusOf(err).Code != tram.DeadlineExceeded {
		t.Fatalf("past the deadline: %v", err)
	}
	if time.Since(start) > 5*time.Second {
		t.Fatal("the deadline was not kept")
	}

	// A context cancelled while waiting.
	cctx, cancelNow := context.WithCancel(context.Background())
	q, err = c.ServerStream(cctx, "/kv.Kv/Watch", pb(1, "go/quiet/"), nil)
	if err != nil {
		t.Fatal(err)
	}
	time.AfterFunc(100*time.Millisecond, cancelNow)
	if _, err := q.Recv(); tram.StatusOf(err).Code != tram.Canceled {
		t.Fatalf("cancelled: %v", err)
	}
	if _, err := c.Unary(ctx(t), "/kv.Kv/Get", pb(1, "go/x"), nil); err != nil {
		t.Fatal(err)
	}
}

func TestKvClientStream(t *testing.T) {
	c := kv(t)
	s, err := c.NewStream(ctx(t), "/kv.Kv/BulkSet", nil)
	if err != nil {
		t.Fatal(err)
	}
	// More than the initial credit: Send waits for the server's CREDIT.
	const n = 1000
	for i := 0; i < n; i++ {
		if err := s.Send(pb(1, fmt.Sprintf("go/bulk/%d", i), 2, []byte("x"))); err != nil {
			t.Fatal(err)
		}
	}
	s.CloseSend()
	resp, err := s.Recv()
	if err != nil {
		t.Fatal(err)
	}
	if got := num(fields(t, resp), 1); got != n {
		t.Fatalf("count %d", got)
	}
	if _, err := s.Recv(); err != io.EOF {
		t.Fatalf("end: %v", err)
	}
}

func TestKvBidiStream(t *testing.T) {
	c := kv(t)
	s, err := c.NewStream(ctx(t), "/kv.Kv/Session", nil)
	if err != nil {
		t.Fatal(err)
	}
	// Interleaved: each command's result read before the next is sent.
	cmds := [][]byte{
		pb(1, uint64(1), 3, pb(1, "go/s", 2, []byte("v"))),
		pb(1, uint64(2), 2, pb(1, "go/s")),
		pb(1, uint64(3), 4, pb(1, "go/s")),
		pb(1, uint64(4), 2, pb(1, "go/s")),
	}
	want := []string{"1:1:", "2:1:v", "3:1:", "4:0:"}
	for i, cmd := range cmds {
		if err := s.Send(cmd); err != nil {
			t.Fatal(err)
		}
		r, err := s.Recv()
		if err != nil {
			t.Fatal(err)
		}
		f := fields(t, r)
		if got := fmt.Sprintf("%d:%d:%s", num(f, 1), num(f, 2), str(f, 3)); got != want[i] {
			t.Fatalf("result %d: %s, want %s", i, got, want[i])
		}
	}
	s.CloseSend()
	if _, err := s.Recv(); err != io.EOF {
		t.Fatalf("end: %v", err)
	}
}
