package wire

import (
	"bytes"
	"encoding/hex"
	"encoding/json"
	"errors"
	"os"
	"reflect"
	"strconv"
	"testing"
)

// The repository's vectors (PROTOCOL.md §9), written by an encoder
// independent of both implementations.
type vectors struct {
	MaxFrameSize uint32 `json:"max_frame_size"`
	Valid        []struct {
		Name  string         `json:"name"`
		Frame map[string]any `json:"frame"`
		Hex   string         `json:"hex"`
	} `json:"valid"`
	DecodeOnly []struct {
		Name      string         `json:"name"`
		Frame     map[string]any `json:"frame"`
		Hex       string         `json:"hex"`
		Canonical string         `json:"canonical_hex"`
	} `json:"decode_only"`
	Invalid []struct {
		Name  string `json:"name"`
		Hex   string `json:"hex"`
		Error string `json:"error"`
	} `json:"invalid"`
	Incomplete []struct {
		Name string `json:"name"`
		Hex  string `json:"hex"`
	} `json:"incomplete"`
	Preface []struct {
		Name   string `json:"name"`
		Hex    string `json:"hex"`
		Result string `json:"result"`
	} `json:"preface"`
}

func load(t *testing.T) vectors {
	t.Helper()
	raw, err := os.ReadFile("../../testdata/vectors/frames.json")
	if err != nil {
		t.Fatal(err)
	}
	var v vectors
	d := json.NewDecoder(bytes.NewReader(raw))
	d.UseNumber()
	if err := d.Decode(&v); err != nil {
		t.Fatal(err)
	}
	return v
}

