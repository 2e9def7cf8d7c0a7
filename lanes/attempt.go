package lanes

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/lanefleet/lanefleet/events"
	"github.com/lanefleet/lanefleet/lanes/internal/fenced"
)

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
