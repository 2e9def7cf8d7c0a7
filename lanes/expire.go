package lanes

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"time"

	"github.com/lanefleet/lanefleet/kvstore"
	"github.com/lanefleet/lanefleet/retention"
)

// ExpireStats counts what one retention pass did.
type ExpireStats struct {
	Scanned int // stored messages of the lanes bucket read
	Expired int // sessions forgotten
	Keys    int // transcript records and settings removed
	Skipped int // idle sessions left as they were: held, or a message waiting
	// Failed counts the lanes whose forget failed: each is tried again,
	// by the next pass or, once skipped, after a wait.
	Failed int
	// Retrying is how many lanes wait on the retry list after the pass.
	Retrying int
	// Lag is how far behind the cutoff the pass stopped (retention.Lag):
	// 0 when it reached the cutoff.
	Lag time.Duration
	// Step is the most lanes one step of the pass looked at at once
	// (retention.Step).
	Step int
}

// retainer is the worker's side of the retention pass.
type retainer struct {
	// pass is held by a pass: one at a time on a worker.
	pass sync.Mutex
	// later remembers lanes a pass kept because they wrote after its
	// cutoff, with that write's time: until the cutoff passes it, their
	// older records need no look (at most maxLater lanes).
	later map[string]time.Time
	// fails counts the failed forgets in a row of lanes the pass stays at
	// (retention.Skip); at most maxFails.
	fails map[string]int
	// forgotten counts the sessions forgotten; lag is the last pass's
	// ExpireStats.Lag (ns).
	forgotten, lag atomic.Int64
	// steps counts the steps that looked at lanes, lanes those lanes and
	// busy the time the steps took (ns), rests not included.
	steps, lanes, busy atomic.Int64
	// behindSince is when the pass last warned that it was behind (zero
	// while it keeps up).
	behindSince time.Time
}

// maxLater bounds retainer.later.
const maxLater = 100_000

// Retention reports how many sessions this worker's retention passes have
// forgotten, and how far behind the session TTL its last pass stopped (0:
// it reached the cutoff, or this worker does not run the pass).
func (w *Worker) Retention() (forgotten int64, lag time.Duration) {
	return w.ret.forgotten.Load(), time.Duration(w.ret.lag.Load())
}

// RetentionSteps reports the steps of this worker's retention passes that
// looked at lanes, how many lanes they looked at and the time they took
// (their rests not included): under load, where a forget's time goes.
func (w *Worker) RetentionSteps() (steps, lanes int64, busy time.Duration) {
	return w.ret.steps.Load(), w.ret.lanes.Load(), time.Duration(w.ret.busy.Load())
}

// retain runs the retention pass (Config.SessionTTL) every
// retention.PassEvery while this worker holds the pass's lease, so that
// one worker of the fleet forgets a given session; it returns when ctx
// ends, giving the lease up.
func (w *Worker) retain(ctx context.Context) {
	p := retention.Policy{SessionTTL: w.cfg.SessionTTL, Rate: w.cfg.RetentionRate}
	t := time.NewTicker(retention.PassEvery)
	defer t.Stop()
	var (
		claim   *kvstore.Lease
		renewed time.Time
		tried   time.Time // when a worker without the lease last tried to take it
	)
	defer func() {
		if claim != nil {
			rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
			defer cancel()
			if err := claim.Release(rctx); err != nil {
				w.log.Warn().Err(err).Msg("retention: give the pass up")
			}
		}
	}()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if claim == nil && time.Since(tried) < w.lanes.LeaseTTL()/3 {
			// Another worker held it a moment ago, and renews it every
			// third of its TTL: trying every second would cost each
			// other worker two requests a second for nothing.
			continue
		}
		tried = time.Now()
		claim, renewed = w.claimRetention(ctx, claim, renewed)
		if claim != nil {
			// The lease is renewed between passes only: a pass longer
			// than it (a loaded box) would let it lapse mid-pass and a
			// second worker start one. It stops after a third of the
			// lease (it goes on from there next time).
			pctx, cancel := context.WithTimeout(ctx, w.lanes.LeaseTTL()/3)
			w.expire(pctx, p)
			cancel()
		}
	}
}

// claimRetention returns the pass's lease, renewed when a third of its TTL
// has passed since renewed, or taken when nobody holds it; nil while
// another worker holds it.
func (w *Worker) claimRetention(ctx context.Context, claim *kvstore.Lease, renewed time.Time) (*kvstore.Lease, time.Time) {
	if claim != nil {
		if time.Since(renewed) < w.lanes.LeaseTTL()/3 {
			return claim, renewed
		}
		err := claim.Renew(ctx)
		if err == nil {
			return claim, time.Now()
		}
		if !errors.Is(err, kvstore.ErrLeaseLost) {
			w.log.Warn().Err(err).Msg("retention: renew the pass's lease")
			return claim, renewed // tried again next pass; it lasts a lease TTL
		}
	}
	claim, err := w.lanes.ClaimRetention(ctx, kvstore.LeaseInfo{Worker: w.cfg.ID, Acquired: w.now().UnixMilli()})
	if err != nil {
		if !errors.Is(err, kvstore.ErrHeld) && ctx.Err() == nil {
			w.log.Warn().Err(err).Msg("retention: take the pass's lease")
		}
		w.ret.lag.Store(0)
		return nil, time.Time{}
	}
	return claim, time.Now()
}

