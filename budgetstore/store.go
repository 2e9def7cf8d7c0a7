package budgetstore

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"hash/fnv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"

	"github.com/lanefleet/lanefleet/governance"
)

// ReservationTTLDefault is how long a reservation lives without renewal
// when Config.ReservationTTL is zero.
const ReservationTTLDefault = 30 * time.Second

// LeaseIdleDefault is Config.LeaseIdle's default.
const LeaseIdleDefault = time.Second

// Config configures a Store.
type Config struct {
	BucketConfig
	// Worker is this worker's id, carried by its reservations (their ids
	// start with it); default a random one.
	Worker string
	// ReservationTTL is how long a worker's lease on a budget counts
	// without renewal: the store renews its leases every third of it, so
	// a dead worker's stop counting within it. The fleet passes its lane
	// lease TTL. Default ReservationTTLDefault.
	ReservationTTL time.Duration
	// LeaseIdle is how long a lease stays with no call admitted against
	// it before it is given back; default LeaseIdleDefault.
	LeaseIdle time.Duration
	// QuotaTimeout bounds one try to take a turn's hold on its tenant's
	// quota (TakeTurn): a store that does not answer within it fails the
	// turn rather than hold it until the run times out. Default
	// QuotaTimeoutDefault.
	QuotaTimeout time.Duration
	// OnChange, when set, is called from the watcher (in order, never
	// concurrently) with every scope whose budget changed.
	OnChange func(governance.Scope)
	// After is the timer of a call that waits for room (Reserve); default
	// time.After. Tests that set BucketConfig.Now pass their clock's.
	After  func(time.Duration) <-chan time.Time
	Logger zerolog.Logger
}

// Store is a worker's view of the budgets: the bucket watched into memory,
// so a call whose session and tenant have no budget costs no KV round trip,
// and whether a session is paused is a map lookup.
type Store struct {
	b   *Bucket
	cfg Config
	log zerolog.Logger

	mu     sync.RWMutex
	states map[governance.Scope]cached
	// changed is closed (and replaced) at every change the cache records:
	// a call that waits for reservations in flight waits on it.
	changed chan struct{}
	// limited counts the scopes in states with a limit: zero makes every
	// lookup a single atomic load.
	limited atomic.Int64

	watcher jetstream.KeyWatcher
	cancel  context.CancelFunc
	done    chan struct{}
	seq     atomic.Uint64 // lease ids
	stop    sync.Once
	closing chan struct{} // closed by Close: the sweep stops
	swept   chan struct{} // closed when the sweep has stopped

	// leases are this worker's leases, by budget; lmu guards the map (a
	// lease's fields are its own mutex's).
	lmu    sync.Mutex
	leases map[governance.Scope]*lease
	// nudge carries leases to give back their surplus to the sweep.
	nudge chan *lease
	// q is the quotas (quota.go).
	q quotas
	// locks are per-key stripes: this worker's writers of one budget
	// queue instead of racing each other, so compare-and-set races are
	// between workers only.
	locks [64]chan struct{}
}

type cached struct {
	st  governance.State
	rev uint64
	// bad: the value does not decode. Its sessions' calls are refused and
	// its sessions paused (fail closed) until an operator sets it again.
	bad *UnreadableError
}

// limited reports whether c limits calls (an unreadable budget does: it
// refuses them).
func (c cached) limited() bool { return c.bad != nil || c.st.Limits.Limited() }

