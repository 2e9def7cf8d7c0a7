package provider

import "context"

// Trace is a model call's hooks into its HTTP exchange, carried by the
// call's context as net/http/httptrace carries a ClientTrace: the adapters
// call them, the caller (the runner, for tenant governance) sets them.
type Trace struct {
	// Response, when set, is called with the provider's response status
	// and a reader of its headers (its rate-limit headers: header returns
	// a header's first value, "" when absent) once they arrive, an error
	// status included, before the body is read. It must not block long
	// nor keep header. (A reader, not an http.Header: this package does
	// not import net/http.)
	Response func(status int, header func(name string) string)
}

type traceKey struct{}

// WithTrace returns ctx carrying t.
func WithTrace(ctx context.Context, t *Trace) context.Context {
	return context.WithValue(ctx, traceKey{}, t)
}

// TraceFrom is the Trace ctx carries, nil when none.
func TraceFrom(ctx context.Context) *Trace {
	t, _ := ctx.Value(traceKey{}).(*Trace)
	return t
}
