package wire

import "math"

// MaxVarintLen is the longest varint: 10 bytes.
const MaxVarintLen = 10

// AppendVarint appends v as a varint (LEB128, shortest form).
func AppendVarint(b []byte, v uint64) []byte {
	for v >= 0x80 {
		b = append(b, byte(v)|0x80)
		v >>= 7
	}
	return append(b, byte(v))
}

// VarintLen is the number of bytes v takes as a varint.
func VarintLen(v uint64) int {
	n := 1
	for v >= 0x80 {
		v >>= 7
		n++
	}
	return n
}

// readVarint reads a varint from b: its value and length; n == 0 when b
// ends before the varint does (without error).
func readVarint(b []byte) (v uint64, n int, err error) {
	for i := 0; i < MaxVarintLen; i++ {
		if i == len(b) {
			return 0, 0, nil
		}
		c := b[i]
		if i == MaxVarintLen-1 && c > 0x01 {
			return 0, 0, fail(VarintOverflow, "tenth byte 0x%02x", c)
		}
		v |= uint64(c&0x7f) << (7 * i)
		if c < 0x80 {
			return v, i + 1, nil
		}
	}
	return 0, 0, fail(VarintOverflow, "more than 10 bytes")
}

// body reads the fields of one frame body, failing with Truncated when a
// field runs past its end.
type body struct {
	b []byte
}

func (r *body) varint() (uint64, error) {
	v, n, err := readVarint(r.b)
	if err != nil {
		return 0, err
	}
	if n == 0 {
		return 0, fail(Truncated, "varint runs past the frame")
	}
	r.b = r.b[n:]
	return v, nil
}

func (r *body) u32() (uint32, error) {
	v, err := r.varint()
	if err != nil {
		return 0, err
	}
	if v > math.MaxUint32 {
		return 0, fail(OutOfRange, "%d does not fit in 32 bits", v)
	}
	return uint32(v), nil
}

func (r *body) field() ([]byte, error) {
	n, err := r.varint()
	if err != nil {
		return nil, err
	}
	if n > uint64(len(r.b)) {
		return nil, fail(Truncated, "field of %d bytes runs past the frame", n)
	}
	f := r.b[:n]
	r.b = r.b[n:]
	return f, nil
}

// metadata reads a metadata block field.
func (r *body) metadata() (Metadata, error) {
	block, err := r.field()
	if err != nil {
		return nil, err
	}
	return decodeMetadata(block)
}

func (r *body) rest() []byte {
	b := r.b
	r.b = nil
	return b
}

func (r *body) end() error {
	if len(r.b) != 0 {
		return fail(TrailingBytes, "%d bytes after the last field", len(r.b))
	}
	return nil
}
