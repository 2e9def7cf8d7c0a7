package schedstore

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"

	"github.com/lanefleet/lanefleet/events"
	"github.com/lanefleet/lanefleet/kvstore"
	"github.com/lanefleet/lanefleet/schedule"
)

// RunLookup says which run a session's lane is running: the active-run
// registry (kvstore.Runs) satisfies it.
type RunLookup interface {
	Get(ctx context.Context, token string) (kvstore.RunInfo, bool, error)
}

// FirerConfig configures a Firer.
type FirerConfig struct {
	Store *Store
	// Runs tells a running firing from a waiting one (OverlapBufferOne);
	// nil counts every unprocessed firing as waiting.
	Runs RunLookup
	Log  zerolog.Logger
	// Observe, when set, is told each decision's outcome, how many due
	// times it stands for and how late it was handled (metrics).
	Observe func(o schedule.Outcome, n int, late time.Duration)
}

// Stats count what a Firer did.
type Stats struct {
	Handled, Fired, Skipped, Missed, Failed atomic.Int64
}

// Firer consumes the schedules' firing messages and fires them.
type Firer struct {
	cfg     FirerConfig
	st      *Store
	inbound jetstream.Stream
	Stats   Stats
}

// handleTimeout bounds one firing's handling (its sends and record
// write); settle renews the firing with the server meanwhile.
const handleTimeout = 20 * time.Second

// NewFirer binds the inbound stream (which must exist: the lanes make it)
// and the firing consumer.
func NewFirer(ctx context.Context, cfg FirerConfig) (*Firer, error) {
	if cfg.Store == nil {
		return nil, errors.New("schedstore: firer without a store")
	}
	in, err := cfg.Store.js.Stream(ctx, events.InboundStream)
	if err != nil {
		return nil, fmt.Errorf("schedstore: stream %s: %w", events.InboundStream, err)
	}
	return &Firer{cfg: cfg, st: cfg.Store, inbound: in}, nil
}

// Run re-arms what needs it (Reconcile), then handles firings until ctx
// ends; it returns nil then, also when ctx ends while it starts.
func (f *Firer) Run(ctx context.Context) error {
	if err := f.Reconcile(ctx); err != nil {
		f.cfg.Log.Warn().Err(err).Msg("schedules: re-arming at start")
	}
	cons, err := f.st.stream.CreateOrUpdateConsumer(ctx, jetstream.ConsumerConfig{
		Durable:       ConsumerName,
		Description:   "hands each due schedule to one worker",
		AckPolicy:     jetstream.AckExplicitPolicy,
		AckWait:       ackWait,
		MaxDeliver:    -1,
		FilterSubject: FirePrefix + ">",
		DeliverPolicy: jetstream.DeliverAllPolicy,
		Replicas:      0,
	})
	if err != nil {
		if ctx.Err() != nil {
			return nil // stopped while starting: not a failure
		}
		return fmt.Errorf("schedstore: consumer: %w", err)
	}
	var handling sync.WaitGroup // the callbacks, which nats.go runs
	cc, err := cons.Consume(func(m jetstream.Msg) {
		handling.Add(1)
		defer handling.Done()
		f.settle(ctx, m)
	}, jetstream.PullMaxMessages(16), jetstream.ConsumeErrHandler(func(_ jetstream.ConsumeContext, err error) {
		// Its own, so that a missed heartbeat while the server is away
		// is not the connection's error.
		if !errors.Is(err, jetstream.ErrNoHeartbeat) {
			f.cfg.Log.Debug().Err(err).Msg("schedules: consume")
		}
	}))
	if err != nil {
		if ctx.Err() != nil {
			return nil
		}
		return fmt.Errorf("schedstore: consume: %w", err)
	}
	<-ctx.Done()
	cc.Drain()
	select {
	case <-cc.Closed():
	case <-time.After(2 * time.Second): // the server is away: stop without it
		cc.Stop()
	}
	handling.Wait()
	return nil
}

