package secretexec

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/lanefleet/lanefleet/provider"
)

// Values holds what the providers returned for the ids the profiles
// reference, read at Load and again at each provider's Refresh by Run.
// Secret reads memory only. Safe for concurrent use.
type Values struct {
	env  func(string) string
	used []*used // by provider name
}

// used is one provider with the ids asked of it and its latest values.
type used struct {
	p    Provider
	ids  []string
	vals atomic.Pointer[map[string]provider.Secret]
}

// New prepares the providers of want (provider name → ids the profiles
// reference) among those declared: each is checked (Check) and nothing
// runs yet. A provider want names that is not declared is an error. env
// is the worker's environment (the providers' PassEnv).
func New(declared map[string]Provider, want map[string][]string, env func(string) string) (*Values, error) {
	v := &Values{env: env}
	for _, name := range slices.Sorted(maps.Keys(want)) {
		p, ok := declared[name]
		if !ok {
			return nil, fmt.Errorf("%w %q is not declared", ErrProvider, name)
		}
		p, err := p.Check()
		if err != nil {
			return nil, err
		}
		ids := slices.Clone(want[name])
		slices.Sort(ids)
		v.used = append(v.used, &used{p: p, ids: slices.Compact(ids)})
	}
	return v, nil
}

// Load runs every provider once, in name order, and stops at the first
// failure (a worker does not start without its secrets).
func (v *Values) Load(ctx context.Context) error {
	for _, u := range v.used {
		if err := v.read(ctx, u, nil); err != nil {
			return err
		}
	}
	return nil
}

// read runs u's provider and keeps its values, after telling seen of
// them (nil: no one); a failure keeps the old.
func (v *Values) read(ctx context.Context, u *used, seen func([]provider.Secret)) error {
	vals, err := fetch(ctx, u.p, v.env, u.ids)
	if err != nil {
		return err
	}
	if seen != nil {
		seen(slices.Collect(maps.Values(vals)))
	}
	u.vals.Store(&vals)
	return nil
}

// Secret returns what provider prov last returned for id
// (authprofile.SecretSources.Exec). It never runs a command.
func (v *Values) Secret(prov, id string) (provider.Secret, error) {
	for _, u := range v.used {
		if u.p.Name != prov {
			continue
		}
		if m := u.vals.Load(); m != nil {
			if s, ok := (*m)[id]; ok {
				return s, nil
			}
		}
		return "", fmt.Errorf("%w %q: no value for id %q (not loaded)", ErrProvider, prov, id)
	}
	return "", fmt.Errorf("%w %q is not declared", ErrProvider, prov)
}

// Run reads each provider again every its Refresh until ctx is done. A
// read's new values are given to seen before any Secret returns them (to
// mask them); a failed read keeps the last values and is given to report.
// Neither may block; what report gets names the provider, never a value.
func (v *Values) Run(ctx context.Context, seen func([]provider.Secret), report func(error)) {
	var wg sync.WaitGroup
	for _, u := range v.used {
		wg.Go(func() {
			t := time.NewTicker(u.p.Refresh)
			defer t.Stop()
			for {
				select {
				case <-ctx.Done():
					return
				case <-t.C:
				}
				if err := v.read(ctx, u, seen); err != nil && ctx.Err() == nil && report != nil {
					report(err)
				}
			}
		})
	}
	wg.Wait()
}
