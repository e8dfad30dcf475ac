package tram

import (
	"context"
	"fmt"

	"github.com/tram-rpc/tram/go/wire"
)

type outgoingKey struct{}
type incomingKey struct{}

// WithOutgoingMetadata is ctx carrying md, for the generated clients to
// send as a call's request metadata.
func WithOutgoingMetadata(ctx context.Context, md wire.Metadata) context.Context {
	return context.WithValue(ctx, outgoingKey{}, md)
}

// OutgoingMetadata is the request metadata ctx carries, if any.
func OutgoingMetadata(ctx context.Context) wire.Metadata {
	md, _ := ctx.Value(outgoingKey{}).(wire.Metadata)
	return md
}

// WithIncomingMetadata is ctx carrying a request's metadata, as generated
// servers give it to handlers.
func WithIncomingMetadata(ctx context.Context, md wire.Metadata) context.Context {
	if len(md) == 0 {
		return ctx
	}
	return context.WithValue(ctx, incomingKey{}, md)
}

// IncomingMetadata is the request metadata of the call ctx belongs to.
func IncomingMetadata(ctx context.Context) wire.Metadata {
	md, _ := ctx.Value(incomingKey{}).(wire.Metadata)
	return md
}

// Errorf is a status with a formatted message: what handlers return to
// fail a call with a code.
func Errorf(code Code, format string, args ...any) *Status {
	return &Status{Code: code, Message: fmt.Sprintf(format, args...)}
}