// settle handles one firing message and acks it, or asks for it again.
// While it handles, it tells the server the message is in progress every
// third of ackWait: a live handler keeps its firing however long its
// writes take (up to handleTimeout), and a dead one's firing goes to
// another worker within ackWait.
func (f *Firer) settle(ctx context.Context, m jetstream.Msg) {
	id := strings.TrimPrefix(m.Subject(), FirePrefix)
	hctx, cancel := context.WithTimeout(ctx, handleTimeout)
	handled := make(chan struct{})
	go func() {
		tick := time.NewTicker(ackWait / 3)
		defer tick.Stop()
		for {
			select {
			case <-handled:
				return
			case <-tick.C:
				_ = m.InProgress()
			}
		}
	}()
	err := f.Handle(hctx, id)
	close(handled)
	cancel()
	switch {
	case err == nil, errors.Is(err, ErrNotFound):
		if aerr := m.Ack(); aerr != nil {
			f.cfg.Log.Debug().Err(aerr).Str("schedule", id).Msg("schedules: ack")
		}
	case errors.Is(err, schedule.ErrBadRecord):
		f.cfg.Log.Error().Err(err).Str("schedule", id).Msg("schedules: corrupt record; it fires no more until replaced")
		_ = m.Term()
	default:
		if ctx.Err() != nil {
			_ = m.Nak() // shutting down: another worker takes it
			return
		}
		f.cfg.Log.Warn().Err(err).Str("schedule", id).Msg("schedules: firing failed; retried")
		_ = m.NakWithDelay(2 * time.Second)
	}
}

// Handle fires a schedule's due times: it plans them from the record
// (overlap, catch-up), records the plan with a compare-and-set write,
// sends each firing the plan fires, records their runs and arms the next
// due time. Run calls it for each firing message; it is safe to call
// twice for one due time, or from two workers at once: only one plan's
// write wins (the other plans again and finds nothing due), and a
// firing's second send is a duplicate the stream drops (it returns the
// first one's run).
//
// The plan is written before its firings are sent so that it is made
// once: a handler that sent a firing and could not record it (a record
// write that timed out, a crash) used to leave the next handler to plan
// again later, which counted the sent due time as missed and, past the
// next due time, fired that one too (the fault soak's schedule: a session
// ran 27 turns, its history said 26 fired).
func (f *Firer) Handle(ctx context.Context, id string) error {
	for range 5 {
		done, err := f.handleOnce(ctx, id)
		if done || err != nil {
			return err
		}
	}
	return fmt.Errorf("schedstore: schedule %s: its record changed under 5 firings in a row", id)
}

func (f *Firer) handleOnce(ctx context.Context, id string) (bool, error) {
	sc, rev, err := f.st.Get(ctx, id)
	if err != nil {
		return true, err
	}
	if len(sc.Pending) > 0 {
		// A plan whose firings are not all recorded as sent: send them
		// (again), whatever happened since (a pause, time passing).
		return f.complete(ctx, sc, rev)
	}
	now := f.st.now()
	next := time.UnixMilli(sc.NextMs)
	if sc.Paused || sc.NextMs == 0 {
		return true, nil // nothing armed; resume arms again
	}
	if now.Before(next) {
		// Early (a timer rounded, or a stale firing message): arm the
		// record's due time again, which is idempotent.
		return true, f.st.arm(ctx, id, next)
	}
	tm, err := sc.Timer()
	if err != nil {
		return true, err
	}
	prev, err := f.previous(ctx, sc)
	if err != nil {
		return true, err
	}
	ds, nextDue, more := schedule.Plan(tm, sc.Overlap, sc.CatchUp, time.UnixMilli(sc.LastDueMs), now, prev)
	f.cfg.Log.Debug().Str("schedule", id).Int("due", len(ds)).Msg("schedules: firing")
	var counted []schedule.Decision // now; the fired ones once sent
	for _, d := range ds {
		due := d.Due.UnixMilli()
		sc.LastDueMs = max(sc.LastDueMs, due)
		if d.Outcome == schedule.Fired {
			sc.Pending, sc.PlannedMs = append(sc.Pending, due), now.UnixMilli()
			continue // noted once sent
		}
		counted = append(counted, d)
		sc.Note(schedule.Firing{DueMs: due, HandledMs: now.UnixMilli(), Outcome: d.Outcome, Count: d.Count})
	}
	sc.NextMs = 0
	if more {
		sc.NextMs = nextDue.UnixMilli()
	}
	if more && len(sc.Pending) == 0 {
		// Armed before the write, as complete does: a death between
		// them leaves the next firing armed, not the schedule timerless.
		if err := f.st.arm(ctx, id, nextDue); err != nil {
			return true, err
		}
	}
	rev, err = f.write(ctx, sc, rev)
	if rev == 0 || err != nil {
		return err != nil, err
	}
	for _, d := range counted {
		f.count(d.Outcome, d.Count, now.Sub(d.Due))
	}
	if len(sc.Pending) > 0 {
		return f.complete(ctx, sc, rev)
	}
	return true, nil
}

