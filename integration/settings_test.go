package integration

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/lanefleet/lanefleet"
	"github.com/lanefleet/lanefleet/authprofile"
	"github.com/lanefleet/lanefleet/events"
	"github.com/lanefleet/lanefleet/internal/fleet"
	"github.com/lanefleet/lanefleet/internal/natstest"
	"github.com/lanefleet/lanefleet/provider"
	"github.com/lanefleet/lanefleet/provider/scripted"
	"github.com/lanefleet/lanefleet/tools"
)

// sendAll publishes the texts to a session in order without waiting, each
// with its options, and returns their runs.
func sendAll(t *testing.T, msgs ...func() (*lanefleet.Run, error)) []*lanefleet.Run {
	t.Helper()
	var runs []*lanefleet.Run
	for _, send := range msgs {
		r, err := send()
		if err != nil {
			t.Fatal(err)
		}
		runs = append(runs, r)
	}
	return runs
}

// TestSessionRunSettingsThroughTheFleet: a session's stored model applies
// to the messages sent after it and not before, a message's own model
// wins over it, a model the fleet does not allow is refused when the
// settings would store it (invalid_input; the stored settings stay), and
// a reset brings the worker's default back, all in lane order.
func TestSessionRunSettingsThroughTheFleet(t *testing.T) {
	if testing.Short() {
		t.Skip("fleet test")
	}
	t.Parallel()
	srv := natstest.Start(t)
	startMember(t, srv.URL, fleet.Config{WorkerID: "w1", DefaultModel: "scripted/echo", NoBuiltinTools: true,
		AllowModels: []string{"scripted/echo", "scripted/alt"},
		Scripts:     map[string]scripted.Script{"alt": {Replies: []scripted.Reply{{Text: "alt here"}}}, "hidden": {Replies: []scripted.Reply{{Text: "hidden"}}}}})
	c, _ := lanefleet.New(natstest.Connect(t, srv.URL))
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	const s = "set:model"
	send := func(text string, opts ...lanefleet.SendOption) func() (*lanefleet.Run, error) {
		return func() (*lanefleet.Run, error) { return c.Send(ctx, s, text, opts...) }
	}
	set := func(rs events.RunSettings) func() (*lanefleet.Run, error) {
		return func() (*lanefleet.Run, error) { return c.SetSettings(ctx, s, lanefleet.SettingsChange{Run: &rs}) }
	}
	runs := sendAll(t,
		send("one"),
		set(events.RunSettings{Model: "scripted/alt", Thinking: "low"}),
		send("two"),
		send("three", lanefleet.WithModel("scripted/echo")),
		set(events.RunSettings{Model: "scripted/hidden"}),
		send("four"),
		send("five", lanefleet.WithModel("scripted/echo")),
		func() (*lanefleet.Run, error) { return c.ResetSettings(ctx, s) },
		send("six"),
	)
	want := []string{"echo: one", "queue settings: defaults; run settings: model scripted/alt, thinking low", "alt here", "echo: three",
		"", "alt here", "echo: five", "queue settings: defaults", "echo: six"}
	for i, r := range runs {
		res, err := r.Wait(ctx)
		if i == 4 {
			var re *lanefleet.RunError
			if !errors.As(err, &re) || re.Kind != "invalid_input" || re.Message != `model "scripted/hidden" is not allowed on this fleet; allowed: scripted/echo, scripted/alt` {
				t.Fatalf("settings of a model the fleet does not allow: %+v, %v (want the allowlist's invalid_input refusal)", res, err)
			}
			continue
		}
		if err != nil || len(res.Payloads) == 0 || res.Payloads[0].Text != want[i] {
			t.Fatalf("run %d: %+v, %v; want %q", i, res, err, want[i])
		}
	}
	got, err := c.Settings(ctx, s)
	if err != nil || got.Run != nil || got.Queue != (lanefleet.SessionSettings{}).Queue {
		t.Fatalf("settings after reset: %+v, %v", got, err)
	}
}

// toolsServer is a Chat Completions endpoint that answers "ok" and records
// the names of the tools each request offered.
type toolsServer struct {
	*httptest.Server
	mu      sync.Mutex
	offered [][]string
}

