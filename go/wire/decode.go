package wire

import (
	"bytes"
	"unicode/utf8"
)

// Decode reads the frame at the start of b, whose body may be at most
// maxFrameSize bytes. It returns the frame and the bytes it took; n == 0
// (and no error) when b does not hold a whole frame yet. The frame's byte
// fields alias b.
//
// The header is checked before the body is waited for: an unknown type or
// flag, or a length above maxFrameSize, fails on the bytes at hand.
func Decode(b []byte, maxFrameSize uint32) (f Frame, n int, err error) {
	if len(b) == 0 {
		return nil, 0, nil
	}
	typ, flags := b[0]>>4, b[0]&0xf
	if typ > TypeGoAway {
		return nil, 0, fail(UnknownFrameType, "type 0x%x", typ)
	}
	if flags&^definedFlags[typ] != 0 {
		return nil, 0, fail(UnknownFlags, "flags 0x%x on type 0x%x", flags, typ)
	}
	length, ln, err := readVarint(b[1:])
	if err != nil {
		return nil, 0, err
	}
	if ln == 0 {
		return nil, 0, nil
	}
	if length > uint64(maxFrameSize) {
		return nil, 0, fail(FrameTooLarge, "%d-byte body, limit %d", length, maxFrameSize)
	}
	start := 1 + ln
	if uint64(len(b)-start) < length {
		return nil, 0, nil
	}
	end := start + int(length)
	f, err = decodeBody(typ, flags, body{b[start:end]})
	if err != nil {
		return nil, 0, err
	}
	return f, end, nil
}

func decodeBody(typ, flags byte, r body) (Frame, error) {
	switch typ {
	case TypeSettings:
		return decodeSettings(r)
	case TypeBind:
		m, err := r.u32()
		if err != nil {
			return nil, err
		}
		name := r.rest()
		if len(name) == 0 {
			return nil, fail(OutOfRange, "empty method name")
		}
		if !utf8.Valid(name) {
			return nil, fail(InvalidUTF8, "method name")
		}
		return Bind{Method: m, Name: string(name)}, nil
	case TypeCall:
		return decodeCall(flags, r)
	case TypeMessage:
		return decodeMessage(flags, r)
	case TypeEnd:
		return decodeEnd(flags, r)
	case TypeCancel:
		call, err := r.u32()
		if err != nil {
			return nil, err
		}
		code, err := r.varint()
		if err != nil {
			return nil, err
		}
		if code > MaxCode {
			return nil, fail(InvalidCode, "code %d", code)
		}
		return Cancel{Call: call, Code: uint32(code)}, r.end()
	case TypeCredit:
		call, err := r.u32()
		if err != nil {
			return nil, err
		}
		n, err := r.u32()
		if err != nil {
			return nil, err
		}
		if n == 0 || n > MaxCredit {
			return nil, fail(OutOfRange, "credit %d", n)
		}
		return Credit{Call: call, N: n}, r.end()
	case TypePing:
		if len(r.b) < 8 {
			return nil, fail(Truncated, "ping of %d bytes", len(r.b))
		}
		if len(r.b) > 8 {
			return nil, fail(TrailingBytes, "ping of %d bytes", len(r.b))
		}
		p := Ping{Ack: flags&PingAck != 0}
		copy(p.Payload[:], r.b)
		return p, nil
	default: // TypeGoAway
		seq, err := r.varint()
		if err != nil {
			return nil, err
		}
		reason, err := r.u32()
		if err != nil {
			return nil, err
		}
		msg := r.rest()
		if !utf8.Valid(msg) {
			return nil, fail(InvalidUTF8, "goaway message")
		}
		return GoAway{LastCallSeq: seq, Reason: reason, Message: string(msg)}, nil
	}
}

