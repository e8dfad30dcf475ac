// Package wire is tram's wire protocol (PROTOCOL.md in the repository),
// sans IO: frames to bytes and bytes to frames, the preface, settings and
// metadata blocks, with every check the protocol asks of a receiver. It
// reads no sockets and keeps no clocks; package tram drives it.
//
// Decode never waits on garbage: an unknown type, an undefined flag or a
// length above the limit fail on the header's first bytes, before the body
// has arrived, and nothing is allocated for a body before its bytes are in
// the buffer.
package wire