// expire runs one retention pass (until its budget or the cutoff) and
// notes how it went: a warning while it stays more than retention.LagWarn
// behind the cutoff (sessions expire faster than the rate forgets them),
// at most one a minute.
func (w *Worker) expire(ctx context.Context, p retention.Policy) {
	st, err := w.ExpireIdle(ctx, p.Cutoff(w.now()), p.Budget())
	if err != nil && ctx.Err() == nil {
		w.log.Warn().Err(err).Msg("retention pass")
	}
	w.ret.lag.Store(int64(st.Lag))
	if st.Expired > 0 || st.Skipped > 0 || st.Failed > 0 {
		w.log.Debug().Int("expired", st.Expired).Int("keys", st.Keys).Int("skipped", st.Skipped).Int("failed", st.Failed).Int("retrying", st.Retrying).
			Int("step", st.Step).Dur("lag_ms", st.Lag).Msg("retention: idle sessions forgotten")
	}
	now := time.Now()
	switch {
	case st.Lag > retention.LagWarn && now.Sub(w.ret.behindSince) >= time.Minute:
		w.ret.behindSince = now
		w.log.Warn().Dur("lag_ms", st.Lag).Int("rate", p.Budget()).Msg("retention: behind: sessions expire faster than the pass forgets them (--retention-rate sessions a second); it goes on from where it stopped")
	case st.Lag == 0 && !w.ret.behindSince.IsZero():
		w.ret.behindSince = time.Time{}
		w.log.Info().Msg("retention: caught up with the session TTL")
	}
}

// ExpireIdle runs one retention pass (see package retention): it walks the
// lanes bucket from the stored scan position up to cutoff and forgets every
// session whose last write is older than cutoff, at most limit of them,
// then stores the position it reached. It looks at several lanes at once
// (a step: more the further behind the cutoff the lanes it reaches are,
// retention.Step) and paces itself (retention.Rest): it rests as
// long as each step took, and spreads the sessions it forgets over
// retention.PassEvery. A lane found to have written after the cutoff is
// not looked at again until a cutoff passes that write. A session is
// forgotten under its lease, so never while someone runs it, and never
// while a message waits for it.
//
// An error leaves the position at the lane it happened on, so the next
// pass tries that one again; after retention.SkipAfter failures in a row
// the pass moves past the lane and puts it on the retry list (stored in
// the bucket, so another worker taking the pass over keeps it), logging
// it once. Each pass first tries the listed lanes whose wait
// (retention.RetryAfter) is over, as many as a step. When ctx ends the
// pass stops before its next step (a lane it began is finished within
// forgetTimeout). Passes of several workers at once are safe (each
// session is forgotten under its lease: the worker's loop runs one, under
// the pass's lease) and the position only moves forward.
func (w *Worker) ExpireIdle(ctx context.Context, cutoff time.Time, limit int) (ExpireStats, error) {
	w.ret.pass.Lock()
	defer w.ret.pass.Unlock()
	if w.ret.later == nil {
		w.ret.later = map[string]time.Time{}
		w.ret.fails = map[string]int{}
	}
	var st ExpireStats
	pos, rev, err := w.lanes.RetentionPos(ctx)
	if err != nil && !errors.Is(err, kvstore.ErrCorrupt) {
		return st, err
	}
	retries, err := w.loadRetries(ctx)
	if err != nil {
		return st, err
	}
	p := &expirePass{w: w, cutoff: cutoff, limit: limit, retries: retries, st: &st, seen: map[string]bool{}, seq: pos, scan: expireScanFirst}
	p.rest = w.retryStep(ctx, retries, cutoff, limit, &st, p.seen)
	for st.Expired < limit && !p.reached && p.err == nil {
		step, stepSeq := p.gather(ctx)
		if len(step) == 0 {
			if p.err == nil && ctx.Err() == nil {
				p.seq = stepSeq
			}
			break
		}
		if !p.pause(ctx) {
			break // the pass's time is up: the next reads this step again
		}
		p.forget(ctx, step, stepSeq)
	}
	err = p.finish(ctx, pos, rev) // sets st's lag and retry count
	return st, err
}

