package runner

import (
	"context"
	"sync"
	"time"

	"github.com/lanefleet/lanefleet/authprofile"
)

// MemoryAuth is an in-process Auth for the tests (the fleet keeps the
// states in KV, package authstore).
type MemoryAuth struct {
	mu    sync.Mutex
	store authprofile.Store
	cfg   authprofile.Config
	now   func() time.Time
}

// NewMemoryAuth returns an Auth over store (which it copies) and cfg.
func NewMemoryAuth(store authprofile.Store, cfg authprofile.Config, now func() time.Time) *MemoryAuth {
	if now == nil {
		now = time.Now
	}
	s := store
	s.Usage = make(map[string]authprofile.State, len(store.Usage))
	for id, st := range store.Usage {
		s.Usage[id] = st.Clone()
	}
	s.LastGood = make(map[string]string, len(store.LastGood))
	for p, id := range store.LastGood {
		s.LastGood[p] = id
	}
	return &MemoryAuth{store: s, cfg: cfg, now: now}
}

// Snapshot implements Auth.
func (a *MemoryAuth) Snapshot() (authprofile.Store, authprofile.Config) {
	a.mu.Lock()
	defer a.mu.Unlock()
	s := a.store
	s.Usage = make(map[string]authprofile.State, len(a.store.Usage))
	for id, st := range a.store.Usage {
		s.Usage[id] = st
	}
	return s, a.cfg
}

// Apply implements Auth.
func (a *MemoryAuth) Apply(_ context.Context, id string, ev authprofile.Event) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.store.Usage[id] = a.cfg.Apply(a.store.Usage[id], ev, a.now())
	return nil
}

// MarkGood implements Auth.
func (a *MemoryAuth) MarkGood(_ context.Context, prov, id string) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.store.LastGood[prov] = id
	return nil
}

// ClaimProbe implements ProbeClaimer: in one process every claim wins.
func (a *MemoryAuth) ClaimProbe(ctx context.Context, id, prov, model string) (bool, error) {
	return true, a.Apply(ctx, id, authprofile.Event{Kind: authprofile.EventProbe, Provider: prov, Model: model})
}

// State returns a profile's usage state.
func (a *MemoryAuth) State(id string) authprofile.State {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.store.Usage[id].Clone()
}
