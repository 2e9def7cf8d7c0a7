package authstore

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/lanefleet/lanefleet/authprofile"
	"github.com/lanefleet/lanefleet/events"
	"github.com/lanefleet/lanefleet/provider"
)

func failure(reason provider.Reason, model string) authprofile.Event {
	return authprofile.Event{Kind: authprofile.EventFailure, Provider: "anthropic", Reason: reason, Model: model}
}

// Two workers (separate connections) each run 50 goroutines recording
// failures of one profile: every failure is counted once.
func TestConcurrentApplyLosesNoUpdate(t *testing.T) {
	t.Parallel()
	b := setup(t)
	a, c := b.open(t, Config{}), b.open(t, Config{})
	const goroutines, each = 50, 2
	reasons := []provider.Reason{provider.ReasonRateLimit, provider.ReasonAuth, provider.ReasonFormat, provider.ReasonOverloaded}
	const id = "anthropic:default"

	var wg sync.WaitGroup
	errs := make(chan error, 2*goroutines*each)
	for _, s := range []*Store{a, c} {
		for g := range goroutines {
			wg.Go(func() {
				for i := range each {
					if _, err := s.Apply(t.Context(), id, failure(reasons[(g*each+i)%len(reasons)], "")); err != nil {
						errs <- err
					}
				}
			})
		}
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}

	const total = 2 * goroutines * each
	key, rev := revisionOf(t, a, id)
	seen(t, c, key, rev)
	_, revC := revisionOf(t, c, id)
	seen(t, a, key, revC)
	for name, s := range map[string]*Store{"a": a, "c": c} {
		st, _ := s.State(id)
		if st.ErrorCount != total {
			t.Errorf("%s: errorCount = %d, want %d", name, st.ErrorCount, total)
		}
		for _, r := range reasons {
			if n := st.FailureCounts[r]; n != total/len(reasons) {
				t.Errorf("%s: failureCounts[%s] = %d, want %d", name, r, n, total/len(reasons))
			}
		}
	}
	t.Logf("%d applies, %d + %d lost compare-and-swaps retried", total, a.conflicts.Load(), c.conflicts.Load())
	if a.conflicts.Load()+c.conflicts.Load() == 0 {
		t.Log("no compare-and-swap conflict happened; the retry path was not exercised this run")
	}
}

// A cooldown recorded by one worker reaches another worker's Store, which
// then rotates away from the profile for that model only.
func TestCooldownPropagates(t *testing.T) {
	t.Parallel()
	b := setup(t)
	cfg := Config{Auth: authprofile.Config{Fleet: authprofile.FleetDefaults()}}
	a, c := b.open(t, cfg), b.open(t, cfg)
	creds := apiKeys("anthropic", 2)
	first := creds.Profiles[0].ID
	if sel := c.Select(creds, c.Order(creds, authprofile.OrderRequest{Provider: "anthropic", Model: "opus"}), "opus"); sel.ID != first {
		t.Fatalf("before: selected %q, want %q", sel.ID, first)
	}

	start := time.Now()
	ev := failure(provider.ReasonRateLimit, "opus")
	ev.RetryAfter = 90 * time.Second
	if _, err := a.Apply(t.Context(), first, ev); err != nil {
		t.Fatal(err)
	}
	applied := time.Since(start)
	key, rev := revisionOf(t, a, first)
	seen(t, c, key, rev)
	t.Logf("cooldown written in %v, seen by the other worker %v after the write started", applied, time.Since(start))

	ids := c.Order(creds, authprofile.OrderRequest{Provider: "anthropic", Model: "opus"})
	if sel := c.Select(creds, ids, "opus"); sel.ID != creds.Profiles[1].ID {
		t.Errorf("opus: selected %q after the cooldown, want %q (order %v)", sel.ID, creds.Profiles[1].ID, ids)
	}
	ids = c.Order(creds, authprofile.OrderRequest{Provider: "anthropic", Model: "haiku"})
	if sel := c.Select(creds, ids, "haiku"); sel.ID != first {
		t.Errorf("haiku: selected %q, want %q (the cooldown is per model)", sel.ID, first)
	}
}

