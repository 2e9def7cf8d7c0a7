package remote

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"runtime/debug"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/micro"
	"github.com/rs/zerolog"

	"github.com/lanefleet/lanefleet/guard"
	"github.com/lanefleet/lanefleet/internal/inflight"
	"github.com/lanefleet/lanefleet/internal/microsvc"
	answer "github.com/lanefleet/lanefleet/internal/reply"
	"github.com/lanefleet/lanefleet/tools"
)

// Service defaults.
const (
	// ServiceNameDefault is the micro service name tools are offered under
	// and discovered by.
	ServiceNameDefault = "lanefleet-tools"
	// VersionDefault is the service version when none is set.
	VersionDefault = "0.1.0"
	// MaxConcurrentDefault is how many calls one Service runs at once.
	MaxConcurrentDefault = 64
	// MaxResultCharsDefault caps the text of a result, in UTF-16 units
	// (guard.HardMaxToolResultChars).
	MaxResultCharsDefault = guard.HardMaxToolResultChars
)

// ServiceConfig configures Serve.
type ServiceConfig struct {
	// Name is the micro service name; ServiceNameDefault when empty.
	// Callers discover tools by this name.
	Name string
	// Version is the service's SemVer version; VersionDefault when empty.
	// When instances disagree on a tool's spec, callers take the one of
	// the highest version.
	Version string
	// Description describes the service in $SRV.INFO replies.
	Description string
	// Metadata annotates the service.
	Metadata map[string]string
	// MaxConcurrent caps the calls running at once; more wait in the
	// endpoint's subscription. MaxConcurrentDefault when 0.
	MaxConcurrent int
	// MaxResultChars caps the text of each result in UTF-16 units;
	// MaxResultCharsDefault when 0. Results are also cut to fit the
	// connection's max payload.
	MaxResultChars int
	// Logger receives panics and replies that could not be sent. Silent
	// when zero.
	Logger zerolog.Logger
}

func (c ServiceConfig) withDefaults() ServiceConfig {
	if c.Name == "" {
		c.Name = ServiceNameDefault
	}
	if c.Version == "" {
		c.Version = VersionDefault
	}
	if c.MaxConcurrent <= 0 {
		c.MaxConcurrent = MaxConcurrentDefault
	}
	if c.MaxResultChars <= 0 {
		c.MaxResultChars = MaxResultCharsDefault
	}
	return c
}

// semVerRE is the version micro accepts (its own pattern): SemVer 2.0.
var semVerRE = regexp.MustCompile(`^(0|[1-9]\d*)\.(0|[1-9]\d*)\.(0|[1-9]\d*)(?:-((?:0|[1-9]\d*|\d*[a-zA-Z-][0-9a-zA-Z-]*)(?:\.(?:0|[1-9]\d*|\d*[a-zA-Z-][0-9a-zA-Z-]*))*))?(?:\+([0-9a-zA-Z-]+(?:\.[0-9a-zA-Z-]+)*))?$`)

// ServiceVersion makes a build's version a service version Serve takes: a
// Go module version loses its leading "v" ("v1.2.3" is "1.2.3"), and one
// that is not SemVer even so ("(devel)", a work tree's build) is
// VersionDefault.
func ServiceVersion(v string) string {
	v = strings.TrimPrefix(v, "v")
	if !semVerRE.MatchString(v) {
		return VersionDefault
	}
	return v
}

// flushTimeout bounds Serve's flush.
const flushTimeout = 5 * time.Second

// Service is a running set of tools offered over NATS. It is a
// micro.Service whose Stop also waits for the calls in flight.
type Service struct {
	micro.Service
	svc   *microsvc.Service
	nc    *nats.Conn
	cfg   ServiceConfig
	log   zerolog.Logger
	calls *inflight.Group       // their contexts' cause is ErrStopped once cancelled
	stats map[string]*toolStats // by tool name; the map is never written after Serve
	guard *answer.Guard
	// cancels holds the calls in flight that carry a HeaderCallToken, by
	// token: a message on the tool's CancelSubject cancels one.
	cancels    sync.Map // token -> context.CancelCauseFunc
	cancelSubs []*nats.Subscription
}

var _ micro.Service = (*Service)(nil)

