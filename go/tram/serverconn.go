package tram

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/tram-rpc/tram/go/wire"
)

// serverConn is one client's connection to a Server.
type serverConn struct {
	link
	srv      *Server
	peer     wire.Settings
	ready    bool // the client's SETTINGS arrived
	bound    map[uint32]string
	calls    map[uint32]*ServerCall
	received uint64 // CALL frames received
	running  int    // calls whose server side is not over
	goneAway bool   // GOAWAY sent: frames on unknown ids are dropped
	draining bool
	handled  chan struct{} // closed when draining and no call is left
	closed   bool
}

func (c *serverConn) close() {
	c.mu.Lock()
	if !c.closed {
		c.closed = true
		for _, call := range c.calls {
			if !call.serverDone {
				c.running--
			}
			call.cancel()
		}
	}
	c.mu.Unlock()
	c.end()
}

// goAway queues a GOAWAY (the calls received so far will be answered).
func (c *serverConn) goAway(reason uint32, why string) {
	c.mu.Lock()
	if !c.goneAway {
		c.goneAway = true
		c.queue(wire.GoAway{LastCallSeq: c.received, Reason: reason, Message: why})
	}
	c.mu.Unlock()
}

// drain tells the client to open no new calls; idle() is closed once the
// calls in flight are over.
func (c *serverConn) drain() {
	c.goAway(wire.NoError, "server shutting down")
	c.mu.Lock()
	c.draining = true
	c.checkIdle()
	c.mu.Unlock()
}

func (c *serverConn) idle() <-chan struct{} { return c.handled }

// checkIdle closes handled once draining with no calls; mu held.
func (c *serverConn) checkIdle() {
	if c.draining && len(c.calls) == 0 {
		select {
		case <-c.handled:
		default:
			close(c.handled)
		}
	}
}

// violation ends the connection with PROTOCOL_ERROR; mu held. Returns
// false, for handle to return.
func (c *serverConn) violation(format string, args ...any) bool {
	why := fmt.Sprintf(format, args...)
	if !c.goneAway {
		c.goneAway = true
		c.queue(wire.GoAway{LastCallSeq: c.received, Reason: wire.ProtocolError, Message: why})
	}
	return false
}

// handle applies one frame from the client (mu held); false ends the
// connection.
func (c *serverConn) handle(f wire.Frame) bool {
	switch f := f.(type) {
	case wire.Settings:
		c.peer = f
		c.ready = true
	case wire.Bind:
		if _, dup := c.bound[f.Method]; dup {
			return c.violation("method %d bound twice", f.Method)
		}
		if len(c.bound) >= int(c.local.MaxBoundMethods) {
			c.goneAway = true
			c.queue(wire.GoAway{LastCallSeq: c.received, Reason: wire.LimitExceeded, Message: "too many methods bound"})
			return false
		}
		c.bound[f.Method] = f.Name
	case wire.Call:
		return c.open(f)
	case wire.Message:
		call := c.calls[f.Call]
		if call == nil {
			return c.goneAway || c.violation("MESSAGE on call %d, not in use", f.Call)
		}
		if call.clientDone {
			return c.violation("MESSAGE on call %d after its end of stream", f.Call)
		}
		if f.HasMetadata {
			return c.violation("METADATA on a client's MESSAGE")
		}
		if call.recvCredit <= 0 {
			return c.violation("MESSAGE on call %d without credit", f.Call)
		}
		call.recvCredit--
		if !call.serverDone {
			call.queue = append(call.queue, clone(f.Payload))
		}
		if f.EndStream {
			call.clientDone = true
		}
		call.signal()
		c.release(call)
	case wire.End:
		if f.Code != 0 || f.HasMessage || f.HasDetails || f.HasTrailers {
			return c.violation("a client's END carries a status")
		}
		call := c.calls[f.Call]
		if call == nil {
			return c.goneAway || c.violation("END on call %d, not in use", f.Call)
		}
		if call.clientDone {
			return c.violation("END on call %d after its end of stream", f.Call)
		}
		call.clientDone = true
		call.signal()
		c.release(call)
	case wire.Cancel:
		call := c.calls[f.Call]
		if call == nil {
			return true // it may have crossed the call's END
		}
		call.clientDone = true
		c.finish(call, nil, &Status{Code: Code(f.Code), Message: "cancelled by the client"})
	case wire.Credit:
		call := c.calls[f.Call]
		if call == nil {
			return true
		}
		if call.sendCredit+int64(f.N) > wire.MaxCredit {
			return c.violation("credit overflow on call %d", f.Call)
		}
		call.sendCredit += int64(f.N)
		call.signal()
	case wire.Ping:
		if !f.Ack {
			c.queue(wire.Ping{Ack: true, Payload: f.Payload})
		}
	case wire.GoAway:
		c.draining = true
		c.checkIdle()
	default:
		return c.violation("a client may not send this frame")
	}
	return true
}

