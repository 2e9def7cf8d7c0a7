package fleet

import (
	"context"
	"strings"
	"time"

	"github.com/lanefleet/lanefleet/authprofile"
	"github.com/lanefleet/lanefleet/provider"
	"github.com/lanefleet/lanefleet/provider/anthropic"
)

// Variables that move Anthropic's OAuth token endpoint and client (for a
// proxy, another deployment, a test).
const (
	envOAuthTokenURL = "ANTHROPIC_OAUTH_TOKEN_URL"
	envOAuthClientID = "ANTHROPIC_OAUTH_CLIENT_ID"
)

// openOAuth makes the fleet's Anthropic OAuth tokens when a profile has
// a refresh token to seed them with; nil otherwise.
func openOAuth(cfg Config, creds *authprofile.Store, store anthropic.OAuthStore) (*anthropic.OAuth, error) {
	if creds == nil || store == nil {
		return nil, nil
	}
	need := false
	for _, p := range creds.Profiles {
		need = need || fleetOAuth(p)
	}
	if !need {
		return nil, nil
	}
	env := cfg.Env
	if env == nil {
		env = func(string) string { return "" }
	}
	return anthropic.NewOAuth(anthropic.OAuthConfig{Store: store, Owner: cfg.WorkerID,
		TokenURL: strings.TrimSpace(env(envOAuthTokenURL)), ClientID: strings.TrimSpace(env(envOAuthClientID))})
}

// fleetOAuth reports whether p's tokens are the fleet's: an Anthropic
// OAuth profile with a refresh token (given, or by reference).
func fleetOAuth(p authprofile.Profile) bool {
	return p.Type == authprofile.TypeOAuth && authprofile.NormalizeProvider(p.Provider) == "anthropic" &&
		(p.Refresh != "" || p.RefreshRef != "")
}

// oauthProfile is p as anthropic.OAuth takes it, seeded with refresh.
func oauthProfile(p authprofile.Profile, refresh provider.Secret) anthropic.OAuthProfile {
	op := anthropic.OAuthProfile{ID: p.ID, ClientID: p.ClientID, Refresh: refresh, Access: p.Access, From: `auth profiles file ("refresh")`}
	if p.Expires > 0 {
		op.Expires = time.UnixMilli(p.Expires)
	}
	if p.RefreshRef != "" {
		op.From = "refreshRef " + p.RefreshRef
	}
	return op
}

// AccessToken returns the fleet's access token of an Anthropic OAuth
// profile with a refresh token (runner.OAuthTokens); ok is false for any
// other profile.
func (a fleetAuth) AccessToken(ctx context.Context, p authprofile.Profile) (provider.Secret, bool, error) {
	if a.oauth == nil || !fleetOAuth(p) {
		return "", false, nil
	}
	refresh, err := p.RefreshSecret(a.SecretSources())
	if err != nil {
		return "", true, err
	}
	tok, err := a.oauth.Token(ctx, oauthProfile(p, refresh))
	return tok, true, err
}

// Rejected renews an access token the API refused (runner.OAuthTokens).
func (a fleetAuth) Rejected(p authprofile.Profile, tok provider.Secret) bool {
	if a.oauth == nil || !fleetOAuth(p) {
		return false
	}
	refresh, err := p.RefreshSecret(a.SecretSources())
	if err != nil {
		return false
	}
	a.oauth.Rejected(oauthProfile(p, refresh), tok)
	return true
}
