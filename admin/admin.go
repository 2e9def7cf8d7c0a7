// Package admin is the service operators steer a fleet through: a NATS
// micro service (Name, queue group QueueGroup) every worker serves on
// agent.admin.<op>, so an operator's tools need no access to the JetStream
// API or the buckets, only the admin role's subjects:
//
//	sessions     the sessions with recent activity, their backlog and running run
//	dlq.list     dead letters, without their data, in pages
//	dlq.show     one dead letter with its headers and data
//	dlq.replay   publish dead letters again on their lanes (new runs)
//	dlq.purge    delete dead letters
//	auth.status  auth profiles and their cooldowns
//	auth.reset   clear a profile's cooldowns across the fleet
//	fleet        the backlog and the dead letters' count
//	approvals    the calls waiting for approval across sessions
//	forget       delete an idle session's transcript, settings and run events
//
// Listings that a gateway asks for a caller (sessions, approvals) carry
// the caller's Scope: the service filters, pages and reads the details of
// the page's sessions only. Every worker also says how it does (slots,
// lanes, turns, version: WorkerStats) in micro's STATS reply
// ($SRV.STATS.lanefleet-admin, no queue group: each worker answers), which
// the client's Workers gathers.
//
// A session's own backlog is the lane service's backlog op
// (lanes/sessionsvc), which a session's sender and viewers may ask for.
// Requests are JSON (at most sessionsvc.MaxRequestBytes; MaxScopedRequestBytes with a Scope), replies msgpack,
// errors micro error replies with the lane service's codes and
// CodeNotFound. Every worker answers from the same fleet state, except
// auth.status, whose profiles are the answering worker's configuration.
package admin

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nats.go/micro"
	"github.com/rs/zerolog"

	"github.com/lanefleet/lanefleet/events"
	"github.com/lanefleet/lanefleet/internal/microsvc"
	"github.com/lanefleet/lanefleet/kvstore"
	"github.com/lanefleet/lanefleet/lanes/sessionsvc"
	"github.com/lanefleet/lanefleet/sessionindex"
)

// Defaults.
const (
	// MaxConcurrent is how many requests one worker answers at once.
	MaxConcurrent = 4
	// RequestTimeout bounds the work of one request.
	RequestTimeout = 20 * time.Second
)

// AuthBook is the member's auth profiles: their fleet-wide state and the
// reset of a profile's cooldowns.
type AuthBook interface {
	// Status returns every profile the worker knows, with its state at
	// now, and the last good profile per provider.
	Status(now time.Time) ([]AuthProfile, map[string]string)
	// Reset clears a profile's cooldowns fleet-wide; cleared is false when
	// there was nothing to clear, ok false when the worker knows no such
	// profile.
	Reset(ctx context.Context, id string) (cleared, ok bool, err error)
}

// Config configures Serve.
type Config struct {
	JS      jetstream.JetStream // publishes replayed dead letters (required)
	Inbound jetstream.Stream    // AGENT_IN (required)
	Events  jetstream.Stream    // AGENT_EV (required)
	Dead    jetstream.Stream    // AGENT_DLQ (required)
	Runs    *kvstore.Runs       // the active-run registry; nil = no running runs listed
	Lanes   *kvstore.Lanes      // the lanes' leases, to tell a running run's worker gone; nil = not told
	// Index is the session index the sessions listing pages through
	// (a page reads its own sessions only); nil = every listing reads
	// every session's subjects, as a fleet without an index must.
	Index  *sessionindex.Index
	Auth   AuthBook // nil = auth ops answer 503
	Worker string   // the serving worker, in the service metadata
	// Stats says how the worker is doing, for micro's STATS (the data of
	// StatsEndpoint); nil = none. It runs under micro's lock: keep it
	// to counter reads.
	Stats func() WorkerStats
	// Forget forgets a session's stored state when no turn runs and no
	// message waits (lanes.Worker.Forget): the keys it removed, or busy.
	// nil = the forget op answers 503.
	Forget func(ctx context.Context, key string) (keys int, busy bool, err error)
	// Scheduled counts the schedules that send to each session, by key
	// (a listing with State asks it once); nil = not counted.
	Scheduled func(ctx context.Context) (map[string]int, error)
	Logger    zerolog.Logger
	Now       func() time.Time // default time.Now
}

