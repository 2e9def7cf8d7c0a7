// Package sessionsvc is the lane service every worker serves: a NATS micro
// service (Name, queue group QueueGroup) that answers a session's reads and
// its import on agent.svc.<lane token>.<op>:
//
//	history   the transcript, in pages that fit the server's max payload
//	import    store a pi session file as the transcript of a new session
//	events    a run's stored events from a seq, batched (a late viewer's catch-up)
//	settings  the session's stored queue settings
//	backlog   what waits on the lane, and the worker holding it
//	runs      the session's runs with stored events, newest first, a page at a time
//
// The lane comes from the subject, never from the body, so subject
// permissions decide who reads what: a sender allowed to publish on
// agent.svc.<its token>.> reads its own sessions and nothing else, and needs
// no access to the JetStream API or the buckets. Requests are bounded
// (MaxRequestBytes) and validated; failures are micro error replies with a
// Code. Replies are msgpack (the wire types of this package).
package sessionsvc

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nats.go/micro"
	"github.com/rs/zerolog"

	"github.com/lanefleet/lanefleet/internal/microsvc"
	"github.com/lanefleet/lanefleet/kvstore"
)

// Defaults.
const (
	// MaxConcurrentDefault is how many requests one Service answers at once;
	// more wait in their endpoint's subscription.
	MaxConcurrentDefault = 32
	// RequestTimeout bounds the work of one request.
	RequestTimeout = 10 * time.Second
	// walkBudget bounds the time one reply spends reading the stream; the
	// rest comes with the next page (More).
	walkBudget = time.Second
	// maxEventsPerReply bounds the events of one reply.
	maxEventsPerReply = 1000
	// maxDescription bounds an error reply's description, in bytes.
	maxDescription = 1024
)

// Config configures Serve.
type Config struct {
	Lanes   *kvstore.Lanes   // transcripts, settings, imports (required)
	Inbound jetstream.Stream // AGENT_IN: whether a run's message still waits (required)
	Events  jetstream.Stream // AGENT_EV: stored run events (required)
	// Worker names the serving worker in the service metadata and in the
	// lease an import holds while it writes.
	Worker        string
	MaxConcurrent int // MaxConcurrentDefault when 0
	Logger        zerolog.Logger
}

// Service is a running lane service.
type Service struct {
	svc     *microsvc.Service
	nc      *nats.Conn
	cfg     Config
	log     zerolog.Logger
	replies *Replier
	imports chan struct{} // a slot per import running: one at a time
}

// handlerFunc answers one request of a lane: a reply value encoded as
// msgpack, or an error (an *Error says which code; any other error is
// CodeUnavailable).
type handlerFunc func(ctx context.Context, r request) (any, error)

// request is a request as the handlers see it.
type request struct {
	token, key string
	data       []byte
}

// Serve starts the lane service on nc: one endpoint per operation, on
// agent.svc.*.<op>, in queue group QueueGroup. It returns when the server
// routes requests to it.
func Serve(nc *nats.Conn, cfg Config) (*Service, error) {
	if cfg.Lanes == nil || cfg.Inbound == nil || cfg.Events == nil {
		return nil, errors.New("service: Lanes, Inbound and Events are required")
	}
	if cfg.MaxConcurrent <= 0 {
		cfg.MaxConcurrent = MaxConcurrentDefault
	}
	s := &Service{nc: nc, cfg: cfg, log: cfg.Logger, imports: make(chan struct{}, 1)}
	s.svc = microsvc.New(nc, microsvc.Config{
		Name:          Name,
		Version:       Version,
		Description:   "Lanefleet lanes: history, import, run events, settings, backlog and runs of a session, on " + Prefix + "<lane>.<op>",
		Metadata:      map[string]string{"worker": cfg.Worker},
		QueueGroup:    QueueGroup,
		Label:         "lane service",
		Log:           cfg.Logger,
		MaxConcurrent: cfg.MaxConcurrent,
	})
	s.replies = &Replier{NC: nc, Log: cfg.Logger, Name: "lane service", Inflight: s.svc.Calls, Guard: s.svc.Guard, Timeout: RequestTimeout}
	var eps []microsvc.Endpoint
	for op, h := range map[string]handlerFunc{OpHistory: s.history, OpImport: s.importSession, OpEvents: s.events, OpSettings: s.settings,
		OpBacklog: s.backlog, OpRuns: s.runs} {
		eps = append(eps, microsvc.Endpoint{Name: op, Subject: Prefix + "*." + op, Handler: s.handler(op, h)})
	}
	if err := s.svc.Serve(eps...); err != nil {
		return nil, fmt.Errorf("service: %w", err)
	}
	return s, nil
}

// Stop stops taking requests, cancels those in flight and waits for them.
func (s *Service) Stop() error {
	return s.svc.Stop(nil)
}

// handler runs each request of op in its own goroutine, at most
// MaxConcurrent at once: a slow history read never holds up a viewer's
// catch-up. The lane comes from the subject.
func (s *Service) handler(op string, h handlerFunc) micro.Handler {
	return s.replies.Handler(op, func(ctx context.Context, q *Request) (any, error) {
		tok, key, err := parseSubject(q.Subject, q.Op)
		if err != nil {
			return nil, &Error{Code: CodeBadRequest, Description: err.Error()}
		}
		return h(ctx, request{token: tok, key: key, data: q.Data})
	})
}

// ErrorHeader returns the headers of e's micro error reply: its code and
// its description on one bounded line (a header value is one line, and
// the description must not crowd out the reply).
func ErrorHeader(e *Error) nats.Header {
	desc := strings.Join(strings.Fields(e.Description), " ")
	if len(desc) > maxDescription {
		desc = strings.ToValidUTF8(desc[:maxDescription], "") + "…"
	}
	return nats.Header{micro.ErrorCodeHeader: {e.Code}, micro.ErrorHeader: {desc}}
}

// budget is the most bytes a reply may carry: the server's max payload
// (micro replies carry no headers).
func (s *Service) budget() int {
	return int(s.nc.MaxPayload())
}

func badRequest(format string, args ...any) error {
	return &Error{Code: CodeBadRequest, Description: fmt.Sprintf(format, args...)}
}

// parseRun checks a run id: a canonical decimal inbound sequence.
func parseRun(run string) (uint64, error) {
	seq, err := strconv.ParseUint(run, 10, 64)
	if err != nil || seq == 0 || strconv.FormatUint(seq, 10) != run {
		return 0, badRequest("run %q is not a run id (a positive decimal number)", clip(run))
	}
	return seq, nil
}
