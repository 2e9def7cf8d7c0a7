package lanes

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/lanefleet/lanefleet/events"
	"github.com/lanefleet/lanefleet/lanes/queue"
)

// collected is one inbound message read off the lane.
type collected struct {
	raw *jetstream.RawStreamMsg
	in  *events.Inbound // nil when it does not decode
}

func (c collected) runID() string { return strconv.FormatUint(c.raw.Sequence, 10) }

// dropped is a message a turn consumes without answering it.
type dropped struct {
	c      collected
	kind   string // events.KindDropped, events.KindInterrupted or kindSettings
	reason string
}

// kindSettings marks a settings message applied on the way (ConsumedRun.Kind).
const kindSettings = "settings"

// plan is what one turn takes off the lane. The cursor moves past through
// when the turn commits; every message up to it is the turn's own, merged
// into it, or dropped, and each of their runs gets a final event.
type plan struct {
	run     collected       // the message whose run carries the turn
	in      *events.Inbound // what the turn runs: run's message, or a collect batch merged
	merged  []collected     // other messages the turn answers: a collect batch, then steered ones
	dropped []dropped       // messages the turn consumed without answering them
	backlog []collected     // steer-backlog messages shown to the turn; each still runs on its own
	through uint64          // the last inbound sequence the turn consumed
	// interrupt: an interrupt is queued behind run; run and what follows
	// it up to the interrupt are dropped without running.
	interrupt bool
}

// consumed lists the messages the turn consumed besides its own.
func (p *plan) consumed() []events.ConsumedRun {
	var out []events.ConsumedRun
	for _, c := range p.merged {
		out = append(out, events.ConsumedRun{RunID: c.runID()})
	}
	for _, d := range p.dropped {
		out = append(out, events.ConsumedRun{RunID: d.c.runID(), Kind: d.kind, Reason: d.reason})
	}
	// In sequence order: the run of the last message consumed is ended
	// last, so when it has its final event every other one has too.
	slices.SortFunc(out, func(a, b events.ConsumedRun) int {
		x, _ := strconv.ParseUint(a.RunID, 10, 64)
		y, _ := strconv.ParseUint(b.RunID, 10, 64)
		return cmp.Compare(x, y)
	})
	return out
}

// jsonOf reports whether the consumed message of run id published JSON (its
// events are then JSON too).
func (p *plan) jsonOf(run string) bool {
	for _, c := range p.merged {
		if c.runID() == run {
			return isJSON(c.raw)
		}
	}
	for _, d := range p.dropped {
		if d.c.runID() == run {
			return isJSON(d.c.raw)
		}
	}
	return false
}

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

// defaultMode is the mode of a message that names none: the session's
// stored mode, else followup. (The reference's default is collect; the
// fleet keeps one turn per message unless a session or message asks.)
func (o *owner) defaultMode() queue.Mode {
	if o.settings != nil {
		if m, ok := queue.ParseMode(o.settings.Mode); ok {
			return m
		}
	}
	return queue.ModeFollowup
}

// modeOf is the queue mode a message runs in; "" for a settings message,
// which is never merged, steered or treated as an interrupt.
func (o *owner) modeOf(in *events.Inbound) queue.Mode { return modeWith(in, o.defaultMode()) }

func modeWith(in *events.Inbound, def queue.Mode) queue.Mode {
	if in == nil || in.QueueSettings != nil {
		return ""
	}
	if m, ok := queue.ParseMode(in.Mode); ok {
		return m
	}
	return def
}

// gatherMax bounds the messages one collect batch reads off the lane.
const gatherMax = 1000

