package metrics

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/lanefleet/lanefleet/message"
)

// serve starts the handler on a real listener and returns its base URL.
func serve(t *testing.T, m *Metrics, ready ReadyFunc) string {
	t.Helper()
	s, err := Listen("127.0.0.1:0", Handler(m, ready, zerolog.Nop()))
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- s.Serve() }()
	t.Cleanup(func() {
		_ = s.Close(context.Background())
		if err := <-done; err != nil {
			t.Error(err)
		}
	})
	return "http://" + s.Addr()
}

func get(t *testing.T, url string) (int, string) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// TestScrape: what the member records and the state it exposes come out in
// the exposition, under their names and labels.
func TestScrape(t *testing.T) {
	t.Parallel()
	m := New()
	m.TurnEnded(OutcomeOK, "", 1500*time.Millisecond)
	m.TurnEnded(OutcomeError, "provider_error", time.Second)
	m.QueueWait("acme", 20*time.Millisecond)
	m.FirstEvent(300 * time.Millisecond)
	m.ProviderCall("anthropic", "claude-sonnet-4-6", "ok", 2*time.Second, &message.Usage{Input: 100, Output: 20, CacheRead: 5, Cost: message.Cost{Total: 0.25}})
	m.ProviderCall("anthropic", "claude-sonnet-4-6", "rate_limit", time.Second, nil)
	m.ToolCall("read", false)
	m.ToolCall("read", true)
	m.Compaction("overflow")
	m.ScheduleDue("fired", 1, 300*time.Millisecond)
	m.ScheduleDue("missed", 4, time.Minute)
	if err := m.Watch(State{
		LanesActive:  func() int { return 3 },
		LanesWaiting: func() int { return 5 },
		Backlog:      func(context.Context) (uint64, error) { return 42, nil },
		Cooldowns:    func() map[string]int { return map[string]int{"anthropic": 1} },
		DeadLetters:  func() map[string]int64 { return map[string]int64{"poison": 2} },
		// Exposed from the start, at 0, so an alert on its rate has a series.
		DeadLetterFailures: func() int64 { return 0 },
		LaneEvents:         func() map[string]int64 { return map[string]int64{"acquired": 7} },
	}); err != nil {
		t.Fatal(err)
	}
	code, body := get(t, serve(t, m, func(context.Context) error { return nil })+"/metrics")
	if code != http.StatusOK {
		t.Fatalf("status %d", code)
	}
	for _, want := range []string{
		`lanefleet_turns_total{outcome="ok"} 1`,
		`lanefleet_turns_total{outcome="error"} 1`,
		`lanefleet_schedule_due_total{outcome="fired"} 1`,
		`lanefleet_schedule_due_total{outcome="missed"} 4`,
		`lanefleet_schedule_due_total{outcome="skipped"} 0`,
		`lanefleet_schedule_lateness_seconds_count 1`,
		`lanefleet_turn_errors_total{kind="provider_error"} 1`,
		`lanefleet_turn_duration_seconds_count 2`,
		`lanefleet_queue_wait_seconds_count{tenant="acme"} 1`,
		`lanefleet_first_event_seconds_count 1`,
		`lanefleet_provider_requests_total{model="claude-sonnet-4-6",outcome="ok",provider="anthropic"} 1`,
		`lanefleet_provider_requests_total{model="claude-sonnet-4-6",outcome="rate_limit",provider="anthropic"} 1`,
		`lanefleet_provider_latency_seconds_count{model="claude-sonnet-4-6",provider="anthropic"} 2`,
		`lanefleet_tokens_total{kind="input",model="claude-sonnet-4-6",provider="anthropic"} 100`,
		`lanefleet_tokens_total{kind="output",model="claude-sonnet-4-6",provider="anthropic"} 20`,
		`lanefleet_tokens_total{kind="cache_read",model="claude-sonnet-4-6",provider="anthropic"} 5`,
		`lanefleet_cost_usd_total{model="claude-sonnet-4-6",provider="anthropic"} 0.25`,
		`lanefleet_tool_calls_total{outcome="ok",tool="read"} 1`,
		`lanefleet_tool_calls_total{outcome="error",tool="read"} 1`,
		`lanefleet_compactions_total{reason="overflow"} 1`,
		`lanefleet_lanes_active 3`,
		`lanefleet_lanes_waiting 5`,
		`lanefleet_inbound_backlog_messages 42`,
		`lanefleet_inbound_backlog_scrape_ok 1`,
		`lanefleet_auth_profile_cooldowns{provider="anthropic"} 1`,
		`lanefleet_dead_letters_total{reason="poison"} 2`,
		`lanefleet_dead_letter_failures_total 0`,
		`lanefleet_lane_events_total{event="acquired"} 7`,
		`lanefleet_build_info{commit=`,
		`go_goroutines `,
	} {
		if !strings.Contains(body, want+"\n") && !strings.Contains(body, want) {
			t.Errorf("exposition lacks %s", want)
		}
	}
	if strings.Contains(body, `kind="cache_write"`) {
		t.Error("a kind with no tokens is exposed")
	}
}

// TestLabelsAreCapped: a sender naming ever new models (allowed by a glob)
// or tools cannot grow the label sets without bound.
func TestLabelsAreCapped(t *testing.T) {
	t.Parallel()
	m := New()
	for i := range MaxLabelValues + 50 {
		m.ProviderCall("openrouter", fmt.Sprintf("vendor/model-%d", i), "ok", time.Millisecond, nil)
		m.ToolCall(fmt.Sprintf("tool-%d", i), false)
	}
	_, body := get(t, serve(t, m, func(context.Context) error { return nil })+"/metrics")
	if n := strings.Count(body, "lanefleet_provider_requests_total{"); n != MaxLabelValues+1 {
		t.Errorf("%d provider request series, want %d and other", n, MaxLabelValues)
	}
	if !strings.Contains(body, `lanefleet_provider_requests_total{model="other",outcome="ok",provider="other"} 50`) ||
		!strings.Contains(body, `lanefleet_tool_calls_total{outcome="ok",tool="other"} 50`) {
		t.Error("the calls past the cap are not counted as other")
	}
}