// Service is a running admin service.
type Service struct {
	svc     *microsvc.Service
	nc      *nats.Conn
	cfg     Config
	log     zerolog.Logger
	replies *sessionsvc.Replier
}

type handlerFunc func(ctx context.Context, data []byte) (any, error)

// Serve starts the admin service on nc, one endpoint per operation.
func Serve(nc *nats.Conn, cfg Config) (*Service, error) {
	if cfg.JS == nil || cfg.Inbound == nil || cfg.Events == nil || cfg.Dead == nil {
		return nil, errors.New("admin: JS, Inbound, Events and Dead are required")
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	s := &Service{nc: nc, cfg: cfg, log: cfg.Logger}
	s.svc = microsvc.New(nc, microsvc.Config{
		Name:        Name,
		Version:     Version,
		Description: "Lanefleet administration: sessions, dead letters, auth profiles, on " + Prefix + "<op>",
		Metadata:    map[string]string{"worker": cfg.Worker},
		QueueGroup:  QueueGroup,
		StatsHandler: func(ep *micro.Endpoint) any {
			if ep.Name != StatsEndpoint || cfg.Stats == nil {
				return nil
			}
			return cfg.Stats()
		},
		Label:         "admin service",
		Log:           cfg.Logger,
		MaxConcurrent: MaxConcurrent,
	})
	s.replies = &sessionsvc.Replier{NC: nc, Log: cfg.Logger, Name: "admin service", Inflight: s.svc.Calls, Guard: s.svc.Guard, Timeout: RequestTimeout}
	ops := map[string]handlerFunc{OpSessions: s.sessions, OpDeadList: s.deadList, OpDeadShow: s.deadShow,
		OpDeadReplay: s.deadReplay, OpDeadPurge: s.deadPurge, OpAuthStatus: s.authStatus, OpAuthReset: s.authReset,
		OpFleet: s.fleet, OpApprovals: s.approvals, OpForget: s.forget}
	var eps []microsvc.Endpoint
	for op, h := range ops {
		// Endpoint names are one token: dlq-list serves agent.admin.dlq.list.
		eps = append(eps, microsvc.Endpoint{Name: strings.ReplaceAll(op, ".", "-"), Subject: Subject(op), Handler: s.handler(op, h), What: "endpoint " + op})
	}
	if err := s.svc.Serve(eps...); err != nil {
		return nil, fmt.Errorf("admin: %w", err)
	}
	return s, nil
}

// Stop stops taking requests, cancels those in flight and waits for them.
func (s *Service) Stop() error {
	return s.svc.Stop(nil)
}

// handler answers each request in its own goroutine, at most MaxConcurrent
// at once (the requests behind wait in the endpoint's subscription).
func (s *Service) handler(op string, h handlerFunc) micro.Handler {
	return s.replies.Handler(op, func(ctx context.Context, q *sessionsvc.Request) (any, error) { return h(ctx, q.Data) })
}

func badRequest(format string, args ...any) error {
	return &sessionsvc.Error{Code: sessionsvc.CodeBadRequest, Description: fmt.Sprintf(format, args...)}
}

func notFound(format string, args ...any) error {
	return &sessionsvc.Error{Code: CodeNotFound, Description: fmt.Sprintf(format, args...)}
}

// decode reads a request body into v (JSON, bounded, no unknown fields).
func decode(data []byte, v any) error {
	if err := sessionsvc.DecodeRequest(data, v); err != nil {
		return badRequest("%v", err)
	}
	return nil
}

// limit returns a request's limit with its default and bound.
func limit(n int) (int, error) {
	switch {
	case n < 0:
		return 0, badRequest("limit %d is negative", n)
	case n == 0:
		return LimitDefault, nil
	case n > LimitMax:
		return 0, badRequest("limit %d is over %d", n, LimitMax)
	}
	return n, nil
}

// fleet reads the fleet's queue state.
func (s *Service) fleet(ctx context.Context, data []byte) (any, error) {
	if err := decode(data, &struct{}{}); err != nil {
		return nil, err
	}
	in, err := s.cfg.Inbound.Info(ctx)
	if err != nil {
		return nil, err
	}
	dead, err := s.cfg.Dead.Info(ctx)
	if err != nil {
		return nil, err
	}
	return FleetReply{Backlog: in.State.Msgs, BacklogBytes: in.State.Bytes, DeadLetters: dead.State.Msgs}, nil
}

// forget forgets an idle session: its lane records under its lease, then
// its run events.
func (s *Service) forget(ctx context.Context, data []byte) (any, error) {
	var q ForgetRequest
	if err := decode(data, &q); err != nil {
		return nil, err
	}
	tok, err := events.KeyToken(q.Session)
	if err != nil {
		return nil, badRequest("session: %v", err)
	}
	if s.cfg.Forget == nil {
		return nil, &sessionsvc.Error{Code: sessionsvc.CodeUnavailable, Description: "this worker forgets no sessions"}
	}
	keys, busy, err := s.cfg.Forget(ctx, q.Session)
	if busy {
		return nil, &sessionsvc.Error{Code: CodeBusy, Description: "the session is running a turn or has a message waiting: stop it, or try again when it is idle"}
	}
	if err != nil {
		return nil, err
	}
	// Its events would keep it in the listings until they expire.
	before, err := s.cfg.Events.Info(ctx, jetstream.WithSubjectFilter(events.EventPrefix+tok+".>"))
	if err != nil {
		return nil, err
	}
	var n uint64
	for _, c := range before.State.Subjects {
		n += c
	}
	if err := s.cfg.Events.Purge(ctx, jetstream.WithPurgeSubject(events.EventPrefix+tok+".>")); err != nil {
		return nil, err
	}
	s.log.Info().Str("session", events.Fingerprint(q.Session)).Int("keys", keys).Uint64("events", n).Msg("session forgotten by an operator")
	return ForgetReply{Session: q.Session, Keys: keys, Events: n}, nil
}

// authStatus lists the worker's auth profiles and their state.
func (s *Service) authStatus(_ context.Context, data []byte) (any, error) {
	if err := decode(data, &struct{}{}); err != nil {
		return nil, err
	}
	if s.cfg.Auth == nil {
		return nil, &sessionsvc.Error{Code: sessionsvc.CodeUnavailable, Description: "this worker serves no auth profiles"}
	}
	now := s.cfg.Now()
	profiles, good := s.cfg.Auth.Status(now)
	if profiles == nil {
		profiles = []AuthProfile{}
	}
	return AuthStatusReply{Worker: s.cfg.Worker, Now: now.UnixMilli(), Profiles: profiles, LastGood: good}, nil
}

// authReset clears a profile's cooldowns fleet-wide.
func (s *Service) authReset(ctx context.Context, data []byte) (any, error) {
	var q AuthResetRequest
	if err := decode(data, &q); err != nil {
		return nil, err
	}
	if q.Profile == "" {
		return nil, badRequest("profile is required")
	}
	if s.cfg.Auth == nil {
		return nil, &sessionsvc.Error{Code: sessionsvc.CodeUnavailable, Description: "this worker serves no auth profiles"}
	}
	cleared, ok, err := s.cfg.Auth.Reset(ctx, q.Profile)
	switch {
	case err != nil:
		return nil, err
	case !ok:
		return nil, notFound("no auth profile %q on worker %s (auth status lists them)", clip(q.Profile), s.cfg.Worker)
	}
	s.log.Info().Str("profile", q.Profile).Bool("cleared", cleared).Msg("auth profile reset by an operator")
	return AuthResetReply{Profile: q.Profile, Cleared: cleared}, nil
}
