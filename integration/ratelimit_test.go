package integration

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/lanefleet/lanefleet"
	"github.com/lanefleet/lanefleet/events"
	"github.com/lanefleet/lanefleet/governance"
	"github.com/lanefleet/lanefleet/internal/fleet"
	"github.com/lanefleet/lanefleet/internal/natstest"
)

// TestRateLimitWaitingNotice: three workers share a limit of two model
// calls a minute (worker --rate-limit 'scripted/*=rpm:2'). Two sessions'
// turns run; the third session's call waits for the window instead of
// being made, and its sender reads why and for how long in a waiting
// lifecycle event on the run. (Before, every call was made at once.)
func TestRateLimitWaitingNotice(t *testing.T) {
	if testing.Short() {
		t.Skip("fleet test")
	}
	t.Parallel()
	srv := natstest.Start(t)
	rule, err := governance.ParseRateRule("scripted/*=rpm:2")
	if err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{"w1", "w2", "w3"} {
		startMember(t, srv.URL, fleet.Config{WorkerID: id, DefaultModel: "scripted/echo", NoBuiltinTools: true, RateLimits: []governance.RateRule{rule},
			ShutdownGrace: 100 * time.Millisecond}) // the waiting turn is cancelled at the end
	}
	c, _ := lanefleet.New(natstest.Connect(t, srv.URL))
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	for i := 1; i <= 2; i++ {
		r, err := c.Send(ctx, fmt.Sprintf("acme:%d", i), "hi")
		if err != nil {
			t.Fatal(err)
		}
		if res, err := r.Wait(ctx); err != nil || res.Payloads[0].Text != "echo: hi" {
			t.Fatalf("turn %d within the limit: %+v, %v", i, res, err)
		}
	}
	r, err := c.Send(ctx, "acme:3", "hi")
	if err != nil {
		t.Fatal(err)
	}
	for e, err := range r.Events(ctx) {
		if err != nil {
			t.Fatal(err)
		}
		if e.Stream == events.StreamFinal {
			t.Fatalf("the third call ran: %+v", e)
		}
		if e.Stream != events.StreamLifecycle || e.Data.Phase != events.PhaseWaiting {
			continue
		}
		want := "Rate limit: the fleet shares scripted/* (rpm:2), and this model call would pass its requests a minute (2 used, 0 held by calls in flight, this call may take 1); it waits about "
		if !strings.HasPrefix(e.Data.Text, want) || e.Data.DelayMs <= 0 || e.Data.DelayMs > 62_000 {
			t.Fatalf("waiting event %q (delay %d ms); want it to start %q with the wait", e.Data.Text, e.Data.DelayMs, want)
		}
		return
	}
	t.Fatal("the run's events ended without a waiting event")
}

// TestRateLimitMovesToAnotherProfile: with two auth profiles of one
// provider and a limit of one request a minute on the first
// (profile:acme:a=rpm:1), a second turn does not wait for the window: its
// call moves to the second profile, whose key the provider sees, and the
// run's attempt event names it.
func TestRateLimitMovesToAnotherProfile(t *testing.T) {
	if testing.Short() {
		t.Skip("fleet test")
	}
	t.Parallel()
	ls := newLimitServer(t, 1000)
	dir := t.TempDir()
	models := filepath.Join(dir, "models.json")
	m := fmt.Sprintf(`{"providers":{"acme":{"baseUrl":%q,"api":"openai-completions","models":[{"id":"m1","contextWindow":128000,"maxTokens":64}]}}}`, ls.URL+"/v1")
	if err := os.WriteFile(models, []byte(m), 0o600); err != nil {
		t.Fatal(err)
	}
	profiles := filepath.Join(dir, "auth-profiles.json")
	p := `{"version":1,"profiles":{"acme:a":{"type":"api_key","provider":"acme","key":"sk-acme-a"},"acme:b":{"type":"api_key","provider":"acme","key":"sk-acme-b"}},"order":{"acme":["acme:a","acme:b"]}}`
	if err := os.WriteFile(profiles, []byte(p), 0o600); err != nil {
		t.Fatal(err)
	}
	rule, err := governance.ParseRateRule("profile:acme:a=rpm:1")
	if err != nil {
		t.Fatal(err)
	}
	srv := natstest.Start(t)
	startMember(t, srv.URL, fleet.Config{WorkerID: "w1", ModelsFile: models, AuthProfiles: profiles, DefaultModel: "acme/m1",
		NoBuiltinTools: true, Env: envMap(nil), RateLimits: []governance.RateRule{rule}, ShutdownGrace: 100 * time.Millisecond})
	c, _ := lanefleet.New(natstest.Connect(t, srv.URL))
	ctx, cancel := context.WithTimeout(t.Context(), 50*time.Second) // less than the minute a wait would take
	defer cancel()
	for i, want := range []string{"acme:a", "acme:b"} {
		r, err := c.Send(ctx, fmt.Sprintf("acme:%d", i), "hi")
		if err != nil {
			t.Fatal(err)
		}
		var profiles []string
		for e, err := range r.Events(ctx) {
			if err != nil {
				t.Fatalf("turn %d: %v", i, err)
			}
			if e.Stream == events.StreamLifecycle && e.Data.Phase == events.PhaseWaiting {
				t.Fatalf("turn %d waited: %s", i, e.Data.Text)
			}
			if e.Stream == events.StreamAttempt {
				profiles = append(profiles, e.Data.AuthProfile)
			}
			if e.Stream == events.StreamFinal {
				break
			}
		}
		if len(profiles) == 0 || profiles[len(profiles)-1] != want {
			t.Fatalf("turn %d's attempts were made with %v; want the last with %s", i, profiles, want)
		}
	}
	if got := ls.keys(); strings.Join(got, ",") != "Bearer sk-acme-a,Bearer sk-acme-b" {
		t.Fatalf("the provider saw the keys %v", got)
	}
}
