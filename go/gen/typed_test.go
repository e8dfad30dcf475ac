package gen_test

// The generated kv client and server (internal/kvpb) over loopback: every
// call kind with typed messages, metadata through the context, errors.

import (
	"context"
	"errors"
	"io"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/tram-rpc/tram/go/gen/internal/kvpb"
	"github.com/tram-rpc/tram/go/tram"
	"github.com/tram-rpc/tram/go/wire"
)

type store struct {
	mu   sync.Mutex
	data map[string][]byte
}

func (s *store) Get(ctx context.Context, in *kvpb.GetRequest) (*kvpb.GetResponse, error) {
	if in.Key == "" {
		return nil, tram.Errorf(tram.InvalidArgument, "empty key")
	}
	if v, ok := tram.IncomingMetadata(ctx).Get("x-fail"); ok {
		return nil, tram.Errorf(tram.FailedPrecondition, "asked to fail: %s", v)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	v, ok := s.data[in.Key]
	return &kvpb.GetResponse{Found: ok, Value: v}, nil
}

func (s *store) Set(ctx context.Context, in *kvpb.SetRequest) (*kvpb.SetResponse, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.data[in.Key] = in.Value
	return &kvpb.SetResponse{}, nil
}

func (s *store) Delete(ctx context.Context, in *kvpb.DeleteRequest) (*kvpb.DeleteResponse, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	_, ok := s.data[in.Key]
	delete(s.data, in.Key)
	return &kvpb.DeleteResponse{Deleted: ok}, nil
}

func (s *store) Watch(in *kvpb.WatchRequest, stream kvpb.Kv_WatchServer) error {
	for i := 0; i < 3; i++ {
		if err := stream.Send(&kvpb.Event{Key: in.Prefix + string(rune('a'+i))}); err != nil {
			return err
		}
	}
	return nil
}

func (s *store) BulkSet(stream kvpb.Kv_BulkSetServer) error {
	var n uint64
	for {
		in, err := stream.Recv()
		if err == io.EOF {
			return stream.SendAndClose(&kvpb.BulkSetResponse{Count: n})
		}
		if err != nil {
			return err
		}
		s.Set(stream.Context(), in)
		n++
	}
}

func (s *store) Session(stream kvpb.Kv_SessionServer) error {
	for {
		cmd, err := stream.Recv()
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return err
		}
		out := &kvpb.CommandResult{Id: cmd.Id}
		switch op := cmd.Op.(type) {
		case *kvpb.Command_Get:
			r, _ := s.Get(stream.Context(), op.Get)
			out.Found, out.Value = r.Found, r.Value
		case *kvpb.Command_Set:
			s.Set(stream.Context(), op.Set)
			out.Found = true
		case *kvpb.Command_Delete:
			r, _ := s.Delete(stream.Context(), op.Delete)
			out.Found = r.Deleted
		}
		if err := stream.Send(out); err != nil {
			return err
		}
	}
}

func client(t *testing.T) kvpb.KvClient {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := tram.NewServer()
	kvpb.RegisterKvServer(srv, &store{data: map[string][]byte{}})
	go srv.Serve(l)
	conn, err := tram.Dial(context.Background(), l.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		conn.Close()
		srv.Shutdown(context.Background())
		l.Close()
	})
	return kvpb.NewKvClient(conn)
}

func TestTypedCallsOfEveryKind(t *testing.T) {
	kv := client(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()

	if _, err := kv.Set(ctx, &kvpb.SetRequest{Key: "a", Value: []byte("1")}); err != nil {
		t.Fatal(err)
	}
	got, err := kv.Get(ctx, &kvpb.GetRequest{Key: "a"})
	if err != nil || !got.Found || string(got.Value) != "1" {
		t.Fatalf("get: %v %v", got, err)
	}
	var st *tram.Status
	if _, err := kv.Get(ctx, &kvpb.GetRequest{}); !errors.As(err, &st) || st.Code != tram.InvalidArgument {
		t.Fatalf("empty key: %v", err)
	}
	failing := tram.WithOutgoingMetadata(ctx, wire.Metadata{{Key: "x-fail", Value: []byte("yes")}})
	if _, err := kv.Get(failing, &kvpb.GetRequest{Key: "a"}); tram.StatusOf(err).Code != tram.FailedPrecondition {
		t.Fatalf("metadata through the context: %v", err)
	}

	w, err := kv.Watch(ctx, &kvpb.WatchRequest{Prefix: "p/"})
	if err != nil {
		t.Fatal(err)
	}
	var keys []string
	for {
		ev, err := w.Recv()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		keys = append(keys, ev.Key)
	}
	if len(keys) != 3 || keys[2] != "p/c" {
		t.Fatalf("watch: %v", keys)
	}

	b, err := kv.BulkSet(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 500; i++ {
		if err := b.Send(&kvpb.SetRequest{Key: "k", Value: []byte{byte(i)}}); err != nil {
			t.Fatal(err)
		}
	}
	res, err := b.CloseAndRecv()
	if err != nil || res.Count != 500 {
		t.Fatalf("bulk set: %v %v", res, err)
	}

	s, err := kv.Session(ctx)
	if err != nil {
		t.Fatal(err)
	}
	cmds := []*kvpb.Command{
		{Id: 1, Op: &kvpb.Command_Set{Set: &kvpb.SetRequest{Key: "s", Value: []byte("v")}}},
		{Id: 2, Op: &kvpb.Command_Get{Get: &kvpb.GetRequest{Key: "s"}}},
		{Id: 3, Op: &kvpb.Command_Delete{Delete: &kvpb.DeleteRequest{Key: "s"}}},
	}
	for _, c := range cmds {
		if err := s.Send(c); err != nil {
			t.Fatal(err)
		}
		r, err := s.Recv()
		if err != nil || r.Id != c.Id || !r.Found {
			t.Fatalf("session %d: %v %v", c.Id, r, err)
		}
	}
	s.CloseSend()
	if _, err := s.Recv(); err != io.EOF {
		t.Fatalf("session end: %v", err)
	}
}
