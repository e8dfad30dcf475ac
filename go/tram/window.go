package tram

// window decides the credit a receiver returns (PROTOCOL.md §6.3): each
// time half the window has been consumed, that much comes back, and the
// window grows toward 1 MiB of unread messages (at most 65536 messages),
// so that a stream of small messages is not held to a round trip per few
// dozen, as the Rust side does.
type window struct {
	size     uint32 // messages the sender may have in flight
	consumed uint32 // consumed since credit was last returned
	bytes    uint64
	msgs     uint64
}

const (
	windowBytes = 1 << 20
	windowMax   = 65536
)

// consume records a message of n bytes; the credit to grant now, if any.
func (w *window) consume(n int, initial uint32) uint32 {
	if w.size == 0 {
		w.size = initial
	}
	w.consumed++
	w.bytes += uint64(n)
	w.msgs++
	if w.consumed < max(w.size/2, 1) {
		return 0
	}
	avg := max(w.bytes/w.msgs, 1)
	target := uint32(min(max(windowBytes/avg, uint64(initial)), windowMax))
	grant := w.consumed
	if target > w.size {
		grant += target - w.size
		w.size = target
	}
	w.consumed = 0
	return grant
}
