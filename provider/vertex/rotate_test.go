package vertex_test

import (
	"context"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/lanefleet/lanefleet/authprofile"
	"github.com/lanefleet/lanefleet/events"
	"github.com/lanefleet/lanefleet/provider"
	"github.com/lanefleet/lanefleet/provider/internal/wiretest"
	"github.com/lanefleet/lanefleet/runner"
)

// profiles is a runner.Auth over fixed profiles that keeps what the run
// applies.
type profiles struct {
	mu    sync.Mutex
	store authprofile.Store
	cfg   authprofile.Config
}

func (p *profiles) Snapshot() (authprofile.Store, authprofile.Config) {
	p.mu.Lock()
	defer p.mu.Unlock()
	s := p.store
	s.Usage = make(map[string]authprofile.State, len(p.store.Usage))
	for id, st := range p.store.Usage {
		s.Usage[id] = st
	}
	return s, p.cfg
}

func (p *profiles) Apply(_ context.Context, id string, ev authprofile.Event) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.store.Usage[id] = p.cfg.Apply(p.store.Usage[id], ev, time.Now())
	return nil
}

func (p *profiles) MarkGood(context.Context, string, string) error { return nil }

type oneModel struct {
	m provider.Model
	p provider.Provider
}

func (o oneModel) Resolve(string) (provider.Model, provider.Provider, error) { return o.m, o.p, nil }

type nopSink struct{}

func (nopSink) Emit(string, events.EventData) {}

// TestThrottleRotatesProfile: two auth profiles hold two service
// accounts' keys; Vertex AI throttles the first account's calls
// (RESOURCE_EXHAUSTED, each family's recorded body) and the run loop
// rotates to the second, whose token answers the turn.
func TestThrottleRotatesProfile(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct{ api, id, file, prov string }{
		{"google-vertex", "gemini-2.5-flash", "google-vertex-429-resource-exhausted.json", "vertex"},
		{"anthropic-vertex", "claude-sonnet-4-5@20250929", "anthropic-vertex-429-quota.json", "vertex-anthropic"},
	} {
		t.Run(tt.api, func(t *testing.T) {
			t.Parallel()
			b := setup(t, setupOpts{})
			keyB := serviceAccount(t, b.ts, "sa-b", "proj-a", keys()[1])
			throttle := wiretest.Body(t, tt.file)
			reply := geminiText
			if tt.prov == "vertex-anthropic" {
				reply = claudeText
			}
			b.setAnswer(func(w http.ResponseWriter, c call) {
				if strings.HasPrefix(c.account, "sa-a@") {
					wiretest.Reply(w, 429, map[string]string{"Content-Type": "application/json; charset=UTF-8"}, throttle, 0)
					return
				}
				sseReply(w, reply)
			})
			auth := &profiles{cfg: authprofile.Config{Fleet: authprofile.FleetDefaults()}, store: authprofile.Store{
				Usage: map[string]authprofile.State{},
				Profiles: []authprofile.Profile{
					{ID: tt.prov + ":a", Type: authprofile.TypeAPIKey, Provider: tt.prov, Key: provider.Secret(b.key)},
					{ID: tt.prov + ":b", Type: authprofile.TypeAPIKey, Provider: tt.prov, Key: provider.Secret(keyB)},
				},
				Order: map[string][]string{tt.prov: {tt.prov + ":a", tt.prov + ":b"}},
			}}
			m := model(b.vs.URL, tt.api, tt.id)
			r, err := runner.New(runner.Config{DefaultModel: m.Ref(), Resolver: oneModel{m: m, p: b.adapter}, Auth: auth})
			if err != nil {
				t.Fatal(err)
			}
			out, err := r.Run(t.Context(), runner.Input{RunID: "r", Inbound: &events.Inbound{Text: "hi"}}, nopSink{})
			if err != nil {
				t.Fatal(err)
			}
			if e := out.Result.Meta.Error; e != nil {
				t.Fatalf("the turn failed: %+v", e)
			}
			var accounts []string
			b.mu.Lock()
			for _, c := range b.calls {
				accounts = append(accounts, strings.Split(c.account, "@")[0])
			}
			b.mu.Unlock()
			if got := strings.Join(accounts, ","); got != "sa-a,sa-b" {
				t.Errorf("calls by %s, want sa-a then sa-b", got)
			}
			st, _ := auth.Snapshot()
			if u := st.Usage[tt.prov+":a"].Models[tt.id]; u.CooldownUntil == 0 || u.FailureCounts[provider.ReasonRateLimit] != 1 {
				t.Errorf("profile a's model not cooled down for a rate limit: %+v", u)
			}
			if out.Usage.Cost.Total <= 0 {
				t.Errorf("turn usage %+v has no cost", out.Usage)
			}
		})
	}
}