// complete sends the firings of the record's plan (sc.Pending, revision
// rev), notes them in the history with their runs, and arms the next due
// time (or reports false to plan it at once when it passed meanwhile). A
// firing sent before is a duplicate the stream drops, and its run is the
// first send's. A send that fails leaves the plan pending, for the retry.
func (f *Firer) complete(ctx context.Context, sc *schedule.Schedule, rev uint64) (bool, error) {
	type sentFiring struct {
		due  time.Time
		late time.Duration
		ok   bool
	}
	var sent []sentFiring
	for _, due := range sc.Pending {
		d := time.UnixMilli(due)
		target := sc.Target(d)
		// The message as first planned (its time is the plan's), so a
		// second send is the same message.
		run, err := f.send(ctx, sc, target, d, time.UnixMilli(sc.PlannedMs))
		if err != nil && !errors.Is(err, errRefused) {
			return true, err // the plan stays pending: the retry sends it
		}
		fi := schedule.Firing{DueMs: due, HandledMs: sc.PlannedMs, Outcome: schedule.Fired, Count: 1, Session: target, RunID: run}
		if err != nil {
			fi.Outcome, fi.Error, fi.RunID = schedule.Failed, err.Error(), ""
		} else {
			sc.LastSession, sc.LastRun = target, run
		}
		sc.Note(fi)
		sent = append(sent, sentFiring{d, f.st.now().Sub(d), err == nil})
	}
	sc.Pending, sc.PlannedMs = nil, 0
	// The next due time is armed before the write that completes the
	// plan: a worker that dies between the two leaves the next firing
	// armed, and its handler finds the plan pending and completes it
	// (the sends again are duplicates). Armed after it, a death there
	// left the schedule without a timer until the firing message came
	// back (TestScheduleAcrossWorkerFaults: 29 due times missed).
	again := false
	if !sc.Paused && sc.NextMs != 0 {
		if next := time.UnixMilli(sc.NextMs); f.st.now().Before(next) {
			if err := f.st.arm(ctx, sc.ID, next); err != nil {
				return true, err // the plan stays pending: the retry sends it
			}
		} else {
			again = true // the next due time passed meanwhile: plan it now
		}
	}
	rev, err := f.write(ctx, sc, rev)
	if rev == 0 || err != nil {
		return err != nil, err // another handler completed it: plan again
	}
	for _, s := range sent {
		o := schedule.Fired
		if !s.ok {
			o = schedule.Failed
		}
		f.count(o, 1, s.late)
	}
	return !again, nil
}

// write stores the schedule with compare-and-set and returns its new
// revision; 0 when another write came first (plan again).
func (f *Firer) write(ctx context.Context, sc *schedule.Schedule, rev uint64) (uint64, error) {
	b, err := sc.Encode()
	if err != nil {
		return 0, err
	}
	rev, err = f.st.kv.Update(ctx, sc.ID, b, rev)
	if err != nil {
		if errors.Is(err, jetstream.ErrKeyExists) {
			return 0, nil // another worker, or a change: plan again
		}
		return 0, fmt.Errorf("schedstore: record %s: %w", sc.ID, err)
	}
	return rev, nil
}

// count counts a handled outcome standing for n due times, late as it
// was handled.
func (f *Firer) count(o schedule.Outcome, n int, late time.Duration) {
	f.Stats.Handled.Add(int64(n))
	switch o {
	case schedule.Fired:
		f.Stats.Fired.Add(1)
	case schedule.Skipped:
		f.Stats.Skipped.Add(1)
	case schedule.Missed:
		f.Stats.Missed.Add(int64(n))
	case schedule.Failed:
		f.Stats.Failed.Add(1)
	}
	if f.cfg.Observe != nil {
		f.cfg.Observe(o, n, late)
	}
}

// errRefused marks a firing the inbound stream refused for good (its lane
// is full, it is too large): recorded as failed, not retried.
var errRefused = errors.New("refused by the session's lane")