func newToolsServer(t *testing.T) *toolsServer {
	t.Helper()
	ts := &toolsServer{}
	ts.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var req struct {
			Tools []struct {
				Function struct {
					Name string `json:"name"`
				} `json:"function"`
			} `json:"tools"`
		}
		_ = json.NewDecoder(r.Body).Decode(&req)
		var names []string
		for _, tool := range req.Tools {
			names = append(names, tool.Function.Name)
		}
		slices.Sort(names)
		ts.mu.Lock()
		ts.offered = append(ts.offered, names)
		ts.mu.Unlock()
		w.Header().Set("Content-Type", "text/event-stream")
		_, _ = w.Write([]byte(sseText("ok")))
	}))
	t.Cleanup(ts.Close)
	return ts
}

func (ts *toolsServer) last() string {
	ts.mu.Lock()
	defer ts.mu.Unlock()
	if len(ts.offered) == 0 {
		return "(no request)"
	}
	return strings.Join(ts.offered[len(ts.offered)-1], ",")
}

// TestSessionToolPolicyNarrowsTheWorkers: a session's stored tool policy
// applies on top of the worker's: it can keep a tool the worker allows
// from the model or ask approval for each of its calls, never offer one
// the worker denies.
func TestSessionToolPolicyNarrowsTheWorkers(t *testing.T) {
	if testing.Short() {
		t.Skip("fleet test")
	}
	t.Parallel()
	ts := newToolsServer(t)
	models, profiles := acmeModels(t, ts.URL, "sk-acme-tools")
	srv := natstest.Start(t)
	root := t.TempDir()
	startMember(t, srv.URL, fleet.Config{WorkerID: "w1", WorkspaceRoot: root, ModelsFile: models, AuthProfiles: profiles,
		DefaultModel: "acme/m1", Env: func(string) string { return "" }, ToolPolicy: tools.Policy{Deny: []string{"edit"}}})
	c, _ := lanefleet.New(natstest.Connect(t, srv.URL))
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	setTools := func(session string, p *events.ToolPolicy, model string) {
		t.Helper()
		rs := events.RunSettings{Tools: p, Model: model}
		set, err := c.SetSettings(ctx, session, lanefleet.SettingsChange{Run: &rs})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := set.Wait(ctx); err != nil {
			t.Fatal(err)
		}
	}
	for _, tc := range []struct {
		session string
		policy  *events.ToolPolicy
		offered string
	}{
		{"tp:none", nil, "apply_patch,read,write"},
		{"tp:deny", &events.ToolPolicy{Deny: []string{"wr*"}}, "apply_patch,read"},
		{"tp:widen", &events.ToolPolicy{Allow: []string{"edit", "write"}}, "write"},
		{"tp:allow", &events.ToolPolicy{Allow: []string{"read"}}, "read"},
	} {
		if tc.policy != nil {
			setTools(tc.session, tc.policy, "")
		}
		if _, err := waitResult(t, ctx, c, tc.session, "which tools?"); err != nil {
			t.Fatalf("%s: %v", tc.session, err)
		}
		if got := ts.last(); got != tc.offered {
			t.Errorf("%s: tools offered %q, want %q", tc.session, got, tc.offered)
		}
	}
	// Approval asked by the session: the call waits for the client and
	// nothing is written.
	setTools("tp:approve", &events.ToolPolicy{Approve: []string{"write"}}, "scripted/script")
	res, err := waitResult(t, ctx, c, "tp:approve", `#script {"replies":[{"toolCalls":[{"id":"c1","name":"write","arguments":{"path":"a.txt","content":"x"}}]},{"text":"done"}]}`)
	if err != nil {
		t.Fatal(err)
	}
	if p := res.Meta.PendingToolCalls; res.Meta.StopReason != "tool_calls" || len(p) != 1 || !p[0].Approval || p[0].Name != "write" {
		t.Fatalf("approve: %+v", res.Meta)
	}
	tok, _ := events.KeyToken("tp:approve")
	if _, err := os.Stat(filepath.Join(root, tok, "a.txt")); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("the write ran before the approval: %v", err)
	}
}