// planCollect builds a collect turn starting at first: the collect-mode
// messages waiting right behind it are gathered; if the batch was queued
// behind a running turn it is drained only once the lane has been quiet for
// the debounce time (it stops waiting when the batch reaches the cap or can
// no longer grow); then the cap and drop policy pick what is merged, and the
// turn runs as the run of the oldest message kept.
func (o *owner) planCollect(ctx context.Context, first collected) (*plan, error) {
	s := queue.Resolve(overridesOf(o.settings))
	batch := []collected{first}
	closer, err := o.gather(ctx, &batch)
	if err != nil {
		return nil, err
	}
	if closer == nil && len(batch) < s.Cap && s.Debounce > 0 && first.raw.Time.Before(o.lastEnd) {
		if closer, err = o.debounce(ctx, &batch, s); err != nil {
			return nil, err
		}
	}
	if closer != nil && closer.in != nil {
		if m := o.modeOf(closer.in); m == queue.ModeInterrupt || m == queue.ModeRollback {
			// An interrupt arrived before the batch ran: it drops the
			// batch like any message queued before it.
			return &plan{run: first, in: first.in, through: first.raw.Sequence, interrupt: true}, nil
		}
	}
	items := make([]queue.Item, len(batch))
	bySeq := make(map[uint64]collected, len(batch))
	for i, c := range batch {
		items[i] = queue.Item{Seq: c.raw.Sequence, Prompt: c.in.Text, At: c.raw.Time}
		bySeq[c.raw.Sequence] = c
	}
	b, _ := queue.Collect(items, queue.Settings{Mode: queue.ModeCollect, Cap: s.Cap, Drop: s.Drop, Dedupe: queue.DedupeNone})
	kept := make([]collected, len(b.Turn.Items))
	for i, it := range b.Turn.Items {
		kept[i] = bySeq[it.Seq]
	}
	p := &plan{run: kept[0], merged: kept[1:], in: kept[0].in, through: batch[len(batch)-1].raw.Sequence}
	summarized := false
	for _, d := range b.Dropped {
		reason := fmt.Sprintf("%s; run %s answered the messages kept", d.Reason, p.run.runID())
		if d.Reason == queue.ReasonCapSummarized {
			summarized = true
			reason = fmt.Sprintf("%s; its summary line is in the prompt of run %s", d.Reason, p.run.runID())
		}
		p.dropped = append(p.dropped, dropped{c: bySeq[d.Item.Seq], kind: events.KindDropped, reason: reason})
	}
	if len(kept) > 1 || summarized {
		p.in = mergeInbound(kept, b.Turn.Prompt)
	}
	return p, nil
}

// Polling bounds of the debounce wait: a core subscription on the lane says
// when a message arrives; it is looked for again shortly after in case the
// stream had not stored it yet, and every second in case a notice was lost.
const (
	debounceRecheck = 20 * time.Millisecond
	debouncePoll    = time.Second
)

// debounce waits until the lane has been quiet (no new collect message) for
// the debounce time, gathering what arrives into *batch. It stops early
// when the batch reaches the cap or something that cannot join arrives,
// and returns that message.
func (o *owner) debounce(ctx context.Context, batch *[]collected, s queue.Settings) (closer *collected, err error) {
	notify := make(chan *nats.Msg, 64)
	sub, err := o.w.nc.ChanSubscribe(o.subject, notify)
	if err != nil {
		return nil, fmt.Errorf("lanes: watch lane: %w", err)
	}
	defer func() { _ = sub.Unsubscribe() }()
	_ = o.w.nc.FlushTimeout(time.Second)
	timer := time.NewTimer(0)
	defer timer.Stop()
	recheck := time.NewTimer(time.Hour)
	recheck.Stop()
	defer recheck.Stop()
	poll := time.NewTicker(debouncePoll)
	defer poll.Stop()
	for {
		// Anything that arrived before the subscription, or since.
		n := len(*batch)
		if closer, err = o.gather(ctx, batch); err != nil || closer != nil || len(*batch) >= s.Cap {
			return closer, err
		}
		last := (*batch)[len(*batch)-1].raw.Time
		// The debounce counts from the newest message's stream time, never
		// longer than one debounce from now (clock skew).
		wait := min(s.Debounce, time.Until(last.Add(s.Debounce)))
		if wait <= 0 {
			return nil, nil
		}
		timer.Reset(wait)
		select {
		case <-timer.C:
			// Quiet for the whole debounce unless the last look found
			// something new.
			if len(*batch) == n {
				if closer, err = o.gather(ctx, batch); err != nil || closer != nil || len(*batch) == n {
					return closer, err
				}
			}
		case <-notify:
			for len(notify) > 0 {
				<-notify
			}
			recheck.Reset(debounceRecheck)
		case <-recheck.C:
		case <-poll.C:
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-o.w.stopCh:
			return nil, errStopping
		}
	}
}

// gather appends to *batch the collect-mode messages waiting right after its
// last one. It returns the message that closes the batch, if one follows: a
// message that cannot join (another mode, a settings message, one that does
// not decode). A batch of gatherMax messages is closed too (by its last).
func (o *owner) gather(ctx context.Context, batch *[]collected) (closer *collected, err error) {
	for len(*batch) < gatherMax {
		last := (*batch)[len(*batch)-1].raw.Sequence
		next, err := o.next(ctx, last)
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			return nil, nil
		}
		if err != nil {
			return nil, err
		}
		in, err := o.decode(next)
		if err != nil {
			in = nil
		}
		c := collected{raw: next, in: in}
		if o.modeOf(in) != queue.ModeCollect {
			return &c, nil
		}
		*batch = append(*batch, c)
	}
	return &(*batch)[len(*batch)-1], nil
}

