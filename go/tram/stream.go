package tram

import (
	"context"
	"errors"
	"io"

	"github.com/tram-rpc/tram/go/wire"
)

// Stream is one call of any kind: Send request messages, CloseSend, Recv
// response messages until io.EOF (OK) or a *Status error.
type Stream struct {
	c          *Conn
	ctx        context.Context
	id         uint32
	seq        uint64
	credit     int64 // messages this side may still send
	recvCredit int64 // messages the server may still send
	queue      [][]byte
	window     window // credit returned to the server
	header     wire.Metadata
	gotHeader  bool
	trailers   wire.Metadata
	end        *Status // the call's end, once known (ok: Code OK)
	clientDone bool
	serverDone bool
	released   bool
	wake       chan struct{}
}

var okStatus = &Status{Code: OK}

func newStream(c *Conn, ctx context.Context, id uint32, seq uint64) *Stream {
	return &Stream{c: c, ctx: ctx, id: id, seq: seq, wake: make(chan struct{}, 1)}
}

// signal wakes the stream's waiter; c.mu held.
func (s *Stream) signal() {
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

// deliver takes a MESSAGE from the server; c.mu held.
func (s *Stream) deliver(f wire.Message) {
	if s.end != nil {
		return
	}
	if !s.gotHeader {
		s.gotHeader = true
		s.header = cloneMetadata(f.Metadata)
	}
	s.queue = append(s.queue, clone(f.Payload))
	if f.EndStream {
		s.serverEnd(nil)
	}
	s.signal()
}

// serverEnd records the server's end of the call; c.mu held.
func (s *Stream) serverEnd(st *Status) {
	if st == nil {
		st = okStatus
	}
	if s.end == nil {
		s.end = st
	}
	s.serverDone = true
	if st.Code != OK && !s.clientDone {
		// The server ended the call first: close this direction (§6.1).
		s.clientDone = true
		s.c.queue(wire.Cancel{Call: s.id, Code: uint32(Canceled)})
	}
	s.c.release(s)
	s.signal()
}

// finish ends the call here, without the server; c.mu held.
func (s *Stream) finish(st *Status) {
	if s.end == nil {
		s.end = st
	}
	s.clientDone, s.serverDone, s.released = true, true, true
	s.signal()
}

// cancel abandons the call because of its context; c.mu held.
func (s *Stream) cancel() {
	code := Canceled
	if errors.Is(s.ctx.Err(), context.DeadlineExceeded) {
		code = DeadlineExceeded
	}
	if s.end == nil {
		s.end = statusf(code, "%v", s.ctx.Err())
	}
	if !s.clientDone || !s.serverDone {
		if !s.released && s.c.err == nil {
			s.c.queue(wire.Cancel{Call: s.id, Code: uint32(code)})
		}
		s.clientDone = true
	}
	// The id stays in use until the server's END answers the CANCEL.
	s.c.release(s)
}

// Send sends one request message, waiting for credit.
func (s *Stream) Send(msg []byte) error {
	c := s.c
	c.mu.Lock()
	for {
		if s.clientDone {
			err := s.sendError()
			c.mu.Unlock()
			return err
		}
		if len(msg) > int(c.peer.MaxFrameSize)-16 {
			c.mu.Unlock()
			return statusf(ResourceExhausted, "message of %d bytes is above the server's frame limit", len(msg))
		}
		if s.credit > 0 {
			s.credit--
			c.queue(wire.Message{Call: s.id, Payload: msg})
			c.mu.Unlock()
			return nil
		}
		c.mu.Unlock()
		select {
		case <-s.wake:
		case <-s.ctx.Done():
			c.mu.Lock()
			s.cancel()
			c.mu.Unlock()
			return s.end
		}
		c.mu.Lock()
	}
}

// sendError says why no more can be sent; c.mu held.
func (s *Stream) sendError() error {
	if s.end != nil && s.end.Code != OK {
		return s.end
	}
	return io.EOF
}

// CloseSend ends the request stream (a half-close).
func (s *Stream) CloseSend() error {
	c := s.c
	c.mu.Lock()
	defer c.mu.Unlock()
	if s.clientDone {
		return nil
	}
	s.clientDone = true
	c.queue(wire.End{Call: s.id})
	c.release(s)
	return nil
}

// Recv is the next response message; io.EOF when the call ended OK, or
// the call's *Status.
func (s *Stream) Recv() ([]byte, error) {
	c := s.c
	c.mu.Lock()
	for {
		if len(s.queue) > 0 {
			m := s.queue[0]
			s.queue[0] = nil
			s.queue = s.queue[1:]
			if n := s.window.consume(len(m), c.local.InitialCredit); n > 0 && !s.serverDone {
				c.queue(wire.Credit{Call: s.id, N: n})
				s.recvCredit += int64(n)
			}
			c.mu.Unlock()
			return m, nil
		}
		if s.end != nil {
			end := s.end
			c.mu.Unlock()
			if end.Code == OK {
				return nil, io.EOF
			}
			return nil, end
		}
		c.mu.Unlock()
		select {
		case <-s.wake:
		case <-s.ctx.Done():
			c.mu.Lock()
			if s.end == nil {
				s.cancel()
			}
			c.mu.Unlock()
		}
		c.mu.Lock()
	}
}

// Header is the response's leading metadata (known once a message or the
// end has arrived).
func (s *Stream) Header() wire.Metadata {
	s.c.mu.Lock()
	defer s.c.mu.Unlock()
	return s.header
}

// Trailer is the response's trailing metadata (known once Recv returned
// io.EOF or a status).
func (s *Stream) Trailer() wire.Metadata {
	s.c.mu.Lock()
	defer s.c.mu.Unlock()
	return s.trailers
}

// Cancel abandons the call (CANCEL with CANCELLED).
func (s *Stream) Cancel() {
	s.c.mu.Lock()
	defer s.c.mu.Unlock()
	if s.end == nil {
		s.end = statusf(Canceled, "cancelled by the caller")
	}
	if !s.clientDone || !s.serverDone {
		if s.c.err == nil {
			s.c.queue(wire.Cancel{Call: s.id, Code: uint32(Canceled)})
		}
		s.clientDone = true
	}
	s.c.release(s)
}

// NewStream opens a call of any kind on method (`/package.Service/Method`)
// with request metadata md; its deadline and cancellation are ctx's.
func (c *Conn) NewStream(ctx context.Context, method string, md wire.Metadata) (*Stream, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.open(ctx, method, md, nil, false, false)
}

// ServerStream opens a call with its one request message: a
// server-streaming call (Recv until io.EOF).
func (c *Conn) ServerStream(ctx context.Context, method string, req []byte, md wire.Metadata) (*Stream, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.open(ctx, method, md, req, true, true)
}

// Unary calls method with req and returns the response message: one CALL
// frame out, one MESSAGE frame back.
func (c *Conn) Unary(ctx context.Context, method string, req []byte, md wire.Metadata) ([]byte, error) {
	s, err := c.ServerStream(ctx, method, req, md)
	if err != nil {
		return nil, err
	}
	resp, err := s.Recv()
	if err == io.EOF {
		return nil, statusf(Internal, "the server ended a unary call without a response")
	}
	if err != nil {
		return nil, err
	}
	// The unary fast path ends the call with its message.
	if _, err := s.Recv(); err != io.EOF {
		if err == nil {
			return nil, statusf(Internal, "the server answered a unary call with more than one message")
		}
		return nil, err
	}
	return resp, nil
}
