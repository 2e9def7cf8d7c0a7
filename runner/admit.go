package runner

import (
	"context"
	"errors"

	"github.com/lanefleet/lanefleet/events"
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
	// reply; ctx's cause means the run was cancelled or timed out while
	// the call waited; any other error fails the run (the lane retries
	// its turn).
	Admit(ctx context.Context, call AdmitCall) (Admitted, error)
}

// AdmitCall is one model call about to be made.
type AdmitCall struct {
	SessionKey string
	// Request is the call, read-only: its model (price, max output) and
	// what its input holds.
	Request *provider.Request
	// FirstCall is set on the run's first model call (it counts a turn).
	FirstCall bool
}

// Admitted settles an admitted call.
type Admitted interface {
	// Settle records what the call used (its reply's usage, zero when it
	// had none) and returns a warning to show the run (a soft limit
	// reached), "" for none. It must not block long.
	Settle(u message.Usage) (warning string)
}

// AdmitRefusal is an Admission's refusal of a call: the turn ends with
// Text as its error reply and Kind (events.KindBudgetReached) as its
// error kind; what the turn did before stays.
type AdmitRefusal struct {
	Kind, Text string
}

func (e *AdmitRefusal) Error() string { return e.Text }

// admit asks the Admission about a call (nil, nil without one).
func (ru *run) admit(ctx context.Context, req *provider.Request) (Admitted, error) {
	a := ru.r.cfg.Admission
	if a == nil {
		return nil, nil
	}
	first := !ru.admitted
	ru.admitted = true
	return a.Admit(ctx, AdmitCall{SessionKey: ru.in.SessionKey, Request: req, FirstCall: first})
}

// settle tells an admitted call's settler what the call used, and shows
// its warning.
func (ru *run) settle(adm Admitted, am *message.Message) {
	if adm == nil {
		return
	}
	var u message.Usage
	if am.Usage != nil {
		u = *am.Usage
	}
	if w := adm.Settle(u); w != "" {
		ru.sink.Emit(events.StreamLifecycle, events.EventData{Phase: events.PhaseBudgetWarning, Text: w})
	}
}

// refusal is err's AdmitRefusal, nil when it is none.
func refusal(err error) *AdmitRefusal {
	r, _ := errors.AsType[*AdmitRefusal](err)
	return r
}
