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

	"github.com/nats-io/nats.go/jetstream"

	"github.com/lanefleet/lanefleet"
	"github.com/lanefleet/lanefleet/authprofile"
	"github.com/lanefleet/lanefleet/authstore"
	"github.com/lanefleet/lanefleet/internal/fleet"
	"github.com/lanefleet/lanefleet/internal/natstest"
)

// keyServer is an OpenAI-compatible Chat Completions endpoint that answers
// by API key: a 429 with Retry-After for the limited keys, the recorded SSE
// reply for the others. It logs the key of every request.
type keyServer struct {
	*httptest.Server
	mu   sync.Mutex
	keys []string
}

func newKeyServer(t *testing.T, limited ...string) *keyServer {
	t.Helper()
	okBody, err := os.ReadFile("testdata/openai-completions-text.sse")
	if err != nil {
		t.Fatal(err)
	}
	tooMany, err := os.ReadFile("testdata/openai-completions-429-rate-limit.json")
	if err != nil {
		t.Fatal(err)
	}
	ks := &keyServer{}
	ks.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		key := strings.TrimPrefix(r.Header.Get("Authorization"), "Bearer ")
		ks.mu.Lock()
		ks.keys = append(ks.keys, key)
		ks.mu.Unlock()
		for _, l := range limited {
			if key == l {
				w.Header().Set("Content-Type", "application/json")
				w.Header().Set("Retry-After", "60")
				w.WriteHeader(http.StatusTooManyRequests)
				_, _ = w.Write(tooMany)
				return
			}
		}
		w.Header().Set("Content-Type", "text/event-stream")
		_, _ = w.Write(okBody)
	}))
	t.Cleanup(ks.Close)
	return ks
}

func (ks *keyServer) used() string {
	ks.mu.Lock()
	defer ks.mu.Unlock()
	return strings.Join(ks.keys, ",")
}

// acmeFiles writes a models file for provider acme (Chat Completions at
// url) and an auth-profiles.json with the profiles acme:a and acme:b.
func acmeFiles(t *testing.T, url string) (models, profiles string) {
	t.Helper()
	dir := t.TempDir()
	models = filepath.Join(dir, "models.json")
	profiles = filepath.Join(dir, "auth-profiles.json")
	m := fmt.Sprintf(`{"providers":{"acme":{"baseUrl":%q,"api":"openai-completions","models":[{"id":"m1","contextWindow":128000,"maxTokens":4096}]}}}`, url+"/v1")
	p := `{"version":1,"profiles":{"acme:a":{"type":"api_key","provider":"acme","key":"sk-acme-a"},"acme:b":{"type":"api_key","provider":"acme","key":"sk-acme-b"}},"order":{"acme":["acme:a","acme:b"]}}`
	for path, data := range map[string]string{models: m, profiles: p} {
		if err := os.WriteFile(path, []byte(data), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return models, profiles
}

// TestRateLimitedProfileRotatesFleetWide: a 429 on profile A makes the run
// rotate to B; the cooldown lands in the auth bucket, so another worker's
// next run starts on B without trying A.
func TestRateLimitedProfileRotatesFleetWide(t *testing.T) {
	if testing.Short() {
		t.Skip("fleet test")
	}
	t.Parallel()
	ks := newKeyServer(t, "sk-acme-a")
	models, profiles := acmeFiles(t, ks.URL)
	srv := natstest.Start(t)
	cfg := fleet.Config{WorkerID: "w1", ModelsFile: models, AuthProfiles: profiles, DefaultModel: "acme/m1", Env: func(string) string { return "" }}
	w1 := startMember(t, srv.URL, cfg)
	nc := natstest.Connect(t, srv.URL)
	c, _ := lanefleet.New(nc)
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()

	run, err := c.Send(ctx, "rot:1", "hello")
	if err != nil {
		t.Fatal(err)
	}
	res, err := run.Wait(ctx)
	if err != nil || len(res.Payloads) == 0 || res.Payloads[0].Text == "" {
		t.Fatalf("first run: %+v, %v", res, err)
	}
	if got := ks.used(); got != "sk-acme-a,sk-acme-b" {
		t.Fatalf("keys used %q, want a then b", got)
	}
	// The cooldown is fleet state: read it from the bucket.
	js, _ := jetstream.New(nc)
	st, err := authstore.Open(ctx, js, authstore.Config{Auth: authprofile.Config{Fleet: authprofile.FleetDefaults()}})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	a, ok := st.State("acme:a")
	if !ok || a.Models["m1"].CooldownUntil < time.Now().Add(50*time.Second).UnixMilli() {
		t.Fatalf("acme:a in the bucket: %+v (want a cooldown of at least the 60 s Retry-After)", a)
	}
	b, _ := st.State("acme:b")
	if b.LastUsed == 0 {
		t.Fatalf("acme:b not marked used: %+v", b)
	}
	raw, _ := json.Marshal(a)
	if strings.Contains(string(raw), "sk-acme") {
		t.Fatal("a secret reached the bucket")
	}

	// Another worker runs the next turn: it starts on b.
	w1.stop()
	cfg.WorkerID = "w2"
	startMember(t, srv.URL, cfg)
	run, err = c.Send(ctx, "rot:2", "hello again")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := run.Wait(ctx); err != nil {
		t.Fatal(err)
	}
	if got := ks.used(); got != "sk-acme-a,sk-acme-b,sk-acme-b" {
		t.Fatalf("keys used %q: the second worker tried the cooling profile", got)
	}
}
