package fleet

import (
	"context"
	"sync"

	"github.com/lanefleet/lanefleet/authprofile"
	"github.com/lanefleet/lanefleet/authstore"
	"github.com/lanefleet/lanefleet/provider"
	"github.com/lanefleet/lanefleet/provider/anthropic"
	"github.com/lanefleet/lanefleet/redact"
	"github.com/lanefleet/lanefleet/secretexec"
)

// fleetAuth is runner.Auth over the fleet's auth bucket and the member's
// credentials.
type fleetAuth struct {
	s     *authstore.Store
	creds *authprofile.Store
	env   func(string) string // where profiles' env: secret references look
	// exec holds the operator's exec secret providers' values (nil:
	// none runs).
	exec *secretexec.Values
	// seen masks what profiles' secret references resolve to (nil: none).
	seen *seenSecrets
	// oauth holds the Anthropic OAuth profiles' tokens (nil: none).
	oauth *anthropic.OAuth
}

// seenSecrets adds to the redactor each value a profile's secret
// reference resolves to that it has not seen for that profile: a secret
// rotated in after start (a new file, a new variable) is masked from its
// first use, and an unchanged one costs a map read per call.
type seenSecrets struct {
	red  *redact.Redactor
	last sync.Map // profile id -> string
}

// NoteSecret masks s, the secret profile's reference resolved to
// (runner.SecretNoter).
func (a fleetAuth) NoteSecret(profile string, s provider.Secret) {
	if a.seen == nil || a.seen.red == nil {
		return
	}
	v := s.Reveal()
	if old, ok := a.seen.last.Load(profile); ok && old.(string) == v {
		return
	}
	a.seen.red.Add(secretForms(v)...)
	a.seen.last.Store(profile, v)
}

// SecretSources are where profiles' secret references are read
// (runner.SecretSources), as LoadCredentials checked them at start: the
// fleet's environment, and the exec providers' values in memory.
func (a fleetAuth) SecretSources() authprofile.SecretSources {
	src := authprofile.SecretSources{Env: a.env}
	if a.exec != nil {
		src.Exec = a.exec.Secret
	}
	return src
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
