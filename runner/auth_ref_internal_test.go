package runner

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/lanefleet/lanefleet/authprofile"
	"github.com/lanefleet/lanefleet/provider"
)

// TestProfileKeyReadsRefs: a profile's secret held in a file is read at
// each use (a rotated file is the next call's key); one that cannot be
// read is the profile's errNoKey, which moves the run to the next profile.
func TestProfileKeyReadsRefs(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "key")
	if err := os.WriteFile(path, []byte("sk-ant-oat01-first\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	p := authprofile.Profile{ID: "anthropic:sub", Type: authprofile.TypeToken, Provider: "anthropic", TokenRef: "file:" + path}
	if k, err := profileKey(t.Context(), nil, p); err != nil || k.Reveal() != "sk-ant-oat01-first" {
		t.Fatalf("key: %v", err)
	}
	if err := os.WriteFile(path, []byte("sk-ant-oat01-second"), 0o600); err != nil {
		t.Fatal(err)
	}
	if k, err := profileKey(t.Context(), nil, p); err != nil || k.Reveal() != "sk-ant-oat01-second" {
		t.Fatalf("rotated key: %v", err)
	}
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	if _, err := profileKey(t.Context(), nil, p); !errors.Is(err, errNoKey) || !errors.Is(err, authprofile.ErrSecretRef) {
		t.Errorf("missing file: %v", err)
	}
	// An Auth with an environment of its own is where env: references look.
	p = authprofile.Profile{ID: "openai:team", Type: authprofile.TypeAPIKey, Provider: "openai", KeyRef: "env:LANEFLEET_TEST_TEAM_KEY"}
	if k, err := profileKey(t.Context(), envAuth{"LANEFLEET_TEST_TEAM_KEY": "sk-team"}, p); err != nil || k.Reveal() != "sk-team" {
		t.Errorf("env reference: %v", err)
	}
	// An Auth with exec secret providers reads exec references from them.
	x := &execAuth{}
	p = authprofile.Profile{ID: "openai:vault", Type: authprofile.TypeAPIKey, Provider: "openai", KeyRef: "exec:vault:openai/team"}
	if k, err := profileKey(t.Context(), x, p); err != nil || k.Reveal() != "sk-vault:openai/team" || x.noted != "openai:vault=sk-vault:openai/team" {
		t.Errorf("exec reference: %v, noted %q", err, x.noted)
	}
	if _, err := profileKey(t.Context(), nil, p); !errors.Is(err, errNoKey) || !errors.Is(err, authprofile.ErrExecOff) {
		t.Errorf("exec reference without providers: %v", err)
	}
	// An Auth that masks secrets is told of each one a reference read.
	p = authprofile.Profile{ID: "openai:team", Type: authprofile.TypeAPIKey, Provider: "openai", KeyRef: "env:LANEFLEET_TEST_TEAM_KEY"}
	n := &noter{}
	if _, err := profileKey(t.Context(), n, p); err != nil || n.noted != "openai:team=sk-noted" {
		t.Errorf("noted %q, %v", n.noted, err)
	}
}

// envAuth is an Auth with only an environment.
type envAuth map[string]string

func (e envAuth) SecretSources() authprofile.SecretSources {
	return authprofile.SecretSources{Env: func(name string) string { return e[name] }}
}
func (envAuth) Snapshot() (authprofile.Store, authprofile.Config) {
	return authprofile.Store{}, authprofile.Config{}
}
func (envAuth) Apply(context.Context, string, authprofile.Event) error { return nil }
func (envAuth) MarkGood(context.Context, string, string) error         { return nil }

// noter is an Auth whose environment has the team key and that records
// the secrets it is told of.
type noter struct {
	envAuth
	noted string
}

func (n *noter) SecretSources() authprofile.SecretSources {
	return authprofile.SecretSources{Env: func(string) string { return "sk-noted" }}
}

func (n *noter) NoteSecret(profile string, s provider.Secret) { n.noted = profile + "=" + s.Reveal() }

// execAuth is an Auth whose exec provider "vault" answers "sk-vault:ID",
// and that records the secrets it is told of.
type execAuth struct{ noter }

func (x *execAuth) SecretSources() authprofile.SecretSources {
	return authprofile.SecretSources{Exec: func(prov, id string) (provider.Secret, error) {
		if prov != "vault" {
			return "", errors.New("no such provider")
		}
		return provider.Secret("sk-" + prov + ":" + id), nil
	}}
}

// TestProfileKeyOAuthTokens: an OAuth profile whose tokens the Auth holds
// (OAuthTokens) authenticates with the Auth's access token, which is
// noted to be masked; one it does not hold uses its own access token;
// a failure to get one is the profile's errNoKey, keeping its cause.
func TestProfileKeyOAuthTokens(t *testing.T) {
	t.Parallel()
	refused := &provider.Error{Reason: provider.ReasonAuthPermanent, Message: "refresh token refused"}
	p := authprofile.Profile{ID: "anthropic:sub", Type: authprofile.TypeOAuth, Provider: "anthropic", Access: "sk-ant-oat01-given", RefreshRef: "env:X"}
	a := &oauthAuth{tok: "sk-ant-oat01-fleet", held: true}
	if k, err := profileKey(t.Context(), a, p); err != nil || k.Reveal() != "sk-ant-oat01-fleet" || a.noted != "anthropic:sub=sk-ant-oat01-fleet" {
		t.Errorf("held: %q %v, noted %q", k.Reveal(), err, a.noted)
	}
	a = &oauthAuth{}
	if k, err := profileKey(t.Context(), a, p); err != nil || k.Reveal() != "sk-ant-oat01-given" || a.noted != "" {
		t.Errorf("not held: %q %v, noted %q", k.Reveal(), err, a.noted)
	}
	a = &oauthAuth{held: true, err: refused}
	var pe *provider.Error
	if _, err := profileKey(t.Context(), a, p); !errors.Is(err, errNoKey) || !errors.As(err, &pe) || pe != refused {
		t.Errorf("refused: %v", err)
	}
	// An api_key profile is not asked of OAuthTokens.
	a = &oauthAuth{tok: "sk-ant-oat01-fleet", held: true}
	if k, err := profileKey(t.Context(), a, authprofile.Profile{ID: "anthropic:key", Type: authprofile.TypeAPIKey, Provider: "anthropic", Key: "sk-ant-api03-key"}); err != nil || k.Reveal() != "sk-ant-api03-key" {
		t.Errorf("api_key: %q %v", k.Reveal(), err)
	}
}

// oauthAuth is an Auth holding OAuth access tokens (OAuthTokens) that
// records the secrets it is told of.
type oauthAuth struct {
	noter
	tok  provider.Secret
	held bool
	err  error
}

func (o *oauthAuth) AccessToken(context.Context, authprofile.Profile) (provider.Secret, bool, error) {
	return o.tok, o.held, o.err
}

func (o *oauthAuth) Rejected(authprofile.Profile, provider.Secret) bool { return o.held }