// mergeInbound makes one inbound message of a collect batch: the merged
// prompt, every image and tool result, and the run settings (model,
// thinking, tools) of the last message, as the reference does.
func mergeInbound(batch []collected, prompt string) *events.Inbound {
	merged := *batch[len(batch)-1].in
	merged.ID = batch[0].in.ID
	merged.Text = prompt
	merged.Images, merged.ToolResults = nil, nil
	for _, c := range batch {
		merged.Images = append(merged.Images, c.in.Images...)
		merged.ToolResults = append(merged.ToolResults, c.in.ToolResults...)
	}
	return &merged
}

// steerer returns the Turn's Steer function. Steer-mode messages waiting
// right behind the turn join it and are consumed with it. Steer-backlog
// messages are shown to the turn too but stay on the lane and run as their
// own follow-up turns afterwards (reference §19: steer the live run and
// enqueue a follow-up); since the cursor cannot pass a message that stays,
// a steer message behind a steer-backlog one waits for a later turn.
func (o *owner) steerer(p *plan) func(ctx context.Context) []*events.Inbound {
	var mu sync.Mutex
	scan := p.through
	kept := false // a steer-backlog message was shown and stays on the lane
	return func(ctx context.Context) []*events.Inbound {
		mu.Lock()
		defer mu.Unlock()
		batch, err := o.pendingSteers(ctx, scan)
		if err != nil && ctx.Err() == nil {
			o.log.Debug().Err(err).Msg("read steered messages")
		}
		var out []*events.Inbound
		for _, c := range batch {
			if o.modeOf(c.in) == queue.ModeSteer {
				if kept {
					break
				}
				p.merged = append(p.merged, c)
				p.through = c.raw.Sequence
			} else {
				kept = true
				p.backlog = append(p.backlog, c)
			}
			scan = c.raw.Sequence
			out = append(out, c.in)
		}
		return out
	}
}

// pendingSteers returns the steer and steer-backlog messages waiting right
// after seq. A message of another mode ends the batch: order is kept, so a
// steer message queued behind a follow-up waits for its own turn.
func (o *owner) pendingSteers(ctx context.Context, seq uint64) ([]collected, error) {
	var batch []collected
	for {
		next, err := o.next(ctx, seq)
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			return batch, nil
		}
		if err != nil {
			return batch, err
		}
		in, err := o.decode(next)
		if err != nil {
			return batch, nil
		}
		if m := o.modeOf(in); m != queue.ModeSteer && m != queue.ModeSteerBacklog {
			return batch, nil
		}
		batch = append(batch, collected{raw: next, in: in})
		seq = next.Sequence
	}
}

// errInterrupted cancels a turn when an interrupt-mode message arrives.
var errInterrupted = errors.New("lanes: interrupted by a newer message")

// watchInterrupts returns the turn's context, cancelled with errInterrupted
// as soon as an interrupt or rollback message is published to the lane. A
// core subscription sees every message the stream stores; if it misses one
// (a reconnect), that message still runs as a follow-up.
func (o *owner) watchInterrupts(ctx context.Context) (context.Context, func()) {
	turnCtx, cancel := context.WithCancelCause(ctx)
	def := o.defaultMode() // the callback must not read the owner's state
	sub, err := o.w.nc.Subscribe(o.subject, func(m *nats.Msg) {
		in, err := events.DecodeInbound(m.Header.Get(events.HeaderContentType), m.Data, o.w.cfg.MaxPayload)
		if err != nil {
			return
		}
		if mode := modeWith(in, def); mode == queue.ModeInterrupt || mode == queue.ModeRollback {
			cancel(errInterrupted)
		}
	})
	if err != nil {
		o.log.Debug().Err(err).Msg("watch for interrupts")
		return turnCtx, func() { cancel(nil) }
	}
	// One round trip so the server has the subscription before the turn
	// starts: an interrupt published from then on is seen.
	_ = o.w.nc.FlushTimeout(time.Second)
	return turnCtx, func() { _ = sub.Unsubscribe(); cancel(nil) }
}

