package lanes

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
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
	msg queue.Msg       // what the planner knows of it
	// dupOf is the inbound sequence (run) of the message this one
	// duplicates (msg.Kind is then queue.KindDuplicate); 0 = none.
	dupOf uint64
}

func (c collected) runID() string { return strconv.FormatUint(c.raw.Sequence, 10) }

// dropped is a message a turn consumes without answering it.
type dropped struct {
	c      collected
	kind   string // events.KindDropped, events.KindInterrupted, kindSettings, or invalid_input (settings refused)
	reason string
}

// kindSettings marks a settings message applied on the way (ConsumedRun.Kind).
const kindSettings = "settings"

// plan is what one turn takes off the lane: queue.PlanTurn's plan with the
// messages it names. The cursor moves past through when the turn commits;
// every message up to it is the turn's own, merged into it, or dropped, and
// each of their runs gets a final event.
type plan struct {
	verb    queue.Verb
	run     collected       // the message whose run carries the turn
	in      *events.Inbound // what the turn runs: run's message, or a collect batch merged
	merged  []collected     // other messages the turn answers: a collect batch, then steered ones
	dropped []dropped       // messages the turn consumed without answering them
	backlog []collected     // steer-backlog messages shown to the turn; each still runs on its own
	through uint64          // the last inbound sequence the turn consumed
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

// read decodes a message read off the lane and says what the planner
// knows of it. Its id (Lanefleet-Msg-Id) is noted: a message whose id an
// earlier message of the lane used within the window is a duplicate.
func (o *owner) read(raw *jetstream.RawStreamMsg) collected {
	in, err := o.decode(raw)
	if err != nil {
		in = nil
	}
	c := collected{raw: raw, in: in, msg: msgOf(raw, in, o.storedMode(), time.Now())}
	if c.dupOf = o.ids.Note(raw.Header.Get(events.HeaderLaneMsgID), raw.Sequence, raw.Time); c.dupOf != 0 {
		c.msg.Kind = queue.KindDuplicate
	}
	return c
}

// newest is when the stream stored the latest message of the plan.
func (p *plan) newest() time.Time {
	t := p.run.raw.Time
	for _, c := range p.merged {
		t = later(t, c.raw.Time)
	}
	for _, d := range p.dropped {
		t = later(t, d.c.raw.Time)
	}
	return t
}

func later(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}

// duplicate ends the run of a message whose id an earlier message of the
// lane used within the de-duplication window: nothing runs, and its run
// points at that message's, as a merged message's does (a client's Wait
// returns that run's result).
func (o *owner) duplicate(ctx context.Context, em *emitter, p *plan) error {
	into := strconv.FormatUint(p.run.dupOf, 10)
	o.w.stats.Duplicates.Add(1)
	o.log.Info().Uint64("seq", p.run.raw.Sequence).Str("duplicates", into).Msg("a message reused the id of an earlier message of its session: not run")
	em.emit(events.StreamLifecycle, events.EventData{Phase: events.PhaseMerged, Text: into})
	return o.commit(ctx, em, p, &Outcome{Result: &events.Result{Meta: events.Meta{MergedInto: into}}})
}

// msgOf is what the planner knows of an inbound message (in nil: it does
// not decode), read at now, in a session whose stored mode is stored.
func msgOf(raw *jetstream.RawStreamMsg, in *events.Inbound, stored queue.Mode, now time.Time) queue.Msg {
	m := queue.Msg{Seq: raw.Sequence, At: raw.Time}
	if now.Before(m.At) {
		m.At = now // a skewed clock never stretches a debounce
	}
	switch {
	case in == nil:
		m.Kind = queue.KindInvalid
	case in.IsSettings():
		m.Kind = queue.KindSettings
	case in.Stop:
		m.Kind = queue.KindStop
	default:
		own, _ := queue.ParseMode(in.Mode)
		m.Mode, m.Prompt, m.Heartbeat = queue.ModeOf(own, stored), in.Text, in.Heartbeat
	}
	return m
}

// storedMode is the session's stored queue mode ("" = none).
func (o *owner) storedMode() queue.Mode {
	q := o.settings.Queue()
	if q == nil {
		return ""
	}
	m, _ := queue.ParseMode(q.Mode)
	return m
}

// planTurn plans the turn that starts at head (queue.PlanTurn): it reads
// the messages behind head and waits for a collect batch's debounce as
// the planner asks, then names the messages of its plan.
func (o *owner) planTurn(ctx context.Context, head collected) (*plan, error) {
	pending := []collected{head}
	msgs := []queue.Msg{head.msg}
	complete := false
	var w *laneWatch
	defer func() { w.close() }()
	for {
		qp := queue.PlanTurn(queue.Input{Pending: msgs, Complete: complete, Settings: queue.Resolve(overridesOf(o.settings.Queue())),
			LastEnd: o.lastEnd, Now: time.Now()})
		switch qp.Verb {
		case queue.VerbRead:
			next, err := o.next(ctx, pending[len(pending)-1].raw.Sequence)
			if errors.Is(err, jetstream.ErrMsgNotFound) {
				complete = true
				continue
			}
			if err != nil {
				return nil, err
			}
			c := o.read(next)
			pending, msgs = append(pending, c), append(msgs, c.msg)
		case queue.VerbWait:
			if w == nil {
				var err error
				if w, err = o.watchLane(); err != nil {
					return nil, err
				}
			}
			if err := w.wait(ctx, qp.Until, o.w.stopCh); err != nil {
				return nil, err
			}
			complete = false
		default:
			return o.planOf(qp, pending), nil
		}
	}
}

// planOf names the messages of a planner's plan; pending holds every
// message it can name.
func (o *owner) planOf(qp queue.Plan, pending []collected) *plan {
	bySeq := make(map[uint64]collected, len(pending))
	for _, c := range pending {
		bySeq[c.raw.Sequence] = c
	}
	p := &plan{verb: qp.Verb, run: bySeq[qp.Run.Seq], through: qp.Through}
	p.in = p.run.in
	for _, m := range qp.Merged {
		p.merged = append(p.merged, bySeq[m.Seq])
	}
	for _, d := range qp.Dropped {
		reason := fmt.Sprintf("%s; run %s answered the messages kept", d.Reason, p.run.runID())
		if d.Reason == queue.ReasonCapSummarized {
			reason = fmt.Sprintf("%s; its summary line is in the prompt of run %s", d.Reason, p.run.runID())
		}
		p.dropped = append(p.dropped, dropped{c: bySeq[d.Item.Seq], kind: events.KindDropped, reason: reason})
	}
	if qp.Merge {
		p.in = mergeInbound(append([]collected{p.run}, p.merged...), qp.Prompt)
	}
	return p
}

// Polling bounds of the debounce wait: a core subscription on the lane says
// when a message arrives; it is looked for again shortly after in case the
// stream had not stored it yet, and every second in case a notice was lost.
const (
	debounceRecheck = 20 * time.Millisecond
	debouncePoll    = time.Second
)

// laneWatch tells a debounce wait that a message arrived on the lane.
type laneWatch struct {
	sub    *nats.Subscription
	notify chan *nats.Msg
}

func (o *owner) watchLane() (*laneWatch, error) {
	w := &laneWatch{notify: make(chan *nats.Msg, 64)}
	sub, err := o.w.nc.ChanSubscribe(o.subject, w.notify)
	if err != nil {
		return nil, fmt.Errorf("lanes: watch lane: %w", err)
	}
	w.sub = sub
	_ = o.w.nc.FlushTimeout(time.Second)
	return w, nil
}

func (w *laneWatch) close() {
	if w != nil {
		_ = w.sub.Unsubscribe()
	}
}

// wait returns when the lane may have a new message (shortly after a
// notice, or at the latest after debouncePoll) or at until, whichever
// comes first; never later than one debounce poll from now.
func (w *laneWatch) wait(ctx context.Context, until time.Time, stop <-chan struct{}) error {
	timer := time.NewTimer(max(0, time.Until(until)))
	defer timer.Stop()
	poll := time.NewTimer(debouncePoll)
	defer poll.Stop()
	select {
	case <-timer.C:
	case <-w.notify:
		for len(w.notify) > 0 {
			<-w.notify
		}
		select {
		case <-time.After(debounceRecheck):
		case <-ctx.Done():
			return ctx.Err()
		}
	case <-poll.C:
	case <-ctx.Done():
		return ctx.Err()
	case <-stop:
		return errStopping
	}
	return nil
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

// steerer returns the Turn's Steer function: at each model-call boundary
// it reads the steerable messages waiting behind the turn and takes what
// queue.Steer picks. Joined steer messages are consumed with the turn;
// steer-backlog ones are shown to it and stay on the lane.
func (o *owner) steerer(p *plan) func(ctx context.Context) []*events.Inbound {
	var mu sync.Mutex
	scan := p.through
	shown := false // a steer-backlog message was shown and stays on the lane
	q := o.quiet
	return func(ctx context.Context) []*events.Inbound {
		mu.Lock()
		defer mu.Unlock()
		count, reconnects := q.before(), o.w.nc.Stats().Reconnects
		batch, end, err := o.pendingSteers(ctx, scan)
		if err != nil && ctx.Err() == nil {
			o.log.Debug().Err(err).Msg("read steered messages")
		}
		q.after(err == nil && end && len(batch) == 0, scan, count, reconnects)
		msgs := make([]queue.Msg, len(batch))
		for i, c := range batch {
			msgs[i] = c.msg
		}
		sp := queue.Steer(msgs, scan, shown)
		scan, shown = sp.Scanned, sp.BacklogShown
		var out []*events.Inbound
		for _, c := range batch {
			if c.raw.Sequence > sp.Scanned {
				break
			}
			if c.msg.Mode == queue.ModeSteer {
				p.merged = append(p.merged, c)
				p.through = c.raw.Sequence
			} else {
				p.backlog = append(p.backlog, c)
			}
			out = append(out, c.in)
		}
		return out
	}
}

// pendingSteers reads the steerable messages (queue.Steerable) waiting
// right after seq; end reports that the lane has no message after them.
func (o *owner) pendingSteers(ctx context.Context, seq uint64) (batch []collected, end bool, err error) {
	for {
		next, err := o.next(ctx, seq)
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			return batch, true, nil
		}
		if err != nil {
			return batch, false, err
		}
		c := o.read(next)
		if !queue.Steerable(c.msg) {
			return batch, false, nil
		}
		batch = append(batch, c)
		seq = next.Sequence
	}
}

// Causes of a cut turn's context.
var (
	// errInterrupted: an interrupt or rollback message arrived.
	errInterrupted = errors.New("lanes: interrupted by a newer message")
	// errStopped: a stop command arrived.
	errStopped = errors.New("lanes: stopped by a stop command")
)

// watchCuts returns the turn's context, cancelled as soon as a message that
// cuts the running turn (queue.OnArrival: interrupt, rollback, stop) is
// published to the lane. It subscribes before the turn's start event is
// published (on the same connection), so a cut sent by a client that saw
// that event is never missed. A core subscription sees every message the
// stream stores; if it misses one (a reconnect), that message still runs in
// order after the turn. The returned function ends the cutting. The
// subscription is the drain's: made by its first turn, kept for the next
// ones and the drain's looks at the lane (o.quiet), ended with the drain.
func (o *owner) watchCuts(ctx context.Context) (context.Context, func()) {
	turnCtx, cancel := context.WithCancelCause(ctx)
	q := o.quiet
	if q == nil {
		q = &quietWatch{notify: make(chan struct{}, 1)}
		sub, err := o.w.nc.Subscribe(o.subject, q.arrived(o.w.cfg.MaxPayload))
		if err != nil {
			o.log.Debug().Err(err).Msg("watch for interrupts")
			return turnCtx, func() { cancel(nil) }
		}
		// No flush: the subscription goes out on the connection before
		// the turn's start event does, and a server takes a connection's
		// protocol in order, so it has the subscription before anyone
		// can see that event and answer it with a cut. (A flush would
		// prove no more in a cluster, where the interest reaches the
		// other servers on its own, and it cost every turn a round trip.)
		q.sub, o.quiet = sub, q
	}
	// The callback must not read the owner's state: the turn's stored
	// mode and the ids seen so far go with its target.
	t := &cutTarget{cancel: cancel, stored: o.storedMode(), seen: o.ids.Clone()}
	q.target.Store(t)
	return turnCtx, func() {
		q.target.CompareAndSwap(t, nil)
		cancel(nil)
	}
}

// cutTarget is the running turn a watched message may cut.
type cutTarget struct {
	cancel context.CancelCauseFunc
	stored queue.Mode
	// seen are the lane's message ids as of the turn's start: a message
	// reusing one is a duplicate (of the turn's own message, say) and
	// cuts nothing.
	seen *queue.IDs
}

// arrived is the watch's callback: it counts the message, wakes a lingering
// owner, and cuts the running turn if the message says so.
func (q *quietWatch) arrived(maxPayload int) nats.MsgHandler {
	return func(m *nats.Msg) {
		q.arrivals.Add(1)
		select {
		case q.notify <- struct{}{}:
		default:
		}
		t := q.target.Load()
		if t == nil {
			return // between turns: the message runs in order
		}
		if t.seen.Known(m.Header.Get(events.HeaderLaneMsgID), time.Now()) {
			return // a duplicate: it ends pointing at its first, in order
		}
		in, err := events.DecodeInbound(m.Header.Get(events.HeaderContentType), m.Data, maxPayload)
		if err != nil {
			return
		}
		msg := msgOf(&jetstream.RawStreamMsg{}, in, t.stored, time.Now())
		if queue.OnArrival(msg, true) == queue.ArriveCut {
			cause := errInterrupted
			if msg.Kind == queue.KindStop {
				cause = errStopped
			}
			t.cancel(cause)
		}
	}
}

// quietWatch counts the messages a turn's watch saw arrive on the lane, so
// that the drain can tell the lane is still as empty as a steer poll found
// it, without reading it again.
type quietWatch struct {
	sub      *nats.Subscription
	arrivals atomic.Uint64
	notify   chan struct{}             // a message arrived (one token at most)
	target   atomic.Pointer[cutTarget] // the running turn; nil between turns
	// mu guards what the last steer poll found: nothing after seq, with
	// arrivals at count and the connection at reconnects; ok false when
	// the last poll found something or failed.
	mu         sync.Mutex
	ok         bool
	seq, count uint64
	reconnects uint64
}

// before is called right before a steer poll reads the lane past seq; it
// returns what after needs.
func (q *quietWatch) before() uint64 {
	if q == nil {
		return 0
	}
	return q.arrivals.Load()
}

// after records a steer poll's outcome: the lane had nothing past seq
// (empty), the watch having seen count arrivals before the read began.
func (q *quietWatch) after(empty bool, seq, count, reconnects uint64) {
	if q == nil {
		return
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	q.ok, q.seq, q.count, q.reconnects = empty, seq, count, reconnects
}

// reset forgets what the last steer poll found (a new turn starts).
func (q *quietWatch) reset() {
	if q == nil {
		return
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	q.ok = false
}

// empty reports whether the lane is known to hold nothing past seq: the
// last steer poll read nothing past seq, and since that read began the
// watch saw no message arrive, dropped none and the connection did not
// reconnect. A message the watch saw before the poll's read, which the
// stream stored only after it, makes the drain release the lane; the
// release reads the lane again before it lets go (see release).
func (q *quietWatch) empty(seq, reconnects uint64) bool {
	if q == nil {
		return false
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	if !q.ok || q.seq != seq || q.reconnects != reconnects || q.arrivals.Load() != q.count {
		return false
	}
	dropped, err := q.sub.Dropped()
	return err == nil && dropped == 0
}

// linger keeps an empty lane for up to Config.Linger after a turn, waiting
// for the session's next message on the last turn's watch: a session whose
// client answers at once goes on without releasing and taking the lane
// again. It reports whether a message arrived. An owner never lingers
// while a lane waits for a slot, or when the worker stops.
func (o *owner) linger(ctx context.Context) bool {
	d := o.w.cfg.Linger
	if d <= 0 || o.quiet == nil || o.w.stopping.Load() || o.w.sched.waiting.Load() > 0 {
		return false
	}
	// The lane was found empty with the watch at count arrivals: a token
	// left from before is stale, and one arrival since means a message.
	q := o.quiet
	select {
	case <-q.notify:
	default:
	}
	q.mu.Lock()
	since := q.arrivals.Load() != q.count
	q.mu.Unlock()
	if since {
		return true
	}
	t := time.NewTimer(d)
	defer t.Stop()
	o.w.lingering.Add(1)
	defer o.w.lingering.Add(-1)
	select {
	case <-q.notify:
		return true
	case <-t.C:
	case <-ctx.Done():
	case <-o.w.stopCh:
	}
	return false
}

// endWatch unsubscribes the running turn's watch, if any.
func (o *owner) endWatch() {
	if o.quiet != nil {
		_ = o.quiet.sub.Unsubscribe()
		o.quiet = nil
	}
}

// cutReasons are the errors of a turn that a message cut, and of the
// messages queued before the cut.
func cutReasons(cut *queue.Msg) (turn, queued string) {
	if cut != nil && cut.Kind == queue.KindStop {
		return "stopped: a stop command ended the session's running turn",
			"dropped: a stop command arrived after this message, before it ran"
	}
	return "interrupted: a newer message asked to interrupt the session",
		"dropped: an interrupt arrived after this message, before it ran"
}

// interrupted ends a turn cut short by an interrupt, rollback or stop (or
// a collect batch with one queued behind it): its run and every message
// queued before the cut end with an "interrupted" final event (settings
// messages among them are applied, queue.AfterCut); the cutting message
// runs next. What the cut turn did (partial, the handler's outcome of a
// cancelled turn: its prompt, completed replies and tool results) is kept
// in the transcript, as the reference and LangGraph's interrupt keep it,
// unless the cut is a rollback, which discards it. seen says the watch saw
// the cutting message arrive (see watchCuts): it is read off the lane even
// if the stream stores it a moment after the watch saw it.
func (o *owner) interrupted(ctx context.Context, em *emitter, p *plan, attempt int, partial *Outcome, seen bool) error {
	var cut *queue.Msg
	var drops []collected
	waited := time.Duration(0)
	for cut == nil {
		next, err := o.next(ctx, p.through)
		if errors.Is(err, jetstream.ErrMsgNotFound) && seen && waited < cutStoreWait {
			// The watch's core subscription can see a message before the
			// stream has stored it: it is on its way.
			d := min(5*time.Millisecond+waited, 100*time.Millisecond)
			select {
			case <-time.After(d):
			case <-ctx.Done():
				return ctx.Err()
			}
			waited += d
			continue
		}
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			if seen {
				o.log.Warn().Dur("waited_ms", waited).
					Msg("the message that cut the turn was not stored (refused as a duplicate or by an expected-sequence check, or stored late): one stored later runs as the lane's next message, and a rollback then keeps the cut turn")
			}
			break
		}
		if err != nil {
			return err
		}
		c := o.read(next)
		switch queue.AfterCut(c.msg) {
		case queue.CutEnd:
			cut = &c.msg
			continue
		case queue.CutApply:
			if why := o.refuseSettings(c.in); why != "" {
				p.dropped = append(p.dropped, dropped{c: c, kind: "invalid_input", reason: why})
				break
			}
			if err := o.storeSettings(ctx, c.in); err != nil {
				return err
			}
			p.dropped = append(p.dropped, dropped{c: c, kind: kindSettings, reason: o.settings.String()})
		default:
			drops = append(drops, c)
		}
		p.through = next.Sequence
	}
	why, dropWhy := cutReasons(cut)
	if cut != nil && cut.Kind == queue.KindStop {
		o.stopped = stopped{seq: cut.Seq, run: em.run, dropped: len(drops)}
	}
	for _, c := range drops {
		p.dropped = append(p.dropped, dropped{c: c, kind: events.KindInterrupted, reason: dropWhy})
	}
	em.emit(events.StreamLifecycle, events.EventData{Phase: events.PhaseError, Error: why, EndedAt: time.Now().UnixMilli(), Attempt: attempt})
	res := &events.Result{Payloads: []events.Payload{{Text: "Interrupted.", IsError: true}},
		Meta: events.Meta{Aborted: true, Error: &events.RunError{Kind: events.KindInterrupted, Message: why}}}
	out := &Outcome{Result: res}
	if partial != nil {
		// What the cut turn's model calls cost counts even when a
		// rollback discards what they said.
		out.Usage, out.AuthProfile = partial.Usage, partial.AuthProfile
		if cut == nil || cut.Mode != queue.ModeRollback {
			out.Entries = partial.Entries
		}
	}
	return o.commit(ctx, em, p, out)
}

// cutStoreWait bounds how long a cut turn waits for the stream to store the
// message that cut it. One the stream refuses (a duplicate Nats-Msg-Id, a
// failed Nats-Expected-* check, a full stream) never comes, and the
// owner, which sees the message on its watch but not the publisher's ack,
// cannot tell; meanwhile it holds the lane. A stream stores a message it
// accepts within milliseconds of the watch seeing it; the bound leaves
// room for a loaded or replicated stream, since a cut stored later still
// runs, after the turn, as the lane's next message (an interrupt with
// nothing to cut; a rollback then no longer discards the cut turn's
// progress), which the owner logs as a warning when it gives up.
const cutStoreWait = 2 * time.Second

// stopped remembers what the lane's last stop command cut, for its own run.
type stopped struct {
	seq     uint64 // the stop message
	run     string // the run it ended
	dropped int    // the messages queued before it that it dropped
}

// stop ends a stop command's run with a final event saying what it
// stopped. The turn it cut has ended (see interrupted); a stop that found
// no turn running (or reached a new owner after a crash) says so.
func (o *owner) stop(ctx context.Context, em *emitter, p *plan) error {
	text := "nothing was running"
	if st := o.stopped; st.seq == p.run.raw.Sequence {
		text = fmt.Sprintf("stopped run %s", st.run)
		if st.dropped > 0 {
			text += fmt.Sprintf("; dropped %d queued message(s)", st.dropped)
		}
	}
	em.emit(events.StreamLifecycle, events.EventData{Phase: events.PhaseEnd, EndedAt: time.Now().UnixMilli(), Text: text})
	return o.commit(ctx, em, p, &Outcome{Result: &events.Result{Payloads: []events.Payload{{Text: text}}}})
}

// applySettings runs a settings message: the session's stored settings
// (queue and run settings, one record) change, fenced, so exactly between
// the messages before and after it, and its run ends with a final event
// describing them.
func (o *owner) applySettings(ctx context.Context, em *emitter, p *plan) error {
	if err := o.storeSettings(ctx, p.in); err != nil {
		return err
	}
	text := o.settings.String()
	em.emit(events.StreamLifecycle, events.EventData{Phase: events.PhaseEnd, EndedAt: time.Now().UnixMilli(), Text: text})
	return o.commit(ctx, em, p, &Outcome{Result: &events.Result{Payloads: []events.Payload{{Text: text}}}})
}

// refuseSettings says why the worker's CheckSettings refuses the run
// settings of settings message in ("" when it stores them).
func (o *owner) refuseSettings(in *events.Inbound) string {
	if check := o.w.cfg.CheckSettings; check != nil && in.RunSettings != nil {
		if err := check(in.RunSettings); err != nil {
			return err.Error()
		}
	}
	return ""
}

// storeSettings applies the settings message in to the session's stored
// settings.
func (o *owner) storeSettings(ctx context.Context, in *events.Inbound) error {
	next := o.settings.Apply(in.QueueSettings, in.RunSettings)
	data, err := events.EncodeSettings(next)
	if err != nil {
		return err
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
	seq, _ := strconv.ParseUint(c.RunID, 10, 64)
	if _, _, err := o.closeAttempt(ctx, em, st, seq); err != nil {
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