// Serve offers ts on nc as the micro service cfg.Name, one endpoint per tool
// on subject agent.tool.<name> in the micro default queue group, so the
// processes that serve one tool share its calls. Each endpoint's metadata
// carries the tool's description (MetaDescription) and JSON-encoded
// parameters (MetaParameters).
//
// Calls run concurrently, up to cfg.MaxConcurrent at once. A tool that
// returns an error or panics gets an error reply; the service keeps
// serving. Serve returns an error when a tool's name is invalid (see
// ValidName) or repeated, or when micro rejects the configuration
// (micro.ErrConfigValidation) or cannot subscribe.
func Serve(nc *nats.Conn, cfg ServiceConfig, ts ...tools.Tool) (*Service, error) {
	cfg = cfg.withDefaults()
	type endpoint struct {
		name string
		tool tools.Tool
		meta map[string]string
	}
	eps := make([]endpoint, 0, len(ts))
	seen := make(map[string]bool, len(ts))
	for _, t := range ts {
		spec := t.Spec()
		if !ValidName(spec.Name) {
			return nil, fmt.Errorf("remote: serve: tool name %q must match %s", spec.Name, nameRE)
		}
		if seen[spec.Name] {
			return nil, fmt.Errorf("remote: serve: tool %s given twice", spec.Name)
		}
		seen[spec.Name] = true
		params := spec.Parameters
		if params == nil {
			params = map[string]any{"type": "object", "properties": map[string]any{}}
		}
		pj, err := json.Marshal(params)
		if err != nil {
			return nil, fmt.Errorf("remote: serve: tool %s parameters: %w", spec.Name, err)
		}
		meta := map[string]string{MetaDescription: spec.Description, MetaParameters: string(pj)}
		if tools.IsIdempotent(t) {
			meta[MetaIdempotent] = "true"
		}
		eps = append(eps, endpoint{spec.Name, t, meta})
	}

	stats := make(map[string]*toolStats, len(eps))
	for _, ep := range eps {
		stats[ep.name] = &toolStats{}
	}
	svc := microsvc.New(nc, microsvc.Config{
		Name:        cfg.Name,
		Version:     cfg.Version,
		Description: cfg.Description,
		Metadata:    cfg.Metadata,
		// Calls reply from their own goroutine, after micro's handler
		// returned, so micro's error and time counts stay at zero; the
		// real ones go in each endpoint's stats data.
		StatsHandler:  func(e *micro.Endpoint) any { return stats[e.Name].snapshot() },
		Label:         "remote tools",
		Log:           cfg.Logger,
		MaxConcurrent: cfg.MaxConcurrent,
		FlushTimeout:  flushTimeout,
	})
	s := &Service{svc: svc, nc: nc, cfg: cfg, log: cfg.Logger, calls: svc.Calls, stats: stats, guard: svc.Guard}
	mes := make([]microsvc.Endpoint, 0, len(eps))
	for _, ep := range eps {
		mes = append(mes, microsvc.Endpoint{Name: ep.name, Subject: Subject(ep.name), Metadata: ep.meta,
			Handler: s.handler(ep.name, ep.tool, stats[ep.name]), What: "tool " + ep.name})
	}
	// Cancels first: a call taken must be cancellable.
	for _, ep := range eps {
		sub, err := nc.Subscribe(CancelSubject(ep.name), s.onCancel)
		if err != nil {
			s.unsubscribeCancels()
			return nil, fmt.Errorf("remote: serve: cancel subject of %s: %w", ep.name, err)
		}
		s.cancelSubs = append(s.cancelSubs, sub)
	}
	// Once Serve returns, the server routes calls and discovery here.
	if err := svc.Serve(mes...); err != nil {
		s.unsubscribeCancels()
		return nil, fmt.Errorf("remote: serve: %w", err)
	}
	s.Service = svc.Service
	return s, nil
}

// Stop stops taking calls, cancels the calls in flight (their context's
// cause is ErrStopped), waits for them to return and stops the micro
// service. A tool that ignores its context delays Stop until it returns.
func (s *Service) Stop() error {
	defer s.unsubscribeCancels()
	if err := s.svc.Stop(ErrStopped); err != nil {
		return fmt.Errorf("remote: stop: %w", err)
	}
	return nil
}