// A new Store (a restarted worker) finds every state and last good profile
// in the bucket.
func TestRestartReloads(t *testing.T) {
	t.Parallel()
	b := setup(t)
	clk := newClock(t0)
	cfg := Config{Auth: authprofile.Config{Fleet: authprofile.FleetDefaults()}, Now: clk.Now}
	a := b.open(t, cfg)
	ctx := t.Context()
	want := map[string]authprofile.State{}
	for i, ev := range []authprofile.Event{
		failure(provider.ReasonRateLimit, "opus"),
		failure(provider.ReasonBilling, ""),
		{Kind: authprofile.EventUsed, Provider: "anthropic", Model: "opus"},
	} {
		id := fmt.Sprintf("anthropic:%d", i)
		st, err := a.Apply(ctx, id, ev)
		if err != nil {
			t.Fatal(err)
		}
		want[id] = st
	}
	if err := a.MarkGood(ctx, "anthropic", "anthropic:2"); err != nil {
		t.Fatal(err)
	}
	if err := a.Close(); err != nil {
		t.Fatal(err)
	}

	r := b.open(t, cfg)
	for id, w := range want {
		got, ok := r.State(id)
		if !ok || !reflect.DeepEqual(got, w) {
			t.Errorf("%s after restart = %+v (%v), want %+v", id, got, ok, w)
		}
	}
	if id, ok := r.LastGood("anthropic"); !ok || id != "anthropic:2" {
		t.Errorf("lastGood after restart = %q, %v", id, ok)
	}
	if got := r.Snapshot(nil).Usage; !reflect.DeepEqual(got, want) {
		t.Errorf("snapshot usage = %+v, want %+v", got, want)
	}
}

// An ended window stops counting at once for readers, and the next update
// clears it: a failure after a cooldown ended starts the ladder again.
func TestExpiryClearing(t *testing.T) {
	t.Parallel()
	b := setup(t)
	clk := newClock(t0)
	s := b.open(t, Config{Now: clk.Now}) // reference policy: 1 min, then 5 min
	creds := apiKeys("anthropic", 2)
	p0, p1 := creds.Profiles[0].ID, creds.Profiles[1].ID
	req := authprofile.OrderRequest{Provider: "anthropic"}
	ctx := t.Context()

	st, err := s.Apply(ctx, p0, failure(provider.ReasonRateLimit, ""))
	if err != nil {
		t.Fatal(err)
	}
	if want := t0.Add(time.Minute).UnixMilli(); st.CooldownUntil != want {
		t.Fatalf("cooldownUntil = %d, want %d", st.CooldownUntil, want)
	}
	if ids := s.Order(creds, req); !slices.Equal(ids, []string{p1, p0}) {
		t.Errorf("cooling: order = %v", ids)
	}
	if _, err := s.Apply(ctx, p1, failure(provider.ReasonAuth, "")); err != nil {
		t.Fatal(err)
	}
	if st := s.Status(creds, "anthropic", ""); !st.AllCooling || st.Reason != provider.ReasonAuth {
		t.Errorf("both cooling: status = %+v", st)
	}

	clk.Advance(61 * time.Second)
	if ids := s.Order(creds, req); !slices.Equal(ids, []string{p0, p1}) {
		t.Errorf("expired: order = %v, want %v", ids, []string{p0, p1})
	}
	if st := s.Status(creds, "anthropic", ""); st.AllCooling {
		t.Errorf("expired: status = %+v", st)
	}
	if st, _ := s.State(p0); st.CooldownUntil == 0 {
		t.Errorf("State cleared the window without a write: %+v", st)
	}

	st, err = s.Apply(ctx, p0, failure(provider.ReasonRateLimit, ""))
	if err != nil {
		t.Fatal(err)
	}
	now := clk.Now()
	if st.ErrorCount != 1 || st.CooldownUntil != now.Add(time.Minute).UnixMilli() || st.FailureCounts[provider.ReasonRateLimit] != 1 {
		t.Errorf("failure after expiry = %+v, want errorCount 1 and a 1 min cooldown from now", st)
	}
	// Expiry persisted with an unrelated update: p1's window ended too.
	st, err = s.Apply(ctx, p1, authprofile.Event{Kind: authprofile.EventProbe, Provider: "anthropic"})
	if err != nil {
		t.Fatal(err)
	}
	if st.CooldownUntil != 0 || st.ErrorCount != 0 || st.FailureCounts != nil || st.LastFailureAt != t0.UnixMilli() {
		t.Errorf("p1 after expiry = %+v, want the window and counters cleared, lastFailureAt kept", st)
	}
	e, err := b.kv(t).Get(ctx, mustKey(t, p1))
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(e.Value()), "cooldownUntil") {
		t.Errorf("stored p1 still has a window: %s", e.Value())
	}
}

