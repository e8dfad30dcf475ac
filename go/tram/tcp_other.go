//go:build !linux

package tram

import (
	"errors"
	"syscall"
)

// setCongestion fails: only Linux lets a socket choose its congestion
// control here.
func setCongestion(_ syscall.RawConn, name string) error {
	return errors.New("TCP congestion control " + name + " cannot be set on this system")
}
