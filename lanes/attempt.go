package lanes

import (
	"cmp"
	"context"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/rs/zerolog"

	"github.com/lanefleet/lanefleet/events"
	"github.com/lanefleet/lanefleet/kvstore"
	"github.com/lanefleet/lanefleet/lanes/internal/fenced"
	"github.com/lanefleet/lanefleet/sessionfile"
)

// attempt is one attempt at a turn: its run's emitter, fenced for this
// owner, and its number.
type attempt struct {
	em       *fenced.Emitter
	seq      uint64 // the inbound sequence whose run carries the turn
	attempt  int
	restart  bool // an earlier attempt started
	log      zerolog.Logger
	poisoned bool // the turn ended before it started (dead-lettered as poison)
	// parent is the session's parent (a sub-agent's), named on its start
	// event; nil = none.
	parent *events.Parent
}

// open fences the run's events, so an earlier owner still running it can no
// longer publish; then continues what earlier attempts (a crash, a lost
// lease, a failed try) left: their sequence, an attempt that never ended,
// their count. A turn started too often is dead-lettered as poison.
func (o *owner) open(ctx context.Context, p *plan) (*attempt, error) {
	seq := p.run.raw.Sequence
	run := strconv.FormatUint(seq, 10)
	if o.lane.cursor.SessionID == "" {
		o.lane.cursor.SessionID = sessionfile.NewSessionID()
	}
	var (
		em  *fenced.Emitter
		st  fenced.RunState
		err error
		log zerolog.Logger
	)
	if a := o.takeAhead(seq); a != nil {
		// The run's logger is the one opened ahead: each With holds a
		// buffer of 500 bytes for the turn's life.
		em, st, err, log = a.em, a.st, a.err, a.log
	} else {
		log = o.log.With().Str("run_id", run).Logger()
		em = o.newEmitter(ctx, run, log, isJSON(p.run.raw))
		st, err = em.Open(ctx, o.lease.Revision())
	}
	if err != nil {
		return nil, err
	}
	mine := o.tried(seq)
	why, silent, err := o.closeAttempt(ctx, em, st, seq)
	if err != nil {
		return nil, err
	}
	a := &attempt{em: em, seq: seq, attempt: max(st.Attempt, mine.attempt) + 1, restart: st.Attempt > 0, log: log}
	em.SetAttempt(a.attempt)
	counted, err := o.counted(ctx, seq, a.attempt, silent)
	if err != nil {
		return nil, err
	}
	if counted >= o.cfg.MaxAttempts {
		// The dead letter and the sender's error name what ended the
		// last attempt: its error, or its worker's end.
		cause := fmt.Errorf("turn started %d times without finishing", counted)
		if last := cmp.Or(why, st.LastError); last != "" {
			cause = fmt.Errorf("%w; %s", cause, last)
		}
		for _, c := range append([]collected{p.run}, p.merged...) {
			if err := o.deadLetter(ctx, events.DeadPoison, c.raw, cause); err != nil {
				return nil, err
			}
		}
		a.poisoned = true
		return a, o.failTurn(ctx, em, p, "poison_message", cause.Error()+"; the message was dead-lettered", a.attempt)
	}
	return a, nil
}

// aheadOpen is the trigger's run opened ahead (see openAhead).
type aheadOpen struct {
	seq  uint64
	log  zerolog.Logger // the run's, its emitter's too
	em   *fenced.Emitter
	done chan struct{} // closed when st and err are set
	st   fenced.RunState
	err  error
}

// openAhead opens the trigger's run (claims its events: fenced.Emitter.Open)
// in the background while the owner's first drain reads the lane's cursor
// and first message: the message a new owner runs first is nearly always
// its trigger's, so its claim is then made by the time the turn opens (one
// round trip less before the turn starts). The lease is held, so the claim
// is this owner's to make, whichever message runs first: a run opened
// ahead and not run (the cursor is past it, or an earlier message runs
// first) is retired unused, and whoever opens it later claims it again over
// this marker, as over any earlier claim. A lane the sweep took has no
// trigger, and an owner that drains again (its lease taken anew) opens
// nothing ahead, nor does one whose trigger's message is at or before done
// (its guess at the cursor: the trigger of a yielded lane, say, which the
// worker ran already).
func (o *owner) openAhead(ctx context.Context, done uint64) {
	if o.lease.trigger == nil || o.lease.aheadTried || o.lease.triggerSeq <= done {
		return
	}
	o.lease.aheadTried = true
	seq, trigger := o.lease.triggerSeq, o.lease.trigger
	run := strconv.FormatUint(seq, 10)
	a := &aheadOpen{seq: seq, log: o.log.With().Str("run_id", run).Logger(), done: make(chan struct{})}
	a.em = o.newEmitter(ctx, run, a.log, events.IsJSON(trigger.Headers().Get(events.HeaderContentType), trigger.Data()))
	rev := o.lease.Revision()
	go func() {
		defer close(a.done)
		a.st, a.err = a.em.Open(ctx, rev)
	}()
	o.lease.ahead = a
}