func unhex(t *testing.T, s string) []byte {
	t.Helper()
	b, err := hex.DecodeString(s)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// normal is v as JSON decodes it with numbers kept exact.
func normal(t *testing.T, v any) any {
	t.Helper()
	raw, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	var out any
	d := json.NewDecoder(bytes.NewReader(raw))
	d.UseNumber()
	if err := d.Decode(&out); err != nil {
		t.Fatal(err)
	}
	return out
}

func mdJSON(m Metadata) [][]string {
	out := [][]string{}
	for _, e := range m {
		out = append(out, []string{e.Key, hex.EncodeToString(e.Value)})
	}
	return out
}

func num(v uint64) json.Number { return json.Number(strconv.FormatUint(v, 10)) }

// asJSON is a frame in the vectors' form.
func asJSON(f Frame) map[string]any {
	switch f := f.(type) {
	case Settings:
		m := map[string]any{"type": "SETTINGS"}
		d := DefaultSettings()
		set := func(k string, v, def uint32) {
			if v != def {
				m[k] = num(uint64(v))
			}
		}
		set("max_frame_size", f.MaxFrameSize, d.MaxFrameSize)
		set("max_concurrent_calls", f.MaxConcurrentCalls, d.MaxConcurrentCalls)
		set("initial_credit", f.InitialCredit, d.InitialCredit)
		set("max_metadata_size", f.MaxMetadataSize, d.MaxMetadataSize)
		set("max_bound_methods", f.MaxBoundMethods, d.MaxBoundMethods)
		return m
	case Bind:
		return map[string]any{"type": "BIND", "method": num(uint64(f.Method)), "name": f.Name}
	case Call:
		m := map[string]any{"type": "CALL", "call": num(uint64(f.Call)), "method": num(uint64(f.Method))}
		if f.EndStream {
			m["end_stream"] = true
		}
		if f.HasTimeout {
			m["timeout_micros"] = num(f.TimeoutMicros)
		}
		if f.HasMetadata {
			m["metadata"] = mdJSON(f.Metadata)
		}
		if f.HasMessage {
			m["message"] = hex.EncodeToString(f.Message)
		}
		return m
	case Message:
		m := map[string]any{"type": "MESSAGE", "call": num(uint64(f.Call)), "payload": hex.EncodeToString(f.Payload)}
		if f.EndStream {
			m["end_stream"] = true
		}
		if f.HasMetadata {
			m["metadata"] = mdJSON(f.Metadata)
		}
		return m
	case End:
		m := map[string]any{"type": "END", "call": num(uint64(f.Call)), "code": num(uint64(f.Code))}
		if f.HasMessage {
			m["message"] = f.Message
		}
		if f.HasDetails {
			m["details"] = hex.EncodeToString(f.Details)
		}
		if f.HasTrailers {
			m["trailers"] = mdJSON(f.Trailers)
		}
		return m
	case Cancel:
		return map[string]any{"type": "CANCEL", "call": num(uint64(f.Call)), "code": num(uint64(f.Code))}
	case Credit:
		return map[string]any{"type": "CREDIT", "call": num(uint64(f.Call)), "n": num(uint64(f.N))}
	case Ping:
		m := map[string]any{"type": "PING", "payload": hex.EncodeToString(f.Payload[:])}
		if f.Ack {
			m["ack"] = true
		}
		return m
	case GoAway:
		return map[string]any{"type": "GOAWAY", "last_call_seq": num(f.LastCallSeq), "reason": num(uint64(f.Reason)), "message": f.Message}
	}
	return nil
}

// fromJSON builds the frame a vector describes.
func fromJSON(t *testing.T, m map[string]any) Frame {
	t.Helper()
	u := func(k string) uint64 {
		n, ok := m[k].(json.Number)
		if !ok {
			return 0
		}
		v, err := strconv.ParseUint(string(n), 10, 64)
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	has := func(k string) bool { _, ok := m[k]; return ok }
	bin := func(k string) []byte { s, _ := m[k].(string); return unhex(t, s) }
	md := func(k string) Metadata {
		out := Metadata{}
		list, _ := m[k].([]any)
		for _, e := range list {
			pair := e.([]any)
			out = append(out, Entry{Key: pair[0].(string), Value: unhex(t, pair[1].(string))})
		}
		return out
	}
	flag := func(k string) bool { b, _ := m[k].(bool); return b }
	switch m["type"] {
	case "SETTINGS":
		s := DefaultSettings()
		if has("max_frame_size") {
			s.MaxFrameSize = uint32(u("max_frame_size"))
		}
		if has("max_concurrent_calls") {
			s.MaxConcurrentCalls = uint32(u("max_concurrent_calls"))
		}
		if has("initial_credit") {
			s.InitialCredit = uint32(u("initial_credit"))
		}
		if has("max_metadata_size") {
			s.MaxMetadataSize = uint32(u("max_metadata_size"))
		}
		if has("max_bound_methods") {
			s.MaxBoundMethods = uint32(u("max_bound_methods"))
		}
		return s
	case "BIND":
		return Bind{Method: uint32(u("method")), Name: m["name"].(string)}
	case "CALL":
		return Call{
			Call: uint32(u("call")), Method: uint32(u("method")), EndStream: flag("end_stream"),
			HasTimeout: has("timeout_micros"), TimeoutMicros: u("timeout_micros"),
			HasMetadata: has("metadata"), Metadata: md("metadata"),
			HasMessage: has("message"), Message: bin("message"),
		}
	case "MESSAGE":
		return Message{
			Call: uint32(u("call")), EndStream: flag("end_stream"),
			HasMetadata: has("metadata"), Metadata: md("metadata"), Payload: bin("payload"),
		}
	case "END":
		msg, _ := m["message"].(string)
		return End{
			Call: uint32(u("call")), Code: uint32(u("code")),
			HasMessage: has("message"), Message: msg,
			HasDetails: has("details"), Details: bin("details"),
			HasTrailers: has("trailers"), Trailers: md("trailers"),
		}
	case "CANCEL":
		return Cancel{Call: uint32(u("call")), Code: uint32(u("code"))}
	case "CREDIT":
		return Credit{Call: uint32(u("call")), N: uint32(u("n"))}
	case "PING":
		p := Ping{Ack: flag("ack")}
		copy(p.Payload[:], bin("payload"))
		return p
	case "GOAWAY":
		return GoAway{LastCallSeq: u("last_call_seq"), Reason: uint32(u("reason")), Message: m["message"].(string)}
	}
	t.Fatalf("unknown frame type %v", m["type"])
	return nil
}

func TestValidVectorsEncodeAndDecodeExactly(t *testing.T) {
	v := load(t)
	for _, c := range v.Valid {
		want := unhex(t, c.Hex)
		if got := fromJSON(t, c.Frame).Append(nil); !bytes.Equal(got, want) {
			t.Errorf("%s: encodes to %x, want %s", c.Name, got, c.Hex)
		}
		f, n, err := Decode(want, v.MaxFrameSize)
		if err != nil || n != len(want) {
			t.Errorf("%s: decode: n=%d err=%v", c.Name, n, err)
			continue
		}
		if got := normal(t, asJSON(f)); !reflect.DeepEqual(got, normal(t, c.Frame)) {
			t.Errorf("%s: decodes to %v, want %v", c.Name, got, c.Frame)
		}
	}
}

func TestNonCanonicalVectorsDecodeAndReencodeCanonically(t *testing.T) {
	v := load(t)
	for _, c := range v.DecodeOnly {
		f, n, err := Decode(unhex(t, c.Hex), v.MaxFrameSize)
		if err != nil || n != len(c.Hex)/2 {
			t.Errorf("%s: decode: n=%d err=%v", c.Name, n, err)
			continue
		}
		if got := normal(t, asJSON(f)); !reflect.DeepEqual(got, normal(t, c.Frame)) {
			t.Errorf("%s: decodes to %v, want %v", c.Name, got, c.Frame)
		}
		if got := hex.EncodeToString(f.Append(nil)); got != c.Canonical {
			t.Errorf("%s: re-encodes to %s, want %s", c.Name, got, c.Canonical)
		}
	}
}

func TestInvalidVectorsFailWithTheirErrorAtOnce(t *testing.T) {
	v := load(t)
	for _, c := range v.Invalid {
		_, _, err := Decode(unhex(t, c.Hex), v.MaxFrameSize)
		var we *Error
		if !errors.As(err, &we) {
			t.Errorf("%s: got %v, want %s", c.Name, err, c.Error)
			continue
		}
		if string(we.Kind) != c.Error {
			t.Errorf("%s: got %s (%v), want %s", c.Name, we.Kind, err, c.Error)
		}
	}
}

func TestIncompleteVectorsAskForMore(t *testing.T) {
	v := load(t)
	for _, c := range v.Incomplete {
		f, n, err := Decode(unhex(t, c.Hex), v.MaxFrameSize)
		if f != nil || n != 0 || err != nil {
			t.Errorf("%s: got %v, %d, %v; want more bytes", c.Name, f, n, err)
		}
	}
}

func TestPrefaceVectors(t *testing.T) {
	names := map[PrefaceResult]string{
		PrefaceOK: "ok", PrefaceIncomplete: "incomplete", BadPreface: "bad_preface",
		UnsupportedVersion: "unsupported_version",
	}
	for _, c := range load(t).Preface {
		if got := names[CheckPreface(unhex(t, c.Hex))]; got != c.Result {
			t.Errorf("%s: %s, want %s", c.Name, got, c.Result)
		}
	}
}
