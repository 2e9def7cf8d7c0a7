package runner

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/lanefleet/lanefleet/events"
	"github.com/lanefleet/lanefleet/internal/backoff"
	"github.com/lanefleet/lanefleet/message"
	"github.com/lanefleet/lanefleet/provider"
)

// Admission decides, before each model call a run makes, whether the call
// may be made (tenant budgets: internal/fleet plugs them in), and is told
// what the call used once it ended. Replayed steps of a re-run are not
// calls and are not admitted.
type Admission interface {
	// Admit reserves the call's worst case and returns what settles it
	// (nil: nothing to settle). An *AdmitRefusal ends the turn with its
	// reply; an *AdmitUnavailable (its store did not answer) makes the
	// run wait and ask again; ctx's cause means the run was cancelled or
	// timed out while the call waited; any other error fails the run (the
	// lane retries its turn).
	Admit(ctx context.Context, call AdmitCall) (Admitted, error)
}

// AdmitCall is one model call about to be made.
type AdmitCall struct {
	SessionKey string
	// Lineage are the sessions SessionKey is a sub-agent of, nearest
	// first (Input.Lineage): their budgets count the call too.
	Lineage []string
	// Request is the call, read-only: its model (price, max output) and
	// what its input holds.
	Request *provider.Request
	// FirstCall is set on the run's first model call (it counts a turn).
	FirstCall bool
	// Compaction is set on a compaction's summary call.
	Compaction bool
	// AuthProfile is the auth profile the call is made with ("" = the
	// provider's environment or config key).
	AuthProfile string
	// Alternates are the other auth profiles of the call's provider the
	// run may move to, in the run's order (none when the run is pinned
	// to its profile; none cooling down): an Admission that would make
	// the call wait, or refuse it, for a limit of AuthProfile's may
	// answer *AdmitMove naming one of them instead.
	Alternates []string
	// Waiting, set by the runner, shows the run that the call waits (a
	// provider rate limit): text says why, d how long (0 = not known).
	// Admit may call it more than once while it waits.
	Waiting func(text string, d time.Duration)
}

// Admitted settles an admitted call.
type Admitted interface {
	// Settle records what the call used (its reply's usage, zero when it
	// had none) and returns a warning to show the run (a soft limit
	// reached), "" for none. It must not block long.
	Settle(u message.Usage) (warning string)
}

// ResponseObserver is an Admitted that reads the provider's response
// headers (its rate-limit headers), before the call's stream is read:
// the runner hands it to the provider through provider.WithTrace.
type ResponseObserver interface {
	Response(status int, header func(name string) string)
}

// AdmitRefusal is an Admission's refusal of a call: the turn ends with
// Text as its error reply and Kind (events.KindBudgetReached) as its
// error kind; what the turn did before stays.
type AdmitRefusal struct {
	Kind, Text string
}

func (e *AdmitRefusal) Error() string { return e.Text }

// AdmitMove is an Admission's answer that the call is not made with its
// auth profile but with Profile, one of AdmitCall.Alternates, which has
// room where the call's own profile has none (a rate limit it would wait
// for, a budget it would pass): the attempt ends without the call, and
// the run's next attempt uses Profile, without marking the profile it
// leaves as failed. Text says why (the attempt event's reason is Reason).
type AdmitMove struct {
	Profile string
	Reason  provider.Reason
	Text    string
}

func (e *AdmitMove) Error() string { return e.Text }

// AdmitUnavailable is an Admission that cannot decide now: the store of
// its budgets did not answer. The call is not made without it, and the
// run's attempt does not fail for it either (that would count toward the
// message's attempts): the run waits, with backoff from
// Config.AdmitWait up to 30 s, showing each wait as a lifecycle retrying
// event whose error says why, and asks again until its context ends.
type AdmitUnavailable struct{ Err error }

func (e *AdmitUnavailable) Error() string {
	return "the budget store is unavailable (model calls wait for it): " + e.Err.Error()
}

func (e *AdmitUnavailable) Unwrap() error { return e.Err }

// AdmitWaitDefault is Config.AdmitWait's default.
const AdmitWaitDefault = time.Second

// admitWaitMax caps the wait between two asks of an unavailable Admission.
const admitWaitMax = 30 * time.Second

