package tram

import (
	"fmt"

	"github.com/tram-rpc/tram/go/wire"
)

// Code is a call's status code: gRPC's codes, with gRPC's numbers.
type Code uint32

// The status codes.
const (
	OK Code = iota
	Canceled
	Unknown
	InvalidArgument
	DeadlineExceeded
	NotFound
	AlreadyExists
	PermissionDenied
	ResourceExhausted
	FailedPrecondition
	Aborted
	OutOfRange
	Unimplemented
	Internal
	Unavailable
	DataLoss
	Unauthenticated
)

var codeNames = [...]string{
	"OK", "CANCELLED", "UNKNOWN", "INVALID_ARGUMENT", "DEADLINE_EXCEEDED", "NOT_FOUND",
	"ALREADY_EXISTS", "PERMISSION_DENIED", "RESOURCE_EXHAUSTED", "FAILED_PRECONDITION",
	"ABORTED", "OUT_OF_RANGE", "UNIMPLEMENTED", "INTERNAL", "UNAVAILABLE", "DATA_LOSS",
	"UNAUTHENTICATED",
}

func (c Code) String() string {
	if int(c) < len(codeNames) {
		return codeNames[c]
	}
	return fmt.Sprintf("CODE(%d)", uint32(c))
}

// Status is how a call that did not succeed ended: the error calls return.
type Status struct {
	Code     Code
	Message  string
	Details  []byte
	Trailers wire.Metadata
	// unprocessed: the call never reached a handler (refused by a GOAWAY
	// or a closing connection), so it is safe to send again.
	unprocessed bool
}

// Unprocessed reports whether the call failed before any server
// processed it: safe to retry whatever the method does.
func (s *Status) Unprocessed() bool { return s.unprocessed }

func (s *Status) Error() string {
	if s.Message == "" {
		return "tram: " + s.Code.String()
	}
	return fmt.Sprintf("tram: %s: %s", s.Code, s.Message)
}

// StatusOf is err's status: the Status itself, or UNKNOWN for any other
// error.
func StatusOf(err error) *Status {
	if s, ok := err.(*Status); ok {
		return s
	}
	return &Status{Code: Unknown, Message: err.Error()}
}

func statusf(code Code, format string, args ...any) *Status {
	return &Status{Code: code, Message: fmt.Sprintf(format, args...)}
}