// takeAhead returns the run opened ahead when it is seq's, once its open
// ended (nil: none, or another run's); a run opened ahead that is not seq's
// is retired. Either way the owner holds none after.
func (o *owner) takeAhead(seq uint64) *aheadOpen {
	a := o.lease.ahead
	if a == nil {
		return nil
	}
	o.lease.ahead = nil
	<-a.done
	if a.seq != seq {
		a.em.Retire()
		return nil
	}
	return a
}

// start stores the attempt's first event before the turn starts, so a
// message that kills its worker is counted and dead-lettered at last.
func (o *owner) start(ctx context.Context, a *attempt) error {
	data := events.EventData{Phase: events.PhaseStart, StartedAt: o.now().UnixMilli(), Worker: o.cfg.ID, InboundSeq: a.seq, Tenant: o.cfg.tenant(o.key)}
	if a.restart {
		data.Phase = events.PhaseRestart
	}
	if a.parent != nil {
		data.ParentSession, data.ParentRun = a.parent.Session, a.parent.Run
	}
	if err := a.em.Start(ctx, data, a.attempt); err != nil {
		if kvstore.Transient(err) {
			// The start event may be stored all the same: then the
			// attempt ended on a store error. Its number is spent either
			// way (the next attempt has the next one), so its note
			// excuses nothing else.
			why := attemptStoreError(a.attempt, err)
			t := o.tried(a.seq)
			t.attempt = a.attempt
			t.ended(a.attempt, why, true)
			o.noteUncounted(a.seq, a.attempt, why)
		}
		return err
	}
	o.tried(a.seq).attempt = a.attempt
	o.inFlight = &flight{seq: a.seq, attempt: a.attempt}
	if o.cfg.Index != nil && o.lane.cursor.Seq == 0 {
		// A session's first turn is listed while it runs, and stays
		// listed if its worker dies before the commit's entry; later
		// turns' commits move it (one write a turn).
		o.cfg.Index.Touch(Activity{Key: o.key, Run: a.em.RunID()})
	}
	return nil
}

// tried is what an owner knows of its own attempts at one message.
type tried struct {
	attempt int // the newest attempt this owner started (its start event stored)
	// end is an attempt of this owner's that ended, perhaps without its
	// aborted event stored (0: none): endWhy is that event's text, and
	// endStore says it ended on a transient store error. closeAttempt
	// puts it on record if the event is missing.
	end      int
	endWhy   string
	endStore bool
	// excused are the attempts this owner knows do not count (see
	// UncountedToken), and whether their note is stored.
	excused map[int]*excuse
}

// excuse is an attempt that does not count: why, and whether its note on
// the run is stored.
type excuse struct {
	why   string
	noted bool
}

// ended notes that attempt n ended: why is its aborted event's text.
func (t *tried) ended(n int, why string, store bool) {
	t.end, t.endWhy, t.endStore = n, why, store
}

// excuse notes that attempt n does not count (why), and returns its excuse.
func (t *tried) excuse(n int, why string) *excuse {
	if t.excused == nil {
		t.excused = map[int]*excuse{}
	}
	e := t.excused[n]
	if e == nil {
		e = &excuse{why: why}
		t.excused[n] = e
	}
	return e
}

// flight is an attempt in flight: the inbound sequence of its run and its
// number.
type flight struct {
	seq     uint64
	attempt int
}

