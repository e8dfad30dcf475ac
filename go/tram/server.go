package tram

import (
	"context"
	"errors"
	"net"
	"sync"
	"time"

	"github.com/tram-rpc/tram/go/wire"
)

// Kind is a method's call kind.
type Kind int

// The call kinds.
const (
	Unary Kind = iota
	ServerStreaming
	ClientStreaming
	BidiStreaming
)

// UnaryHandler answers a unary call: the response message, or an error
// (a *Status, or any error as UNKNOWN).
type UnaryHandler func(ctx context.Context, req []byte, md wire.Metadata) ([]byte, error)

// StreamHandler runs a streaming call of any kind through its ServerCall;
// returning ends the call (nil: OK).
type StreamHandler func(ctx context.Context, call *ServerCall) error

type method struct {
	kind   Kind
	unary  UnaryHandler
	stream StreamHandler
}

// ServerOptions are a server's limits.
type ServerOptions struct {
	// Settings announced to clients (limits on what the server receives).
	Settings wire.Settings
	// HandshakeTimeout: a connection whose preface and SETTINGS have not
	// arrived by then is closed (default 10 s).
	HandshakeTimeout time.Duration
	// KeepaliveInterval and KeepaliveTimeout: ping a client silent for
	// the interval, close its connection (GOAWAY TIMEOUT) if nothing
	// arrives within the timeout after (defaults 30 s and 10 s; a negative
	// interval turns keepalive off).
	KeepaliveInterval, KeepaliveTimeout time.Duration
	// CongestionControl names the TCP congestion control set on each
	// accepted connection ("cubic", "reno", ...; Linux only), instead of
	// the system's (see Options.CongestionControl). Serve returns the
	// error if the kernel refuses it.
	CongestionControl string
}

// Server serves tram calls with Go handlers. Register every method before
// serving.
type Server struct {
	opts    ServerOptions
	methods map[string]method

	mu       sync.Mutex
	conns    map[*serverConn]struct{}
	draining bool

	// work hands a call to an idle worker goroutine. Workers outlive their
	// calls, so a call does not start on a fresh goroutine whose stack
	// must grow (and be copied) on every call.
	work chan func()
}

// workerIdle is how long a worker waits for a call before it exits.
const workerIdle = 10 * time.Second

// spawn runs fn on an idle worker, or on a new one.
func (s *Server) spawn(fn func()) {
	select {
	case s.work <- fn:
	default:
		go s.worker(fn)
	}
}

func (s *Server) worker(fn func()) {
	idle := time.NewTimer(workerIdle)
	defer idle.Stop()
	for {
		fn()
		idle.Reset(workerIdle)
		select {
		case fn = <-s.work:
		case <-idle.C:
			return
		}
	}
}

// NewServer is a server with default limits.
func NewServer() *Server {
	return NewServerOptions(ServerOptions{Settings: wire.DefaultSettings()})
}

// NewServerOptions is a server with these limits.
func NewServerOptions(o ServerOptions) *Server {
	if o.HandshakeTimeout == 0 {
		o.HandshakeTimeout = 10 * time.Second
	}
	if o.KeepaliveInterval == 0 {
		o.KeepaliveInterval = 30 * time.Second
	}
	if o.KeepaliveTimeout <= 0 {
		o.KeepaliveTimeout = 10 * time.Second
	}
	return &Server{opts: o, methods: map[string]method{}, conns: map[*serverConn]struct{}{}, work: make(chan func())}
}

// HandleUnary serves a unary method at path (`/package.Service/Method`).
func (s *Server) HandleUnary(path string, h UnaryHandler) {
	s.methods[path] = method{kind: Unary, unary: h}
}

// HandleStream serves a streaming method of kind at path.
func (s *Server) HandleStream(path string, kind Kind, h StreamHandler) {
	s.methods[path] = method{kind: kind, stream: h}
}

// Serve accepts connections on l until it fails or Shutdown is called.
func (s *Server) Serve(l net.Listener) error {
	for {
		nc, err := l.Accept()
		if err != nil {
			s.mu.Lock()
			draining := s.draining
			s.mu.Unlock()
			if draining {
				return nil
			}
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				time.Sleep(10 * time.Millisecond)
				continue
			}
			return err
		}
		if tc, ok := nc.(*net.TCPConn); ok {
			_ = tc.SetNoDelay(true)
			if err := s.setCongestion(tc); err != nil {
				nc.Close()
				return err
			}
		}
		go s.ServeConn(nc)
	}
}

// setCongestion gives tc the configured congestion control, if any.
func (s *Server) setCongestion(tc *net.TCPConn) error {
	if s.opts.CongestionControl == "" {
		return nil
	}
	rc, err := tc.SyscallConn()
	if err != nil {
		return err
	}
	return setCongestion(rc, s.opts.CongestionControl)
}

// ServeConn serves one connection until it closes.
func (s *Server) ServeConn(nc net.Conn) {
	c := &serverConn{
		link:    newLink(nc, s.opts.Settings),
		srv:     s,
		bound:   map[uint32]string{},
		calls:   map[uint32]*ServerCall{},
		peer:    wire.DefaultSettings(),
		handled: make(chan struct{}),
	}
	s.mu.Lock()
	if s.draining {
		s.mu.Unlock()
		_ = nc.Close()
		return
	}
	s.conns[c] = struct{}{}
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		delete(s.conns, c)
		s.mu.Unlock()
	}()
	c.out = append(c.out, wire.Preface[:]...)
	c.out = s.opts.Settings.Append(c.out)
	c.wake <- struct{}{}
	go c.writeLoop(func(error) { c.close() })
	if s.opts.KeepaliveInterval > 0 {
		go c.keepalive(s.opts.KeepaliveInterval, s.opts.KeepaliveTimeout, func() {
			c.goAway(wire.Timeout, "keepalive timeout")
			c.close()
		})
	}
	handshake := time.AfterFunc(s.opts.HandshakeTimeout, func() {
		c.mu.Lock()
		late := !c.ready
		if late {
			c.goneAway = true
			c.queue(wire.GoAway{Reason: wire.Timeout, Message: "handshake timeout"})
		}
		c.mu.Unlock()
		if late {
			c.close()
		}
	})
	err := c.readLoop(c.handle)
	handshake.Stop()
	var pe errProtocol
	if errors.As(err, &pe) && !pe.silent {
		c.goAway(pe.reason, pe.why)
	}
	c.close()
}

// Shutdown stops accepting, tells every client to open no new calls
// (GOAWAY), lets the calls in flight finish, and returns when they have or
// ctx is done (then the rest are cancelled).
func (s *Server) Shutdown(ctx context.Context) {
	s.mu.Lock()
	s.draining = true
	conns := make([]*serverConn, 0, len(s.conns))
	for c := range s.conns {
		conns = append(conns, c)
	}
	s.mu.Unlock()
	for _, c := range conns {
		c.drain()
	}
	for _, c := range conns {
		select {
		case <-c.idle():
		case <-ctx.Done():
		}
		c.close()
	}
}
