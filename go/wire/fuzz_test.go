package wire

import (
	"bytes"
	"encoding/hex"
	"testing"
)

// FuzzDecode: no input panics, and whatever decodes re-encodes to bytes
// that decode to the same frame (`go test -fuzz FuzzDecode ./wire`; the
// seed corpus, every vector, runs with `go test`).
func FuzzDecode(f *testing.F) {
	v := load(&testing.T{})
	for _, c := range v.Valid {
		b, _ := hex.DecodeString(c.Hex)
		f.Add(b)
	}
	for _, c := range v.Invalid {
		b, _ := hex.DecodeString(c.Hex)
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		fr, n, err := Decode(b, 1<<20)
		if err != nil || n == 0 {
			return
		}
		again := fr.Append(nil)
		fr2, n2, err := Decode(again, 1<<20)
		if err != nil || n2 != len(again) {
			t.Fatalf("%x re-encoded to %x, which does not decode: %v", b[:n], again, err)
		}
		if !bytes.Equal(fr2.Append(nil), again) {
			t.Fatalf("%x: encoding is not stable", b[:n])
		}
	})
}
