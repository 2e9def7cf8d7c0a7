package budgetstore

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/lanefleet/lanefleet/governance"
)

// Quotas live in the budgets bucket too, one key per tenant: quota.<name>
// holds its governance.QuotaState, the turns it may run at once across the
// fleet and the holds of the turns running, changed by compare-and-set.
const quotaPrefix = "quota."

// QuotaKey is the bucket key of a tenant's quota.
func QuotaKey(tenant string) (string, error) {
	if err := governance.ValidName(tenant); err != nil {
		return "", err
	}
	return quotaPrefix + tenant, nil
}

// GetQuota reads a tenant's quota; found is false when it has none.
func (b *Bucket) GetQuota(ctx context.Context, tenant string) (governance.QuotaState, bool, error) {
	key, err := QuotaKey(tenant)
	if err != nil {
		return governance.QuotaState{}, false, err
	}
	st, rev, err := b.readQuota(ctx, key)
	if err != nil {
		return governance.QuotaState{}, false, fmt.Errorf("budgetstore: get quota of %s: %w", tenant, err)
	}
	return st, rev != 0, nil
}

// SetQuota gives a tenant's quota new limits (0 turns = no quota), keeping
// the turns running, audited as who's ("quota"). It returns the quota
// before and after.
func (b *Bucket) SetQuota(ctx context.Context, tenant string, q governance.Quota, who string) (old, now governance.QuotaState, err error) {
	if err := q.Validate(); err != nil {
		return old, now, err
	}
	key, err := QuotaKey(tenant)
	if err != nil {
		return old, now, err
	}
	now, _, err = b.updateQuota(ctx, key, func(st *governance.QuotaState, t time.Time) error {
		old = *st
		st.Quota = q
		st.Roll(t)
		return nil
	})
	if err != nil {
		return old, now, fmt.Errorf("budgetstore: set quota of %s: %w", tenant, err)
	}
	sc := governance.Scope{Kind: governance.ScopeTenant, Name: tenant}
	err = b.Audit(ctx, AuditRecord{At: b.cfg.Now().UTC(), Who: who, Op: "quota", Scope: sc, OldQuota: &old.Quota, NewQuota: &now.Quota})
	return old, now, err
}

func (b *Bucket) readQuota(ctx context.Context, key string) (governance.QuotaState, uint64, error) {
	e, err := b.kv.Get(ctx, key)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return governance.QuotaState{}, 0, nil
	}
	if err != nil {
		return governance.QuotaState{}, 0, err
	}
	st, err := decodeQuota(e.Value())
	if err != nil {
		return governance.QuotaState{}, e.Revision(), b.unreadable(key, err)
	}
	return st, e.Revision(), nil
}

func decodeQuota(data []byte) (governance.QuotaState, error) {
	var st governance.QuotaState
	if len(data) > maxValue {
		return st, fmt.Errorf("budgetstore: value of %d bytes", len(data))
	}
	if err := json.Unmarshal(data, &st); err != nil {
		return governance.QuotaState{}, err
	}
	return st, st.Quota.Validate()
}

// errQuotaFull makes a take write nothing.
var errQuotaFull = errors.New("budgetstore: quota full")

// updateQuota is update for a quota's key: fn on a fresh read, written by
// compare-and-set, retried when another writer got there first.
func (b *Bucket) updateQuota(ctx context.Context, key string, fn func(*governance.QuotaState, time.Time) error) (governance.QuotaState, uint64, error) {
	read := func() (governance.QuotaState, uint64, error) { return b.readQuota(ctx, key) }
	cur, rev, err := read()
	if err != nil {
		return governance.QuotaState{}, 0, err
	}
	return casUpdate(ctx, b, key, cur, rev, true, read, fn)
}

// quotas is a Store's cache of the quotas and its turns' holds.
type quotas struct {
	mu    sync.Mutex
	state map[string]cachedQuota // by tenant
	// held are this worker's holds, by tenant and hold id, renewed by the
	// sweep.
	held map[string]map[string]bool
	// renewed is when the sweep last renewed the holds (the sweep's own).
	renewed time.Time
}

type cachedQuota struct {
	st  governance.QuotaState
	rev uint64
}

// observeQuota records a quota entry; false when key is no quota's.
func (s *Store) observeQuota(e jetstream.KeyValueEntry) (string, bool) {
	tenant, ok := strings.CutPrefix(e.Key(), quotaPrefix)
	if !ok || governance.ValidName(tenant) != nil {
		return "", false
	}
	var st governance.QuotaState
	if e.Operation() == jetstream.KeyValuePut {
		var err error
		if st, err = decodeQuota(e.Value()); err != nil {
			s.log.Error().Err(err).Str("key", e.Key()).Msg("budgetstore: unreadable quota: treating it as none")
		}
	}
	s.q.mu.Lock()
	if s.q.state == nil {
		s.q.state = map[string]cachedQuota{}
	}
	if old, had := s.q.state[tenant]; !had || old.rev < e.Revision() {
		s.q.state[tenant] = cachedQuota{st: st, rev: e.Revision()}
	}
	s.q.mu.Unlock()
	s.mu.Lock()
	close(s.changed)
	s.changed = make(chan struct{})
	s.mu.Unlock()
	return tenant, true
}