// Shutdown stops taking calls and waits for the calls in flight to finish;
// when ctx ends first it cancels them (cause ErrStopped) and waits for them
// to return. Once the server has the unsubscribes (a flush), calls go to
// other instances or fail with no responders. It returns the error of the
// micro service's Stop or of the flush.
func (s *Service) Shutdown(ctx context.Context) error {
	defer s.unsubscribeCancels()
	if err := s.svc.Shutdown(ctx, ErrStopped); err != nil {
		return fmt.Errorf("remote: stop: %w", err)
	}
	return nil
}

// onCancel cancels the call in flight named by the message's
// HeaderCallToken, if this instance runs it.
func (s *Service) onCancel(m *nats.Msg) {
	if f, ok := s.cancels.Load(m.Header.Get(HeaderCallToken)); ok {
		cause := errCallerCancelled
		if m.Header.Get(HeaderCancelReason) == "timeout" {
			// The caller's timer ran out a moment before ours would.
			cause = errCallerTimeout
		}
		f.(context.CancelCauseFunc)(cause)
	}
}

// unsubscribeCancels ends the cancel subscriptions, once the calls they
// could cancel are over or cancelled.
func (s *Service) unsubscribeCancels() {
	for _, sub := range s.cancelSubs {
		_ = sub.Unsubscribe() // the connection may be closed: nothing to keep then
	}
}

// inbound is a call taken off micro: micro.Request may only be answered
// inside micro's handler, which must return at once so the endpoint's next
// request is not held up, so calls answer on the connection themselves.
type inbound struct {
	name  string
	reply answer.To
	data  []byte
	hdr   nats.Header
}

// handler returns the endpoint handler of one tool. It runs on the
// endpoint's subscription goroutine, so it only takes a slot and hands the
// call to a goroutine that Stop waits for.
func (s *Service) handler(name string, t tools.Tool, st *toolStats) micro.Handler {
	return s.guard.Handler(name, func(req *answer.Request) {
		in := &inbound{name: name, reply: req.To, data: req.Data, hdr: req.Headers}
		if in.reply.None() {
			// Nobody waits for the result: a tool with side effects
			// must not run for a stray publish.
			s.log.Debug().Str("tool", name).Msg("remote tools: ignored a call without a reply subject")
			return
		}
		// serve turns a tool's panic into the call's error: no panic hook.
		if err := s.calls.Go(func(ctx context.Context) { s.serve(ctx, in, t, st) }, nil); err != nil {
			s.respondError(in, CodeUnavailable, fmt.Sprintf("tool %s is not available: the process serving it is stopping", name))
		}
	})
}

// errCallerTimeout is the cause of a call's context when the caller's
// timeout passes.
var errCallerTimeout = errors.New("the caller stopped waiting")

// errCallerCancelled is the cause of a call's context when its caller
// cancelled it (its run was stopped).
var errCallerCancelled = errors.New("the caller cancelled the call")

// serve runs one call and replies.
func (s *Service) serve(ctx context.Context, in *inbound, t tools.Tool, st *toolStats) {
	name := in.name
	st.inFlight.Add(1)
	defer st.inFlight.Add(-1)
	start := time.Now()
	defer func() { st.busy.Add(int64(time.Since(start))) }()

	var req request
	if err := json.Unmarshal(in.data, &req); err != nil {
		st.errors.Add(1)
		s.respondError(in, CodeBadRequest, fmt.Sprintf("tool %s got a malformed request: %v", name, err))
		return
	}
	if req.Name != "" && req.Name != name {
		st.errors.Add(1)
		s.respondError(in, CodeBadRequest, fmt.Sprintf("tool %s got a request for tool %q", name, req.Name))
		return
	}
	lim, bad := parseCallLimits(name, in.hdr)
	if bad != "" {
		st.errors.Add(1)
		s.respondError(in, CodeBadRequest, bad)
		return
	}
	timeout := lim.timeout
	if timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeoutCause(ctx, timeout, errCallerTimeout)
		defer cancel()
	}
	var beats *heartbeat
	if lim.beatEvery > 0 {
		beats = s.beat(in.reply, name, lim.beatEvery)
	}
	if tok := in.hdr.Get(HeaderCallToken); tok != "" && len(tok) <= 64 {
		var cancel context.CancelCauseFunc
		ctx, cancel = context.WithCancelCause(ctx)
		s.cancels.Store(tok, cancel)
		defer func() { s.cancels.Delete(tok); cancel(nil) }()
	}
	ctx = WithRunInfo(ctx, RunInfo{SessionKey: req.SessionKey, RunID: req.RunID})
	call := tools.Call{ID: req.ID, Name: name, Args: req.Args, Key: in.hdr.Get(HeaderIdempotencyKey)}

	var upd *updater
	if in.hdr.Get(HeaderUpdates) == "1" {
		upd = &updater{s: s, to: in.reply, name: name}
		call.Update = upd.send
	}
	res, err := s.call(ctx, t, call, st)
	if upd != nil {
		upd.close()
	}
	// The beats go on until the reply is ready, not only while the tool
	// runs: encoding a result of megabytes of images can outlast the
	// caller's silence on a busy machine. None follows the reply.
	defer beats.stop() // also when encoding panics; stop is idempotent

	if err != nil {
		beats.stop()
		st.errors.Add(1)
		code, msg := callFailure(ctx, name, call.Key, timeout, err)
		s.respondError(in, code, msg)
		return
	}
	data, err := encodeResult(res, s.cfg.MaxResultChars, s.maxPayload())
	beats.stop()
	if err != nil {
		st.errors.Add(1)
		s.respondError(in, CodeTooLarge, fmt.Sprintf("tool %s produced a result too large to send (over %d bytes even with its text cut); ask for less, e.g. fewer images", name, s.maxPayload()))
		return
	}
	if err := s.guard.Send(in.reply, &nats.Msg{Data: data}); err != nil {
		s.log.Warn().Err(err).Str("tool", name).Msg("remote tools: reply not sent")
	}
}

