package main

import (
	"os"
	"strings"
	"testing"
	"time"
)

func TestParseProcStat(t *testing.T) {
	t.Parallel()
	// Fields 14 and 15 (utime, stime) are 250 and 40 ticks.
	tail := " S 1 2 3 4 5 6 7 8 9 10 250 40 0 0 20 0 8 0 100 2000000 500\n"
	cases := []struct {
		name, line string
		want       time.Duration
		err        string
	}{
		{name: "plain name", line: "1234 (nats-server)" + tail, want: 2900 * time.Millisecond},
		{name: "name with spaces and parentheses", line: "1234 (a (b) c)" + tail, want: 2900 * time.Millisecond},
		{name: "no name", line: "1234 nats-server" + tail, err: "no command name"},
		{name: "too few fields", line: "1234 (w) S 1 2 3", err: "fields after the command name"},
		{name: "not a number", line: "1234 (w) S 1 2 3 4 5 6 7 8 9 10 x 40 0", err: "proc stat"},
		{name: "negative", line: "1234 (w) S 1 2 3 4 5 6 7 8 9 10 -1 40 0", err: "proc stat"},
		{name: "too long", line: "1234 (" + strings.Repeat("w", 5000) + ")" + tail, err: "longer than"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			got, err := parseProcStat([]byte(tc.line))
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("err %v, want one containing %q", err, tc.err)
				}
				return
			}
			if err != nil || got != tc.want {
				t.Fatalf("got %v, %v; want %v", got, err, tc.want)
			}
		})
	}
}

// TestProcCPUOfSelf reads this process's own stat: it parses, and the
// CPU it reports does not go backwards.
func TestProcCPUOfSelf(t *testing.T) {
	t.Parallel()
	a, err := procCPU(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	b, err := procCPU(os.Getpid())
	if err != nil || b < a {
		t.Fatalf("second read %v, %v after %v", b, err, a)
	}
}

func TestParseCounts(t *testing.T) {
	t.Parallel()
	if got, err := parseCounts("1, 2,3"); err != nil || len(got) != 3 || got[0] != 1 || got[2] != 3 {
		t.Fatalf("got %v, %v", got, err)
	}
	for _, bad := range []string{"", "0", "1,x", "65", "-1"} {
		if _, err := parseCounts(bad); err == nil {
			t.Errorf("%q: no error", bad)
		}
	}
}

func TestClusterRowFigures(t *testing.T) {
	t.Parallel()
	r := clusterRow{turns: 100, elapsed: 10 * time.Second,
		cpuServers: 600 * time.Millisecond, cpuWorkers: 300 * time.Millisecond, cpuClient: 100 * time.Millisecond,
		idleServers: 0.02, idleWorkers: 0.01}
	if got := r.rate(); got != 10 {
		t.Errorf("rate %v, want 10 (turns over the window)", got)
	}
	r.loopsRate = 9.5
	if got := r.rate(); got != 9.5 {
		t.Errorf("rate %v, want the loops' 9.5", got)
	}
	if got := r.perTurn(r.cpuAll()); got != 10 {
		t.Errorf("CPU per turn %v ms, want 10", got)
	}
	// Idle: 30 ms/s over 10 s = 300 ms off 1,000 ms.
	if got := r.perTurn(r.cpuNet()); got != 7 {
		t.Errorf("net CPU per turn %v ms, want 7", got)
	}
	if got := r.per(10, 310); got != 3 {
		t.Errorf("per turn %v, want 3", got)
	}
	if got := (clusterRow{}).per(0, 5); got != 0 {
		t.Errorf("per turn with no turns %v, want 0", got)
	}
}
