// Package adapter is what every provider adapter is built on: its Config,
// the Client that sends its calls, and Run, the one skeleton of a streaming
// call (build, watch, post, parse, drain, stop reason). An adapter brings
// only its wire API's pieces, in a Spec: the request it builds and a Parser
// of its events. Sending is package send's, decoding package stream's.
//
// config.go holds Config; adapter.go the Client, Spec, Parser and Run.
package adapter

import (
	"context"
	"errors"
	"net/http"

	"github.com/lanefleet/lanefleet/message"
	"github.com/lanefleet/lanefleet/provider"
	"github.com/lanefleet/lanefleet/provider/internal/send"
	"github.com/lanefleet/lanefleet/provider/internal/sse"
	"github.com/lanefleet/lanefleet/provider/internal/stream"
)

// Client is what an adapter holds to make its calls: its name, its Config
// with defaults applied, and the pool its requests go through. It is safe
// for concurrent use.
type Client struct {
	name string
	cfg  Config
	pool *send.Pool
}

// NewClient returns the client of an adapter configured by cfg; name
// prefixes its error messages ("anthropic").
func NewClient(name string, cfg Config) Client {
	cfg = cfg.withDefaults()
	return Client{name: name, cfg: cfg, pool: send.NewPool(cfg.HTTPClient)}
}

// Call is the request of one call, as an adapter builds it.
type Call struct {
	// Base is the model's base URL, the adapter's default applied; Path
	// is joined to it (see send.JoinURL).
	Base, Path string
	// Header holds the adapter's headers (credentials, versions); the
	// Config's Headers are set over them.
	Header http.Header
	// Body is the JSON request body, followed by each of More (a body
	// in parts: see send.Request.More).
	Body []byte
	More [][]byte
	// Done, when set, is called once nothing reads Body and More any
	// more (see send.Request.Done): the adapter may then reuse their
	// buffers.
	Done func()
}

// Parser folds one wire API's events into a stream.Builder. Run makes one
// per call (Spec.Parse) and uses it from one goroutine.
type Parser interface {
	// Event applies one event of the stream; an error ends the call as is.
	Event(sse.Event) *provider.Error
	// Ended reports the terminal event: Run reads no further events (what
	// follows is only drained for the connection). An API whose stream
	// has none returns false.
	Ended() bool
	// HasStop reports that the stop reason has arrived: a stall after it
	// only loses trailing data (usage, a terminal marker) and ends the
	// read like the body's end instead of failing the call.
	HasStop() bool
	// Outcome is asked once the stream is read: the reply's stop reason,
	// or the failure the stream ended in (no stop reason, a refusal, a
	// finish reason that is an error).
	Outcome() (message.StopReason, *provider.Error)
}

// Spec is what an adapter brings to one call. (The adapter's name is the
// Client's, so that a Spec's functions, which Run only calls, can stay on
// the caller's stack.)
type Spec struct {
	// Build builds the request; an error fails the call as
	// provider.ReasonFormat, "<name>: build request: <err>", unless it is
	// a *provider.Error (credentials that could not be had), which fails
	// it as it is.
	Build func() (Call, error)
	// Parse returns the parser of the call's events, writing to b.
	Parse func(b *stream.Builder) Parser
}

// Run makes one streaming call of req: build the request, watch the call
// for stalls (Config.IdleTimeout), post it (send.Pool.Post), read its
// events through the parser (stream.Drain), and end the message with the
// parser's stop reason. The message is stamped with Config.Now and its
// events go to emit (nil drops them). Every failure ends the message
// through stream.Builder.Fail, so the partial message and a
// *provider.Error come back; a success returns the message and nil.
func (c Client) Run(ctx context.Context, req *provider.Request, emit func(provider.Event), s Spec) (message.Message, error) {
	b := stream.NewBuilder(req.Model, c.cfg.Now(), emit)
	call, err := s.Build()
	if pe := (*provider.Error)(nil); errors.As(err, &pe) {
		return b.Fail(pe)
	}
	if err != nil {
		return b.Fail(&provider.Error{Reason: provider.ReasonFormat, Message: c.name + ": build request: " + err.Error(), Err: err})
	}
	w := stream.NewWatch(ctx, c.cfg.IdleTimeout)
	defer w.Stop()
	resp, perr := c.post(ctx, w, req.APIKey, call)
	if perr != nil {
		return b.Fail(perr)
	}
	defer resp.Body.Close()
	b.Start()
	p := s.Parse(b)
	if perr := stream.Drain(ctx, w, c.name, w.Body(resp.Body), p.Ended, p.HasStop, p.Event); perr != nil {
		return b.Fail(perr)
	}
	stop, perr := p.Outcome()
	if perr != nil {
		return b.Fail(perr)
	}
	return b.Done(stop), nil
}

// post sends call in w's context and returns the response whose body is
// the event stream. A base URL send.JoinURL rejects fails as
// provider.ReasonFormat, "<name>: <err>"; key is scrubbed from transport
// errors.
func (c Client) post(ctx context.Context, w *stream.Watch, key provider.Secret, call Call) (*http.Response, *provider.Error) {
	name := c.name
	u, err := send.JoinURL(call.Base, call.Path)
	if err != nil {
		if call.Done != nil {
			call.Done() // nothing read the body
		}
		return nil, &provider.Error{Reason: provider.ReasonFormat, Message: name + ": " + err.Error(), Err: err}
	}
	h := call.Header
	if h == nil {
		h = http.Header{}
	}
	for k, v := range c.cfg.Headers {
		h.Set(k, v)
	}
	return c.pool.Post(ctx, w, send.Request{Name: name, URL: u, Header: h, Body: call.Body, More: call.More, Done: call.Done, Key: key, Now: c.cfg.Now})
}
