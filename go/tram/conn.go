// Package tram is a tram client in Go: one TCP connection multiplexing
// calls of every kind, byte-compatible with the Rust implementation
// (PROTOCOL.md), on package wire.
//
// A connection has one reader and one writer goroutine. Callers append
// their frames to the connection's out buffer under its lock and wake the
// writer, which takes everything queued since its last write and writes it
// at once: calls made while a write is in progress share the next one,
// without a timer.
package tram

import (
	"container/heap"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"syscall"
	"time"

	"github.com/tram-rpc/tram/go/wire"
)

// Options of a connection.
type Options struct {
	// Settings this side announces (limits on what it receives).
	Settings wire.Settings
	// DialTimeout bounds the TCP connect (default 10 s).
	DialTimeout time.Duration
	// KeepaliveInterval: after this long without a byte from the server,
	// ping it; KeepaliveTimeout: close the connection if nothing arrives
	// within this long after the ping (defaults 30 s and 10 s, as the
	// Rust side; negative turns keepalive off).
	KeepaliveInterval, KeepaliveTimeout time.Duration
	// CongestionControl names the TCP congestion control of the
	// connection ("cubic", "reno", ...; Linux only), instead of the
	// system's. A host running BBR paces every connection's sends with
	// kernel timers where no fq qdisc does, loopback included, which costs
	// CPU on every large message (docs/performance.md). An unknown or
	// refused name fails the dial.
	CongestionControl string
}

// Conn is a client connection. It is safe for concurrent use.
type Conn struct {
	link

	peer    wire.Settings
	calls   map[uint32]*Stream
	free    ids
	nextID  uint32
	methods map[string]uint32
	sent    uint64 // CALL frames sent
	closing bool   // GOAWAY seen or sent: no new calls
	err     error  // why the connection ended
}

// Dial connects to a tram server at addr (host:port).
func Dial(ctx context.Context, addr string) (*Conn, error) {
	return DialOptions(ctx, addr, Options{Settings: wire.DefaultSettings()})
}

// DialOptions connects with options.
func DialOptions(ctx context.Context, addr string, o Options) (*Conn, error) {
	if o.DialTimeout == 0 {
		o.DialTimeout = 10 * time.Second
	}
	d := net.Dialer{Timeout: o.DialTimeout}
	if cc := o.CongestionControl; cc != "" {
		d.Control = func(_, _ string, rc syscall.RawConn) error { return setCongestion(rc, cc) }
	}
	nc, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil, err
	}
	if tc, ok := nc.(*net.TCPConn); ok {
		_ = tc.SetNoDelay(true)
	}
	c := NewConn(nc, o.Settings)
	if o.KeepaliveInterval >= 0 {
		interval, timeout := o.KeepaliveInterval, o.KeepaliveTimeout
		if interval == 0 {
			interval = 30 * time.Second
		}
		if timeout <= 0 {
			timeout = 10 * time.Second
		}
		go c.keepalive(interval, timeout, func() {
			c.mu.Lock()
			if c.err == nil {
				c.out = wire.GoAway{Reason: wire.Timeout, Message: "keepalive timeout"}.Append(c.out)
			}
			c.mu.Unlock()
			c.fail(statusf(Unavailable, "keepalive: no answer from the server within %v", timeout))
		})
	}
	return c, nil
}

// NewConn runs the protocol's client side over nc (any stream transport).
func NewConn(nc net.Conn, settings wire.Settings) *Conn {
	c := &Conn{
		link:    newLink(nc, settings),
		peer:    wire.DefaultSettings(),
		calls:   map[uint32]*Stream{},
		methods: map[string]uint32{},
	}
	// Until the server's SETTINGS arrives, frames stay within 16 KiB.
	c.peer.MaxFrameSize = 16 << 10
	c.out = append(c.out, wire.Preface[:]...)
	c.out = settings.Append(c.out)
	c.wake <- struct{}{}
	go c.writeLoop(func(err error) { c.fail(statusf(Unavailable, "write: %v", err)) })
	go func() {
		err := c.readLoop(c.handle)
		var pe errProtocol
		switch {
		case errors.As(err, &pe) && pe.silent:
			c.fail(statusf(Unavailable, "%s", pe.why))
		case errors.As(err, &pe):
			c.protocolError(pe.why)
		case errors.Is(err, io.EOF):
			c.fail(statusf(Unavailable, "the server closed the connection"))
		case err != nil:
			c.fail(statusf(Unavailable, "read: %v", err))
		}
	}()
	return c
}

// Close ends the connection: calls in flight fail with UNAVAILABLE.
func (c *Conn) Close() error {
	c.mu.Lock()
	if c.err == nil {
		c.out = wire.GoAway{Reason: wire.NoError, Message: "client closing"}.Append(c.out)
	}
	c.mu.Unlock()
	c.fail(statusf(Unavailable, "connection closed by the client"))
	return nil
}

// Done is closed when the connection has ended.
func (c *Conn) Done() <-chan struct{} { return c.done }

// Err is why the connection ended (nil while it is up).
func (c *Conn) Err() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.err
}

func (c *Conn) protocolError(why string) {
	c.mu.Lock()
	if c.err == nil {
		c.out = wire.GoAway{Reason: wire.ProtocolError, Message: why}.Append(c.out)
	}
	c.mu.Unlock()
	c.fail(statusf(Internal, "protocol error: %s", why))
}

