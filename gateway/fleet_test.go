package gateway

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/lanefleet/lanefleet/admin"
	"github.com/lanefleet/lanefleet/internal/fleet"
)

type adminProfile = admin.AuthProfile

// TestFleet: GET /api/fleet answers an admin with every worker (two
// here, each its own answer), their slots and turns, the backlog, the
// dead letters and the auth profiles; anyone else gets 403.
func TestFleet(t *testing.T) {
	t.Parallel()
	b := setup(t, setupOpts{member: func(c *fleet.Config) { c.WorkerID = "w1" }})
	startWorker(t, b.url, func(c *fleet.Config) { c.WorkerID = "w2" })
	resp := b.do(t, "acme", "POST", "/api/sessions/acme:f/messages", `{"text":"hi","stream":true}`)
	if _, err := readSSE(resp.Body, nil); err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	var fl FleetReply
	for {
		// The second worker's admin service may still be starting, and a
		// turn is counted once it commits, after its final event.
		resp = b.do(t, "root", "GET", "/api/fleet", "")
		readJSON(t, resp, &fl)
		if resp.StatusCode != 200 {
			t.Fatalf("fleet: %d", resp.StatusCode)
		}
		if len(fl.Workers) == 2 && fl.Workers[0].TurnsTotal+fl.Workers[1].TurnsTotal == 1 {
			break
		}
		select {
		case <-b.ctx.Done():
			t.Fatalf("workers %+v", fl.Workers)
		case <-time.After(50 * time.Millisecond):
		}
	}
	var turns int64
	for i, w := range fl.Workers {
		if w.ID != []string{"w1", "w2"}[i] || w.Version == "" || w.SlotsTotal <= 0 || w.SlotsUsed < 0 || w.LastSeen.IsZero() {
			t.Fatalf("worker %d: %+v", i, w)
		}
		turns += w.TurnsTotal
	}
	if turns != 1 || fl.At.IsZero() || fl.DeadLetters != 0 || fl.AuthProfiles == nil {
		t.Fatalf("fleet %+v", fl)
	}
	for _, who := range []string{"acme", "acme-viewer"} {
		wantProblem(t, b.do(t, who, "GET", "/api/fleet", ""), 403, CodeForbidden)
		wantProblem(t, b.do(t, who, "GET", "/api/fleet/events", ""), 403, CodeForbidden)
	}
}

// TestFleetEvents: the stream sends the fleet's state at once and then
// every FleetEvery, and ends when the gateway shuts down.
func TestFleetEvents(t *testing.T) {
	t.Parallel()
	b := setup(t, setupOpts{cfg: func(c *Config) { c.FleetEvery = 20 * time.Millisecond }})
	resp := b.do(t, "root", "GET", "/api/fleet/events", "")
	defer resp.Body.Close()
	if resp.StatusCode != 200 || resp.Header.Get("Content-Type") != "text/event-stream" {
		t.Fatalf("%d %s", resp.StatusCode, resp.Header.Get("Content-Type"))
	}
	evs, err := readSSE(resp.Body, func(e sseEvent) bool { return true })
	if err != nil || len(evs) != 1 || evs[0].event != "fleet" {
		t.Fatalf("%v %+v", err, evs)
	}
	var n int
	evs, err = readSSE(resp.Body, func(e sseEvent) bool { n++; return n == 2 })
	if err != nil || len(evs) != 2 || evs[1].event != "fleet" {
		t.Fatalf("%v %+v", err, evs)
	}
	b.srv.shutdownStreams()
	done := make(chan error, 1)
	go func() { _, err := readSSE(resp.Body, nil); done <- err }()
	select {
	case <-done:
	case <-b.ctx.Done():
		t.Fatal("the stream did not end at shutdown")
	}
}

// TestAuthProfiles: an admin lists the auth profiles and resets one; an
// unknown one is a 404; other roles get 403.
func TestAuthProfiles(t *testing.T) {
	t.Parallel()
	profiles := filepath.Join(t.TempDir(), "auth-profiles.json")
	if err := os.WriteFile(profiles, []byte(`{"version":1,"profiles":{"anthropic:ops":{"type":"api_key","provider":"anthropic","key":"sk-ant-test"}}}`), 0o600); err != nil {
		t.Fatal(err)
	}
	b := setup(t, setupOpts{member: func(c *fleet.Config) { c.AuthProfiles = profiles; c.Env = func(string) string { return "" } }})
	resp := b.do(t, "root", "GET", "/api/auth-profiles", "")
	var ls struct {
		AuthProfiles []AuthProfile `json:"authProfiles"`
	}
	readJSON(t, resp, &ls)
	if resp.StatusCode != 200 || len(ls.AuthProfiles) != 1 {
		t.Fatalf("%d %+v", resp.StatusCode, ls)
	}
	if p := ls.AuthProfiles[0]; p.ID != "anthropic:ops" || p.Provider != "anthropic" || p.State != "ok" || p.CooldownUntil != nil {
		t.Fatalf("profile %+v", p)
	}
	resp = b.do(t, "root", "POST", "/api/auth-profiles/anthropic:ops/reset", "")
	var rr struct {
		ID      string
		Cleared bool
	}
	readJSON(t, resp, &rr)
	if resp.StatusCode != 200 || rr.ID != "anthropic:ops" || rr.Cleared {
		t.Fatalf("reset: %d %+v", resp.StatusCode, rr)
	}
	wantProblem(t, b.do(t, "root", "POST", "/api/auth-profiles/nope/reset", ""), 404, CodeNotFound)
	wantProblem(t, b.do(t, "acme", "GET", "/api/auth-profiles", ""), 403, CodeForbidden)
	wantProblem(t, b.do(t, "acme", "POST", "/api/auth-profiles/anthropic:ops/reset", ""), 403, CodeForbidden)
	resp = b.do(t, "root", "GET", "/api/fleet", "")
	var fl FleetReply
	readJSON(t, resp, &fl)
	if len(fl.AuthProfiles) != 1 || fl.AuthProfiles[0].ID != "anthropic:ops" {
		t.Fatalf("fleet's profiles %+v", fl.AuthProfiles)
	}
}

// TestAuthProfileView: the console's view of a profile's state.
func TestAuthProfileView(t *testing.T) {
	t.Parallel()
	now := time.UnixMilli(1_000_000)
	later := now.Add(time.Minute).UnixMilli()
	for _, tc := range []struct {
		name   string
		in     adminProfile
		state  string
		reason string
		until  int64
	}{
		{"usable", adminProfile{ErrorCount: 1}, "ok", "", 0},
		{"cooling", adminProfile{Cooling: true, CooldownUntil: later, FailureCounts: map[string]int{"rate_limit": 3, "timeout": 1}}, "cooldown", "rate_limit", later},
		{"a cooldown that ended", adminProfile{CooldownUntil: now.Add(-time.Second).UnixMilli()}, "ok", "", 0},
		{"disabled", adminProfile{DisabledUntil: later + 5, DisabledReason: "billing", CooldownUntil: later}, "disabled", "billing", later + 5},
		{"some models", adminProfile{Models: map[string]int64{"m1": later, "m2": later + 9}}, "cooldown", "models", later + 9},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := authProfileOf(tc.in, now)
			if got.State != tc.state || got.Reason != tc.reason {
				t.Fatalf("%+v", got)
			}
			if (tc.until == 0) != (got.CooldownUntil == nil) || (got.CooldownUntil != nil && got.CooldownUntil.UnixMilli() != tc.until) {
				t.Fatalf("until %v, want %d", got.CooldownUntil, tc.until)
			}
		})
	}
}
