package metrics

import (
	"context"
	"os"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/lanefleet/lanefleet/message"
)

// TestDashboardQueriesExist: every lanefleet_* series the Grafana
// dashboard queries is one a member exposes, so a renamed metric breaks
// this test and not the operators' dashboard.
func TestDashboardQueriesExist(t *testing.T) {
	t.Parallel()
	dash, err := os.ReadFile("../dashboards/lanefleet.json")
	if err != nil {
		t.Fatal(err)
	}
	m := New()
	m.TurnEnded(OutcomeError, "rate_limit", time.Second)
	m.QueueWait("acme", time.Second)
	m.FirstEvent(time.Second)
	m.ProviderCall("p", "m", "ok", time.Second, &message.Usage{Input: 1, Output: 1, CacheRead: 1, CacheWrite: 1, Cost: message.Cost{Total: 1}})
	m.ToolCall("read", false)
	m.Compaction("threshold")
	if err := m.Watch(State{LanesActive: func() int { return 1 }, LanesWaiting: func() int { return 1 }, DeadLetterFailures: func() int64 { return 1 }, Backlog: func(context.Context) (uint64, error) { return 1, nil },
		Cooldowns: func() map[string]int { return map[string]int{"p": 1} }, DeadLetters: func() map[string]int64 { return map[string]int64{"poison": 1} },
		LaneEvents: func() map[string]int64 { return map[string]int64{"turns": 1} }}); err != nil {
		t.Fatal(err)
	}
	fams, err := m.Registry().Gather()
	if err != nil {
		t.Fatal(err)
	}
	exposed := map[string]bool{}
	for _, f := range fams {
		exposed[f.Name] = true
	}
	used := regexp.MustCompile(`lanefleet_[a-z_]+`).FindAllString(string(dash), -1)
	if len(used) == 0 {
		t.Fatal("the dashboard queries no lanefleet metric")
	}
	queried := map[string]bool{}
	for _, name := range used {
		base := name
		for _, suffix := range []string{"_bucket", "_count", "_sum"} {
			if b, ok := strings.CutSuffix(name, suffix); ok && exposed[b] {
				base = b
			}
		}
		if !exposed[base] {
			t.Errorf("the dashboard queries %s, which no member exposes", name)
		}
		queried[base] = true
	}
	// And the other way round: every lanefleet series a member exposes is
	// on the dashboard, but those that describe the scrape itself.
	notShown := map[string]bool{
		"lanefleet_build_info":                true, // the running version: a label, not a time series worth a panel
		"lanefleet_inbound_backlog_scrape_ok": true, // whether the backlog panel's value is fresh
	}
	for name := range exposed {
		if strings.HasPrefix(name, "lanefleet_") && !queried[name] && !notShown[name] {
			t.Errorf("the dashboard shows no %s", name)
		}
	}
}