// expirePass is one retention pass's walk of the lanes bucket (ExpireIdle):
// where it is, what it read ahead, and how it went.
type expirePass struct {
	w       *Worker
	cutoff  time.Time
	limit   int
	retries *retryList
	st      *ExpireStats

	seq     uint64           // the position the pass stores: past every lane it is done with
	scan    int              // how many messages the next read of the bucket asks for
	ahead   []kvstore.Stored // read from the bucket, not looked at yet
	seen    map[string]bool  // lanes looked at this pass
	next    time.Time        // the time of the first message the pass left
	reached bool             // the pass reached the cutoff or the end
	rest    time.Duration    // how long to rest before the next request
	err     error
}

// pause rests as long as the pass's pace says (retention.Rest), reporting
// false when ctx ends first.
func (p *expirePass) pause(ctx context.Context) bool {
	if p.rest <= 0 {
		return ctx.Err() == nil
	}
	return restExpire(ctx, p.rest)
}

// gather reads the next lanes to look at, each once a pass, at most as
// many as retention.Step says for how far behind the pass is and the
// budget left, and the position past the messages it read (stepSeq).
func (p *expirePass) gather(ctx context.Context) (step []kvstore.Stored, stepSeq uint64) {
	stepSeq = p.seq
	size := retention.StepLanes
	if !p.next.IsZero() {
		size = retention.Step(p.cutoff.Sub(p.next))
	}
	for len(step) < min(size, p.limit-p.st.Expired) {
		if len(p.ahead) == 0 {
			if len(step) > 0 || !p.readAhead(ctx, stepSeq) {
				break // look at these first; or nothing more to read
			}
		}
		m := p.ahead[0]
		if !m.Time.Before(p.cutoff) {
			p.reached = true // every lane written before the cutoff
			break
		}
		p.next = m.Time
		p.ahead = p.ahead[1:]
		p.st.Scanned++
		stepSeq = m.Seq + 1
		later := p.w.ret.later[m.Token]
		if !m.Data || p.seen[m.Token] || !later.IsZero() && !later.Before(p.cutoff) {
			continue
		}
		p.seen[m.Token] = true
		step = append(step, m)
	}
	return step, stepSeq
}

// readAhead reads the bucket's next messages from seq into ahead,
// reporting false when there are none (the end: reached), on an error
// (err), or when ctx ends during the pause before it.
func (p *expirePass) readAhead(ctx context.Context, seq uint64) bool {
	if !p.pause(ctx) {
		return false
	}
	began := time.Now()
	ahead, err := p.w.lanes.ScanBatch(ctx, seq, p.scan)
	p.rest = retention.Rest(time.Since(began), 0, p.limit)
	// A pass that keeps up finds the cutoff in its first messages: it
	// reads a few, and more while it finds none.
	p.scan = min(2*p.scan, expireScan)
	switch {
	case err != nil:
		p.err = err
		return false
	case len(ahead) == 0:
		p.reached = true // the end of the bucket
		return false
	}
	p.ahead = ahead
	return true
}

// forget forgets the step's idle lanes at once and moves the position past
// the step (stepSeq) unless a lane failed: then it stays at the first that
// did, which the next pass retries, until the lane is skipped.
func (p *expirePass) forget(ctx context.Context, step []kvstore.Stored, stepSeq uint64) {
	w := p.w
	p.st.Step = max(p.st.Step, len(step))
	began := time.Now()
	tokens := make([]string, len(step))
	for i, m := range step {
		tokens[i] = m.Token
	}
	outs, errs := w.forgetStep(ctx, tokens, p.cutoff)
	n := 0
	moved := stepSeq
	for i, m := range step {
		forgot, hold := w.settle(p.st, p.retries, m, outs[i], errs[i], p.cutoff)
		if forgot {
			n++
		}
		if hold != nil {
			moved = min(moved, m.Seq)
			p.err = errors.Join(p.err, hold)
		}
	}
	if len(w.ret.fails) > maxFails {
		clear(w.ret.fails) // lanes another worker's passes moved past
	}
	p.seq = moved
	took := time.Since(began)
	w.ret.steps.Add(1)
	w.ret.lanes.Add(int64(len(step)))
	w.ret.busy.Add(int64(took))
	p.rest = retention.Rest(took, n, p.limit)
}

