package gateway

import (
	"flag"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"regexp"
	"strings"
	"testing"
	"time"
)

var updateGolden = flag.Bool("update", false, "rewrite testdata/*.golden from what the code writes now")

// TestMetricsGolden pins the gateway's /metrics page: names, help, types,
// labels, the latency buckets and the values of a fixed set of requests.
// The golden file was written by the Prometheus client the gateway used
// before its own writer; the Go runtime's and the process's sample values
// are masked (they change from run to run).
func TestMetricsGolden(t *testing.T) {
	t.Parallel()
	m := newMetrics()
	m.observe("POST /v1/sessions/{key}/messages", http.MethodPost, 202, 3*time.Millisecond)
	m.observe("POST /v1/sessions/{key}/messages", http.MethodPost, 429, 200*time.Microsecond)
	m.observe("GET /v1/sessions/{key}/events", http.MethodGet, 200, 40*time.Second)
	m.observe("GET /v1/sessions/{key}/events", "BREW", 405, time.Millisecond)
	m.limited.WithLabelValues("ci-bot").Inc()
	m.streams.Inc()
	m.streams.Inc()
	m.streams.Dec()
	rec := httptest.NewRecorder()
	m.handler().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/metrics", nil))
	if rec.Code != http.StatusOK || !strings.HasPrefix(rec.Header().Get("Content-Type"), "text/plain; version=0.0.4") {
		t.Fatalf("status %d, content type %q", rec.Code, rec.Header().Get("Content-Type"))
	}
	body, _ := io.ReadAll(rec.Body)
	goVersion := regexp.MustCompile(`\{version="[^"]*"\}`)
	lines := strings.Split(string(body), "\n")
	for i, line := range lines {
		if strings.HasPrefix(line, "go_") || strings.HasPrefix(line, "process_") {
			if j := strings.LastIndexByte(line, ' '); j > 0 {
				line = line[:j] + " V"
			}
			lines[i] = goVersion.ReplaceAllString(line, `{version="GO"}`)
		}
	}
	got := strings.Join(lines, "\n")
	const path = "testdata/metrics.golden"
	if *updateGolden {
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if got != string(want) {
		t.Errorf("%s differs (go test -run TestMetricsGolden -update rewrites it); got:\n%s", path, got)
	}
}