// Open opens the bucket, loads every budget and watches the bucket. Close
// stops the watcher.
func Open(ctx context.Context, js jetstream.JetStream, cfg Config) (*Store, error) {
	if cfg.ReservationTTL <= 0 {
		cfg.ReservationTTL = ReservationTTLDefault
	}
	if cfg.LeaseIdle <= 0 {
		cfg.LeaseIdle = LeaseIdleDefault
	}
	if cfg.QuotaTimeout <= 0 {
		cfg.QuotaTimeout = QuotaTimeoutDefault
	}
	if cfg.After == nil {
		cfg.After = time.After
	}
	if cfg.Worker == "" {
		// Reservation ids must differ between workers.
		var b [6]byte
		_, _ = rand.Read(b[:])
		cfg.Worker = "w-" + hex.EncodeToString(b[:])
	}
	b, err := OpenBucket(ctx, js, cfg.BucketConfig)
	if err != nil {
		return nil, err
	}
	cfg.BucketConfig = b.cfg
	s := &Store{b: b, cfg: cfg, log: cfg.Logger, states: map[governance.Scope]cached{}, done: make(chan struct{}), changed: make(chan struct{}),
		closing: make(chan struct{}), swept: make(chan struct{}), leases: map[governance.Scope]*lease{}, nudge: make(chan *lease, 64)}
	for i := range s.locks {
		s.locks[i] = make(chan struct{}, 1)
	}
	wctx, cancel := context.WithCancel(context.Background())
	w, err := b.kv.WatchAll(wctx)
	if err != nil {
		cancel()
		return nil, fmt.Errorf("budgetstore: watch bucket %s: %w", b.cfg.Bucket, err)
	}
	s.watcher, s.cancel = w, cancel
	for loaded := false; !loaded; {
		select {
		case e, ok := <-w.Updates():
			if !ok {
				cancel()
				return nil, fmt.Errorf("budgetstore: load bucket %s: watcher closed", b.cfg.Bucket)
			}
			if e == nil {
				loaded = true
				continue
			}
			s.observe(e)
		case <-ctx.Done():
			_ = w.Stop()
			cancel()
			return nil, fmt.Errorf("budgetstore: load bucket %s: %w", b.cfg.Bucket, context.Cause(ctx))
		}
	}
	go s.watch()
	go s.sweep()
	return s, nil
}

// after is the store's timer (Config.After).
func (s *Store) after(d time.Duration) <-chan time.Time { return s.cfg.After(d) }

// Bucket is the store's bucket (for operators' changes).
func (s *Store) Bucket() *Bucket { return s.b }

func (s *Store) watch() {
	defer close(s.done)
	for e := range s.watcher.Updates() {
		if e == nil {
			continue
		}
		if sc, ok := s.observe(e); ok && s.cfg.OnChange != nil {
			s.cfg.OnChange(sc)
		}
	}
}

// observe records one bucket entry.
func (s *Store) observe(e jetstream.KeyValueEntry) (governance.Scope, bool) {
	if tenant, ok := s.observeQuota(e); ok {
		return governance.Scope{Kind: governance.ScopeTenant, Name: tenant}, true
	}
	sc, ok := scopeOf(e.Key())
	if !ok {
		s.log.Warn().Str("key", e.Key()).Msg("budgetstore: skipping an unknown key")
		return sc, false
	}
	var st governance.State
	var bad *UnreadableError
	if e.Operation() == jetstream.KeyValuePut {
		var err error
		if st, err = decode(e.Value()); err != nil {
			bad = s.b.unreadable(e.Key(), err)
			s.log.Error().Err(bad).Msg("budgetstore: unreadable budget: its sessions' calls are refused until it is set again")
		}
	}
	s.putBad(sc, st, e.Revision(), bad)
	s.observeLease(sc, st)
	return sc, true
}

// put records a state unless the cache holds a newer one.
func (s *Store) put(sc governance.Scope, st governance.State, rev uint64) { s.putBad(sc, st, rev, nil) }

// putBad is put, of a value that may be unreadable (bad).
func (s *Store) putBad(sc governance.Scope, st governance.State, rev uint64, bad *UnreadableError) {
	s.mu.Lock()
	defer s.mu.Unlock()
	old, had := s.states[sc]
	if had && old.rev >= rev {
		return
	}
	// One change to the count: Any and budgets read it without the lock,
	// and a count that dipped to zero between two changes would let a
	// call through with no admission.
	c := cached{st: st, rev: rev, bad: bad}
	switch was := had && old.limited(); {
	case was && !c.limited():
		s.limited.Add(-1)
	case !was && c.limited():
		s.limited.Add(1)
	}
	s.states[sc] = c
	close(s.changed)
	s.changed = make(chan struct{})
}