// refusals are the inbound stream's refusals that retrying does not
// cure while the schedule waits: a full lane or stream, a message too
// large.
var refusals = map[string]bool{
	"maximum messages per subject exceeded": true,
	"maximum bytes exceeded":                true,
	"maximum messages exceeded":             true,
	"message size exceeds maximum allowed":  true,
}

// send publishes one firing to its session's lane and returns its run id.
func (f *Firer) send(ctx context.Context, sc *schedule.Schedule, target string, due, now time.Time) (string, error) {
	tok, err := events.KeyToken(target)
	if err != nil {
		return "", fmt.Errorf("%w: session %q: %v", errRefused, target, err)
	}
	in := sc.FiringMessage(due, now)
	data, ct, err := events.EncodeInbound(&in, false)
	if err != nil {
		return "", fmt.Errorf("%w: encode: %v", errRefused, err)
	}
	m := nats.NewMsg(events.InboundPrefix + tok)
	m.Data = data
	m.Header.Set(events.HeaderContentType, ct)
	m.Header.Set(events.HeaderMsgID, sc.FiringMsgID(due))
	m.Header.Set(events.HeaderLaneMsgID, in.ID)
	ack, err := f.st.js.PublishMsg(ctx, m)
	if err != nil {
		var apiErr *jetstream.APIError
		if errors.As(err, &apiErr) && refusals[apiErr.Description] {
			return "", fmt.Errorf("%w: %s", errRefused, apiErr.Description)
		}
		if errors.Is(err, nats.ErrMaxPayload) {
			return "", fmt.Errorf("%w: %v", errRefused, err)
		}
		return "", fmt.Errorf("schedstore: send %s due %s: %w", sc.ID, due.UTC().Format(time.RFC3339), err)
	}
	return strconv.FormatUint(ack.Sequence, 10), nil
}

// previous finds the state of the schedule's latest fired run: its
// message is processed (deleted from the inbound stream), waiting, or
// its turn is running.
func (f *Firer) previous(ctx context.Context, sc *schedule.Schedule) (schedule.Previous, error) {
	if sc.LastRun == "" {
		return schedule.PrevDone, nil
	}
	seq, err := strconv.ParseUint(sc.LastRun, 10, 64)
	if err != nil {
		return schedule.PrevDone, nil
	}
	tok, err := events.KeyToken(sc.LastSession)
	if err != nil {
		return schedule.PrevDone, nil
	}
	raw, err := f.inbound.GetMsg(ctx, seq, jetstream.WithGetMsgSubject(events.InboundPrefix+tok))
	switch {
	case errors.Is(err, jetstream.ErrMsgNotFound):
		return schedule.PrevDone, nil
	case err != nil:
		return 0, fmt.Errorf("schedstore: previous firing of %s: %w", sc.ID, err)
	case raw.Sequence != seq:
		return schedule.PrevDone, nil // a later message of the lane: ours was processed
	}
	if f.cfg.Runs != nil {
		info, ok, err := f.cfg.Runs.Get(ctx, tok)
		if err == nil && ok && info.RunID == sc.LastRun {
			return schedule.PrevRunning, nil
		}
	}
	return schedule.PrevWaiting, nil
}

// Reconcile arms every active schedule whose timer is not pending (a
// crash between a record write and its arming, a purged stream): run at
// start-up, so no schedule is left without a timer. A due time that
// passed meanwhile fires at once and is caught up by its policy.
func (f *Firer) Reconcile(ctx context.Context) error {
	armed, err := f.st.armed(ctx)
	if err != nil {
		return err
	}
	all, bad, err := f.st.List(ctx)
	if err != nil {
		return err
	}
	for _, e := range bad {
		f.cfg.Log.Error().Err(e).Msg("schedules: corrupt record skipped")
	}
	for _, sc := range all {
		if armed[sc.ID] || (len(sc.Pending) == 0 && (sc.Paused || sc.NextMs == 0)) {
			continue
		}
		at := time.UnixMilli(sc.NextMs)
		if len(sc.Pending) > 0 {
			at = f.st.now() // a plan to send: at once
		}
		if err := f.st.arm(ctx, sc.ID, at); err != nil {
			return err
		}
	}
	return nil
}
