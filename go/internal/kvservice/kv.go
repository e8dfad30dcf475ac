// Package kvservice is the kv service of examples/proto/kv.proto on the Go
// server, with messages written by hand (internal/pb): cmd/kv-server
// serves it, and the client's tests run against it.
package kvservice

import (
	"context"
	"io"
	"strings"
	"sync"

	"github.com/tram-rpc/tram/go/internal/pb"
	"github.com/tram-rpc/tram/go/tram"
	"github.com/tram-rpc/tram/go/wire"
)

type store struct {
	mu       sync.Mutex
	data     map[string][]byte
	watchers map[chan []byte]string // event channel -> key prefix
}

func (s *store) set(key string, value []byte) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.data[key] = value
	s.notify(pb.Append(nil, 1, key, 2, value))
}

func (s *store) del(key string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	_, ok := s.data[key]
	delete(s.data, key)
	if ok {
		s.notify(pb.Append(nil, 1, key, 3, true))
	}
	return ok
}

// notify sends an event to matching watchers; mu held. A watcher that
// does not keep up loses the event rather than stalling writers.
func (s *store) notify(ev []byte) {
	f, _ := pb.Decode(ev)
	for ch, prefix := range s.watchers {
		if strings.HasPrefix(f.String(1), prefix) {
			select {
			case ch <- ev:
			default:
			}
		}
	}
}

func key(req []byte) (pb.Fields, string, error) {
	f, err := pb.Decode(req)
	if err != nil {
		return nil, "", &tram.Status{Code: tram.Internal, Message: err.Error()}
	}
	k := f.String(1)
	if k == "" {
		return nil, "", &tram.Status{Code: tram.InvalidArgument, Message: "empty key"}
	}
	return f, k, nil
}

// Register adds the kv methods, over a new empty store, to srv.
func Register(srv *tram.Server) {
	s := &store{data: map[string][]byte{}, watchers: map[chan []byte]string{}}
	srv.HandleUnary("/kv.Kv/Get", func(ctx context.Context, req []byte, md wire.Metadata) ([]byte, error) {
		_, k, err := key(req)
		if err != nil {
			return nil, err
		}
		s.mu.Lock()
		v, ok := s.data[k]
		s.mu.Unlock()
		return pb.Append(nil, 1, ok, 2, v), nil
	})
	srv.HandleUnary("/kv.Kv/Set", func(ctx context.Context, req []byte, md wire.Metadata) ([]byte, error) {
		f, k, err := key(req)
		if err != nil {
			return nil, err
		}
		s.set(k, f.Bytes(2))
		return nil, nil
	})
	srv.HandleUnary("/kv.Kv/Delete", func(ctx context.Context, req []byte, md wire.Metadata) ([]byte, error) {
		_, k, err := key(req)
		if err != nil {
			return nil, err
		}
		return pb.Append(nil, 1, s.del(k)), nil
	})
	srv.HandleStream("/kv.Kv/Watch", tram.ServerStreaming, func(ctx context.Context, call *tram.ServerCall) error {
		req, err := call.Recv()
		if err != nil {
			return err
		}
		f, err := pb.Decode(req)
		if err != nil {
			return &tram.Status{Code: tram.Internal, Message: err.Error()}
		}
		ch := make(chan []byte, 1024)
		s.mu.Lock()
		s.watchers[ch] = f.String(1)
		s.mu.Unlock()
		defer func() {
			s.mu.Lock()
			delete(s.watchers, ch)
			s.mu.Unlock()
		}()
		for {
			select {
			case ev := <-ch:
				if err := call.Send(ev); err != nil {
					return err
				}
			case <-ctx.Done():
				return ctx.Err()
			}
		}
	})
	srv.HandleStream("/kv.Kv/BulkSet", tram.ClientStreaming, func(ctx context.Context, call *tram.ServerCall) error {
		var n uint64
		for {
			req, err := call.Recv()
			if err == io.EOF {
				return call.SendAndClose(pb.Append(nil, 1, n))
			}
			if err != nil {
				return err
			}
			f, k, err := key(req)
			if err != nil {
				return err
			}
			s.set(k, f.Bytes(2))
			n++
		}
	})
	srv.HandleStream("/kv.Kv/Session", tram.BidiStreaming, func(ctx context.Context, call *tram.ServerCall) error {
		for {
			req, err := call.Recv()
			if err == io.EOF {
				return nil
			}
			if err != nil {
				return err
			}
			cmd, err := pb.Decode(req)
			if err != nil {
				return &tram.Status{Code: tram.Internal, Message: err.Error()}
			}
			id := cmd.Uint(1)
			var out []byte
			switch {
			case cmd.Bytes(2) != nil:
				g, _ := pb.Decode(cmd.Bytes(2))
				s.mu.Lock()
				v, ok := s.data[g.String(1)]
				s.mu.Unlock()
				out = pb.Append(nil, 1, id, 2, ok, 3, v)
			case cmd.Bytes(3) != nil:
				st, _ := pb.Decode(cmd.Bytes(3))
				s.set(st.String(1), st.Bytes(2))
				out = pb.Append(nil, 1, id, 2, true)
			case cmd.Bytes(4) != nil:
				d, _ := pb.Decode(cmd.Bytes(4))
				out = pb.Append(nil, 1, id, 2, s.del(d.String(1)))
			default:
				out = pb.Append(nil, 1, id)
			}
			if err := call.Send(out); err != nil {
				return err
			}
		}
	})
}