func decodeSettings(r body) (Frame, error) {
	s := DefaultSettings()
	var seen [6]bool
	for len(r.b) > 0 {
		id, err := r.varint()
		if err != nil {
			return nil, err
		}
		v, err := r.varint()
		if err != nil {
			return nil, err
		}
		if id < 1 || id > 5 {
			continue
		}
		if seen[id] {
			return nil, fail(InvalidSetting, "setting %d repeated", id)
		}
		seen[id] = true
		if v > 1<<32-1 {
			return nil, fail(InvalidSetting, "setting %d = %d", id, v)
		}
		u := uint32(v)
		switch id {
		case 1:
			if u < 16<<10 || u > 1<<30 {
				return nil, fail(InvalidSetting, "max_frame_size %d", u)
			}
			s.MaxFrameSize = u
		case 2:
			s.MaxConcurrentCalls = u
		case 3:
			if u < 1 || u > MaxCredit {
				return nil, fail(InvalidSetting, "initial_credit %d", u)
			}
			s.InitialCredit = u
		case 4:
			s.MaxMetadataSize = u
		case 5:
			s.MaxBoundMethods = u
		}
	}
	return s, nil
}

func decodeCall(flags byte, r body) (Frame, error) {
	var f Call
	var err error
	if f.Call, err = r.u32(); err != nil {
		return nil, err
	}
	if f.Method, err = r.u32(); err != nil {
		return nil, err
	}
	f.EndStream = flags&CallEndStream != 0
	if flags&CallDeadline != 0 {
		f.HasTimeout = true
		if f.TimeoutMicros, err = r.varint(); err != nil {
			return nil, err
		}
	}
	if flags&CallMetadata != 0 {
		f.HasMetadata = true
		if f.Metadata, err = r.metadata(); err != nil {
			return nil, err
		}
	}
	if flags&CallMessage != 0 {
		f.HasMessage = true
		f.Message = r.rest()
		return f, nil
	}
	return f, r.end()
}

func decodeMessage(flags byte, r body) (Frame, error) {
	var f Message
	var err error
	if f.Call, err = r.u32(); err != nil {
		return nil, err
	}
	f.EndStream = flags&MessageEndStream != 0
	if flags&MessageMetadata != 0 {
		f.HasMetadata = true
		if f.Metadata, err = r.metadata(); err != nil {
			return nil, err
		}
	}
	f.Payload = r.rest()
	return f, nil
}

func decodeEnd(flags byte, r body) (Frame, error) {
	var f End
	var err error
	if f.Call, err = r.u32(); err != nil {
		return nil, err
	}
	code, err := r.varint()
	if err != nil {
		return nil, err
	}
	if code > MaxCode {
		return nil, fail(InvalidCode, "code %d", code)
	}
	f.Code = uint32(code)
	if flags&EndStatusMsg != 0 {
		f.HasMessage = true
		msg, err := r.field()
		if err != nil {
			return nil, err
		}
		if !utf8.Valid(msg) {
			return nil, fail(InvalidUTF8, "status message")
		}
		f.Message = string(msg)
	}
	if flags&EndDetails != 0 {
		f.HasDetails = true
		if f.Details, err = r.field(); err != nil {
			return nil, err
		}
	}
	if flags&EndTrailers != 0 {
		f.HasTrailers = true
		if f.Trailers, err = r.metadata(); err != nil {
			return nil, err
		}
	}
	return f, r.end()
}

// Preface is the 8 bytes each side sends first: 0x89 "TRAM" CR LF, and
// the version.
var Preface = [8]byte{0x89, 'T', 'R', 'A', 'M', '\r', '\n', 1}

// PrefaceResult is what the first bytes of a connection say.
type PrefaceResult int

// The outcomes of CheckPreface.
const (
	PrefaceOK PrefaceResult = iota
	PrefaceIncomplete
	BadPreface
	UnsupportedVersion
)

// CheckPreface looks at a connection's first bytes: a bad byte among the
// first seven fails at once.
func CheckPreface(b []byte) PrefaceResult {
	n := min(len(b), 7)
	if !bytes.Equal(b[:n], Preface[:n]) {
		return BadPreface
	}
	if len(b) < 8 {
		return PrefaceIncomplete
	}
	if b[7] != Preface[7] {
		return UnsupportedVersion
	}
	return PrefaceOK
}
