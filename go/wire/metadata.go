package wire

import "strings"

// Entry is one metadata entry. Keys ending in "-bin" carry binary values;
// other values are printable ASCII.
type Entry struct {
	Key   string
	Value []byte
}

// Metadata is a metadata block (PROTOCOL.md §5): entries in order, keys
// may repeat.
type Metadata []Entry

// Get is the first value of key, if any.
func (m Metadata) Get(key string) ([]byte, bool) {
	for _, e := range m {
		if e.Key == key {
			return e.Value, true
		}
	}
	return nil, false
}

// ValidKey reports whether key is a metadata key: 1 or more of a-z 0-9 - _ .
func ValidKey(key string) bool {
	if key == "" {
		return false
	}
	for i := 0; i < len(key); i++ {
		c := key[i]
		if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-' || c == '_' || c == '.') {
			return false
		}
	}
	return true
}

// ValidValue reports whether value may go with key.
func ValidValue(key string, value []byte) bool {
	if strings.HasSuffix(key, "-bin") {
		return true
	}
	for _, c := range value {
		if c < 0x20 || c > 0x7e {
			return false
		}
	}
	return true
}

// Validate checks every entry, as a receiver would.
func (m Metadata) Validate() error {
	for _, e := range m {
		if !ValidKey(e.Key) {
			return fail(InvalidMetadata, "key %q", e.Key)
		}
		if !ValidValue(e.Key, e.Value) {
			return fail(InvalidMetadata, "value of %q is not printable ASCII", e.Key)
		}
	}
	return nil
}

// EncodedLen is the block's size on the wire.
func (m Metadata) EncodedLen() int {
	n := 0
	for _, e := range m {
		n += VarintLen(uint64(len(e.Key))) + len(e.Key) + VarintLen(uint64(len(e.Value))) + len(e.Value)
	}
	return n
}

func appendMetadata(b []byte, m Metadata) []byte {
	for _, e := range m {
		b = AppendVarint(b, uint64(len(e.Key)))
		b = append(b, e.Key...)
		b = AppendVarint(b, uint64(len(e.Value)))
		b = append(b, e.Value...)
	}
	return b
}

// decodeMetadata parses a block whose bounds the frame already checked:
// anything wrong inside it is InvalidMetadata.
func decodeMetadata(block []byte) (Metadata, error) {
	m := Metadata{}
	r := body{block}
	for len(r.b) > 0 {
		k, err := r.field()
		if err != nil {
			return nil, fail(InvalidMetadata, "entry runs past the block")
		}
		v, err := r.field()
		if err != nil {
			return nil, fail(InvalidMetadata, "entry runs past the block")
		}
		key := string(k)
		if !ValidKey(key) {
			return nil, fail(InvalidMetadata, "key %q", key)
		}
		if !ValidValue(key, v) {
			return nil, fail(InvalidMetadata, "value of %q is not printable ASCII", key)
		}
		m = append(m, Entry{Key: key, Value: v})
	}
	return m, nil
}