// callLimits are what a call's headers ask for: a timeout and a heartbeat
// period, 0 for none.
type callLimits struct{ timeout, beatEvery time.Duration }

// parseCallLimits reads a call's timeout and heartbeat headers, in
// milliseconds; the heartbeat period is kept within [HeartbeatMin,
// heartbeatMax]. A malformed header gives the bad request's message.
func parseCallLimits(name string, hdr nats.Header) (callLimits, string) {
	var lim callLimits
	if v := hdr.Get(HeaderTimeout); v != "" {
		ms, err := strconv.ParseInt(v, 10, 64)
		if err != nil || ms <= 0 {
			return callLimits{}, fmt.Sprintf("tool %s got a malformed %s header %q", name, HeaderTimeout, v)
		}
		lim.timeout = time.Duration(ms) * time.Millisecond
	}
	if v := hdr.Get(HeaderHeartbeat); v != "" {
		ms, err := strconv.ParseInt(v, 10, 64)
		if err != nil || ms <= 0 {
			return callLimits{}, fmt.Sprintf("tool %s got a malformed %s header %q", name, HeaderHeartbeat, v)
		}
		lim.beatEvery = min(max(time.Duration(min(ms, heartbeatMax.Milliseconds()))*time.Millisecond, HeartbeatMin), heartbeatMax)
	}
	return lim, ""
}

// callFailure is the code and message of a call that failed with err: the
// serving process stopped it, its caller cancelled it or its timeout
// passed (ctx says which), or the tool's own error.
func callFailure(ctx context.Context, name, key string, timeout time.Duration, err error) (code, msg string) {
	switch cause := context.Cause(ctx); {
	case ctx.Err() != nil && errors.Is(cause, ErrStopped):
		// Not CodeUnavailable: the tool ran in part, so the caller must
		// not resend the call on its own.
		msg := fmt.Sprintf("tool %s was stopped before it finished: the process serving it is shutting down", name)
		if key != "" {
			msg += fmt.Sprintf("; it may have taken effect in part (idempotency key %s)", key)
		}
		return CodeToolFailed, msg
	case ctx.Err() != nil && errors.Is(cause, errCallerCancelled):
		return CodeToolFailed, fmt.Sprintf("tool %s was cancelled by its caller", name)
	case ctx.Err() != nil && errors.Is(cause, errCallerTimeout):
		return CodeTimeout, fmt.Sprintf("tool %s timed out after %s", name, timeout)
	}
	return CodeToolFailed, err.Error()
}

// call runs the tool, turning a panic into an error.
func (s *Service) call(ctx context.Context, t tools.Tool, call tools.Call, st *toolStats) (res tools.Result, err error) {
	defer func() {
		if v := recover(); v != nil {
			st.panics.Add(1)
			s.log.Error().Str("tool", call.Name).Str("call_id", call.ID).Interface("panic", v).
				Str("stack", string(debug.Stack())).Msg("remote tools: tool panicked")
			err = fmt.Errorf("tool %s failed: it panicked: %v", call.Name, v)
		}
	}()
	return t.Call(ctx, call)
}