// QuotaFull reports whether tenant's quota has no room for another turn at
// now, as the cache has it.
func (s *Store) QuotaFull(tenant string, now time.Time) bool {
	if tenant == "" {
		return false
	}
	s.q.mu.Lock()
	defer s.q.mu.Unlock()
	c, ok := s.q.state[tenant]
	return ok && c.st.Full(now)
}

// Quota is tenant's quota as the cache has it.
func (s *Store) Quota(tenant string) governance.Quota {
	s.q.mu.Lock()
	defer s.q.mu.Unlock()
	return s.q.state[tenant].st.Quota
}

// QuotaTimeoutDefault is Config.QuotaTimeout's default.
const QuotaTimeoutDefault = 10 * time.Second

// QuotaUnavailableError is a turn that could not take its hold on its
// tenant's quota because the store failed (the bucket does not answer,
// or is gone). The turn is not run without its hold: the attempt fails,
// and counts toward the message's attempts, as any failed attempt.
type QuotaUnavailableError struct {
	Tenant string
	Err    error
}

func (e *QuotaUnavailableError) Error() string {
	return fmt.Sprintf("quota store unavailable: tenant %s's quota of turns at once could not be held (%v); the turn is not run without it", e.Tenant, e.Err)
}

func (e *QuotaUnavailableError) Unwrap() error { return e.Err }

// TakeTurn counts one turn of tenant against its quota before the turn
// runs, waiting while the quota is full (until ctx ends: its cause is
// returned). With no quota it returns a no-op release. A store that fails,
// or does not answer within Config.QuotaTimeout, is a
// *QuotaUnavailableError.
// release ends the hold; the sweep renews it meanwhile.
func (s *Store) TakeTurn(ctx context.Context, tenant string) (release func(), err error) {
	if tenant == "" || s.Quota(tenant).Turns == 0 {
		return func() {}, nil
	}
	key, _ := QuotaKey(tenant)
	id := s.cfg.Worker + ".t" + strconv.FormatUint(s.seq.Add(1), 36)
	for {
		s.mu.RLock()
		changed := s.changed
		s.mu.RUnlock()
		tctx, cancel := context.WithTimeout(ctx, s.cfg.QuotaTimeout)
		_, _, err := s.b.updateQuota(tctx, key, func(st *governance.QuotaState, now time.Time) error {
			if st.Quota.Turns == 0 {
				return errNoChange
			}
			if !st.Take(governance.TurnHold{ID: id, Worker: s.cfg.Worker, Expires: now.Add(s.cfg.ReservationTTL).UnixMilli()}, now) {
				return errQuotaFull
			}
			return nil
		})
		cancel()
		if err == nil {
			break
		}
		if ctx.Err() != nil {
			return nil, context.Cause(ctx)
		}
		if !errors.Is(err, errQuotaFull) {
			return nil, &QuotaUnavailableError{Tenant: tenant, Err: err}
		}
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
	s.q.mu.Lock()
	if s.q.held == nil {
		s.q.held = map[string]map[string]bool{}
	}
	if s.q.held[tenant] == nil {
		s.q.held[tenant] = map[string]bool{}
	}
	s.q.held[tenant][id] = true
	s.q.mu.Unlock()
	var once sync.Once
	return func() {
		once.Do(func() {
			s.q.mu.Lock()
			delete(s.q.held[tenant], id)
			if len(s.q.held[tenant]) == 0 {
				delete(s.q.held, tenant)
			}
			s.q.mu.Unlock()
			ctx, cancel := context.WithTimeout(context.Background(), closeTimeout)
			defer cancel()
			_, _, err := s.b.updateQuota(ctx, key, func(st *governance.QuotaState, now time.Time) error {
				st.Roll(now)
				st.Drop(id)
				return nil
			})
			if err != nil {
				s.log.Warn().Err(err).Str("tenant", tenant).Msg("budgetstore: release a turn's quota hold (it expires)")
			}
		})
	}, nil
}

// renewTurns renews this worker's quota holds.
func (s *Store) renewTurns(ctx context.Context) {
	s.q.mu.Lock()
	held := make(map[string][]string, len(s.q.held))
	for tenant, ids := range s.q.held {
		for id := range ids {
			held[tenant] = append(held[tenant], id)
		}
	}
	s.q.mu.Unlock()
	for tenant, ids := range held {
		key, _ := QuotaKey(tenant)
		_, _, err := s.b.updateQuota(ctx, key, func(st *governance.QuotaState, now time.Time) error {
			st.Roll(now)
			for _, id := range ids {
				st.Renew(id, now.Add(s.cfg.ReservationTTL).UnixMilli())
			}
			return nil
		})
		if err != nil {
			s.log.Warn().Err(err).Str("tenant", tenant).Msg("budgetstore: renew turns' quota holds")
		}
	}
}
