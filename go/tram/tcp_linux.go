//go:build linux

package tram

import (
	"fmt"
	"syscall"
)

// setCongestion sets the TCP congestion control of the socket behind rc
// (TCP_CONGESTION).
func setCongestion(rc syscall.RawConn, name string) error {
	var err error
	if cerr := rc.Control(func(fd uintptr) {
		err = syscall.SetsockoptString(int(fd), syscall.IPPROTO_TCP, syscall.TCP_CONGESTION, name)
	}); cerr != nil {
		return cerr
	}
	if err != nil {
		return fmt.Errorf("setting TCP congestion control %q: %w", name, err)
	}
	return nil
}
