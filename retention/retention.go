// Package retention is the fleet's policy for what a session and a run leave
// behind on the server, and when it goes away. Every per-session and per-run
// thing is bounded by one of these:
//
//	what                                    bounded by
//	agent.in.<lane> (AGENT_IN)              deleted when processed; a lane's subject
//	                                        leaves the index with its last message
//	lanes: <lane>.lease                     per-key TTL (--lease-ttl); released with
//	                                        a purge marker living MarkerTTL
//	lanes: <lane>.tx.<seq>, <lane>.settings the session TTL (--session-ttl), below
//	agent.ev.<lane>.<run>, its .fence,      the event stream's MaxAge (--event-max-age)
//	.uncounted (AGENT_EV)                   and byte limit
//	runs: <lane>                            removed when its run ends; a dead run's
//	                                        entry by the bucket's MaxAge
//	dispatch deliveries                     one un-acked trigger per owned lane
//	subscriptions                           an owner's on its lane while it drains;
//	                                        a follower's on a run while it follows
//
// A session untouched for the session TTL (no message processed, no
// settings stored, nobody holding its lane) is forgotten: its transcript
// records and stored settings are removed, so it starts over as a new
// session if it ever speaks again. We chose removal over archiving: an
// archive would need its own reader in every History path and a restore
// before a returning session's next turn, while a session's transcript can
// already be exported (Client.Export, pi session JSONL) by whoever must keep
// it. 0 keeps sessions forever.
//
// The worker's retention pass walks the lanes bucket's stream in sequence
// order, which is time order, up to the cutoff (now minus the TTL). At a
// transcript record or settings value written before the cutoff, it asks
// Decide about that record's lane: a lane whose newest write of any kind is
// also older than the cutoff is idle and is forgotten (under its lease,
// after checking that no message waits for it); any other lane wrote later,
// and the pass will reach that later write in its turn. So one forward pass
// finds every idle session, remembers only its position, and reads each
// stored message once.
//
// The pass's cost is bounded and spread (Budget, Rest, Step): one worker
// of the fleet runs it at a time (it holds the pass's lease), a pass a
// second (PassEvery), each forgetting at most Rate sessions, evenly over
// the second, and resting Share-1 times as long as each of its steps
// took, so it works at most half the time. A step looks at StepLanes
// lanes at once while the pass keeps up, and at more the further behind
// the cutoff the lanes it reaches are: a step's time is mostly its lanes'
// round trips, so a bigger one takes about as long. (One at a time and a
// quarter of the time fell behind on a loaded box: 0.5 sessions forgotten
// a second where 2 expired; four at a time whatever the lag fell behind in
// the soak on a loaded box, its lag 49 s → 102 s over five rounds.)
// (Forgetting sessions as fast as it could, four at a time and resting as
// long as each batch took, cut a busy lane's writes to 0.29× while it ran:
// BenchmarkExpireIdle.) A pass
// that ends on its budget or its time before the cutoff is behind (Lag):
// the next goes on from there, and the worker warns while it stays behind
// by more than LagWarn.
//
// A lane whose forget fails is tried again by the next pass, which starts
// from that lane (a passing fault costs a second); after SkipAfter
// failures in a row the pass moves past it and puts it on a retry list of
// at most MaxRetries lanes, tried again after RetryAfter, so that one lane
// the pass cannot forget does not hold back every session after it.
package retention

import (
	"errors"
	"fmt"
	"time"
)

// MinSessionTTL is the shortest session TTL: longer than any lease or
// marker lives, so a lane's own bookkeeping never looks like activity that
// outlives it.
const MinSessionTTL = time.Second

// ErrBadPolicy is returned by Validate.
var ErrBadPolicy = errors.New("retention: bad policy")

// Policy is the fleet's retention policy. Every worker of a fleet should
// use the same.
type Policy struct {
	// SessionTTL is how long an untouched session's transcript and
	// settings are kept; 0 = forever.
	SessionTTL time.Duration
	// Rate is the most sessions the fleet's pass forgets a second;
	// 0 = DefaultRate.
	Rate int
}

// DefaultRate is Policy.Rate's default: sessions forgotten a second at
// most, fleet-wide.
const DefaultRate = 100

// PassEvery is how often the pass runs; Share the inverse of the share of
// the time it works at most; LagWarn how far behind the cutoff it may fall
// before the worker warns.
const (
	PassEvery = time.Second
	Share     = 2
	LagWarn   = time.Minute
)

