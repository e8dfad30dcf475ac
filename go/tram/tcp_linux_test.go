//go:build linux

package tram

// The congestion control options, over loopback: the kernel reports the
// named algorithm on the client's and the server's sockets, and an
// unknown name fails the dial, and Serve.

import (
	"context"
	"net"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"
	"unsafe"

	"github.com/tram-rpc/tram/go/wire"
)

// otherThanDefault is an algorithm any process may set that is not the
// system's default ("reno" is built into every kernel and always allowed),
// or "" if there is none.
func otherThanDefault(t *testing.T) string {
	def, err := os.ReadFile("/proc/sys/net/ipv4/tcp_congestion_control")
	if err != nil {
		t.Skip("no congestion control sysctl:", err)
	}
	allowed, _ := os.ReadFile("/proc/sys/net/ipv4/tcp_allowed_congestion_control")
	for _, name := range append([]string{"reno"}, strings.Fields(string(allowed))...) {
		if name != strings.TrimSpace(string(def)) {
			return name
		}
	}
	return ""
}

// running is the congestion control the kernel runs on nc.
func running(t *testing.T, nc net.Conn) string {
	t.Helper()
	rc, err := nc.(*net.TCPConn).SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	var name [16]byte
	size := uint32(len(name))
	var errno syscall.Errno
	if err := rc.Control(func(fd uintptr) {
		_, _, errno = syscall.Syscall6(syscall.SYS_GETSOCKOPT, fd, syscall.IPPROTO_TCP,
			syscall.TCP_CONGESTION, uintptr(unsafe.Pointer(&name[0])), uintptr(unsafe.Pointer(&size)), 0)
	}); err != nil {
		t.Fatal(err)
	}
	if errno != 0 {
		t.Fatal(errno)
	}
	return strings.TrimRight(string(name[:size]), "\x00")
}

// recording hands Serve the connections it accepts and keeps them.
type recording struct {
	net.Listener
	accepted chan net.Conn
}

func (r recording) Accept() (net.Conn, error) {
	nc, err := r.Listener.Accept()
	if err == nil {
		r.accepted <- nc
	}
	return nc, err
}

func TestCongestionControlOnBothEnds(t *testing.T) {
	cc := otherThanDefault(t)
	if cc == "" {
		t.Skip("only one congestion control may be set here")
	}
	srv := NewServerOptions(ServerOptions{Settings: wire.DefaultSettings(), CongestionControl: cc})
	srv.HandleUnary("/t.T/Echo", func(_ context.Context, req []byte, _ wire.Metadata) ([]byte, error) {
		return req, nil
	})
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	rl := recording{Listener: l, accepted: make(chan net.Conn, 1)}
	go srv.Serve(rl)
	defer func() {
		srv.Shutdown(context.Background())
		l.Close()
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	c, err := DialOptions(ctx, l.Addr().String(), Options{Settings: wire.DefaultSettings(), CongestionControl: cc})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	// Answered: the server set the option before it served the connection.
	if resp, err := c.Unary(ctx, "/t.T/Echo", []byte("hi"), nil); err != nil || string(resp) != "hi" {
		t.Fatalf("echo: %q, %v", resp, err)
	}
	if got := running(t, c.nc); got != cc {
		t.Fatalf("client runs %q, not %q", got, cc)
	}
	if got := running(t, <-rl.accepted); got != cc {
		t.Fatalf("server runs %q, not %q", got, cc)
	}
}

func TestUnknownCongestionControlFailsDialAndServe(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_, err = DialOptions(ctx, l.Addr().String(), Options{Settings: wire.DefaultSettings(), CongestionControl: "no-such-cc"})
	if err == nil || !strings.Contains(err.Error(), "no-such-cc") {
		t.Fatalf("dial: %v", err)
	}
	srv := NewServerOptions(ServerOptions{Settings: wire.DefaultSettings(), CongestionControl: "no-such-cc"})
	served := make(chan error, 1)
	go func() { served <- srv.Serve(l) }()
	nc, err := net.Dial("tcp", l.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	select {
	case err := <-served:
		if err == nil || !strings.Contains(err.Error(), "no-such-cc") {
			t.Fatalf("serve: %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Serve did not fail")
	}
}
