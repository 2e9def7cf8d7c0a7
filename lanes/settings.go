package lanes

import (
	"context"
	"time"

	"github.com/lanefleet/lanefleet/events"
	"github.com/lanefleet/lanefleet/lanes/internal/fenced"
	"github.com/lanefleet/lanefleet/lanes/queue"
)

// overridesOf returns a session's stored queue settings (nil = none) as a
// layer for queue.Resolve.
func overridesOf(q *events.QueueSettings) queue.Overrides {
	if q == nil {
		return queue.Overrides{}
	}
	o := queue.Overrides{Cap: q.Cap}
	o.Mode, _ = queue.ParseMode(q.Mode)
	o.Drop, _ = queue.ParseDropPolicy(q.Drop)
	if q.DebounceMs != nil {
		d := time.Duration(*q.DebounceMs) * time.Millisecond
		o.Debounce = &d
	}
	return o
}

// applySettings runs a settings message: the session's stored settings
// (queue and run settings, one record) change, fenced, so exactly between
// the messages before and after it, and its run ends with a final event
// describing them.
func (o *owner) applySettings(ctx context.Context, em *fenced.Emitter, p *plan) error {
	if err := o.storeSettings(ctx, p.in); err != nil {
		return err
	}
	text := o.lane.settings.String()
	if c := p.run.cmd; c != nil {
		text = c.Reply(o.lane.settings, o.cfg.ChatDefaults)
	}
	res := &events.Result{Payloads: []events.Payload{{Text: text}}}
	o.endRun(em, 0, runEnding(res, text))
	return o.commit(ctx, em, p, &Outcome{Result: res})
}

// refuseSettings says why the worker's CheckSettings refuses the run
// settings of settings message in ("" when it stores them).
func (o *owner) refuseSettings(in *events.Inbound) string {
	if check := o.cfg.CheckSettings; check != nil && in.RunSettings != nil {
		if err := check(in.RunSettings); err != nil {
			return err.Error()
		}
	}
	return ""
}

// storeSettings applies the settings message in to the session's stored
// settings.
func (o *owner) storeSettings(ctx context.Context, in *events.Inbound) error {
	next := o.lane.settings.Apply(in.QueueSettings, in.RunSettings)
	data, err := events.EncodeSettings(next)
	if err != nil {
		return err
	}
	if err := o.lease.PutSettings(ctx, data); err != nil {
		return err
	}
	o.lane.settings = next
	return nil
}
