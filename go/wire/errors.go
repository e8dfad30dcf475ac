package wire

import "fmt"

// ErrorKind names a decoding failure as PROTOCOL.md §6.5 does.
type ErrorKind string

// The decoding failures of PROTOCOL.md §1–§5.
const (
	UnknownFrameType ErrorKind = "unknown_frame_type"
	UnknownFlags     ErrorKind = "unknown_flags"
	FrameTooLarge    ErrorKind = "frame_too_large"
	VarintOverflow   ErrorKind = "varint_overflow"
	Truncated        ErrorKind = "truncated"
	TrailingBytes    ErrorKind = "trailing_bytes"
	OutOfRange       ErrorKind = "out_of_range"
	InvalidCode      ErrorKind = "invalid_code"
	InvalidUTF8      ErrorKind = "invalid_utf8"
	InvalidMetadata  ErrorKind = "invalid_metadata"
	InvalidSetting   ErrorKind = "invalid_setting"
)

// Error is a frame that breaks the protocol: a connection error.
type Error struct {
	Kind   ErrorKind
	Detail string
}

func (e *Error) Error() string {
	if e.Detail == "" {
		return "tram wire: " + string(e.Kind)
	}
	return fmt.Sprintf("tram wire: %s: %s", e.Kind, e.Detail)
}

func fail(kind ErrorKind, format string, args ...any) error {
	return &Error{Kind: kind, Detail: fmt.Sprintf(format, args...)}
}
