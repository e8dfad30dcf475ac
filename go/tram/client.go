package tram

import (
	"context"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/tram-rpc/tram/go/wire"
)

// Caller makes calls: a Conn (one connection) or a Client (a connection
// kept up). Generated clients take either.
type Caller interface {
	Unary(ctx context.Context, method string, req []byte, md wire.Metadata) ([]byte, error)
	ServerStream(ctx context.Context, method string, req []byte, md wire.Metadata) (*Stream, error)
	NewStream(ctx context.Context, method string, md wire.Metadata) (*Stream, error)
}

// ClientOptions configure a Client.
type ClientOptions struct {
	Options
	// Backoff between failed connects: from MinBackoff, doubling (with
	// jitter) up to MaxBackoff (defaults 100 ms and 10 s).
	MinBackoff, MaxBackoff time.Duration
}

// Client keeps a connection to one address up: it connects on first use,
// and after the connection ends it connects again, backing off while
// connects fail. Calls wait for a connection within their context.
type Client struct {
	addr string
	opts ClientOptions

	mu       sync.Mutex
	conn     *Conn
	dialing  chan struct{} // closed when the current dial attempt ends
	lastErr  error
	failures int
	closed   bool
}

// NewClient is a client of addr; it connects when first used.
func NewClient(addr string, o ClientOptions) *Client {
	if o.Settings == (wire.Settings{}) {
		o.Settings = wire.DefaultSettings()
	}
	if o.MinBackoff == 0 {
		o.MinBackoff = 100 * time.Millisecond
	}
	if o.MaxBackoff == 0 {
		o.MaxBackoff = 10 * time.Second
	}
	return &Client{addr: addr, opts: o}
}

// Close closes the connection; later calls fail.
func (c *Client) Close() error {
	c.mu.Lock()
	c.closed = true
	conn := c.conn
	c.mu.Unlock()
	if conn != nil {
		return conn.Close()
	}
	return nil
}

// get is a live connection, connecting (once, for all waiting callers) if
// there is none.
func (c *Client) get(ctx context.Context) (*Conn, error) {
	for {
		c.mu.Lock()
		if c.closed {
			c.mu.Unlock()
			return nil, statusf(Unavailable, "the client is closed")
		}
		if c.conn != nil {
			select {
			case <-c.conn.Done():
				c.conn = nil
			default:
				if !c.conn.isClosing() {
					conn := c.conn
					c.mu.Unlock()
					return conn, nil
				}
				c.conn = nil
			}
		}
		if c.dialing == nil {
			c.dialing = make(chan struct{})
			go c.dial(c.dialing)
		}
		wait := c.dialing
		c.mu.Unlock()
		select {
		case <-wait:
		case <-ctx.Done():
			c.mu.Lock()
			err := c.lastErr
			c.mu.Unlock()
			code := Unavailable
			if ctx.Err() == context.DeadlineExceeded {
				code = DeadlineExceeded
			}
			if err != nil {
				return nil, statusf(code, "no connection to %s: %v", c.addr, err)
			}
			return nil, statusf(code, "no connection to %s yet", c.addr)
		}
	}
}

// dial connects, after the backoff that the failures so far call for.
func (c *Client) dial(done chan struct{}) {
	c.mu.Lock()
	failures := c.failures
	c.mu.Unlock()
	if failures > 0 {
		d := c.opts.MinBackoff << min(failures-1, 16)
		d = min(d, c.opts.MaxBackoff)
		// Full jitter over the upper half, so that clients spread out.
		d = d/2 + rand.N(d/2+1)
		time.Sleep(d)
	}
	ctx, cancel := context.WithTimeout(context.Background(), max(c.opts.DialTimeout, 10*time.Second))
	conn, err := DialOptions(ctx, c.addr, c.opts.Options)
	cancel()
	c.mu.Lock()
	if err != nil {
		c.failures++
		c.lastErr = err
	} else {
		c.failures = 0
		c.lastErr = nil
		if c.closed {
			conn.Close()
		} else {
			c.conn = conn
		}
	}
	c.dialing = nil
	c.mu.Unlock()
	close(done)
}

// retries is how many times a call no server processed is sent again.
const retries = 3

// unprocessed reports whether err says the call reached no handler.
func unprocessed(err error) bool {
	st, ok := err.(*Status)
	return ok && st.unprocessed
}

// Unary is Conn.Unary on the current connection. A call that no server
// processed (its connection was going away) is sent again on the next
// connection, within its context; the first failure is reported if all
// fail.
func (c *Client) Unary(ctx context.Context, method string, req []byte, md wire.Metadata) ([]byte, error) {
	var first error
	for try := 0; ; try++ {
		conn, err := c.get(ctx)
		if err != nil {
			if first != nil {
				return nil, first
			}
			return nil, err
		}
		resp, err := conn.Unary(ctx, method, req, md)
		if err == nil || !unprocessed(err) || try == retries || ctx.Err() != nil {
			if err != nil && first != nil {
				return nil, first
			}
			return resp, err
		}
		if first == nil {
			first = err
		}
	}
}

// ServerStream is Conn.ServerStream on the current connection.
func (c *Client) ServerStream(ctx context.Context, method string, req []byte, md wire.Metadata) (*Stream, error) {
	conn, err := c.get(ctx)
	if err != nil {
		return nil, err
	}
	return conn.ServerStream(ctx, method, req, md)
}

// NewStream is Conn.NewStream on the current connection.
func (c *Client) NewStream(ctx context.Context, method string, md wire.Metadata) (*Stream, error) {
	conn, err := c.get(ctx)
	if err != nil {
		return nil, err
	}
	return conn.NewStream(ctx, method, md)
}