// Close stops the watcher and the leases' sweep and gives every lease
// back, reporting what its calls used (the worst case of a call still in
// flight stays reserved until it expires, as a dead worker's would).
func (s *Store) Close() error {
	s.stop.Do(func() {
		close(s.closing)
		_ = s.watcher.Stop()
	})
	<-s.done
	<-s.swept
	s.cancel()
	ctx, cancel := context.WithTimeout(context.Background(), closeTimeout)
	defer cancel()
	s.lmu.Lock()
	ls := make([]*lease, 0, len(s.leases))
	for _, l := range s.leases {
		ls = append(ls, l)
	}
	s.lmu.Unlock()
	var errs []error
	for _, l := range ls {
		if err := l.giveBack(ctx); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// closeTimeout bounds giving the leases back at Close.
const closeTimeout = 5 * time.Second

// budgets are the limited budgets among scopes, as the cache has them.
func (s *Store) budgets(scopes []governance.Scope) []governance.Scope {
	if s.limited.Load() == 0 {
		return nil
	}
	s.mu.RLock()
	defer s.mu.RUnlock()
	var out []governance.Scope
	for _, sc := range scopes {
		if c, ok := s.states[sc]; ok && c.limited() {
			out = append(out, sc)
		}
	}
	return out
}

// Limited reports whether a scope has a budget (as the cache has it).
func (s *Store) Limited(sc governance.Scope) bool { return len(s.budgets([]governance.Scope{sc})) > 0 }

// Limits reports whether any of scopes has a budget (as the cache has it).
func (s *Store) Limits(scopes []governance.Scope) bool { return len(s.budgets(scopes)) > 0 }

// Any reports whether any scope has a budget: false makes every call's
// admission a single atomic load.
func (s *Store) Any() bool { return s.limited.Load() > 0 }

// Cached is a scope's budget as the cache has it: found is false when it
// has none; err is its *UnreadableError when it does not decode.
func (s *Store) Cached(sc governance.Scope) (st governance.State, found bool, err error) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	c, ok := s.states[sc]
	if c.bad != nil {
		return governance.State{}, true, c.bad
	}
	return c.st, ok && c.st.Limits.Limited(), nil
}

// Paused names the first of scopes whose budget is paused at now, as the
// cache has it; ok is false when none is.
func (s *Store) Paused(scopes []governance.Scope, now time.Time) (governance.Scope, bool) {
	if s.limited.Load() == 0 {
		return governance.Scope{}, false
	}
	s.mu.RLock()
	defer s.mu.RUnlock()
	for _, sc := range scopes {
		if c, ok := s.states[sc]; ok && (c.bad != nil || c.st.Limits.Limited() && c.st.Paused(now)) {
			return sc, true
		}
	}
	return governance.Scope{}, false
}

// apply updates a scope's budget starting from the cache and records what
// it wrote. A *ReachedError from fn is written too (the refusal is the
// pause every worker must see) and then returned.
func (s *Store) apply(ctx context.Context, sc governance.Scope, fn func(*governance.State, time.Time) error) error {
	key, err := Key(sc)
	if err != nil {
		return err
	}
	unlock, err := s.lock(ctx, key)
	if err != nil {
		return err
	}
	defer unlock()
	s.mu.RLock()
	c := s.states[sc]
	s.mu.RUnlock()
	var reached *ReachedError
	if c.bad != nil {
		return c.bad
	}
	st, rev, err := s.b.update(ctx, key, c.st, c.rev, false, func(st *governance.State, now time.Time) error {
		reached = nil
		err := fn(st, now)
		if u, ok := errors.AsType[*unwritten](err); ok {
			reached = u.r
			reached.unwritten = true
			return errNoChange
		}
		if r, ok := errors.AsType[*ReachedError](err); ok {
			reached = r
			return nil // write the refusal
		}
		return err
	})
	if err != nil {
		return fmt.Errorf("budgetstore: %s: %w", sc, err)
	}
	if rev != 0 {
		s.put(sc, st, rev)
	}
	if reached != nil {
		return reached
	}
	return nil
}

// lock takes key's stripe, giving up when ctx ends.
func (s *Store) lock(ctx context.Context, key string) (func(), error) {
	h := fnv.New32a()
	_, _ = h.Write([]byte(key))
	ch := s.locks[h.Sum32()%uint32(len(s.locks))]
	select {
	case ch <- struct{}{}:
		return func() { <-ch }, nil
	case <-ctx.Done():
		return nil, context.Cause(ctx)
	}
}