// open starts a call; mu held.
func (c *serverConn) open(f wire.Call) bool {
	name, ok := c.bound[f.Method]
	if !ok {
		return c.violation("CALL on unbound method %d", f.Method)
	}
	if _, dup := c.calls[f.Call]; dup {
		return c.violation("duplicate call id %d", f.Call)
	}
	c.received++
	if c.goneAway && c.draining {
		return true // past the GOAWAY's count: the client fails it
	}
	call := &ServerCall{
		c:          c,
		id:         f.Call,
		md:         cloneMetadata(f.Metadata),
		recvCredit: int64(c.local.InitialCredit),
		sendCredit: int64(c.peer.InitialCredit),
		clientDone: f.EndStream,
		wake:       make(chan struct{}, 1),
	}
	ctx := context.Background()
	if f.HasTimeout {
		ctx, call.stop = context.WithDeadline(ctx, time.Now().Add(time.Duration(min(f.TimeoutMicros, 1<<62/1000))*time.Microsecond))
	} else {
		ctx, call.stop = context.WithCancel(ctx)
	}
	call.ctx = ctx
	c.calls[f.Call] = call
	c.running++
	if f.HasMessage {
		call.recvCredit--
		call.queue = append(call.queue, clone(f.Message))
	}
	m, known := c.srv.methods[name]
	switch {
	case f.HasMetadata && f.Metadata.EncodedLen() > int(c.local.MaxMetadataSize):
		c.finish(call, nil, statusf(ResourceExhausted, "request metadata above %d bytes", c.local.MaxMetadataSize))
	case c.running > int(c.local.MaxConcurrentCalls):
		c.finish(call, nil, statusf(ResourceExhausted, "more than %d calls at once", c.local.MaxConcurrentCalls))
	case !known:
		c.finish(call, nil, statusf(Unimplemented, "unknown method %s", name))
	default:
		if f.HasTimeout {
			context.AfterFunc(ctx, func() {
				if errors.Is(ctx.Err(), context.DeadlineExceeded) {
					c.mu.Lock()
					c.finish(call, nil, statusf(DeadlineExceeded, "deadline exceeded"))
					c.mu.Unlock()
				}
			})
		}
		c.srv.spawn(func() { call.run(m) })
	}
	return true
}

// finish ends the server's side of a call with resp (a response message,
// for unary and client-streaming calls) or st; mu held.
func (c *serverConn) finish(call *ServerCall, resp []byte, st *Status) {
	if call.serverDone {
		return
	}
	call.serverDone = true
	c.running--
	call.stop()
	hdr := call.header
	if st == nil && resp != nil {
		m := wire.Message{Call: call.id, EndStream: len(call.trailer) == 0, Payload: resp}
		if !call.headerSent && len(hdr) > 0 {
			m.HasMetadata, m.Metadata = true, hdr
		}
		c.queue(m)
		if len(call.trailer) > 0 {
			c.queue(wire.End{Call: call.id, HasTrailers: true, Trailers: call.trailer})
		}
	} else {
		if st == nil {
			st = okStatus
		}
		end := wire.End{Call: call.id, Code: uint32(st.Code)}
		if st.Message != "" {
			end.HasMessage, end.Message = true, st.Message
		}
		if len(st.Details) > 0 {
			end.HasDetails, end.Details = true, st.Details
		}
		trailers := append(wire.Metadata{}, call.trailer...)
		trailers = append(trailers, st.Trailers...)
		if !call.headerSent {
			trailers = append(append(wire.Metadata{}, hdr...), trailers...)
		}
		if len(trailers) > 0 {
			end.HasTrailers, end.Trailers = true, trailers
		}
		c.queue(end)
	}
	call.signal()
	c.release(call)
}

// release forgets a call closed in both directions; mu held.
func (c *serverConn) release(call *ServerCall) {
	if call.clientDone && call.serverDone && c.calls[call.id] == call {
		delete(c.calls, call.id)
		c.checkIdle()
	}
}

// ServerCall is one call as its handler sees it.
type ServerCall struct {
	c          *serverConn
	id         uint32
	ctx        context.Context
	stop       context.CancelFunc
	md         wire.Metadata
	queue      [][]byte
	recvCredit int64  // messages the client may still send
	window     window // credit returned to the client
	sendCredit int64
	header     wire.Metadata
	headerSent bool
	trailer    wire.Metadata
	clientDone bool
	serverDone bool
	wake       chan struct{}
}