// Garbage in the bucket is skipped with a warning, never a crash, both at
// load and while watching, and the next update of the profile replaces it.
func TestMalformedValuesSkipped(t *testing.T) {
	t.Parallel()
	b := setup(t)
	first := b.open(t, Config{}) // creates the bucket
	kv := b.kv(t)
	ctx := t.Context()
	const garbage = "sk-garbage-not-json{"
	work, home := "anthropic:work", "anthropic:home"
	puts := map[string]string{
		mustKey(t, work): garbage,
		mustKey(t, home): `[1,2,3]`,
		"p.a-b-c":        `{"errorCount": 3`,
		"good.anthropic": `{"not":"a string"}`,
		"p.=":            `{}`,
		"junk":           `{}`,
	}
	for k, v := range puts {
		if _, err := kv.PutString(ctx, k, v); err != nil {
			t.Fatalf("put %s: %v", k, err)
		}
	}
	// A valid state among the garbage is still read.
	valid, err := first.Apply(ctx, "anthropic:ok", failure(provider.ReasonRateLimit, ""))
	if err != nil {
		t.Fatal(err)
	}

	s := b.open(t, Config{})
	if st, ok := s.State("anthropic:ok"); !ok || !reflect.DeepEqual(st, valid) {
		t.Errorf("valid state = %+v, %v; want %+v", st, ok, valid)
	}
	for _, id := range []string{work, home} {
		if st, ok := s.State(id); ok {
			t.Errorf("%s: malformed value read as %+v", id, st)
		}
	}
	if id, ok := s.LastGood("anthropic"); ok {
		t.Errorf("malformed last good read as %q", id)
	}

	// While watching.
	rev, err := kv.PutString(ctx, mustKey(t, "anthropic:late"), garbage)
	if err != nil {
		t.Fatal(err)
	}
	seen(t, s, mustKey(t, "anthropic:late"), rev)
	seen(t, first, mustKey(t, "anthropic:late"), rev)

	for _, id := range []string{work, "anthropic:late"} {
		st, err := s.Apply(ctx, id, failure(provider.ReasonRateLimit, ""))
		if err != nil {
			t.Fatalf("apply over garbage: %v", err)
		}
		if st.ErrorCount != 1 {
			t.Errorf("%s: errorCount = %d after replacing garbage, want 1", id, st.ErrorCount)
		}
	}
	// The worker that had cached the garbage's revision sees the new state.
	key, rev2 := revisionOf(t, s, "anthropic:late")
	seen(t, first, key, rev2)
	if st, _ := first.State("anthropic:late"); st.ErrorCount != 1 {
		t.Errorf("other worker: %+v", st)
	}

	logs := b.logs.String()
	for _, want := range []string{"malformed profile state", "malformed last-good entry", "unreadable profile key", "unknown key"} {
		if !strings.Contains(logs, want) {
			t.Errorf("no %q warning logged", want)
		}
	}
	if strings.Contains(logs, "sk-garbage") {
		t.Error("a malformed value's content reached the log")
	}
}

