package runner

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/lanefleet/lanefleet/authprofile"
	"github.com/lanefleet/lanefleet/fallback"
	"github.com/lanefleet/lanefleet/provider"
)

// Auth is the auth-profile state the run loop reads and changes. The fleet's
// implementation keeps usage states in a KV bucket (package authstore);
// MemoryAuth keeps them in memory.
type Auth interface {
	// Snapshot returns the credentials with their current usage states and
	// the rules that order and update them. The Store is the caller's to
	// read; it must not be modified.
	Snapshot() (authprofile.Store, authprofile.Config)
	// Apply records ev for a profile; concurrent Applies never lose an
	// update.
	Apply(ctx context.Context, profileID string, ev authprofile.Event) error
	// MarkGood records profileID as the provider's last good profile.
	MarkGood(ctx context.Context, prov, profileID string) error
}

// MemoryAuth is an in-process Auth, for one worker or tests.
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

// errNoKey is returned for a profile whose secret is not held here.
var errNoKey = errors.New("no usable secret")

// profileKey returns the secret a profile authenticates with.
func profileKey(p authprofile.Profile) (provider.Secret, error) {
	switch {
	case p.Key != "":
		return p.Key, nil
	case p.Token != "":
		return p.Token, nil
	case p.Access != "":
		return p.Access, nil
	case p.KeyRef != "" || p.TokenRef != "":
		return "", fmt.Errorf("auth profile %q: %w (secret references are not resolved by this worker)", p.ID, errNoKey)
	}
	return "", fmt.Errorf("auth profile %q: %w", p.ID, errNoKey)
}

// availability adapts Auth to the model-fallback planner.
func availability(a Auth, now func() time.Time) fallback.AvailabilityFunc {
	if a == nil {
		return nil
	}
	return func(prov, model string) fallback.Availability {
		s, c := a.Snapshot()
		st := authprofile.Status(s, c, prov, model, now())
		return fallback.Availability{Profiles: st.Profiles, AllCooling: st.AllCooling, Reason: st.Reason, SoonestExpiry: st.SoonestExpiry}
	}
}
