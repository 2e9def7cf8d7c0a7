package fleet

import (
	"context"

	"github.com/lanefleet/lanefleet/authprofile"
	"github.com/lanefleet/lanefleet/authstore"
)

// fleetAuth is runner.Auth over the fleet's auth bucket and the member's
// credentials.
type fleetAuth struct {
	s     *authstore.Store
	creds *authprofile.Store
	env   func(string) string // where profiles' env: secret references look
}

// SecretEnv reads the fleet's environment for env: secret references
// (runner.SecretEnv), as LoadCredentials checked them at start.
func (a fleetAuth) SecretEnv(name string) string {
	if a.env == nil {
		return ""
	}
	return a.env(name)
}

func (a fleetAuth) Snapshot() (authprofile.Store, authprofile.Config) {
	return a.s.Snapshot(a.creds), a.s.Config().Auth
}

// Auth writes are bounded: a store in failover costs a run a cooldown
// record, never the run.
func (a fleetAuth) Apply(ctx context.Context, id string, ev authprofile.Event) error {
	ctx, cancel := context.WithTimeout(ctx, stateTimeout)
	defer cancel()
	_, err := a.s.Apply(ctx, id, ev)
	return err
}

func (a fleetAuth) MarkGood(ctx context.Context, prov, id string) error {
	ctx, cancel := context.WithTimeout(ctx, stateTimeout)
	defer cancel()
	return a.s.MarkGood(ctx, prov, id)
}

func (a fleetAuth) ClaimProbe(ctx context.Context, id, prov, model string) (bool, error) {
	ctx, cancel := context.WithTimeout(ctx, stateTimeout)
	defer cancel()
	return a.s.ClaimProbe(ctx, id, prov, model)
}
