package fleet

import (
	"bufio"
	"bytes"
	"encoding/json"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/lanefleet/lanefleet/message"
	"github.com/lanefleet/lanefleet/provider/scripted"
)

// lockedBuffer is a bytes.Buffer the member's goroutines may write to.
type lockedBuffer struct {
	mu     sync.Mutex
	b      bytes.Buffer
	notify chan struct{}
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.notify != nil {
		select {
		case l.notify <- struct{}{}:
		default:
		}
	}
	return l.b.Write(p)
}

// waitFor waits until the buffer holds s.
func (l *lockedBuffer) waitFor(t *testing.T, s string) {
	t.Helper()
	l.mu.Lock()
	if l.notify == nil {
		l.notify = make(chan struct{}, 1)
	}
	notify := l.notify
	l.mu.Unlock()
	deadline := time.After(time.Minute) // detects a hang only
	for !strings.Contains(l.String(), s) {
		select {
		case <-notify:
		case <-deadline:
			t.Fatalf("no %q in the log:\n%s", s, l.String())
		}
	}
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// TestRunEndLine: the run-end log line names its units (duration_ms,
// queue_wait_ms) and its tokens are the sum of the parts it shows, whatever
// total the provider reported (a line printed tokens_in 42, tokens_out
// 1400, tokens 49).
func TestRunEndLine(t *testing.T) {
	t.Parallel()
	var logs lockedBuffer
	reply := map[string]scripted.Script{"usage": {Replies: []scripted.Reply{
		{Text: "done", Usage: &message.Usage{Input: 42, Output: 1400, CacheRead: 7, CacheWrite: 3, TotalTokens: 49}},
	}}}
	m, err := Start(t.Context(), Config{DataDir: t.TempDir(), Listen: "127.0.0.1:0", Scripted: true, Scripts: reply,
		DefaultModel: "scripted/usage", NoBuiltinTools: true, Logger: zerolog.New(&logs)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(m.close)
	_, c, ctx := runStarted(t, m)
	if v := watch(t, ctx, c, "log-line", "hi"); v.runErr != nil {
		t.Fatal(v.runErr)
	}
	var end map[string]any
	for sc := bufio.NewScanner(strings.NewReader(logs.String())); sc.Scan(); {
		var line map[string]any
		if json.Unmarshal(sc.Bytes(), &line) == nil && line["message"] == "run ended" {
			end = line
		}
	}
	if end == nil {
		t.Fatalf("no run-end line:\n%s", logs.String())
	}
	for _, k := range []string{"duration_ms", "queue_wait_ms"} {
		if _, ok := end[k].(float64); !ok {
			t.Errorf("run-end line lacks %s: %v", k, end)
		}
	}
	for _, k := range []string{"duration", "queue_wait"} {
		if _, ok := end[k]; ok {
			t.Errorf("run-end line has %s without its unit: %v", k, end)
		}
	}
	want := map[string]float64{"tokens_in": 42, "tokens_out": 1400, "tokens_cache_read": 7, "tokens_cache_write": 3, "tokens": 1452}
	for k, v := range want {
		if end[k] != v {
			t.Errorf("%s = %v, want %v (line %v)", k, end[k], v, end)
		}
	}
}