// finish works out the pass's lag, trims the lanes remembered for later,
// stores the retry list and the position the pass reached (pos and rev:
// where it started), and returns the pass's error.
func (p *expirePass) finish(ctx context.Context, pos, rev uint64) error {
	w, st := p.w, p.st
	next := p.next
	if p.reached {
		next = time.Time{}
	}
	if len(p.ahead) > 0 && !p.reached {
		next = p.ahead[0].Time
	}
	st.Lag = retention.Lag(p.cutoff, next, p.reached)
	// Lanes remembered with a write the cutoff has passed are looked at
	// when the scan reaches them; those it never reaches again (forgotten
	// meanwhile by an operator) go here.
	if len(w.ret.later) >= maxLater {
		for tok, at := range w.ret.later {
			if at.Before(p.cutoff) {
				delete(w.ret.later, tok)
			}
		}
	}
	wctx := context.WithoutCancel(ctx)
	seq, err := p.seq, p.err
	if serr := p.retries.store(wctx, w.lanes); serr != nil {
		// The position does not pass a lane skipped but not listed.
		seq = min(seq, p.retries.firstSkipped(seq))
		err = errors.Join(err, serr)
	}
	st.Retrying = p.retries.len()
	if seq != pos {
		if perr := w.lanes.SetRetentionPos(wctx, seq, rev); perr != nil && !errors.Is(perr, kvstore.ErrPosMoved) {
			err = errors.Join(err, perr)
		}
	}
	return err
}

// retryStep tries the lanes of the retry list whose wait is over, as many
// as a step (each marked seen, so that the pass does not look at it
// again), and returns how long the pass rests after it.
func (w *Worker) retryStep(ctx context.Context, retries *retryList, cutoff time.Time, limit int, st *ExpireStats, seen map[string]bool) time.Duration {
	due := retries.due(w.now(), min(retention.StepLanes, limit))
	if len(due) == 0 {
		return 0
	}
	began := time.Now()
	outs, errs := w.forgetStep(ctx, due, cutoff)
	n := 0
	for i, tok := range due {
		seen[tok] = true
		if errs[i] != nil {
			st.Failed++
			retries.failed(tok, w.now())
			w.log.Debug().Err(errs[i]).Str("lane", tok).Msg("retention: a session skipped after failing failed again")
			continue
		}
		if w.count(st, tok, outs[i]) {
			n++
			w.log.Info().Str("lane", tok).Msg("retention: a session skipped after failing is forgotten")
		}
		retries.done(tok, outs[i], cutoff, w.now())
	}
	return retention.Rest(time.Since(began), n, limit)
}

// settle notes what forgetIdle did with a lane the scan reached (m), and
// reports whether it forgot the session, or the error that keeps the
// pass's position at the lane (nil when the lane failed but is skipped:
// it failed retention.SkipAfter times in a row, or is on the retry list).
func (w *Worker) settle(st *ExpireStats, retries *retryList, m kvstore.Stored, out forgotten, err error, cutoff time.Time) (forgot bool, hold error) {
	if err == nil {
		delete(w.ret.fails, m.Token)
		forgot = w.count(st, m.Token, out)
		retries.done(m.Token, out, cutoff, w.now())
		return forgot, nil
	}
	st.Failed++
	if retries.failed(m.Token, w.now()) {
		return false, nil // skipped before: it waits for its retry
	}
	w.ret.fails[m.Token]++
	tries := w.ret.fails[m.Token]
	if !retention.Skip(tries, retries.len()) {
		return false, err
	}
	delete(w.ret.fails, m.Token)
	retries.skip(m.Token, m.Seq, tries, w.now())
	w.log.Warn().Err(err).Str("lane", m.Token).Int("tries", tries).Dur("retry_in", retention.RetryAfter(tries)).
		Msg("retention: forgetting this session keeps failing; the pass moves past it and tries it again later")
	return false, nil
}

// forgetStep runs forgetIdle on the lanes at once.
func (w *Worker) forgetStep(ctx context.Context, tokens []string, cutoff time.Time) ([]forgotten, []error) {
	outs := make([]forgotten, len(tokens))
	errs := make([]error, len(tokens))
	var wg sync.WaitGroup
	for i, tok := range tokens {
		wg.Go(func() {
			// A lane begun is finished: ctx's end stops the pass between
			// steps, never mid-purge.
			lctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), forgetTimeout)
			defer cancel()
			outs[i], errs[i] = w.forgetIdle(lctx, tok, cutoff)
		})
	}
	wg.Wait()
	return outs, errs
}

// count adds what forgetIdle did with a lane to st and the worker's
// counts, and reports whether it forgot the session.
func (w *Worker) count(st *ExpireStats, token string, out forgotten) bool {
	delete(w.ret.later, token)
	switch {
	case out.forgot:
		st.Expired++
		st.Keys += out.keys
		w.ret.forgotten.Add(1)
		return true
	case out.busy:
		st.Skipped++
	case !out.later.IsZero() && len(w.ret.later) < maxLater:
		w.ret.later[token] = out.later
	}
	return false
}

// maxFails bounds retainer.fails.
const maxFails = 64

// expireScan is how many of the bucket's messages the pass reads in one
// request, expireScanFirst in its first; forgetTimeout bounds the pass's
// work on one lane.
const (
	expireScanFirst = 64
	expireScan      = 1024
	forgetTimeout   = 30 * time.Second
)

// restExpire waits d between two steps of a retention pass. It reports
// false when ctx (the pass's time) ends first.
func restExpire(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}
