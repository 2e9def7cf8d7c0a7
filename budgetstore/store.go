package budgetstore

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"hash/fnv"
	"strconv"
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

// Config configures a Store.
type Config struct {
	BucketConfig
	// Worker is this worker's id, carried by its reservations (their ids
	// start with it); default a random one.
	Worker string
	// ReservationTTL is how long a reservation counts without renewal: a
	// Hold renews its reservations every third of it while its call runs,
	// so a dead worker's stop counting within it. The fleet passes its
	// lane lease TTL. Default ReservationTTLDefault.
	ReservationTTL time.Duration
	// OnChange, when set, is called from the watcher (in order, never
	// concurrently) with every scope whose budget changed.
	OnChange func(governance.Scope)
	Logger   zerolog.Logger
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
	seq     atomic.Uint64 // reservation ids
	holds   sync.WaitGroup
	closing chan struct{} // closed by Close: renewals stop
	stop    sync.Once
	// locks are per-key stripes: this worker's writers of one budget
	// queue instead of racing each other, so compare-and-set races are
	// between workers only.
	locks [64]chan struct{}
}

type cached struct {
	st  governance.State
	rev uint64
}

// Open opens the bucket, loads every budget and watches the bucket. Close
// stops the watcher.
func Open(ctx context.Context, js jetstream.JetStream, cfg Config) (*Store, error) {
	if cfg.ReservationTTL <= 0 {
		cfg.ReservationTTL = ReservationTTLDefault
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
		closing: make(chan struct{})}
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
	return s, nil
}

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
	sc, ok := scopeOf(e.Key())
	if !ok {
		s.log.Warn().Str("key", e.Key()).Msg("budgetstore: skipping an unknown key")
		return sc, false
	}
	var st governance.State
	if e.Operation() == jetstream.KeyValuePut {
		var err error
		if st, err = decode(e.Value()); err != nil {
			s.log.Warn().Err(err).Str("budget", sc.String()).Msg("budgetstore: unreadable budget; treating it as none")
		}
	}
	s.put(sc, st, e.Revision())
	return sc, true
}

// put records a state unless the cache holds a newer one.
func (s *Store) put(sc governance.Scope, st governance.State, rev uint64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	old, had := s.states[sc]
	if had && old.rev >= rev {
		return
	}
	if had && old.st.Limits.Limited() {
		s.limited.Add(-1)
	}
	if st.Limits.Limited() {
		s.limited.Add(1)
	}
	s.states[sc] = cached{st: st, rev: rev}
	close(s.changed)
	s.changed = make(chan struct{})
}

// Close stops the watcher and the holds' renewals and waits for them. A
// hold not settled by then expires in the bucket as a dead worker's would.
func (s *Store) Close() error {
	s.stop.Do(func() {
		close(s.closing)
		_ = s.watcher.Stop()
	})
	<-s.done
	s.cancel()
	s.holds.Wait()
	return nil
}