// admit asks the Admission about the run's next model call, made with
// the auth profile profile (nil, nil without one).
func (ru *run) admit(ctx context.Context, profile string, req *provider.Request) (Admitted, error) {
	if ru.r.cfg.Admission == nil {
		return nil, nil
	}
	first := !ru.admitted
	ru.admitted = true
	adm, err := admitCall(ctx, ru.r.cfg, ru.sink, AdmitCall{SessionKey: ru.in.SessionKey, Lineage: ru.in.Lineage, Request: req, FirstCall: first, AuthProfile: profile, Alternates: ru.alternates})
	if mv := moved(err); mv != nil {
		if !slices.Contains(ru.alternates, mv.Profile) {
			return nil, fmt.Errorf("runner: admission moved the call to auth profile %q, not one of the run's alternates", mv.Profile)
		}
		if first {
			ru.admitted = false // the call was not made: the next one is the run's first
		}
	}
	return adm, err
}

// admitCall asks cfg's Admission about call, waiting while it is
// unavailable (AdmitUnavailable).
func admitCall(ctx context.Context, cfg Config, sink Sink, call AdmitCall) (Admitted, error) {
	wait := backoff.Policy{Base: cfg.AdmitWait, Max: admitWaitMax, Jitter: true}
	call.Waiting = func(text string, d time.Duration) {
		sink.Emit(events.StreamLifecycle, events.EventData{Phase: events.PhaseWaiting, Text: text, DelayMs: d.Milliseconds()})
	}
	for n := 1; ; n++ {
		adm, err := cfg.Admission.Admit(ctx, call)
		u, ok := errors.AsType[*AdmitUnavailable](err)
		if !ok || ctx.Err() != nil {
			return adm, err
		}
		d := wait.Delay(n)
		sink.Emit(events.StreamLifecycle, events.EventData{Phase: events.PhaseRetrying, DelayMs: d.Milliseconds(),
			Error: u.Error() + "; the message stays queued, and this does not count toward its attempts"})
		if err := backoff.Sleep(ctx, d); err != nil {
			return nil, err
		}
		sink.Emit(events.StreamLifecycle, events.EventData{Phase: events.PhaseRetry})
	}
}

// callAdmitted makes the admitted call and settles it, also when the provider
// panics (lanes recovers the turn): an unsettled call stays in its lease's
// flight, renewed for ever, and holds that much of the budget.
// The reply is written to am.
func (ru *run) callAdmitted(ctx context.Context, prov provider.Provider, req *provider.Request, adm Admitted, am *message.Message) (err error) {
	defer ru.settle(adm, am)
	*am, err = prov.Stream(observed(ctx, adm), req, ru.sub.event)
	return err
}

// observed is ctx carrying adm's ResponseObserver, if it is one, to the
// provider.
func observed(ctx context.Context, adm Admitted) context.Context {
	if o, ok := adm.(ResponseObserver); ok {
		return provider.WithTrace(ctx, &provider.Trace{Response: o.Response})
	}
	return ctx
}

// settle tells an admitted call's settler what the call used, and shows
// its warning.
func (ru *run) settle(adm Admitted, am *message.Message) { settleCall(ru.sink, adm, am) }

func settleCall(sink Sink, adm Admitted, am *message.Message) {
	if adm == nil {
		return
	}
	var u message.Usage
	if am.Usage != nil {
		u = *am.Usage
	}
	if w := adm.Settle(u); w != "" {
		sink.Emit(events.StreamLifecycle, events.EventData{Phase: events.PhaseBudgetWarning, Text: w})
	}
}

// admitted is a provider whose calls the Admission admits and settles
// like a turn's (a compaction's summary calls): a refusal fails the call.
func admitted(cfg Config, sink Sink, in Input, profile string, p provider.Provider) provider.Provider {
	if cfg.Admission == nil {
		return p
	}
	return provider.Func(func(ctx context.Context, req *provider.Request, emit func(provider.Event)) (m message.Message, err error) {
		adm, err := admitCall(ctx, cfg, sink, AdmitCall{SessionKey: in.SessionKey, Lineage: in.Lineage, Request: req, Compaction: true, AuthProfile: profile})
		if err != nil {
			return message.Message{Role: message.RoleAssistant, StopReason: message.StopError, ErrorMessage: err.Error()}, err
		}
		defer func() { settleCall(sink, adm, &m) }() // also on a panic, as callAdmitted
		return p.Stream(observed(ctx, adm), req, emit)
	})
}

// moved is err's AdmitMove, nil when it is none.
func moved(err error) *AdmitMove {
	m, _ := errors.AsType[*AdmitMove](err)
	return m
}

// refusal is err's AdmitRefusal, nil when it is none.
func refusal(err error) *AdmitRefusal {
	r, _ := errors.AsType[*AdmitRefusal](err)
	return r
}
