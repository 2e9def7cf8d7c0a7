package fleet

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/lanefleet/lanefleet/budgetstore"
	"github.com/lanefleet/lanefleet/governance"
	"github.com/lanefleet/lanefleet/internal/natstest"
	"github.com/lanefleet/lanefleet/message"
	"github.com/lanefleet/lanefleet/provider"
	"github.com/lanefleet/lanefleet/runner"
)

// budgetsSetup opens a worker's budgets on a fresh server, with a budget
// on tenant acme.
func budgetsSetup(t *testing.T) (*budgets, *natstest.Server, jetstream.KeyValue) {
	t.Helper()
	srv := natstest.Start(t)
	js, err := jetstream.New(natstest.Connect(t, srv.URL))
	if err != nil {
		t.Fatal(err)
	}
	s, err := budgetstore.Open(t.Context(), js, budgetstore.Config{Worker: "w1"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	acme := governance.Scope{Kind: governance.ScopeTenant, Name: "acme"}
	if _, _, err := s.Bucket().Set(t.Context(), acme, governance.Limits{Max: governance.Amount{Turns: 100}}, "test"); err != nil {
		t.Fatal(err)
	}
	waitLimited(t, s, acme)
	kv, err := js.KeyValue(t.Context(), budgetstore.DefaultBucket)
	if err != nil {
		t.Fatal(err)
	}
	return &budgets{store: s, now: time.Now}, srv, kv
}

func call() runner.AdmitCall {
	return runner.AdmitCall{SessionKey: "acme:1", FirstCall: true, Request: &provider.Request{Model: provider.Model{MaxTokens: 1000}}}
}

// TestAdmitStoreOutage: when the budgets bucket does not answer, Admit
// says the store is unavailable (the run waits and asks again, its
// attempt not counted) rather than failing the run. (Before, its error
// failed the attempt, which counts toward the message's attempts.)
func TestAdmitStoreOutage(t *testing.T) {
	t.Parallel()
	b, srv, _ := budgetsSetup(t)
	if err := srv.DisableJetStream(); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	_, err := b.Admit(ctx, call())
	if u, ok := errors.AsType[*runner.AdmitUnavailable](err); !ok || !strings.Contains(u.Error(), "the budget store is unavailable") {
		t.Fatalf("Admit during an outage: %v (%T); want *runner.AdmitUnavailable", err, err)
	}
}

// TestAdmitUnreadableBudgetFailsClosed: a budget whose record does not
// decode refuses its sessions' calls with a reply naming its key, and
// pauses them, instead of letting them run unlimited. (Before, it was
// read as no budget at all.)
func TestAdmitUnreadableBudgetFailsClosed(t *testing.T) {
	t.Parallel()
	b, _, kv := budgetsSetup(t)
	if _, err := kv.Put(t.Context(), "tenant.acme", []byte(`{"limits":{"max":{"turns":"many"}}}`)); err != nil {
		t.Fatal(err)
	}
	acme := governance.Scope{Kind: governance.ScopeTenant, Name: "acme"}
	deadline := time.Now().Add(time.Minute)
	for !b.Paused("acme:1") && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	if !b.Paused("acme:1") {
		t.Fatal("a session under an unreadable budget is not paused")
	}
	_, err := b.Admit(t.Context(), call())
	r, ok := errors.AsType[*runner.AdmitRefusal](err)
	if !ok || !strings.Contains(r.Text, "Budget unreadable: the tenant acme budget (key tenant.acme of the budgets bucket)") ||
		!strings.Contains(r.Text, "publisher budget set --tenant acme") {
		t.Fatalf("Admit under an unreadable budget: %v; want a refusal naming the key", err)
	}
	// Setting the budget again overwrites it, and calls are admitted.
	if _, _, err := b.store.Bucket().Set(t.Context(), acme, governance.Limits{Max: governance.Amount{Turns: 100}}, "ops"); err != nil {
		t.Fatal(err)
	}
	for b.Paused("acme:1") && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	adm, err := b.Admit(t.Context(), call())
	if err != nil || adm == nil {
		t.Fatalf("Admit after the budget was set again: %v, %v", adm, err)
	}
}

// TestAdmitRateStoreOutage: a call under a rate limit whose bucket does
// not answer waits for the store (Admit says it is unavailable; the run
// waits, its attempt not counted) rather than being made unlimited or
// failing the run.
func TestAdmitRateStoreOutage(t *testing.T) {
	t.Parallel()
	b, _, srv, _ := rateBudgets(t, "openai/*=rpm:100")
	if err := srv.DisableJetStream(); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	c := call()
	c.Request.Model.Provider, c.Request.Model.ID = "openai", "gpt-5"
	_, err := b.Admit(ctx, c)
	if _, ok := errors.AsType[*runner.AdmitUnavailable](err); !ok {
		t.Fatalf("Admit under a rate limit during an outage: %v (%T); want *runner.AdmitUnavailable", err, err)
	}
}

// TestAdmitChargesTheLineage: a sub-agent's calls are reserved against
// the budget of every session above it too: once its parent's budget is
// full, the child's next call is refused with a reply that says whose
// budget it is. (Before, a child's calls never touched its parent's
// budget.)
func TestAdmitChargesTheLineage(t *testing.T) {
	t.Parallel()
	b, _, _ := budgetsSetup(t)
	lead := governance.Scope{Kind: governance.ScopeSession, Name: "acme:lead"}
	if _, _, err := b.store.Bucket().Set(t.Context(), lead, governance.Limits{Max: governance.Amount{Turns: 1}}, "test"); err != nil {
		t.Fatal(err)
	}
	waitLimited(t, b.store, lead)
	child := runner.AdmitCall{SessionKey: "acme:lead:subagent:x", Lineage: []string{"acme:lead"}, FirstCall: true,
		Request: &provider.Request{Model: provider.Model{MaxTokens: 1000}}}
	adm, err := b.Admit(t.Context(), child)
	if err != nil || adm == nil {
		t.Fatalf("the child's first call: %v, %v", adm, err)
	}
	adm.Settle(message.Usage{Input: 10, Output: 5})
	_, err = b.Admit(t.Context(), child)
	r, ok := errors.AsType[*runner.AdmitRefusal](err)
	if !ok || !strings.Contains(r.Text, `the session "acme:lead" budget`) || !strings.Contains(r.Text, "sub-agents under it") {
		t.Fatalf("the child's second call under its parent's full budget: %v", err)
	}
	// A session of another tenant named in a lineage is never charged.
	other := runner.AdmitCall{SessionKey: "beta:x:subagent:y", Lineage: []string{"acme:lead"}, FirstCall: true,
		Request: &provider.Request{Model: provider.Model{MaxTokens: 1000}}}
	if _, err := b.Admit(t.Context(), other); err != nil {
		t.Fatalf("a call whose lineage names another tenant's session: %v", err)
	}
}

// TestAdmitMovesToAnotherProfile: with a rate limit of one request a
// minute on auth profile a and none on b, a second call made with a moves
// to b instead of waiting when the run may use b; one that may not (no
// alternates) waits, showing why. A budget of profile a's with no room
// moves the call to b too, and refuses it when b has none either.
func TestAdmitMovesToAnotherProfile(t *testing.T) {
	t.Parallel()
	b, s, _, rule := rateBudgets(t, "profile:openai:a=rpm:1")
	waitLimited(t, s, rule.Scope())
	mk := func(profile string, alternates ...string) runner.AdmitCall {
		c := call()
		c.Request.Model.Provider, c.Request.Model.ID = "openai", "gpt-5"
		c.AuthProfile, c.Alternates = profile, alternates
		return c
	}
	adm, err := b.Admit(t.Context(), mk("openai:a", "openai:b"))
	if err != nil || adm == nil {
		t.Fatalf("first call: %v, %v", adm, err)
	}
	adm.Settle(message.Usage{Input: 10, Output: 10})
	_, err = b.Admit(t.Context(), mk("openai:a", "openai:b"))
	if mv, ok := errors.AsType[*runner.AdmitMove](err); !ok || mv.Profile != "openai:b" || mv.Reason != provider.ReasonRateLimit {
		t.Fatalf("second call with an alternate: %v (%T); want a move to openai:b", err, err)
	}
	if adm, err := b.Admit(t.Context(), mk("openai:b")); err != nil {
		t.Fatalf("the moved call with openai:b: %v, %v", adm, err)
	}
	// Without an alternate the call waits, and says so.
	ctx, cancel := context.WithCancel(t.Context())
	waited := make(chan string, 1)
	c := mk("openai:a")
	c.Waiting = func(text string, _ time.Duration) {
		select {
		case waited <- text:
		default:
		}
		cancel()
	}
	if _, err := b.Admit(ctx, c); err == nil {
		t.Fatal("a call with no alternate was admitted past the rate limit")
	}
	if w := <-waited; !strings.Contains(w, "Rate limit: the fleet shares profile:openai:a (rpm:1)") {
		t.Fatalf("waiting text %q", w)
	}
	// A budget of profile a's with no room moves the call to b.
	b.rates = nil
	pa, pb := governance.Scope{Kind: governance.ScopeProfile, Name: "openai:a"}, governance.Scope{Kind: governance.ScopeProfile, Name: "openai:b"}
	for _, sc := range []governance.Scope{pa, pb} {
		if _, _, err := s.Bucket().Set(t.Context(), sc, governance.Limits{Max: governance.Amount{Tokens: 10}}, "test"); err != nil {
			t.Fatal(err)
		}
		waitLimited(t, s, sc)
	}
	bc := call()
	bc.AuthProfile, bc.Alternates = "openai:a", []string{"openai:b"}
	if _, err := b.Admit(t.Context(), bc); err == nil {
		t.Fatal("a call past both profiles' budgets was admitted")
	} else if r, ok := errors.AsType[*runner.AdmitRefusal](err); !ok || !strings.Contains(r.Text, `the auth profile "openai:a" budget (10 tokens in total) has no room`) || !strings.Contains(r.Text, "the session is not paused") {
		t.Fatalf("refusal %v", err)
	}
	if _, _, err := s.Bucket().Set(t.Context(), pb, governance.Limits{Max: governance.Amount{Tokens: 1 << 20}}, "test"); err != nil {
		t.Fatal(err)
	}
	for {
		if st, _, _ := s.Cached(pb); st.Limits.Max.Tokens == 1<<20 {
			break
		}
		time.Sleep(time.Millisecond)
	}
	if _, err := b.Admit(t.Context(), bc); err == nil {
		t.Fatal("a call past profile a's budget was admitted")
	} else if mv, ok := errors.AsType[*runner.AdmitMove](err); !ok || mv.Profile != "openai:b" || mv.Reason != provider.ReasonBilling {
		t.Fatalf("a call past profile a's budget with b's room: %v (%T), want a move to openai:b", err, err)
	}
	if b.Paused("acme:1") {
		t.Fatal("a profile's budget paused a session")
	}
}

// rateBudgets opens a worker's budgets on a fresh server with the rate
// limit rule set.
// waitLimited waits until s has read a limit of sc's, failing the test
// after a minute rather than hanging it.
func waitLimited(t *testing.T, s *budgetstore.Store, sc governance.Scope) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for !s.Limited(sc) {
		if time.Now().After(deadline) {
			t.Fatalf("the budget store never read a limit of %v", sc)
		}
		time.Sleep(time.Millisecond)
	}
}

func rateBudgets(t *testing.T, text string) (*budgets, *budgetstore.Store, *natstest.Server, governance.RateRule) {
	t.Helper()
	srv := natstest.Start(t)
	js, err := jetstream.New(natstest.Connect(t, srv.URL))
	if err != nil {
		t.Fatal(err)
	}
	s, err := budgetstore.Open(t.Context(), js, budgetstore.Config{Worker: "w1"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	b := &budgets{store: s, now: time.Now}
	rule, err := governance.ParseRateRule(text)
	if err != nil {
		t.Fatal(err)
	}
	if err := b.setRates(t.Context(), []governance.RateRule{rule}); err != nil {
		t.Fatal(err)
	}
	return b, s, srv, rule
}