// budgets are the limited budgets among scopes, as the cache has them.
func (s *Store) budgets(scopes []governance.Scope) []governance.Scope {
	if s.limited.Load() == 0 {
		return nil
	}
	s.mu.RLock()
	defer s.mu.RUnlock()
	var out []governance.Scope
	for _, sc := range scopes {
		if c, ok := s.states[sc]; ok && c.st.Limits.Limited() {
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

// Paused names the first of scopes whose budget is paused at now, as the
// cache has it; ok is false when none is.
func (s *Store) Paused(scopes []governance.Scope, now time.Time) (governance.Scope, bool) {
	if s.limited.Load() == 0 {
		return governance.Scope{}, false
	}
	s.mu.RLock()
	defer s.mu.RUnlock()
	for _, sc := range scopes {
		if c, ok := s.states[sc]; ok && c.st.Limits.Limited() && c.st.Paused(now) {
			return sc, true
		}
	}
	return governance.Scope{}, false
}

// ReachedError is a call refused because a budget would be passed: the
// session pauses.
type ReachedError struct {
	Scope    governance.Scope
	Limits   governance.Limits
	Exceeded *governance.ExceededError
}

func (e *ReachedError) Error() string {
	return fmt.Sprintf("budget reached: %s's budget (%s): %v", e.Scope, e.Limits, e.Exceeded)
}

func (e *ReachedError) Unwrap() error { return e.Exceeded }

// Hold is the reservations of one call. Settle (or Release) ends it.
type Hold struct {
	s     *Store
	id    string
	held  []governance.Scope
	stop  chan struct{}
	ended sync.Once
}

// Reserve reserves a call's worst case against every limited budget among
// scopes. With none it returns a nil Hold and costs nothing. A call that
// would fit but for other calls' reservations waits until the budget
// changes (they settle, or expire) and tries again, until ctx ends. When a
// budget has no room it marks that budget reached (pausing its sessions),
// releases what it reserved elsewhere and returns a *ReachedError. Other
// errors are the bucket's, wrapped, or ctx's cause.
func (s *Store) Reserve(ctx context.Context, scopes []governance.Scope, need governance.Amount) (*Hold, error) {
	budgets := s.budgets(scopes)
	if len(budgets) == 0 {
		return nil, nil
	}
	for {
		s.mu.RLock()
		changed := s.changed
		s.mu.RUnlock()
		h, err := s.reserve(ctx, budgets, need)
		r, ok := errors.AsType[*ReachedError](err)
		if !ok || r.Exceeded == nil || !r.Exceeded.Held() {
			return h, err
		}
		// Wait for a change, or for the reservations to expire.
		t := time.NewTimer(s.cfg.ReservationTTL)
		select {
		case <-changed:
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return nil, context.Cause(ctx)
		}
		t.Stop()
	}
}

// reserve tries once.
func (s *Store) reserve(ctx context.Context, budgets []governance.Scope, need governance.Amount) (*Hold, error) {
	h := &Hold{s: s, id: s.cfg.Worker + "." + strconv.FormatUint(s.seq.Add(1), 36), stop: make(chan struct{})}
	for _, sc := range budgets {
		err := s.apply(ctx, sc, func(st *governance.State, now time.Time) error {
			if !st.Limits.Limited() {
				return errNoChange // removed since the cache saw it
			}
			r := governance.Reservation{ID: h.id, Worker: s.cfg.Worker, Amount: need, Expires: now.Add(s.cfg.ReservationTTL).UnixMilli()}
			if err := st.Reserve(r, now); err != nil {
				ex, _ := errors.AsType[*governance.ExceededError](err)
				return &ReachedError{Scope: sc, Limits: st.Limits, Exceeded: ex}
			}
			return nil
		})
		if err != nil {
			h.settle(context.WithoutCancel(ctx), governance.Amount{})
			return nil, err
		}
		h.held = append(h.held, sc)
	}
	s.holds.Add(1)
	go h.renew()
	return h, nil
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
	st, rev, err := s.b.update(ctx, key, c.st, c.rev, func(st *governance.State, now time.Time) error {
		reached = nil
		err := fn(st, now)
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

// renew keeps the hold's reservations alive while its call runs.
func (h *Hold) renew() {
	defer h.s.holds.Done()
	every := h.s.cfg.ReservationTTL / 3
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-h.stop:
			return
		case <-h.s.closing:
			return
		case <-t.C:
		}
		ctx, cancel := context.WithTimeout(context.Background(), every)
		for _, sc := range h.held {
			err := h.s.apply(ctx, sc, func(st *governance.State, now time.Time) error {
				if !st.Renew(h.id, now.Add(h.s.cfg.ReservationTTL).UnixMilli()) {
					return errNoChange
				}
				return nil
			})
			if err != nil {
				h.s.log.Warn().Err(err).Str("budget", sc.String()).Msg("budgetstore: renew a reservation")
			}
		}
		cancel()
	}
}

// Settle replaces the hold's reservations with the call's real use and
// reports the budgets whose soft limit it reached (dimension per scope).
// A nil Hold settles nothing. Errors are the bucket's, joined: a use not
// recorded is lost (its reservation expires).
func (h *Hold) Settle(ctx context.Context, real governance.Amount) (soft map[governance.Scope][]string, err error) {
	if h == nil {
		return nil, nil
	}
	return h.settle(ctx, real)
}

func (h *Hold) settle(ctx context.Context, real governance.Amount) (map[governance.Scope][]string, error) {
	h.ended.Do(func() { close(h.stop) })
	var errs []error
	var soft map[governance.Scope][]string
	for _, sc := range h.held {
		var crossed []string
		err := h.s.apply(ctx, sc, func(st *governance.State, now time.Time) error {
			crossed = st.Settle(h.id, real, now).Soft
			return nil
		})
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if len(crossed) > 0 {
			if soft == nil {
				soft = map[governance.Scope][]string{}
			}
			soft[sc] = crossed
		}
	}
	h.held = nil
	return soft, errors.Join(errs...)
}