// maxPayload is the largest message the connection may publish.
func (s *Service) maxPayload() int {
	if n := s.nc.MaxPayload(); n > 0 {
		return int(n)
	}
	return 1 << 20
}

// respondError sends an error reply: a one-line description in the
// Nats-Service-Error header and the whole message in the JSON body.
func (s *Service) respondError(in *inbound, code, msg string) {
	body, _ := json.Marshal(errorBody{Error: msg}) // a string always encodes
	if len(body) > s.maxPayload()-2*maxErrorHeader {
		body = nil // the header still carries the start of the message
	}
	m := &nats.Msg{Data: body, Header: nats.Header{
		micro.ErrorHeader:     []string{headerLine(msg)},
		micro.ErrorCodeHeader: []string{code},
	}}
	if err := s.guard.Send(in.reply, m); err != nil {
		s.log.Warn().Err(err).Str("tool", in.name).Str("code", code).Msg("remote tools: error reply not sent")
	}
}

// toolStats counts one tool's calls for the $SRV.STATS endpoint data.
type toolStats struct {
	inFlight, errors, panics atomic.Int64
	busy                     atomic.Int64 // nanoseconds spent in calls
}

// ToolStats is the data of a tool's endpoint in $SRV.STATS replies. micro's
// own num_errors and processing_time stay zero: calls are answered after
// micro's handler returns.
type ToolStats struct {
	InFlight       int64         `json:"in_flight"`
	NumErrors      int64         `json:"num_errors"`
	NumPanics      int64         `json:"num_panics"`
	ProcessingTime time.Duration `json:"processing_time"`
}

func (st *toolStats) snapshot() ToolStats {
	return ToolStats{InFlight: st.inFlight.Load(), NumErrors: st.errors.Load(), NumPanics: st.panics.Load(), ProcessingTime: time.Duration(st.busy.Load())}
}

// updater publishes a call's partial results to its reply subject until
// the call returns.
type updater struct {
	s    *Service
	to   answer.To
	name string

	mu   sync.Mutex
	done bool
}

func (u *updater) send(p tools.Result) {
	data, err := encodeResult(p, u.s.cfg.MaxResultChars, u.s.maxPayload()-128)
	if err != nil {
		return // partial results are best effort
	}
	u.mu.Lock()
	defer u.mu.Unlock()
	if u.done {
		return
	}
	msg := &nats.Msg{Header: nats.Header{HeaderUpdate: []string{"1"}}, Data: data}
	if err := u.s.guard.Send(u.to, msg); err != nil {
		u.s.log.Debug().Err(err).Str("tool", u.name).Msg("remote tools: partial result not sent")
	}
}

// close stops further updates, so none follows the reply.
func (u *updater) close() {
	u.mu.Lock()
	u.done = true
	u.mu.Unlock()
}

// heartbeat beats for one call until stopped.
type heartbeat struct {
	mu      sync.Mutex
	stopped bool
	timer   *time.Timer
}

// beat publishes a heartbeat to the call's reply subject now and then
// every interval until the returned heartbeat is stopped: the caller
// knows the call is still running, and fails it soon after the beats end
// without a reply (this process was killed or cut off from NATS).
func (s *Service) beat(to answer.To, name string, every time.Duration) *heartbeat {
	h := &heartbeat{}
	send := func() {
		if err := s.guard.Send(to, &nats.Msg{Header: nats.Header{HeaderBeat: []string{"1"}}}); err != nil {
			s.log.Debug().Err(err).Str("tool", name).Msg("remote tools: heartbeat not sent")
		}
	}
	send()
	var tick func()
	tick = func() {
		h.mu.Lock()
		defer h.mu.Unlock()
		if h.stopped {
			return
		}
		send()
		h.timer = time.AfterFunc(every, tick)
	}
	h.mu.Lock()
	h.timer = time.AfterFunc(every, tick)
	h.mu.Unlock()
	return h
}

// stop ends the beats; none is sent once it returns. A nil heartbeat
// (a call that asked for none) has nothing to stop.
func (h *heartbeat) stop() {
	if h == nil {
		return
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	h.stopped = true
	h.timer.Stop()
}
