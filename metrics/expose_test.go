package metrics

import (
	"math"
	"strings"
	"sync"
	"testing"
)

// TestAppendText: escaping of help texts and label values, the special
// floats, a summary's quantiles, labels written sorted by name, and no
// family without a series.
func TestAppendText(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name string
		fam  Family
		want string
	}{
		{"help escaped", Family{Name: "a", Help: "back\\slash\nnew \"quoted\"", Type: TypeGauge, Series: []Series{{Value: 1}}},
			"# HELP a back\\\\slash\\nnew \"quoted\"\n# TYPE a gauge\na 1\n"},
		{"special floats", Family{Name: "b", Type: TypeGauge, LabelNames: []string{"k"},
			Series: []Series{{Labels: []string{"inf"}, Value: math.Inf(1)}, {Labels: []string{"nan"}, Value: math.NaN()}, {Labels: []string{"neg"}, Value: math.Inf(-1)}, {Labels: []string{"small"}, Value: 1e-7}}},
			"# HELP b \n# TYPE b gauge\nb{k=\"inf\"} +Inf\nb{k=\"nan\"} NaN\nb{k=\"neg\"} -Inf\nb{k=\"small\"} 1e-07\n"},
		{"labels sorted by name", Family{Name: "c", Type: TypeCounter, LabelNames: []string{"z", "a"}, Series: []Series{{Labels: []string{"1", "2"}, Value: 3}}},
			"# HELP c \n# TYPE c counter\nc{a=\"2\",z=\"1\"} 3\n"},
		{"summary", Family{Name: "d", Type: TypeSummary, Series: []Series{{Hist: &Distribution{Bounds: []float64{0, 0.5, 1}, Values: []float64{0.1, 0.2, 0.3}, Sum: 0.6, Count: 3}}}},
			"# HELP d \n# TYPE d summary\nd{quantile=\"0\"} 0.1\nd{quantile=\"0.5\"} 0.2\nd{quantile=\"1\"} 0.3\nd_sum 0.6\nd_count 3\n"},
	} {
		if got := string(AppendText(nil, []Family{c.fam})); got != c.want {
			t.Errorf("%s:\n got %q\nwant %q", c.name, got, c.want)
		}
	}
	r := NewRegistry()
	r.NewCounterVec("empty_total", "never used", "l")
	if fams, err := r.Gather(); err != nil || len(fams) != 0 {
		t.Errorf("a family without series is shown: %v %v", fams, err)
	}
}

// TestHistogramBuckets: an observation on a bound counts in that bucket
// (le: less or equal), above the last one only in +Inf; concurrent
// records all count.
func TestHistogramBuckets(t *testing.T) {
	t.Parallel()
	h := newHistogram([]float64{1, 2})
	var wg sync.WaitGroup
	for _, v := range []float64{0.5, 1, 1.5, 2, 3} {
		wg.Go(func() { h.Observe(v) })
	}
	wg.Wait()
	d := h.snapshot()
	if d.Counts[0] != 2 || d.Counts[1] != 4 || d.Count != 5 || d.Sum != 8 {
		t.Errorf("buckets %v, count %d, sum %v", d.Counts, d.Count, d.Sum)
	}
	r := NewRegistry()
	c := r.NewCounterVec("c_total", "", "l")
	c.WithLabelValues("x").Add(-1) // a counter never goes down
	c.WithLabelValues("x").Inc()
	fams, _ := r.Gather()
	if out := string(AppendText(nil, fams)); !strings.Contains(out, "c_total{l=\"x\"} 1\n") {
		t.Errorf("counter: %s", out)
	}
}