// Secrets stay in memory: no key or value of the bucket, no log line and no
// error ever contains one.
func TestSecretsNeverStored(t *testing.T) {
	t.Parallel()
	b := setup(t)
	secrets := []string{"sk-ant-file-secret", "tok-file-secret", "oauth-access-secret", "oauth-refresh-secret", "sk-ant-env-secret", "sk-openai-env-secret"}
	path := writeFile(t, `{"version":1,"profiles":{
		"anthropic:work":{"type":"api_key","provider":"anthropic","key":"sk-ant-file-secret"},
		"anthropic:tok":{"type":"token","provider":"anthropic","token":"tok-file-secret"},
		"anthropic:oauth":{"type":"oauth","provider":"anthropic","access":"oauth-access-secret","refresh":"oauth-refresh-secret","expires":1}
	},"usageStats":{"anthropic:work":{"errorCount":9}}}`)
	creds, err := loadCreds(t, path, envOf(map[string]string{"ANTHROPIC_API_KEY": "sk-ant-env-secret", "OPENAI_API_KEY": "sk-openai-env-secret"}))
	if err != nil {
		t.Fatal(err)
	}
	clk := newClock(t0)
	s := b.open(t, Config{Auth: authprofile.Config{Fleet: authprofile.FleetDefaults()}, Now: clk.Now})
	ctx := t.Context()
	var errTexts []string
	for _, p := range creds.Profiles {
		for _, ev := range []authprofile.Event{
			{Kind: authprofile.EventFailure, Provider: p.Provider, Reason: provider.ReasonRateLimit, Model: "m", RunID: "run-1"},
			{Kind: authprofile.EventFailure, Provider: p.Provider, Reason: provider.ReasonBilling},
			{Kind: authprofile.EventUsed, Provider: p.Provider, Model: "m", RunID: "run-2"},
		} {
			if _, err := s.Apply(ctx, p.ID, ev); err != nil {
				t.Fatal(err)
			}
		}
		if err := s.MarkGood(ctx, p.Provider, p.ID); err != nil {
			t.Fatal(err)
		}
		if _, err := s.ClaimProbe(ctx, p.ID, p.Provider, "m"); err != nil {
			t.Fatal(err)
		}
	}
	// Errors that name profiles.
	_, err = s.Apply(ctx, "", authprofile.Event{Kind: authprofile.EventUsed})
	errTexts = append(errTexts, fmt.Sprint(err))
	_, err = loadCreds(t, writeFile(t, `{"profiles":{"x":{"type":"api_key","provider":"p","key":"sk-ant-file-secret"}`), nil)
	errTexts = append(errTexts, fmt.Sprint(err))

	kv := b.kv(t)
	keys, err := kv.Keys(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(keys) < len(creds.Profiles) {
		t.Fatalf("bucket holds %d keys, want at least %d", len(keys), len(creds.Profiles))
	}
	texts := map[string]string{"log": b.logs.String(), "errors": strings.Join(errTexts, "\n"),
		"snapshot": fmt.Sprintf("%+v %#v", s.Snapshot(creds), s.Snapshot(creds))}
	for _, k := range keys {
		e, err := kv.Get(ctx, k)
		if err != nil {
			t.Fatal(err)
		}
		texts["key "+k] = k + " " + string(e.Value())
	}
	for where, text := range texts {
		for _, secret := range secrets {
			if strings.Contains(text, secret) {
				t.Errorf("%s contains secret %q", where, secret)
			}
		}
	}
	if st, _ := s.State("anthropic:work"); st.ErrorCount == 9 {
		t.Error("the file's usageStats were taken over")
	}
}

// Of all the workers offered the probe of a cooling profile, one wins.
func TestClaimProbeOneWinner(t *testing.T) {
	t.Parallel()
	b := setup(t)
	clk := newClock(t0)
	cfg := Config{Auth: authprofile.Config{Fleet: authprofile.FleetDefaults()}, Now: clk.Now}
	a, c := b.open(t, cfg), b.open(t, cfg)
	creds := apiKeys("anthropic", 1)
	id := creds.Profiles[0].ID
	if _, err := a.Apply(t.Context(), id, failure(provider.ReasonRateLimit, "opus")); err != nil {
		t.Fatal(err)
	}
	key, rev := revisionOf(t, a, id)
	seen(t, c, key, rev)
	if sel := c.Select(creds, []string{id}, "opus"); sel.ID != "" || !sel.AllInCooldown {
		t.Fatalf("fresh cooldown: %+v", sel)
	}
	clk.Advance(31 * time.Second) // past the probe interval, 29 s before expiry
	if sel := c.Select(creds, []string{id}, "opus"); sel.ID != id || !sel.Probe {
		t.Fatalf("near expiry: %+v, want a probe of %s", sel, id)
	}

	var wg sync.WaitGroup
	var mu sync.Mutex
	wins := 0
	for _, s := range []*Store{a, c} {
		for range 10 {
			wg.Go(func() {
				won, err := s.ClaimProbe(t.Context(), id, "anthropic", "opus")
				if err != nil {
					t.Error(err)
				}
				if won {
					mu.Lock()
					wins++
					mu.Unlock()
				}
			})
		}
	}
	wg.Wait()
	if wins != 1 {
		t.Errorf("%d probe claims won, want 1", wins)
	}
	if sel := a.Select(creds, []string{id}, "opus"); sel.Probe {
		t.Errorf("after the claim: %+v, want no further probe", sel)
	}
}

// The fallback planner's view: a provider whose profiles all cool is
// reported with its inferred reason and soonest expiry.
func TestAvailability(t *testing.T) {
	t.Parallel()
	b := setup(t)
	clk := newClock(t0)
	s := b.open(t, Config{Auth: authprofile.Config{Fleet: authprofile.FleetDefaults()}, Now: clk.Now})
	creds := apiKeys("anthropic", 2)
	avail := s.Availability(creds)
	if av := avail("anthropic", "opus"); av.Profiles != 2 || av.AllCooling {
		t.Fatalf("fresh: %+v", av)
	}
	for i, p := range creds.Profiles {
		clk.Advance(time.Second)
		ev := failure(provider.ReasonRateLimit, "opus")
		if i == 1 {
			ev = failure(provider.ReasonBilling, "opus") // disables the whole profile
		}
		if _, err := s.Apply(t.Context(), p.ID, ev); err != nil {
			t.Fatal(err)
		}
	}
	av := avail("anthropic", "opus")
	if !av.AllCooling || av.Reason != provider.ReasonBilling || !av.SoonestExpiry.Equal(t0.Add(time.Second+time.Minute)) {
		t.Errorf("opus: %+v", av)
	}
	if av := avail("anthropic", "haiku"); av.AllCooling {
		t.Errorf("haiku: %+v (the rate limit was for opus only)", av)
	}
	if av := avail("openai", "gpt"); av.Profiles != 0 || av.AllCooling {
		t.Errorf("openai: %+v", av)
	}
}

// Workers starting together race to create the bucket; all of them open it.
func TestOpenConcurrently(t *testing.T) {
	t.Parallel()
	b := setup(t)
	var wg sync.WaitGroup
	for range 4 {
		js := b.js(t)
		wg.Go(func() {
			s, err := Open(t.Context(), js, Config{Logger: b.log})
			if err != nil {
				t.Error(err)
				return
			}
			_ = s.Close()
		})
	}
	wg.Wait()

	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	if _, err := Open(ctx, b.js(t), Config{}); !errors.Is(err, context.Canceled) {
		t.Errorf("Open with an ended context: %v", err)
	}

	// The end of Open's context does not stop the watcher.
	ctx, cancel = context.WithCancel(t.Context())
	s, err := Open(ctx, b.js(t), Config{Logger: b.log})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	cancel()
	w := b.open(t, Config{})
	if _, err := w.Apply(t.Context(), "a:b", failure(provider.ReasonRateLimit, "")); err != nil {
		t.Fatal(err)
	}
	key, rev := revisionOf(t, w, "a:b")
	seen(t, s, key, rev)
}

func TestUpdatesAfterClose(t *testing.T) {
	t.Parallel()
	b := setup(t)
	s := b.open(t, Config{})
	if _, err := s.Apply(t.Context(), "a:b", failure(provider.ReasonRateLimit, "")); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	if _, err := s.Apply(t.Context(), "a:b", failure(provider.ReasonRateLimit, "")); !errors.Is(err, ErrClosed) {
		t.Errorf("Apply after Close: %v, want ErrClosed", err)
	}
	if err := s.MarkGood(t.Context(), "a", "a:b"); !errors.Is(err, ErrClosed) {
		t.Errorf("MarkGood after Close: %v, want ErrClosed", err)
	}
	if st, ok := s.State("a:b"); !ok || st.ErrorCount != 1 {
		t.Errorf("state after Close: %+v, %v", st, ok)
	}
}

// An event that changes nothing writes nothing, and OpenRouter failures are
// no-ops.
func TestNoOpWritesNothing(t *testing.T) {
	t.Parallel()
	b := setup(t)
	s := b.open(t, Config{})
	ev := authprofile.Event{Kind: authprofile.EventFailure, Provider: "openrouter", Reason: provider.ReasonRateLimit}
	if _, err := s.Apply(t.Context(), "openrouter:default", ev); err != nil {
		t.Fatal(err)
	}
	if err := s.MarkGood(t.Context(), "openrouter", "openrouter:default"); err != nil {
		t.Fatal(err)
	}
	if err := s.MarkGood(t.Context(), "openrouter", "openrouter:default"); err != nil {
		t.Fatal(err)
	}
	status, err := s.kv.Status(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if n := status.Values(); n != 1 {
		t.Errorf("bucket holds %d values, want 1 (the last good entry)", n)
	}
}

func mustKey(t testing.TB, id string) string {
	t.Helper()
	k, err := profileKey(id)
	if err != nil {
		t.Fatal(err)
	}
	if tok, _ := events.KeyToken(id); k != profilePrefix+tok {
		t.Fatalf("key %q", k)
	}
	return k
}