// interrupted ends a turn cut short by an interrupt: its run and every
// message queued before the interrupt end with an "interrupted" final event
// and nothing in the transcript (settings messages among them are applied);
// the interrupt message runs next.
func (o *owner) interrupted(ctx context.Context, em *emitter, p *plan, attempt int) error {
	const why = "interrupted: a newer message asked to interrupt the session"
	for {
		next, err := o.next(ctx, p.through)
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			break
		}
		if err != nil {
			return err
		}
		in, derr := o.decode(next)
		c := collected{raw: next, in: in}
		if derr == nil {
			if mode := o.modeOf(in); mode == queue.ModeInterrupt || mode == queue.ModeRollback {
				break
			}
			if in.QueueSettings != nil {
				if err := o.storeSettings(ctx, in.QueueSettings); err != nil {
					return err
				}
				p.dropped = append(p.dropped, dropped{c: c, kind: kindSettings, reason: "queue settings: " + o.settings.String()})
				p.through = next.Sequence
				continue
			}
		}
		p.dropped = append(p.dropped, dropped{c: c, kind: events.KindInterrupted,
			reason: "dropped: an interrupt arrived after this message, before it ran"})
		p.through = next.Sequence
	}
	em.emit(events.StreamLifecycle, events.EventData{Phase: events.PhaseError, Error: why, EndedAt: time.Now().UnixMilli(), Attempt: attempt})
	res := &events.Result{Payloads: []events.Payload{{Text: "Interrupted.", IsError: true}},
		Meta: events.Meta{Aborted: true, Error: &events.RunError{Kind: events.KindInterrupted, Message: why}}}
	return o.commit(ctx, em, p, &Outcome{Result: res})
}

// applySettings runs a settings message: the session's stored settings
// change (fenced, so exactly between the messages before and after it) and
// its run ends with a final event describing them.
func (o *owner) applySettings(ctx context.Context, em *emitter, p *plan) error {
	if err := o.storeSettings(ctx, p.in.QueueSettings); err != nil {
		return err
	}
	text := "queue settings: " + o.settings.String()
	em.emit(events.StreamLifecycle, events.EventData{Phase: events.PhaseEnd, EndedAt: time.Now().UnixMilli(), Text: text})
	return o.commit(ctx, em, p, &Outcome{Result: &events.Result{Payloads: []events.Payload{{Text: text}}}})
}

func (o *owner) storeSettings(ctx context.Context, change *events.QueueSettings) error {
	next := o.settings.Apply(change)
	data, err := json.Marshal(next)
	if err != nil {
		return fmt.Errorf("lanes: encode settings: %w", err)
	}
	if err := o.lease.PutSettings(ctx, data); err != nil {
		return err
	}
	o.settings = next
	return nil
}

// endConsumed ends the run of a message a turn consumed without running it
// (merged, steered, dropped, or a settings message applied on the way): a
// lifecycle event saying why, then its final event, continuing whatever that
// run published before. A run that already has its final event is left
// alone, so it can be called again after a failure or by the lane's next
// owner after a crash.
func (o *owner) endConsumed(ctx context.Context, c events.ConsumedRun, into string, asJSON bool) error {
	em := o.newEmitter(ctx, c.RunID, o.log.With().Str("run_id", c.RunID).Logger(), asJSON)
	st, err := em.open(ctx, o.lease.Revision())
	if err != nil || st.finished {
		return err
	}
	if err := o.closeAttempt(ctx, em, st); err != nil {
		return err
	}
	var why events.EventData
	var res *events.Result
	now := time.Now().UnixMilli()
	switch c.Kind {
	case "":
		o.w.stats.Merged.Add(1)
		why = events.EventData{Phase: events.PhaseMerged, Text: into}
		res = &events.Result{Meta: events.Meta{MergedInto: into}}
	case kindSettings:
		why = events.EventData{Phase: events.PhaseEnd, EndedAt: now, Text: c.Reason}
		res = &events.Result{Payloads: []events.Payload{{Text: c.Reason}}}
	default:
		o.w.stats.Dropped.Add(1)
		why = events.EventData{Phase: events.PhaseError, Error: c.Reason, EndedAt: now}
		res = &events.Result{Payloads: []events.Payload{{Text: c.Reason, IsError: true}},
			Meta: events.Meta{Aborted: c.Kind == events.KindInterrupted, Error: &events.RunError{Kind: c.Kind, Message: c.Reason}}}
	}
	if st.lastPhase != why.Phase {
		em.emit(events.StreamLifecycle, why) // not again when a failed try stored it
	}
	return em.final(ctx, res)
}

// announceSteered tells the sender of a steer-backlog message that a running
// turn saw it; the message still runs as its own turn.
func (o *owner) announceSteered(ctx context.Context, c collected, into string) {
	em := o.newEmitter(ctx, c.runID(), o.log, isJSON(c.raw))
	st, err := em.open(ctx, o.lease.Revision())
	if err == nil && !st.finished {
		err = em.publish(ctx, events.StreamLifecycle, events.EventData{Phase: events.PhaseSteered, Text: into}, st.attempt)
	}
	if err != nil {
		o.log.Debug().Err(err).Str("run_id", c.runID()).Msg("steered event")
	}
}