// fail ends the connection and every call on it.
func (c *Conn) fail(st *Status) {
	c.mu.Lock()
	if c.err == nil {
		c.err = st
		c.closing = true
		for id, s := range c.calls {
			s.finish(st)
			delete(c.calls, id)
		}
	}
	c.mu.Unlock()
	c.end()
}

// handle applies one frame from the server (mu held); false ends the
// reader.
func (c *Conn) handle(f wire.Frame) bool {
	switch f := f.(type) {
	case wire.Settings:
		c.peer = f
	case wire.Message:
		s := c.calls[f.Call]
		if s == nil {
			// The call was cancelled here; its messages may still arrive.
			return true
		}
		// Within the credit granted, or the queue would grow without bound.
		if s.recvCredit <= 0 {
			go c.protocolError(fmt.Sprintf("MESSAGE on call %d without credit", f.Call))
			return false
		}
		s.recvCredit--
		s.deliver(f)
	case wire.End:
		if s := c.calls[f.Call]; s != nil {
			var st *Status
			if f.Code != 0 || f.HasMessage {
				st = &Status{Code: Code(f.Code), Message: f.Message, Details: clone(f.Details)}
			}
			s.trailers = cloneMetadata(f.Trailers)
			s.serverEnd(st)
		}
	case wire.Credit:
		if s := c.calls[f.Call]; s != nil {
			if s.credit+int64(f.N) > wire.MaxCredit {
				go c.protocolError(fmt.Sprintf("credit overflow on call %d", f.Call))
				return false
			}
			s.credit += int64(f.N)
			s.signal()
		}
	case wire.Ping:
		if !f.Ack {
			c.queue(wire.Ping{Ack: true, Payload: f.Payload})
		}
	case wire.GoAway:
		c.closing = true
		for _, s := range c.calls {
			if s.seq > f.LastCallSeq {
				st := statusf(Unavailable, "the server is closing (GOAWAY: %s); the call was not processed", f.Message)
				st.unprocessed = true
				s.finish(st)
			}
		}
		if f.Reason != wire.NoError {
			go c.fail(statusf(Unavailable, "GOAWAY %d: %s", f.Reason, f.Message))
			return false
		}
	default:
		go c.protocolError("a server may not send this frame")
		return false
	}
	return true
}

// open starts a call; c.mu held.
func (c *Conn) open(ctx context.Context, method string, md wire.Metadata, first []byte, hasFirst, endStream bool) (*Stream, error) {
	if c.err != nil {
		return nil, c.err
	}
	if c.closing {
		st := statusf(Unavailable, "the connection is closing")
		st.unprocessed = true
		return nil, st
	}
	if err := md.Validate(); err != nil {
		return nil, statusf(Internal, "request metadata: %v", err)
	}
	if len(c.calls) >= int(c.peer.MaxConcurrentCalls) {
		return nil, statusf(ResourceExhausted, "the server allows %d calls at once", c.peer.MaxConcurrentCalls)
	}
	if len(first) > int(c.peer.MaxFrameSize)-32 {
		return nil, statusf(ResourceExhausted, "request of %d bytes is above the server's frame limit", len(first))
	}
	num, ok := c.methods[method]
	if !ok {
		num = uint32(len(c.methods))
		c.methods[method] = num
		c.queue(wire.Bind{Method: num, Name: method})
	}
	var id uint32
	if c.free.Len() > 0 {
		id = heap.Pop(&c.free).(uint32)
	} else {
		id = c.nextID
		c.nextID++
	}
	c.sent++
	s := newStream(c, ctx, id, c.sent)
	s.credit = int64(c.peer.InitialCredit)
	s.recvCredit = int64(c.local.InitialCredit)
	call := wire.Call{Call: id, Method: num, EndStream: endStream, HasMessage: hasFirst, Message: first}
	if dl, ok := ctx.Deadline(); ok {
		call.HasTimeout = true
		call.TimeoutMicros = uint64(max(time.Until(dl), 0) / time.Microsecond)
	}
	if len(md) > 0 {
		call.HasMetadata, call.Metadata = true, md
	}
	if hasFirst {
		s.credit--
	}
	s.clientDone = endStream
	c.calls[id] = s
	c.queue(call)
	return s, nil
}

// release frees a call's id once both directions are closed; c.mu held.
func (c *Conn) release(s *Stream) {
	if s.released || !s.clientDone || !s.serverDone {
		return
	}
	s.released = true
	if c.calls[s.id] == s {
		delete(c.calls, s.id)
	}
	heap.Push(&c.free, s.id)
}

// ids is a min-heap of free call ids: the lowest is reused first, which
// keeps ids (and their varints) small.
type ids []uint32

func (h ids) Len() int           { return len(h) }
func (h ids) Less(i, j int) bool { return h[i] < h[j] }
func (h ids) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *ids) Push(x any)        { *h = append(*h, x.(uint32)) }
func (h *ids) Pop() any {
	old := *h
	x := old[len(old)-1]
	*h = old[:len(old)-1]
	return x
}

// isClosing reports whether the connection takes no new calls (GOAWAY).
func (c *Conn) isClosing() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.closing
}
