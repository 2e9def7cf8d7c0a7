package integration

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/lanefleet/lanefleet"
	"github.com/lanefleet/lanefleet/internal/fleet"
	"github.com/lanefleet/lanefleet/internal/natstest"
)

// TestExecSecretProvider: a worker started with --secret-exec reads an
// auth profile's key from the exec provider its profiles file declares
// (a real script, run at start) and calls the model with it; the key is
// masked in what the run produces (the model here echoes it) and absent
// from auth status. Without --secret-exec the same files stop the worker
// at start, naming the flag.
func TestExecSecretProvider(t *testing.T) {
	if testing.Short() {
		t.Skip("fleet test")
	}
	t.Parallel()
	const secret = "sk-exec-acme-0123456789abcdef"
	var mu sync.Mutex
	var keys []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		keys = append(keys, strings.TrimPrefix(r.Header.Get("Authorization"), "Bearer "))
		mu.Unlock()
		w.Header().Set("Content-Type", "text/event-stream")
		_, _ = w.Write([]byte(sseText("the key you gave me is " + secret)))
	}))
	t.Cleanup(srv.Close)

	dir := t.TempDir()
	script := filepath.Join(dir, "vault.sh")
	if err := os.WriteFile(script, []byte(`req=$(cat)
case "$req" in
*'"acme/key"'*) printf '{"protocolVersion":1,"values":{"acme/key":"`+secret+`"}}\n' ;;
*) exit 3 ;;
esac
`), 0o600); err != nil {
		t.Fatal(err)
	}
	models, profiles := filepath.Join(dir, "models.json"), filepath.Join(dir, "auth-profiles.json")
	m := fmt.Sprintf(`{"providers":{"acme":{"baseUrl":%q,"api":"openai-completions","models":[{"id":"m1","contextWindow":128000,"maxTokens":4096}]}}}`, srv.URL+"/v1")
	p := fmt.Sprintf(`{"secrets": {"providers": {"vault": {"source": "exec", "command": "/bin/sh", "args": [%q], "timeoutMs": 60000}}},
		"profiles": {"acme:vault": {"type": "api_key", "provider": "acme", "keyRef": "exec:vault:acme/key"}}}`, script)
	for path, data := range map[string]string{models: m, profiles: p} {
		if err := os.WriteFile(path, []byte(data), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	ns := natstest.Start(t)
	cfg := fleet.Config{WorkerID: "w1", ModelsFile: models, AuthProfiles: profiles, DefaultModel: "acme/m1", Env: func(string) string { return "" }}

	off := cfg
	off.NATSURL = ns.URL
	if mem, err := fleet.Start(t.Context(), off); err == nil {
		_ = mem.Run(canceled())
		t.Fatal("a worker without --secret-exec started with an exec reference")
	} else if !strings.Contains(err.Error(), `auth profile "acme:vault": secret reference exec:vault:acme/key: exec secret providers are off: start the worker with --secret-exec`) {
		t.Fatalf("without --secret-exec: %v", err)
	}

	cfg.SecretExec = true
	startMember(t, ns.URL, cfg)
	c, err := lanefleet.New(natstest.Connect(t, ns.URL))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	run, err := c.Send(ctx, "vault:1", "hello")
	if err != nil {
		t.Fatal(err)
	}
	res, err := run.Wait(ctx)
	if err != nil || len(res.Payloads) == 0 {
		t.Fatalf("run: %+v, %v", res, err)
	}
	mu.Lock()
	got := strings.Join(keys, ",")
	mu.Unlock()
	if got != secret {
		t.Fatalf("keys sent %q, want the exec provider's", got)
	}
	raw, _ := json.Marshal(res)
	if strings.Contains(string(raw), secret) || !strings.Contains(string(raw), "the key you gave me is") {
		t.Errorf("result not masked: %s", raw)
	}
	hist, err := c.History(ctx, "vault:1")
	if err != nil {
		t.Fatal(err)
	}
	if raw, _ := json.Marshal(hist); strings.Contains(string(raw), secret) {
		t.Errorf("the transcript holds the secret: %s", raw)
	}
	st, err := c.AuthStatus(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if raw, _ := json.Marshal(st); strings.Contains(string(raw), secret) || strings.Contains(string(raw), "vault.sh") || !strings.Contains(string(raw), "acme:vault") {
		t.Errorf("auth status: %s", raw)
	}
}

// canceled is a context that is already done.
func canceled() context.Context {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	return ctx
}