func (s *ServerCall) signal() {
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

// cancel stops the handler (the connection is gone); mu held.
func (s *ServerCall) cancel() {
	s.serverDone, s.clientDone = true, true
	s.stop()
	s.signal()
}

// Context is the call's: done when the client cancels, the deadline
// passes or the connection ends.
func (s *ServerCall) Context() context.Context { return s.ctx }

// Metadata is the request's metadata.
func (s *ServerCall) Metadata() wire.Metadata { return s.md }

// SetHeader sets the leading metadata, sent with the first message (or
// with the trailers if there is none).
func (s *ServerCall) SetHeader(md wire.Metadata) {
	s.c.mu.Lock()
	s.header = md
	s.c.mu.Unlock()
}

// SetTrailer sets the trailing metadata.
func (s *ServerCall) SetTrailer(md wire.Metadata) {
	s.c.mu.Lock()
	s.trailer = md
	s.c.mu.Unlock()
}

// Recv is the next request message, io.EOF after the client's last.
func (s *ServerCall) Recv() ([]byte, error) {
	c := s.c
	c.mu.Lock()
	for {
		if len(s.queue) > 0 {
			m := s.queue[0]
			s.queue[0] = nil
			s.queue = s.queue[1:]
			if n := s.window.consume(len(m), c.local.InitialCredit); n > 0 && !s.clientDone {
				c.queue(wire.Credit{Call: s.id, N: n})
				s.recvCredit += int64(n)
			}
			c.mu.Unlock()
			return m, nil
		}
		if s.serverDone {
			c.mu.Unlock()
			return nil, statusf(Canceled, "the call is over")
		}
		if s.clientDone {
			c.mu.Unlock()
			return nil, io.EOF
		}
		c.mu.Unlock()
		select {
		case <-s.wake:
		case <-s.ctx.Done():
		}
		c.mu.Lock()
	}
}

// Send sends one response message, waiting for the client's credit.
func (s *ServerCall) Send(msg []byte) error {
	c := s.c
	c.mu.Lock()
	for {
		if s.serverDone {
			c.mu.Unlock()
			return statusf(Canceled, "the call is over")
		}
		if len(msg) > int(c.peer.MaxFrameSize)-16 {
			c.mu.Unlock()
			return statusf(ResourceExhausted, "message of %d bytes is above the client's frame limit", len(msg))
		}
		if s.sendCredit > 0 {
			s.sendCredit--
			m := wire.Message{Call: s.id, Payload: msg}
			if !s.headerSent {
				s.headerSent = true
				if len(s.header) > 0 {
					m.HasMetadata, m.Metadata = true, s.header
				}
			}
			c.queue(m)
			c.mu.Unlock()
			return nil
		}
		c.mu.Unlock()
		select {
		case <-s.wake:
		case <-s.ctx.Done():
		}
		c.mu.Lock()
	}
}

// run runs the handler and ends the call with what it returns.
func (s *ServerCall) run(m method) {
	var resp []byte
	var err error
	func() {
		defer func() {
			if p := recover(); p != nil {
				err = statusf(Internal, "handler panicked: %v", p)
			}
		}()
		if m.kind == Unary {
			var req []byte
			if req, err = s.Recv(); err == nil {
				resp, err = m.unary(s.ctx, req, s.md)
				if err == nil && resp == nil {
					resp = []byte{}
				}
			} else if err == io.EOF {
				err = statusf(Internal, "a unary call without a request message")
			}
			return
		}
		err = m.stream(s.ctx, s)
	}()
	var st *Status
	if err != nil {
		switch {
		case errors.As(err, &st):
		case errors.Is(err, context.DeadlineExceeded):
			st = statusf(DeadlineExceeded, "deadline exceeded")
		case errors.Is(err, context.Canceled):
			st = statusf(Canceled, "%v", err)
		default:
			st = &Status{Code: Unknown, Message: err.Error()}
		}
		resp = nil
	}
	s.c.mu.Lock()
	s.c.finish(s, resp, st)
	s.c.mu.Unlock()
}

// SendAndClose answers a client-streaming call with its one response (as
// the handler's last act).
func (s *ServerCall) SendAndClose(msg []byte) error {
	s.c.mu.Lock()
	defer s.c.mu.Unlock()
	if s.serverDone {
		return statusf(Canceled, "the call is over")
	}
	s.c.finish(s, msg, nil)
	return nil
}
