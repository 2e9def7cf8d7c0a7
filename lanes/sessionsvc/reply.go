package sessionsvc

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/micro"
	"github.com/rs/zerolog"
	"github.com/vmihailenco/msgpack/v5"

	"github.com/lanefleet/lanefleet/internal/inflight"
	"github.com/lanefleet/lanefleet/internal/reply"
)

// Replier runs a micro service's requests, each on a goroutine of its own
// (inflight.Group), and answers them itself on their reply subjects:
// micro's Request must not be used after its handler returned. A reply is
// a value, msgpack-encoded, or an error as a micro error reply (see
// ErrorHeader). The lane service and the admin service share it. Its
// requests come through reply.Guard: one whose reply subject is not an
// inbox is dropped and logged before answer runs.
type Replier struct {
	NC       *nats.Conn
	Log      zerolog.Logger
	Name     string // the service, in log messages ("lane service")
	Inflight *inflight.Group
	Timeout  time.Duration // of each request's context
	// Guard is the reply guard the replies go through (the service's,
	// microsvc.Service.Guard); nil = one of its own.
	Guard *reply.Guard

	guardOnce sync.Once
	guard     *reply.Guard
}

// Request is a request as its goroutine keeps it.
type Request struct {
	Op, Subject string
	Reply       reply.To
	Data        []byte
}

// guardOf returns the reply guard the replier answers through.
func (r *Replier) guardOf() *reply.Guard {
	r.guardOnce.Do(func() {
		r.guard = r.Guard
		if r.guard == nil {
			r.guard = &reply.Guard{NC: r.NC, Log: r.Log, Service: r.Name}
		}
	})
	return r.guard
}

// Handler returns op's micro handler: it runs answer on a goroutine of its
// own once a slot of r.Inflight is free, with a context that ends after
// r.Timeout or when the service stops, and sends what answer returns (a
// value, or an error: see Error). A panic is logged and answered with
// CodeInternal; a request that comes while the service stops is answered
// with CodeUnavailable.
func (r *Replier) Handler(op string, answer func(ctx context.Context, q *Request) (any, error)) micro.Handler {
	return r.guardOf().Handler(op, func(req *reply.Request) {
		q := &Request{Op: op, Subject: req.Subject, Reply: req.To, Data: req.Data}
		err := r.Inflight.Go(func(ctx context.Context) {
			ctx, cancel := context.WithTimeout(ctx, r.Timeout)
			defer cancel()
			v, err := answer(ctx, q)
			if err != nil {
				r.Error(q, err)
				return
			}
			r.Value(q, v)
		}, func(p any, stack []byte) {
			r.Log.Error().Interface("panic", p).Bytes("stack", stack).Str("op", op).Msg(r.Name + ": handler panicked")
			r.Error(q, &Error{Code: CodeInternal, Description: "internal error"})
		})
		if err != nil {
			r.Error(q, &Error{Code: CodeUnavailable, Description: "the worker is stopping"})
		}
	})
}

// Value sends v, msgpack-encoded (one that does not encode: CodeInternal).
func (r *Replier) Value(q *Request, v any) {
	data, err := msgpack.Marshal(v)
	if err != nil {
		r.Error(q, &Error{Code: CodeInternal, Description: "encode reply: " + err.Error()})
		return
	}
	r.send(q, &nats.Msg{Data: data})
}

// Error sends err as a micro error reply: an *Error's code and
// description, any other error's text as CodeUnavailable. Internal and
// unavailable ones are logged: they are the service's, not the caller's.
func (r *Replier) Error(q *Request, err error) {
	var e *Error
	if !errors.As(err, &e) {
		e = &Error{Code: CodeUnavailable, Description: err.Error()}
	}
	if e.Code == CodeInternal || e.Code == CodeUnavailable {
		r.Log.Warn().Str("op", q.Op).Str("subject", clip(q.Subject)).Str("code", e.Code).Str("error", e.Description).Msg(r.Name)
	}
	r.send(q, &nats.Msg{Header: ErrorHeader(e)})
}

func (r *Replier) send(q *Request, m *nats.Msg) {
	// A publish, not a request, has nobody to answer: Send sends nothing.
	if err := r.guardOf().Send(q.Reply, m); err != nil {
		r.Log.Warn().Err(err).Str("op", q.Op).Str("subject", clip(q.Subject)).Int("bytes", len(m.Data)).Msg(r.Name + ": reply not sent")
	}
}