// TestStickyAuthProfile: a session's next turn runs on the auth profile
// that answered its last one, although the fleet rotates the profiles
// between sessions; a stored auth profile pins the session to another,
// and a message's own profile wins over the stored one.
func TestStickyAuthProfile(t *testing.T) {
	if testing.Short() {
		t.Skip("fleet test")
	}
	t.Parallel()
	ks := newKeyServer(t)
	models, _ := acmeFiles(t, ks.URL)
	// Two keys and no explicit order: the fleet rotates them by last use.
	profiles := filepath.Join(t.TempDir(), "auth-profiles.json")
	if err := os.WriteFile(profiles, []byte(`{"version":1,"profiles":{"acme:a":{"type":"api_key","provider":"acme","key":"sk-acme-a"},"acme:b":{"type":"api_key","provider":"acme","key":"sk-acme-b"}}}`), 0o600); err != nil {
		t.Fatal(err)
	}
	srv := natstest.Start(t)
	startMember(t, srv.URL, fleet.Config{WorkerID: "w1", ModelsFile: models, AuthProfiles: profiles, DefaultModel: "acme/m1",
		NoBuiltinTools: true, Env: func(string) string { return "" }, AllowAuthPins: []string{"acme:*"}})
	c, _ := lanefleet.New(natstest.Connect(t, srv.URL))
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	profileOf := map[string]string{"sk-acme-a": "acme:a", "sk-acme-b": "acme:b"}
	turn := func(session string, opts ...lanefleet.SendOption) (key string, res *events.Result) {
		t.Helper()
		before := len(strings.Split(ks.used(), ","))
		if ks.used() == "" {
			before = 0
		}
		res, err := waitResult(t, ctx, c, session, "hello", opts...)
		if err != nil {
			t.Fatalf("%s: %v", session, err)
		}
		used := strings.Split(ks.used(), ",")
		if len(used) != before+1 {
			t.Fatalf("%s: keys used %v, want one more call", session, used)
		}
		return used[len(used)-1], res
	}
	first, res := turn("sticky:1")
	if s := res.Meta.Session; s == nil || s.AuthProfile != profileOf[first] {
		t.Fatalf("first turn's session state = %+v, want profile %s", s, profileOf[first])
	}
	other, _ := turn("sticky:2")
	if other == first {
		t.Fatalf("the fleet did not rotate between sessions (both on %s): the test cannot tell stickiness", first)
	}
	// Rotation by last use would alternate from here: each turn of the
	// session stays on its first profile.
	for i := 2; i <= 4; i++ {
		if again, _ := turn("sticky:1"); again != first {
			t.Fatalf("sticky:1's turn %d ran on %s, want %s (the profile of its first turn); keys so far %s", i, again, first, ks.used())
		}
	}
	rs := events.RunSettings{AuthProfile: profileOf[other]}
	set, err := c.SetSettings(ctx, "sticky:1", lanefleet.SettingsChange{Run: &rs})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := set.Wait(ctx); err != nil {
		t.Fatal(err)
	}
	if pinned, _ := turn("sticky:1"); pinned != other {
		t.Fatalf("pinned turn ran on %s, want %s", pinned, other)
	}
	if own, _ := turn("sticky:1", lanefleet.WithAuthProfile(profileOf[first])); own != first {
		t.Fatalf("a message's own profile: ran on %s, want %s", own, first)
	}
}

