package wire

// Frame types (the high nibble of a frame's first byte).
const (
	TypeSettings = 0x0
	TypeBind     = 0x1
	TypeCall     = 0x2
	TypeMessage  = 0x3
	TypeEnd      = 0x4
	TypeCancel   = 0x5
	TypeCredit   = 0x6
	TypePing     = 0x7
	TypeGoAway   = 0x8
)

// Flags of CALL, MESSAGE, END and PING.
const (
	CallEndStream    = 0x1
	CallMessage      = 0x2
	CallDeadline     = 0x4
	CallMetadata     = 0x8
	MessageEndStream = 0x1
	MessageMetadata  = 0x2
	EndStatusMsg     = 0x1
	EndDetails       = 0x2
	EndTrailers      = 0x4
	PingAck          = 0x1
)

// definedFlags are the flags each type defines; any other is an error.
var definedFlags = [16]byte{
	TypeSettings: 0, TypeBind: 0, TypeCall: 0xf, TypeMessage: 0x3, TypeEnd: 0x7,
	TypeCancel: 0, TypeCredit: 0, TypePing: 0x1, TypeGoAway: 0,
}

// MaxCode is the highest status code (UNAUTHENTICATED).
const MaxCode = 16

// MaxCredit is the largest credit window.
const MaxCredit = 1<<31 - 1

// Frame is one of the frame types below.
type Frame interface {
	// Append appends the frame's canonical encoding to b.
	Append(b []byte) []byte
}

// Settings are a side's limits on what it receives (PROTOCOL.md §2.2).
type Settings struct {
	MaxFrameSize       uint32
	MaxConcurrentCalls uint32
	InitialCredit      uint32
	MaxMetadataSize    uint32
	MaxBoundMethods    uint32
}

// DefaultSettings are the settings a side has until its SETTINGS says
// otherwise.
func DefaultSettings() Settings {
	return Settings{
		MaxFrameSize:       4 << 20,
		MaxConcurrentCalls: 1024,
		InitialCredit:      64,
		MaxMetadataSize:    16 << 10,
		MaxBoundMethods:    1024,
	}
}

// Bind gives method number Method the path Name.
type Bind struct {
	Method uint32
	Name   string
}

// Call opens a call.
type Call struct {
	Call, Method uint32
	EndStream    bool
	// HasTimeout: TimeoutMicros is the caller's allowance.
	HasTimeout    bool
	TimeoutMicros uint64
	// HasMetadata: Metadata is the request's metadata block.
	HasMetadata bool
	Metadata    Metadata
	// HasMessage: Message is the first request message.
	HasMessage bool
	Message    []byte
}

// Message is one message of a call.
type Message struct {
	Call        uint32
	EndStream   bool
	HasMetadata bool
	Metadata    Metadata
	Payload     []byte
}

// End ends the sender's direction of a call, with a status from a server.
type End struct {
	Call       uint32
	Code       uint32
	HasMessage bool
	Message    string
	HasDetails bool
	Details    []byte
	// HasTrailers: Trailers is the trailing metadata block.
	HasTrailers bool
	Trailers    Metadata
}

// Cancel abandons a call.
type Cancel struct {
	Call, Code uint32
}

// Credit allows N more messages on a call.
type Credit struct {
	Call, N uint32
}

// Ping asks for (or, with Ack, answers) a round trip.
type Ping struct {
	Ack     bool
	Payload [8]byte
}

// GoAway closes a connection.
type GoAway struct {
	LastCallSeq uint64
	Reason      uint32
	Message     string
}

// GOAWAY reasons.
const (
	NoError        = 0
	ProtocolError  = 1
	InternalError  = 2
	FrameTooLargeR = 3
	LimitExceeded  = 4
	Timeout        = 5
)
