package authstore

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestLoadCredentialsChecksRefs: a profile whose secret is held by
// reference loads when the reference reads, keeping the reference (the
// secret is read at use), and stops the worker at start, naming the
// profile and the reference but no secret, when it does not.
func TestLoadCredentialsChecksRefs(t *testing.T) {
	t.Parallel()
	key := filepath.Join(t.TempDir(), "key")
	if err := os.WriteFile(key, []byte("sk-ant-oat01-secret\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	good := writeFile(t, `{"profiles": {"anthropic:sub": {"type": "token", "provider": "anthropic", "tokenRef": "file:`+key+`"},
		"openai:team": {"type": "api_key", "provider": "openai", "keyRef": "env:TEAM_KEY"}}}`)
	env := func(k string) string { return map[string]string{"TEAM_KEY": "sk-team"}[k] }
	creds, err := loadCreds(t, good, env)
	if err != nil {
		t.Fatal(err)
	}
	if p, _ := creds.Profile("anthropic:sub"); p.Token != "" || p.TokenRef != "file:"+key {
		t.Errorf("profile %+v", p)
	}
	_, err = loadCreds(t, good, func(string) string { return "" })
	if err == nil || !strings.Contains(err.Error(), `auth profile "openai:team": secret reference env:TEAM_KEY: the variable is not set`) || strings.Contains(err.Error(), "sk-") {
		t.Errorf("unset variable: %v", err)
	}
	oauth := writeFile(t, `{"profiles": {"anthropic:sub": {"type": "oauth", "provider": "anthropic", "refreshRef": "env:CLAUDE_REFRESH"}}}`)
	if _, err := loadCreds(t, oauth, func(string) string { return "sk-ant-ort01-x" }); err != nil {
		t.Errorf("oauth refreshRef: %v", err)
	}
	_, err = loadCreds(t, oauth, func(string) string { return "" })
	if err == nil || !strings.Contains(err.Error(), `auth profile "anthropic:sub": refreshRef: secret reference env:CLAUDE_REFRESH: the variable is not set`) {
		t.Errorf("unset refreshRef: %v", err)
	}
}