// Validate reports a TTL that is negative or shorter than MinSessionTTL,
// and a negative rate.
func (p Policy) Validate() error {
	if p.SessionTTL < 0 || (p.SessionTTL > 0 && p.SessionTTL < MinSessionTTL) {
		return fmt.Errorf("%w: session TTL %v (0 keeps sessions, else at least %v)", ErrBadPolicy, p.SessionTTL, MinSessionTTL)
	}
	if p.Rate < 0 {
		return fmt.Errorf("%w: retention rate %d (sessions a second: 0 for the default %d, else positive)", ErrBadPolicy, p.Rate, DefaultRate)
	}
	return nil
}

// Budget is the most sessions one pass forgets (one PassEvery's worth of
// Rate).
func (p Policy) Budget() int {
	r := p.Rate
	if r == 0 {
		r = DefaultRate
	}
	return max(1, r*int(PassEvery/time.Second))
}

// Rest is how long a pass with the given budget rests after a step (a read
// of the bucket, or lanes looked at) that took took and forgot forgot
// sessions: Share-1 times as long, so that it works at most 1/Share of the
// time; and at least the rest of forgot's share of PassEvery, so that its
// sessions are spread over the pass.
func Rest(took time.Duration, forgot, budget int) time.Duration {
	return max(took*(Share-1), time.Duration(forgot)*PassEvery/time.Duration(max(budget, 1))-took)
}

// A step looks at StepLanes lanes at once while the pass is within
// StepBehind of the cutoff, and twice as many for each StepBehind more it
// is behind, up to MaxStepLanes.
const (
	StepLanes    = 4
	MaxStepLanes = 32
	StepBehind   = 5 * time.Second
)

// Step is how many lanes a step of the pass looks at at once when the
// last message it reached was stored behind before the cutoff. A pass that
// keeps up looks at few at a time; one that falls behind (sessions expire
// faster than steps of StepLanes forget them, resting as long as each
// step took) looks at more in a step of about the same time, since most of
// a lane's time is its requests' round trips, and catches up.
func Step(behind time.Duration) int {
	if behind <= 0 {
		return StepLanes
	}
	return min(MaxStepLanes, StepLanes<<min(behind/StepBehind, 8))
}

// Lag is how far a pass that stopped before the cutoff is behind: from
// the time of the first message it left to the cutoff; 0 when it reached
// the cutoff (reached) or left nothing older.
func Lag(cutoff, next time.Time, reached bool) time.Duration {
	if reached || next.IsZero() || !next.Before(cutoff) {
		return 0
	}
	return cutoff.Sub(next)
}

// SkipAfter is how many forgets of one lane in a row fail before the pass
// moves past it; MaxRetries how many lanes the retry list holds (a pass
// that would skip one more stays at it, as before SkipAfter).
const (
	SkipAfter  = 3
	MaxRetries = 256
)

// Skip reports whether the pass moves past a lane whose forget failed for
// the tries-th time in a row, with waiting lanes on the retry list
// already: from the SkipAfter-th failure on, while the list has room.
func Skip(tries, waiting int) bool {
	return tries >= SkipAfter && waiting < MaxRetries
}

// RetryAfter is how long a lane on the retry list waits before the pass
// tries it again, after tries failures in all: a minute after it was
// skipped, doubling each failed retry up to an hour.
func RetryAfter(tries int) time.Duration {
	return min(time.Minute<<min(max(tries-SkipAfter, 0), 6), time.Hour)
}

// Enabled reports whether sessions expire at all.
func (p Policy) Enabled() bool { return p.SessionTTL > 0 }

// Cutoff is the time before which a session's last write makes it idle.
func (p Policy) Cutoff(now time.Time) time.Time { return now.Add(-p.SessionTTL) }

// Verdict is what the retention pass does with a lane.
type Verdict int

// Verdicts.
const (
	// Keep: the lane was written after the cutoff, or is busy; the pass
	// moves on (it reaches the lane's later write in its turn).
	Keep Verdict = iota
	// Forget: remove the lane's transcript and settings.
	Forget
)

// Lane is what the pass knows about a lane when it reaches one of its
// records written before the cutoff, read while it holds the lane's lease
// (a lane someone else holds is kept without asking).
type Lane struct {
	LastWrite time.Time // its newest transcript record or settings; zero: none (nothing to forget)
	Pending   bool      // a message waits for it in AGENT_IN
}

// Decide returns what to do with a lane, given the cutoff.
func Decide(l Lane, cutoff time.Time) Verdict {
	if l.Pending || l.LastWrite.IsZero() || !l.LastWrite.Before(cutoff) {
		return Keep
	}
	return Forget
}
