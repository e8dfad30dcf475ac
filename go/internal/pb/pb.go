// Package pb writes and reads protobuf messages by hand, for the examples
// and tests that use tram without generated code.
package pb

import (
	"errors"

	"github.com/tram-rpc/tram/go/wire"
)

// Append appends (field number, value) pairs: string and []byte values
// length-delimited, uint64 and bool as varints (false left out).
func Append(b []byte, fields ...any) []byte {
	for i := 0; i+1 < len(fields); i += 2 {
		num := uint64(fields[i].(int))
		switch v := fields[i+1].(type) {
		case string:
			b = wire.AppendVarint(b, num<<3|2)
			b = wire.AppendVarint(b, uint64(len(v)))
			b = append(b, v...)
		case []byte:
			b = wire.AppendVarint(b, num<<3|2)
			b = wire.AppendVarint(b, uint64(len(v)))
			b = append(b, v...)
		case uint64:
			b = wire.AppendVarint(b, num<<3)
			b = wire.AppendVarint(b, v)
		case bool:
			if v {
				b = wire.AppendVarint(b, num<<3)
				b = append(b, 1)
			}
		}
	}
	return b
}

// Fields is a decoded message: each field number's values, varints as
// uint64 and length-delimited fields as []byte.
type Fields map[int][]any

// Decode reads a message's fields (varint and length-delimited only).
func Decode(b []byte) (Fields, error) {
	out := Fields{}
	read := func() (uint64, error) {
		var v uint64
		for i := 0; i < 10; i++ {
			if len(b) == 0 {
				return 0, errors.New("truncated protobuf")
			}
			c := b[0]
			b = b[1:]
			v |= uint64(c&0x7f) << (7 * i)
			if c < 0x80 {
				return v, nil
			}
		}
		return 0, errors.New("varint too long")
	}
	for len(b) > 0 {
		tag, err := read()
		if err != nil {
			return nil, err
		}
		f := int(tag >> 3)
		switch tag & 7 {
		case 0:
			v, err := read()
			if err != nil {
				return nil, err
			}
			out[f] = append(out[f], v)
		case 2:
			n, err := read()
			if err != nil {
				return nil, err
			}
			if n > uint64(len(b)) {
				return nil, errors.New("truncated protobuf")
			}
			out[f] = append(out[f], b[:n])
			b = b[n:]
		default:
			return nil, errors.New("unsupported wire type")
		}
	}
	return out, nil
}

// Bytes is field f's last value as bytes (protobuf's last-one-wins).
func (m Fields) Bytes(f int) []byte {
	if v, ok := m[f]; ok {
		if b, ok := v[len(v)-1].([]byte); ok {
			return b
		}
	}
	return nil
}

// String is field f as a string.
func (m Fields) String(f int) string { return string(m.Bytes(f)) }

// Uint is field f's last value as a varint.
func (m Fields) Uint(f int) uint64 {
	if v, ok := m[f]; ok {
		if u, ok := v[len(v)-1].(uint64); ok {
			return u
		}
	}
	return 0
}
