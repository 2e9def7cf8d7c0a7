package metrics

import (
	"context"
	"flag"
	"os"
	"regexp"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/lanefleet/lanefleet/message"
)

var update = flag.Bool("update", false, "rewrite testdata/*.golden from what the code writes now")

// normalize replaces what changes from run to run in an exposition: the
// sample values of the Go runtime's and the process's families (go_*,
// process_*) and the build's own labels (version, commit, Go version).
func normalize(body string) string {
	build := regexp.MustCompile(`\{commit="[^"]*",goversion="[^"]*",version="[^"]*"\}`)
	goVersion := regexp.MustCompile(`\{version="[^"]*"\}`)
	var out []string
	for _, line := range strings.Split(body, "\n") {
		if strings.HasPrefix(line, "go_") || strings.HasPrefix(line, "process_") {
			if i := strings.LastIndexByte(line, ' '); i > 0 {
				line = line[:i] + " V"
			}
			line = goVersion.ReplaceAllString(line, `{version="GO"}`)
		}
		line = build.ReplaceAllString(line, `{commit="C",goversion="GO",version="V"}`)
		out = append(out, line)
	}
	return strings.Join(out, "\n")
}

// golden compares got with testdata/name, or rewrites it under -update.
func golden(t *testing.T, name, got string) {
	t.Helper()
	path := "testdata/" + name
	if *update {
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if got != string(want) {
		gl, wl := strings.Split(got, "\n"), strings.Split(string(want), "\n")
		for i := range max(len(gl), len(wl)) {
			var g, w string
			if i < len(gl) {
				g = gl[i]
			}
			if i < len(wl) {
				w = wl[i]
			}
			if g != w {
				t.Fatalf("%s differs from line %d:\n got: %q\nwant: %q\n(go test -run %s -update rewrites it)", path, i+1, g, w, t.Name())
			}
		}
	}
}

// TestExpositionGolden pins the whole /metrics page of a member: every
// family's name, help, type, labels, bucket layout and the values of a
// fixed set of events, in the order a scraper reads them. The golden file
// was written by the Prometheus client this package used before its own
// writer, so the writer's output is the same page.
func TestExpositionGolden(t *testing.T) {
	t.Parallel()
	m := New()
	m.Expect("anthropic/claude-sonnet-4-6", "openrouter/openai/gpt-5")
	m.TurnEnded(OutcomeOK, "", 1500*time.Millisecond)
	m.TurnEnded(OutcomeError, "provider_error", time.Second)
	m.QueueWait("acme", 20*time.Millisecond)
	m.FirstEvent(300 * time.Millisecond)
	m.ProviderCall("anthropic", "claude-sonnet-4-6", "ok", 2*time.Second, &message.Usage{Input: 100, Output: 20, CacheRead: 5, Cost: message.Cost{Total: 0.25}})
	m.ProviderCall("anthropic", "claude-sonnet-4-6", "rate_limit", time.Second, nil)
	m.ProviderCall("local", `we"ird\model`+"\n", "ok", 30*time.Second, &message.Usage{Input: 1e12})
	m.ToolCall("read", false)
	m.ToolCall("read", true)
	m.Compaction(CompactionOverflow)
	m.BudgetEvent("acme", BudgetSoftLimit)
	m.BudgetEvent("", BudgetReached)
	m.BudgetSpend("acme", 1.5)
	m.ScheduleDue("fired", 1, 300*time.Millisecond)
	m.ScheduleDue("missed", 4, time.Minute)
	if err := m.Watch(State{
		LanesActive:        func() int { return 3 },
		LanesWaiting:       func() int { return 5 },
		Backlog:            func(context.Context) (uint64, error) { return 42, nil },
		Cooldowns:          func() map[string]int { return map[string]int{"openai": 1, "anthropic": 2} },
		DeadLetters:        func() map[string]int64 { return map[string]int64{"poison": 2} },
		DeadLetterFailures: func() int64 { return 0 },
		LaneEvents:         func() map[string]int64 { return map[string]int64{"acquired": 7, "turns": 9, "yields": 0} },
	}); err != nil {
		t.Fatal(err)
	}
	_, body := get(t, serve(t, m, func(context.Context) error { return nil })+"/metrics")
	golden(t, "metrics.golden", normalize(body))
	parse(t, body)
}

// parse reads an exposition with Prometheus's own text parser (a test
// dependency only) and checks each family's type and series count.
func parse(t *testing.T, body string) {
	t.Helper()
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(strings.NewReader(body))
	if err != nil {
		t.Fatalf("Prometheus's parser refuses the page: %v", err)
	}
	for _, want := range []struct {
		name   string
		typ    dto.MetricType
		series int
	}{
		{"lanefleet_provider_latency_seconds", dto.MetricType_HISTOGRAM, 2},
		{"lanefleet_tokens_total", dto.MetricType_COUNTER, 9},
		{"lanefleet_lanes_active", dto.MetricType_GAUGE, 1},
		{"go_gc_duration_seconds", dto.MetricType_SUMMARY, 1},
		{"go_goroutines", dto.MetricType_GAUGE, 1},
		{"process_resident_memory_bytes", dto.MetricType_GAUGE, 1},
	} {
		f := fams[want.name]
		if f == nil || f.GetType() != want.typ || len(f.GetMetric()) != want.series {
			t.Errorf("parsed %s: %v", want.name, f)
		}
	}
	for _, s := range fams["lanefleet_provider_latency_seconds"].GetMetric() {
		for _, l := range s.GetLabel() {
			if l.GetName() == "model" && l.GetValue() != "claude-sonnet-4-6" && l.GetValue() != "we\"ird\\model\n" {
				t.Errorf("a label value read back as %q", l.GetValue())
			}
		}
		if h := s.GetHistogram(); len(h.GetBucket()) != 14 || h.GetSampleCount() == 0 {
			t.Errorf("histogram read back as %v", h)
		}
	}
}