// TestAuthPinsAreTheOperators: a message or a session's settings may pin
// only a profile of --allow-auth-pins that exists and is not disabled;
// any other pin ends with an invalid_input error saying why (naming the
// pinnable ones) before any provider call, and turns without a pin rotate
// as usual.
func TestAuthPinsAreTheOperators(t *testing.T) {
	if testing.Short() {
		t.Skip("fleet test")
	}
	t.Parallel()
	ks := newKeyServer(t)
	models, profiles := acmeFiles(t, ks.URL)
	srv := natstest.Start(t)
	mem := startMember(t, srv.URL, fleet.Config{WorkerID: "w1", ModelsFile: models, AuthProfiles: profiles, DefaultModel: "acme/m1",
		NoBuiltinTools: true, Env: func(string) string { return "" }, AllowAuthPins: []string{"acme:b", "acme:z*"}})
	c, _ := lanefleet.New(natstest.Connect(t, srv.URL))
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	refused := func(session, want string, opts ...lanefleet.SendOption) {
		t.Helper()
		before := ks.used()
		res, err := waitResult(t, ctx, c, session, "hello", opts...)
		var re *lanefleet.RunError
		if !errors.As(err, &re) || re.Kind != events.KindInvalidInput || !strings.Contains(re.Message, want) {
			t.Fatalf("%s: %+v, %v; want invalid_input saying %q", session, res, err, want)
		}
		if ks.used() != before {
			t.Fatalf("%s: a refused pin reached the provider (keys %s)", session, ks.used())
		}
	}
	refused("pin:1", `auth profile "acme:a" may not be pinned on this fleet; pinnable: acme:b, acme:z*`, lanefleet.WithAuthProfile("acme:a"))
	refused("pin:1", `auth profile "acme:zz" does not exist on this fleet`, lanefleet.WithAuthProfile("acme:zz"))
	if _, err := waitResult(t, ctx, c, "pin:1", "hello", lanefleet.WithAuthProfile("acme:b")); err != nil || ks.used() != "sk-acme-b" {
		t.Fatalf("allowed pin: %v, keys %s", err, ks.used())
	}
	// A billing failure disables acme:b: it cannot be pinned until then.
	if _, err := mem.m.Auth.Apply(ctx, "acme:b", authprofile.Event{Kind: authprofile.EventFailure, Provider: "acme", Reason: provider.ReasonBilling}); err != nil {
		t.Fatal(err)
	}
	refused("pin:1", `auth profile "acme:b" is disabled (billing) until `, lanefleet.WithAuthProfile("acme:b"))
	// A pin stored with the session's settings is checked at every turn.
	rs := events.RunSettings{AuthProfile: "acme:a"}
	set, err := c.SetSettings(ctx, "pin:2", lanefleet.SettingsChange{Run: &rs})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := set.Wait(ctx); err != nil {
		t.Fatal(err)
	}
	refused("pin:2", `auth profile "acme:a" (the session's setting) may not be pinned on this fleet`)
	// Unpinned turns rotate past the disabled profile.
	if _, err := waitResult(t, ctx, c, "pin:3", "hello"); err != nil || ks.used() != "sk-acme-b,sk-acme-a" {
		t.Fatalf("unpinned turn: %v, keys %s", err, ks.used())
	}
}

// TestRunningCostThroughTheFleet: the session's running total of tokens
// and cost (priced from the models file) grows by each turn's usage, as
// the provider reported it, and is shown by the final result and by the
// session's settings.
func TestRunningCostThroughTheFleet(t *testing.T) {
	if testing.Short() {
		t.Skip("fleet test")
	}
	t.Parallel()
	ks := newKeyServer(t)
	dir := t.TempDir()
	models := filepath.Join(dir, "models.json")
	m := fmt.Sprintf(`{"providers":{"acme":{"baseUrl":%q,"api":"openai-completions","apiKey":"sk-acme","models":[{"id":"m1","contextWindow":128000,"maxTokens":4096,"cost":{"input":1,"output":2,"cacheRead":0,"cacheWrite":0}}]}}}`, ks.URL+"/v1")
	if err := os.WriteFile(models, []byte(m), 0o600); err != nil {
		t.Fatal(err)
	}
	srv := natstest.Start(t)
	startMember(t, srv.URL, fleet.Config{WorkerID: "w1", ModelsFile: models, DefaultModel: "acme/m1", NoBuiltinTools: true,
		Env: envMap(map[string]string{"ACME_API_KEY": "sk-acme"})})
	c, _ := lanefleet.New(natstest.Connect(t, srv.URL))
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	// Each reply of the recorded stream reports 20 prompt and 2
	// completion tokens: $20e-6 + $4e-6 at $1 and $2 per million.
	const perTurn = 24e-6
	for n := int64(1); n <= 3; n++ {
		res, err := waitResult(t, ctx, c, "cost:1", fmt.Sprintf("turn %d", n))
		if err != nil {
			t.Fatal(err)
		}
		s := res.Meta.Session
		if s == nil || s.Usage == nil || s.Turns != n || s.Usage.Input != 20*n || s.Usage.Output != 2*n || s.Usage.Total != 22*n ||
			s.Usage.Cost == nil || math.Abs(s.Usage.Cost.Total-perTurn*float64(n)) > 1e-12 {
			t.Fatalf("turn %d: session state %+v (usage %+v)", n, s, s.Usage)
		}
	}
	got, err := c.Settings(ctx, "cost:1")
	if err != nil || got.State == nil || got.State.Turns != 3 || got.State.Usage.Total != 66 || math.Abs(got.State.Usage.Cost.Total-3*perTurn) > 1e-12 {
		t.Fatalf("settings op state = %+v, %v", got.State, err)
	}
}
