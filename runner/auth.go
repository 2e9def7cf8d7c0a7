package runner

import (
	"context"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/lanefleet/lanefleet/authprofile"
	"github.com/lanefleet/lanefleet/fallback"
	"github.com/lanefleet/lanefleet/provider"
)

// Auth is the auth-profile state the run loop reads and changes. The fleet's
// implementation keeps usage states in a KV bucket (package authstore).
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

// errNoKey is returned for a profile whose secret is not held here.
var errNoKey = errors.New("no usable secret")

// SecretSources is an Auth whose profiles' secret references read
// sources of its own: the fleet's configured environment instead of the
// process's for "env:NAME", and the values of the operator's exec secret
// providers for "exec:PROVIDER:ID".
type SecretSources interface {
	SecretSources() authprofile.SecretSources
}

// SecretNoter is an Auth told of each secret a profile's keyRef or
// tokenRef resolved to, so that one rotated in after start is masked in
// what the worker produces from its first use.
type SecretNoter interface {
	NoteSecret(profile string, s provider.Secret)
}

// OAuthTokens is an Auth that holds OAuth profiles' access tokens as
// fleet state (the fleet's Anthropic OAuth profiles, whose refresh token
// rotates at each refresh): it refreshes them, and is told when the API
// refuses one.
type OAuthTokens interface {
	// AccessToken returns p's access token; ok is false when p's tokens
	// are not held here (its own access token is used as given). The
	// error is a *provider.Error when p cannot be used now: auth_permanent
	// when its refresh token was refused.
	AccessToken(ctx context.Context, p authprofile.Profile) (tok provider.Secret, ok bool, err error)
	// Rejected tells that the API refused tok, p's access token, as
	// unauthorized before its expiry; it reports whether the next
	// AccessToken gets a new one.
	Rejected(p authprofile.Profile, tok provider.Secret) bool
}

// profileKey returns the secret a profile authenticates with: an OAuth
// access token the Auth holds (OAuthTokens), else its key, token or
// access token, or the value its keyRef or tokenRef names ("env:NAME",
// "file:/path", "exec:PROVIDER:ID"), read now from a's sources (a
// SecretSources', else the process's environment and no exec provider)
// or the file, so a rotated secret is used from the next call.
// A secret that is not the configuration's own is noted (SecretNoter).
func profileKey(ctx context.Context, a Auth, p authprofile.Profile) (provider.Secret, error) {
	if o, ok := a.(OAuthTokens); ok && p.Type == authprofile.TypeOAuth {
		k, held, err := o.AccessToken(ctx, p)
		if err != nil {
			return "", fmt.Errorf("%w: %w", errNoKey, err)
		}
		if held {
			if n, ok := a.(SecretNoter); ok {
				n.NoteSecret(p.ID, k)
			}
			return k, nil
		}
	}
	src := authprofile.SecretSources{Env: os.Getenv}
	if e, ok := a.(SecretSources); ok {
		src = e.SecretSources()
	}
	k, err := p.Secret(src)
	if err != nil {
		return "", fmt.Errorf("%w: %w", errNoKey, err)
	}
	if n, ok := a.(SecretNoter); ok && (p.KeyRef != "" || p.TokenRef != "") {
		n.NoteSecret(p.ID, k)
	}
	return k, nil
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

// lastResortOn reports whether a's rules use a cooling profile as a last
// resort (authprofile.Fleet.LastResort).
func lastResortOn(a Auth) bool {
	if a == nil {
		return false
	}
	_, c := a.Snapshot()
	return c.Fleet.LastResort
}
