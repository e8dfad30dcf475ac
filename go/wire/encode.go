package wire

// header appends a frame header for a body of n bytes.
func header(b []byte, typ, flags byte, n int) []byte {
	b = append(b, typ<<4|flags)
	return AppendVarint(b, uint64(n))
}

// Append appends the canonical SETTINGS: values that differ from the
// defaults, in id order.
func (s Settings) Append(b []byte) []byte {
	d := DefaultSettings()
	var body []byte
	pair := func(id uint64, v, def uint32) {
		if v != def {
			body = AppendVarint(body, id)
			body = AppendVarint(body, uint64(v))
		}
	}
	pair(1, s.MaxFrameSize, d.MaxFrameSize)
	pair(2, s.MaxConcurrentCalls, d.MaxConcurrentCalls)
	pair(3, s.InitialCredit, d.InitialCredit)
	pair(4, s.MaxMetadataSize, d.MaxMetadataSize)
	pair(5, s.MaxBoundMethods, d.MaxBoundMethods)
	b = header(b, TypeSettings, 0, len(body))
	return append(b, body...)
}

func (f Bind) Append(b []byte) []byte {
	n := VarintLen(uint64(f.Method)) + len(f.Name)
	b = header(b, TypeBind, 0, n)
	b = AppendVarint(b, uint64(f.Method))
	return append(b, f.Name...)
}

func (f Call) Append(b []byte) []byte {
	var flags byte
	n := VarintLen(uint64(f.Call)) + VarintLen(uint64(f.Method))
	if f.EndStream {
		flags |= CallEndStream
	}
	if f.HasTimeout {
		flags |= CallDeadline
		n += VarintLen(f.TimeoutMicros)
	}
	var mdLen int
	if f.HasMetadata {
		flags |= CallMetadata
		mdLen = f.Metadata.EncodedLen()
		n += VarintLen(uint64(mdLen)) + mdLen
	}
	if f.HasMessage {
		flags |= CallMessage
		n += len(f.Message)
	}
	b = header(b, TypeCall, flags, n)
	b = AppendVarint(b, uint64(f.Call))
	b = AppendVarint(b, uint64(f.Method))
	if f.HasTimeout {
		b = AppendVarint(b, f.TimeoutMicros)
	}
	if f.HasMetadata {
		b = AppendVarint(b, uint64(mdLen))
		b = appendMetadata(b, f.Metadata)
	}
	if f.HasMessage {
		b = append(b, f.Message...)
	}
	return b
}

func (f Message) Append(b []byte) []byte {
	var flags byte
	n := VarintLen(uint64(f.Call)) + len(f.Payload)
	if f.EndStream {
		flags |= MessageEndStream
	}
	var mdLen int
	if f.HasMetadata {
		flags |= MessageMetadata
		mdLen = f.Metadata.EncodedLen()
		n += VarintLen(uint64(mdLen)) + mdLen
	}
	b = header(b, TypeMessage, flags, n)
	b = AppendVarint(b, uint64(f.Call))
	if f.HasMetadata {
		b = AppendVarint(b, uint64(mdLen))
		b = appendMetadata(b, f.Metadata)
	}
	return append(b, f.Payload...)
}

func (f End) Append(b []byte) []byte {
	var flags byte
	n := VarintLen(uint64(f.Call)) + VarintLen(uint64(f.Code))
	if f.HasMessage {
		flags |= EndStatusMsg
		n += VarintLen(uint64(len(f.Message))) + len(f.Message)
	}
	if f.HasDetails {
		flags |= EndDetails
		n += VarintLen(uint64(len(f.Details))) + len(f.Details)
	}
	var mdLen int
	if f.HasTrailers {
		flags |= EndTrailers
		mdLen = f.Trailers.EncodedLen()
		n += VarintLen(uint64(mdLen)) + mdLen
	}
	b = header(b, TypeEnd, flags, n)
	b = AppendVarint(b, uint64(f.Call))
	b = AppendVarint(b, uint64(f.Code))
	if f.HasMessage {
		b = AppendVarint(b, uint64(len(f.Message)))
		b = append(b, f.Message...)
	}
	if f.HasDetails {
		b = AppendVarint(b, uint64(len(f.Details)))
		b = append(b, f.Details...)
	}
	if f.HasTrailers {
		b = AppendVarint(b, uint64(mdLen))
		b = appendMetadata(b, f.Trailers)
	}
	return b
}

func (f Cancel) Append(b []byte) []byte {
	b = header(b, TypeCancel, 0, VarintLen(uint64(f.Call))+VarintLen(uint64(f.Code)))
	b = AppendVarint(b, uint64(f.Call))
	return AppendVarint(b, uint64(f.Code))
}

func (f Credit) Append(b []byte) []byte {
	b = header(b, TypeCredit, 0, VarintLen(uint64(f.Call))+VarintLen(uint64(f.N)))
	b = AppendVarint(b, uint64(f.Call))
	return AppendVarint(b, uint64(f.N))
}

func (f Ping) Append(b []byte) []byte {
	var flags byte
	if f.Ack {
		flags = PingAck
	}
	b = header(b, TypePing, flags, 8)
	return append(b, f.Payload[:]...)
}

func (f GoAway) Append(b []byte) []byte {
	n := VarintLen(f.LastCallSeq) + VarintLen(uint64(f.Reason)) + len(f.Message)
	b = header(b, TypeGoAway, 0, n)
	b = AppendVarint(b, f.LastCallSeq)
	b = AppendVarint(b, uint64(f.Reason))
	return append(b, f.Message...)
}
