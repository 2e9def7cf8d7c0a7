package fleet

import (
	"testing"
	"time"
)

// TestTurnRate: the rate is the counter's increase over the samples of
// the last rateWindow (and the one just before it), per second.
func TestTurnRate(t *testing.T) {
	t.Parallel()
	t0 := time.Unix(1000, 0)
	for _, tc := range []struct {
		name    string
		samples []int64 // one a second from t0
		want    float64
	}{
		{"no sample", nil, 0},
		{"one sample", []int64{5}, 0},
		{"steady", []int64{0, 2, 4, 6}, 2},
		{"idle", []int64{7, 7, 7}, 0},
		// 20 samples: only the last 11 (10 s) count.
		{"old bursts leave the window", []int64{0, 200, 400, 600, 800, 1000, 1000, 1000, 1000, 1000, 1000, 1000, 1000, 1000, 1000, 1000, 1000, 1000, 1000, 1010}, 1},
		// A counter that went back (it cannot; a restart would) is 0.
		{"counter went back", []int64{10, 3}, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var r turnRate
			for i, n := range tc.samples {
				r.sample(t0.Add(time.Duration(i)*time.Second), n)
			}
			if got := r.rate(); got != tc.want {
				t.Fatalf("rate %v, want %v", got, tc.want)
			}
			if len(r.samples) > int(rateWindow/time.Second)+2 {
				t.Fatalf("%d samples kept", len(r.samples))
			}
		})
	}
}
