package tram

import (
	"errors"
	"io"
	"net"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tram-rpc/tram/go/wire"
)

// link is what both ends of a connection share: the socket, the batched
// writer and the frame reader.
//
// Writes: frames are appended to out under mu and the writer goroutine is
// woken; it takes everything queued since its last write and writes it in
// one call, while callers append to the other buffer. Frames queued while a
// write is in progress therefore share the next one, with no timer.
type link struct {
	nc    net.Conn
	local wire.Settings

	mu   sync.Mutex
	out  []byte
	wake chan struct{}

	done     chan struct{}
	doneOnce sync.Once

	// lastRead is when bytes last arrived (UnixNano), for keepalive.
	lastRead atomic.Int64
}

func newLink(nc net.Conn, local wire.Settings) link {
	return link{nc: nc, local: local, wake: make(chan struct{}, 1), done: make(chan struct{})}
}

// queue appends a frame for the writer; mu held.
func (l *link) queue(f wire.Frame) {
	l.out = f.Append(l.out)
	select {
	case l.wake <- struct{}{}:
	default:
	}
}

// end marks the link done: the writer flushes what is queued (a GOAWAY)
// and closes the socket.
func (l *link) end() {
	l.doneOnce.Do(func() { close(l.done) })
}

func (l *link) writeLoop(failed func(error)) {
	var spare []byte
	for {
		select {
		case <-l.wake:
		case <-l.done:
			l.mu.Lock()
			buf := l.out
			l.out = nil
			l.mu.Unlock()
			if len(buf) > 0 {
				_ = l.nc.SetWriteDeadline(time.Now().Add(time.Second))
				_, _ = l.nc.Write(buf)
			}
			_ = l.nc.Close()
			return
		}
		// Let the goroutines that are ready run first: what they queue
		// goes out in this write instead of the next.
		runtime.Gosched()
		l.mu.Lock()
		buf := l.out
		if len(buf) == 0 {
			l.mu.Unlock()
			continue
		}
		// Callers append to the other buffer while this one is written.
		l.out = spare[:0]
		l.mu.Unlock()
		_, err := l.nc.Write(buf)
		spare = buf
		if err != nil {
			failed(err)
		}
	}
}

// keepalive pings the peer after interval without a byte from it, and
// calls dead if nothing at all arrives within timeout of the ping (PROTOCOL.md
// §8: any frame counts, so a busy peer is never cut off). It returns when
// the link ends.
func (l *link) keepalive(interval, timeout time.Duration, dead func()) {
	l.lastRead.Store(time.Now().UnixNano())
	t := time.NewTimer(interval)
	defer t.Stop()
	for {
		select {
		case <-l.done:
			return
		case <-t.C:
		}
		silent := time.Since(time.Unix(0, l.lastRead.Load()))
		if silent < interval {
			t.Reset(interval - silent)
			continue
		}
		before := l.lastRead.Load()
		l.mu.Lock()
		l.queue(wire.Ping{Payload: [8]byte{'k', 'e', 'e', 'p', 'a', 'l', 'v', 'e'}})
		l.mu.Unlock()
		t.Reset(timeout)
		select {
		case <-l.done:
			return
		case <-t.C:
		}
		if l.lastRead.Load() == before {
			dead()
			return
		}
		t.Reset(interval)
	}
}

// errProtocol wraps a peer's protocol violation: the GOAWAY reason to
// send, or none when the peer does not speak tram at all (a bad preface).
type errProtocol struct {
	why    string
	reason uint32
	silent bool
}

func (e errProtocol) Error() string { return "protocol error: " + e.why }

// readLoop reads the peer's preface and frames and hands each frame to
// handle (false stops reading), with mu held. A frame's bytes are valid
// only during handle: it copies what it keeps. It returns why reading ended: io.EOF, a
// socket error, or an errProtocol.
func (l *link) readLoop(handle func(wire.Frame) bool) error {
	buf := make([]byte, 0, 64<<10)
	preface, settings := false, false
	for {
		if len(buf) == cap(buf) {
			bigger := make([]byte, len(buf), 2*cap(buf))
			copy(bigger, buf)
			buf = bigger
		}
		n, err := l.nc.Read(buf[len(buf):cap(buf)])
		buf = buf[:len(buf)+n]
		if n > 0 {
			l.lastRead.Store(time.Now().UnixNano())
		}
		if err != nil {
			if errors.Is(err, io.EOF) {
				return io.EOF
			}
			return err
		}
		at := 0
		if !preface {
			switch wire.CheckPreface(buf) {
			case wire.PrefaceIncomplete:
				continue
			case wire.PrefaceOK:
				preface = true
				at = len(wire.Preface)
			case wire.UnsupportedVersion:
				return errProtocol{why: "unsupported protocol version", silent: true}
			default:
				return errProtocol{why: "the peer does not speak tram", silent: true}
			}
		}
		// The frames of one read are handled under one lock.
		err = l.handleAll(buf, &at, &settings, handle)
		if err != nil || at < 0 {
			return err
		}
		// Frames alias buf only while handle runs (it copies what it
		// keeps), so the buffer is reused: the unread tail moves to its
		// start.
		buf = buf[:copy(buf, buf[at:])]
	}
}

// handleAll hands each whole frame in buf (from *at) to handle, with mu
// held; *at = -1 when handle asked to stop.
func (l *link) handleAll(buf []byte, at *int, settings *bool, handle func(wire.Frame) bool) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	for {
		f, n, err := wire.Decode(buf[*at:], l.local.MaxFrameSize)
		if err != nil {
			reason := uint32(wire.ProtocolError)
			var we *wire.Error
			if errors.As(err, &we) && we.Kind == wire.FrameTooLarge {
				reason = wire.FrameTooLargeR
			}
			return errProtocol{why: err.Error(), reason: reason}
		}
		if n == 0 {
			return nil
		}
		*at += n
		if _, ok := f.(wire.Settings); ok == *settings {
			return errProtocol{why: "SETTINGS must come first, and once", reason: wire.ProtocolError}
		}
		*settings = true
		if !handle(f) {
			*at = -1
			return nil
		}
	}
}

// clone is a copy of b, out of the read buffer.
func clone(b []byte) []byte {
	return append(make([]byte, 0, len(b)), b...)
}

// cloneMetadata is a copy of md, out of the read buffer.
func cloneMetadata(md wire.Metadata) wire.Metadata {
	if md == nil {
		return nil
	}
	out := make(wire.Metadata, len(md))
	for i, e := range md {
		out[i] = wire.Entry{Key: e.Key, Value: clone(e.Value)}
	}
	return out
}