// counted returns how many of the attempts at the message of inbound seq
// before attempt n count toward MaxAttempts: all but those that ended for
// no fault of the message (see UncountedToken). The run's notes are read
// only when what the owner knows itself puts the message at the limit.
// silent says the last attempt ended without a word (closeAttempt): its
// worker died, or it lost the lane and is about to note it; before the
// message is dead-lettered that worker gets noteGrace to do so.
func (o *owner) counted(ctx context.Context, seq uint64, n int, silent bool) (int, error) {
	mine := 0
	for m := range o.tried(seq).excused {
		if m < n {
			mine++
		}
	}
	if n-1-mine < o.cfg.MaxAttempts {
		return n - 1 - mine, nil
	}
	deadline := o.now().Add(o.noteGrace())
	for {
		excused, err := o.uncounted(ctx, seq, n)
		if err != nil {
			return 0, err
		}
		counted := n - 1 - len(excused)
		if counted < o.cfg.MaxAttempts || !silent || !o.now().Before(deadline) {
			if counted >= o.cfg.MaxAttempts {
				o.log.Warn().Str("run_id", strconv.FormatUint(seq, 10)).Int("attempts", n-1).Int("counted", counted).
					Ints("uncounted", slices.Sorted(maps.Keys(excused))).Msg("the message's attempts are spent: dead-lettering it as poison")
			}
			return counted, nil
		}
		select {
		case <-time.After(max(o.store.LeaseTTL()/8, 50*time.Millisecond)):
		case <-ctx.Done():
			return 0, ctx.Err()
		case <-o.shutdown:
			return 0, errShuttingDown
		}
	}
}

// tried returns what the owner knows of its attempts at inbound seq.
func (o *owner) tried(seq uint64) *tried {
	if o.failures == nil {
		o.failures = map[uint64]*tried{}
	}
	t := o.failures[seq]
	if t == nil {
		t = &tried{}
		o.failures[seq] = t
	}
	return t
}

// storeFailure is the error of an attempt that ended on a transient store
// error (kvstore.Transient): its turn's record could not be stored, or its
// handler failed after its step journal could not be read or written. The
// attempt does not count toward MaxAttempts.
type storeFailure struct{ err error }

func (e *storeFailure) Error() string { return e.err.Error() }

func (e *storeFailure) Unwrap() error { return e.err }

// endAttempt ends attempt a, which failed with err (store: on a transient
// store error, which does not count toward MaxAttempts: it is noted so),
// on record before this owner retries the message, so the next attempt
// continues after it. An aborted event that cannot be stored now is
// published by the next attempt (closeAttempt).
func (o *owner) endAttempt(ctx context.Context, a *attempt, err error, store bool) {
	o.inFlight = nil
	why := attemptFailed(a.attempt, o.cfg.MaxAttempts, err)
	if store {
		why = attemptStoreError(a.attempt, err)
		o.noteUncounted(a.seq, a.attempt, why)
	}
	o.tried(a.seq).ended(a.attempt, why, store)
	o.stats.Aborted.Add(1)
	if aerr := a.em.Abort(ctx, why); aerr != nil {
		a.log.Warn().Err(aerr).Msg("aborted event")
	}
}

// closeAttempt ends an attempt that started and never ended on record with
// an aborted event, so a viewer sees start … aborted, restart … rather than
// a restart out of nowhere: this owner knows how it ended, or its worker
// died or lost the lane mid-run (silent). seq is the run's inbound
// sequence. It returns the event's text ("" when it published none).
func (o *owner) closeAttempt(ctx context.Context, em *fenced.Emitter, st fenced.RunState, seq uint64) (why string, silent bool, err error) {
	if st.Attempt == 0 || st.Finished || st.LastPhase == events.PhaseAborted {
		return "", false, nil
	}
	mine := o.tried(seq)
	o.stats.Aborted.Add(1)
	why, silent = fmt.Sprintf("attempt %d did not finish: the worker running it stopped or lost the session's lane", st.Attempt), true
	if mine.end == st.Attempt {
		why, silent = mine.endWhy, false
		if mine.endStore {
			o.noteUncounted(seq, st.Attempt, why) // unless it is noted
		}
	}
	return why, silent, em.Aborted(ctx, st.Attempt, why)
}

// maxFailureText bounds the error of a failed attempt as its aborted event
// and the dead letter show it (in runes).
const maxFailureText = 500

// attemptFailed is the text of the aborted event that ends attempt n (of
// at most max) because the handler failed with err: the error on one line,
// bounded, and whether the message is tried again. The handler's error is
// the sender's to read: the fleet's handler masks its secrets.
func attemptFailed(n, max int, err error) string {
	msg := fmt.Sprintf("attempt %d failed: %s", n, failureText(err))
	if n < max {
		msg += "; it is retried"
	}
	return msg
}

// attemptStoreError is the text of the aborted event that ends attempt n
// on a transient store error err: the message is always tried again.
func attemptStoreError(n int, err error) string {
	return fmt.Sprintf("attempt %d ended on a store error (it does not count toward the attempt limit): %s; it is retried", n, failureText(err))
}

// failureText is err on one line, bounded by maxFailureText.
func failureText(err error) string {
	text := strings.Join(strings.Fields(err.Error()), " ")
	if r := []rune(text); len(r) > maxFailureText {
		text = string(r[:maxFailureText]) + "…"
	}
	return text
}
