package tram

// The Go client against the Rust kv server (examples/src/kv.rs): every call
// kind, errors, deadlines, cancellation. examples/tests/go_client.rs starts
// the server and runs these with TRAM_KV_ADDR set; alone, they skip.

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/tram-rpc/tram/go/wire"
)

// pb is a protobuf message written by hand: (field, value) pairs, values
// string/[]byte (length-delimited) or uint64/bool (varint).
func pb(fields ...any) []byte {
	var b []byte
	for i := 0; i < len(fields); i += 2 {
		num := uint64(fields[i].(int))
		switch v := fields[i+1].(type) {
		case string:
			b = wire.AppendVarint(b, num<<3|2)
			b = wire.AppendVarint(b, uint64(len(v)))
			b = append(b, v...)
		case []byte:
			b = wire.AppendVarint(b, num<<3|2)
			b = wire.AppendVarint(b, uint64(len(v)))
			b = append(b, v...)
		case uint64:
			b = wire.AppendVarint(b, num<<3)
			b = wire.AppendVarint(b, v)
		case bool:
			if v {
				b = wire.AppendVarint(b, num<<3)
				b = append(b, 1)
			}
		}
	}
	return b
}

// fields decodes a message: field number to its values (varints as
// uint64, length-delimited as []byte).
func fields(t *testing.T, b []byte) map[int][]any {
	t.Helper()
	out := map[int][]any{}
	read := func() uint64 {
		var v uint64
		for i := 0; ; i++ {
			if len(b) == 0 {
				t.Fatal("truncated protobuf")
			}
			c := b[0]
			b = b[1:]
			v |= uint64(c&0x7f) << (7 * i)
			if c < 0x80 {
				return v
			}
		}
	}
	for len(b) > 0 {
		tag := read()
		switch tag & 7 {
		case 0:
			out[int(tag>>3)] = append(out[int(tag>>3)], read())
		case 2:
			n := read()
			out[int(tag>>3)] = append(out[int(tag>>3)], b[:n])
			b = b[n:]
		default:
			t.Fatalf("wire type %d", tag&7)
		}
	}
	return out
}

func str(m map[int][]any, f int) string {
	if v, ok := m[f]; ok {
		return string(v[0].([]byte))
	}
	return ""
}

func num(m map[int][]any, f int) uint64 {
	if v, ok := m[f]; ok {
		return v[0].(uint64)
	}
	return 0
}

func kv(t *testing.T) *Conn {
	t.Helper()
	addr := os.Getenv("TRAM_KV_ADDR")
	if addr == "" {
		t.Skip("TRAM_KV_ADDR is not set: examples/tests/go_client.rs runs this against the Rust kv server")
	}
	c, err := Dial(context.Background(), addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
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
	var st *Status
	if !errors.As(err, &st) || st.Code != InvalidArgument || st.Message != "empty key" {
		t.Fatalf("empty key: %v", err)
	}
	_, err = c.Unary(ctx(t), "/kv.Kv/Nope", nil, nil)
	if StatusOf(err).Code != Unimplemented {
		t.Fatalf("unknown method: %v", err)
	}
	// A message that does not decode as the method's type.
	_, err = c.Unary(ctx(t), "/kv.Kv/Get", []byte{0xff, 0xff, 0xff}, nil)
	if StatusOf(err).Code != Internal {
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
	if _, err := w.Recv(); StatusOf(err).Code != Canceled {
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
	if _, err := q.Recv(); StatusOf(err).Code != DeadlineExceeded {
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
	if _, err := q.Recv(); StatusOf(err).Code != Canceled {
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
