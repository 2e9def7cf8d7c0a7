package fleet

import (
	"io"
	"net/http"
	"strings"
	"testing"
)

// TestMetricsStartAtZero: before any turn, a member's /metrics has the
// series of its configured models (the default model and the fallbacks)
// and of every dead-letter and compaction reason at 0, so a fresh
// fleet's dashboard shows 0 where it showed "No data".
func TestMetricsStartAtZero(t *testing.T) {
	t.Parallel()
	m, _, _ := runMember(t, Config{DataDir: t.TempDir(), DefaultModel: "scripted/echo", Fallbacks: []string{"scripted/script"},
		MetricsListen: "127.0.0.1:0", Env: noEnv})
	resp, err := http.Get("http://" + m.MetricsAddr() + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	body := string(b)
	for _, want := range []string{
		`lanefleet_cost_usd_total{model="echo",provider="scripted"} 0`,
		`lanefleet_cost_usd_total{model="script",provider="scripted"} 0`,
		`lanefleet_tokens_total{kind="input",model="echo",provider="scripted"} 0`,
		`lanefleet_tokens_total{kind="output",model="script",provider="scripted"} 0`,
		`lanefleet_provider_requests_total{model="echo",outcome="ok",provider="scripted"} 0`,
		`lanefleet_auth_profile_cooldowns{provider="scripted"} 0`,
		`lanefleet_dead_letters_total{reason="poison"} 0`,
		`lanefleet_dead_letters_total{reason="invalid"} 0`,
		`lanefleet_dead_letters_total{reason="bad-lane"} 0`,
		`lanefleet_compactions_total{reason="threshold"} 0`,
		`lanefleet_compactions_total{reason="overflow"} 0`,
		`lanefleet_compactions_total{reason="failed"} 0`,
		`lanefleet_turns_total{outcome="ok"} 0`,
		`lanefleet_lanes_waiting 0`,
	} {
		if !strings.Contains(body, want+"\n") {
			t.Errorf("/metrics lacks %s", want)
		}
	}
}