// TestHealthAndReadiness: /healthz answers while the process is up;
// /readyz says why the member is not ready; a failed backlog read is
// visible, not a scrape error.
func TestHealthAndReadiness(t *testing.T) {
	t.Parallel()
	m := New()
	if err := m.Watch(State{Backlog: func(context.Context) (uint64, error) { return 0, errors.New("no responders") }}); err != nil {
		t.Fatal(err)
	}
	var notReady atomic.Bool
	url := serve(t, m, func(context.Context) error {
		if notReady.Load() {
			return errors.New("disconnected from NATS")
		}
		return nil
	})
	if code, body := get(t, url+"/healthz"); code != 200 || body != "ok\n" {
		t.Fatalf("healthz: %d %q", code, body)
	}
	if code, body := get(t, url+"/readyz"); code != 200 || body != "ready\n" {
		t.Fatalf("readyz: %d %q", code, body)
	}
	notReady.Store(true)
	if code, body := get(t, url+"/readyz"); code != 503 || !strings.Contains(body, "disconnected from NATS") {
		t.Fatalf("readyz when not ready: %d %q", code, body)
	}
	code, body := get(t, url+"/metrics")
	if code != 200 || !strings.Contains(body, "lanefleet_inbound_backlog_scrape_ok 0") || strings.Contains(body, "lanefleet_inbound_backlog_messages ") {
		t.Fatalf("metrics with a failing backlog: %d\n%s", code, body)
	}
}

// TestNilRecordsNothing: a member without metrics passes nil.
func TestNilRecordsNothing(t *testing.T) {
	t.Parallel()
	var m *Metrics
	m.TurnEnded(OutcomeOK, "", time.Second)
	m.ProviderCall("p", "m", "ok", time.Second, &message.Usage{Input: 1})
	m.ToolCall("t", false)
	m.Compaction("threshold")
	m.QueueWait("acme", time.Second)
	m.FirstEvent(time.Second)
	m.ScheduleDue("fired", 1, time.Second)
}

// TestKnownSeriesStartAtZero: every labelled series whose label values are
// known before anything happened is exposed at 0 from the start, so a
// dashboard panel or an alert on its rate shows 0 and not "No data": turn
// outcomes, compaction reasons, dead-letter reasons, and the tokens, cost
// and successful calls of the configured models with their providers'
// cooldowns.
func TestKnownSeriesStartAtZero(t *testing.T) {
	t.Parallel()
	m := New()
	m.Expect("anthropic/claude-sonnet-4-6", "openrouter/openai/gpt-5", "anthropic/claude-sonnet-4-6", "not-a-model-ref")
	if err := m.Watch(State{
		Cooldowns:   func() map[string]int { return map[string]int{"openai": 1} }, // a profile of another provider cools
		DeadLetters: func() map[string]int64 { return map[string]int64{} },
	}); err != nil {
		t.Fatal(err)
	}
	_, body := get(t, serve(t, m, func(context.Context) error { return nil })+"/metrics")
	for _, want := range []string{
		`lanefleet_turns_total{outcome="ok"} 0`,
		`lanefleet_turns_total{outcome="tool_calls"} 0`,
		`lanefleet_turns_total{outcome="error"} 0`,
		`lanefleet_turns_total{outcome="aborted"} 0`,
		`lanefleet_turns_total{outcome="failed"} 0`,
		`lanefleet_compactions_total{reason="threshold"} 0`,
		`lanefleet_compactions_total{reason="overflow"} 0`,
		`lanefleet_compactions_total{reason="failed"} 0`,
		`lanefleet_dead_letters_total{reason="poison"} 0`,
		`lanefleet_dead_letters_total{reason="invalid"} 0`,
		`lanefleet_dead_letters_total{reason="bad-lane"} 0`,
		`lanefleet_provider_requests_total{model="claude-sonnet-4-6",outcome="ok",provider="anthropic"} 0`,
		`lanefleet_tokens_total{kind="input",model="claude-sonnet-4-6",provider="anthropic"} 0`,
		`lanefleet_tokens_total{kind="output",model="claude-sonnet-4-6",provider="anthropic"} 0`,
		`lanefleet_tokens_total{kind="cache_read",model="claude-sonnet-4-6",provider="anthropic"} 0`,
		`lanefleet_tokens_total{kind="cache_write",model="claude-sonnet-4-6",provider="anthropic"} 0`,
		`lanefleet_cost_usd_total{model="claude-sonnet-4-6",provider="anthropic"} 0`,
		`lanefleet_cost_usd_total{model="openai/gpt-5",provider="openrouter"} 0`,
		`lanefleet_auth_profile_cooldowns{provider="anthropic"} 0`,
		`lanefleet_auth_profile_cooldowns{provider="openrouter"} 0`,
		`lanefleet_auth_profile_cooldowns{provider="openai"} 1`,
	} {
		if !strings.Contains(body, want+"\n") {
			t.Errorf("exposition lacks %s", want)
		}
	}
	if n := strings.Count(body, "lanefleet_cost_usd_total{"); n != 2 {
		t.Errorf("%d cost series, want one per configured model (a repeated or malformed reference adds none)", n)
	}
}
