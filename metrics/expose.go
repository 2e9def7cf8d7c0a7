package metrics

import (
	"compress/gzip"
	"errors"
	"math"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
)

// The exposition: counters, gauges and histograms with labels, held in a
// Registry and written in the Prometheus text format 0.0.4 — families
// sorted by name, series by their label values, labels by name — the page
// Prometheus's own Go client writes for the same families.

// Type is a family's TYPE.
type Type string

// Family types.
const (
	TypeCounter   Type = "counter"
	TypeGauge     Type = "gauge"
	TypeHistogram Type = "histogram"
	TypeSummary   Type = "summary"
)

// Family is one metric family as a scrape reads it.
type Family struct {
	Name, Help string
	Type       Type
	LabelNames []string // the names of Series.Labels, in their order
	Series     []Series
}

// Series is one labelled series of a Family.
type Series struct {
	Labels []string      // values, one per Family.LabelNames
	Value  float64       // a counter's or gauge's value
	Hist   *Distribution // a histogram's or summary's
}

// Distribution is a histogram's or a summary's state.
type Distribution struct {
	// Bounds are a histogram's upper bounds (+Inf implied) or a
	// summary's quantiles.
	Bounds []float64
	Counts []uint64  // histogram: the cumulative count at or under each bound
	Values []float64 // summary: the value at each quantile
	Sum    float64
	Count  uint64
}

// collector adds its families to a scrape; an error leaves out what it
// could not read and is reported, the rest of the page still written.
type collector interface {
	collect(add func(Family)) error
}

type collectFunc func(add func(Family)) error

func (c collectFunc) collect(add func(Family)) error { return c(add) }

// Registry holds the families of one /metrics page. A family name is
// registered once; a second registration panics, as names are fixed in
// the code.
type Registry struct {
	mu    sync.Mutex
	names map[string]bool
	cs    []collector
}

// NewRegistry returns an empty registry.
func NewRegistry() *Registry { return &Registry{names: map[string]bool{}} }

func (r *Registry) register(c collector, names ...string) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, n := range names {
		if r.names[n] {
			return errors.New("metrics: " + n + " is registered already")
		}
	}
	for _, n := range names {
		r.names[n] = true
	}
	r.cs = append(r.cs, c)
	return nil
}

func (r *Registry) mustRegister(c collector, names ...string) {
	if err := r.register(c, names...); err != nil {
		panic(err)
	}
}

// Gather reads every family with at least one series, sorted by name,
// its series sorted by label values. The error joins what collectors
// could not read; the families returned are the rest.
func (r *Registry) Gather() ([]Family, error) {
	r.mu.Lock()
	cs := slices.Clone(r.cs)
	r.mu.Unlock()
	var out []Family
	var errs []error
	for _, c := range cs {
		errs = append(errs, c.collect(func(f Family) {
			if len(f.Series) > 0 {
				out = append(out, f)
			}
		}))
	}
	for i := range out {
		f := &out[i]
		order := sortedOrder(f.LabelNames)
		slices.SortFunc(f.Series, func(a, b Series) int {
			for _, j := range order {
				if c := strings.Compare(a.Labels[j], b.Labels[j]); c != 0 {
					return c
				}
			}
			return 0
		})
	}
	slices.SortFunc(out, func(a, b Family) int { return strings.Compare(a.Name, b.Name) })
	return out, errors.Join(errs...)
}

// sortedOrder returns the indexes of names in their sorted order.
func sortedOrder(names []string) []int {
	idx := make([]int, len(names))
	for i := range idx {
		idx[i] = i
	}
	slices.SortFunc(idx, func(a, b int) int { return strings.Compare(names[a], names[b]) })
	return idx
}

// ContentType is the text format's media type.
const ContentType = "text/plain; version=0.0.4; charset=utf-8"

// serve writes the registry's page, gzipped when the scraper accepts it
// (Prometheus does). A collector's error is handed to failed; the page
// holds the rest.
func (r *Registry) serve(w http.ResponseWriter, req *http.Request, failed func(error)) {
	fams, err := r.Gather()
	if err != nil && failed != nil {
		failed(err)
	}
	body := AppendText(nil, fams)
	w.Header().Set("Content-Type", ContentType)
	if acceptsGzip(req.Header.Get("Accept-Encoding")) {
		w.Header().Set("Content-Encoding", "gzip")
		zw := gzip.NewWriter(w)
		_, _ = zw.Write(body)
		_ = zw.Close()
		return
	}
	w.Header().Set("Content-Length", strconv.Itoa(len(body)))
	_, _ = w.Write(body)
}

// Handler serves the registry's page.
func (r *Registry) Handler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) { r.serve(w, req, nil) })
}

func acceptsGzip(ae string) bool {
	for _, part := range strings.Split(ae, ",") {
		enc, params, _ := strings.Cut(part, ";")
		if strings.TrimSpace(enc) == "gzip" && strings.ReplaceAll(strings.TrimSpace(params), " ", "") != "q=0" {
			return true
		}
	}
	return false
}

// AppendText appends fams in the text format 0.0.4.
func AppendText(b []byte, fams []Family) []byte {
	for _, f := range fams {
		b = append(b, "# HELP "...)
		b = append(b, f.Name...)
		b = append(b, ' ')
		b = appendEscaped(b, f.Help, false)
		b = append(b, "\n# TYPE "...)
		b = append(b, f.Name...)
		b = append(b, ' ')
		b = append(b, f.Type...)
		b = append(b, '\n')
		order := sortedOrder(f.LabelNames)
		for _, s := range f.Series {
			switch {
			case s.Hist != nil && f.Type == TypeSummary:
				for i, q := range s.Hist.Bounds {
					b = appendSample(b, f.Name, "", f.LabelNames, order, s.Labels, "quantile", q)
					b = appendFloat(b, s.Hist.Values[i])
					b = append(b, '\n')
				}
				b = appendSums(b, f, order, s)
			case s.Hist != nil:
				for i, le := range s.Hist.Bounds {
					b = appendSample(b, f.Name, "_bucket", f.LabelNames, order, s.Labels, "le", le)
					b = strconv.AppendUint(b, s.Hist.Counts[i], 10)
					b = append(b, '\n')
				}
				b = appendSample(b, f.Name, "_bucket", f.LabelNames, order, s.Labels, "le", math.Inf(1))
				b = strconv.AppendUint(b, s.Hist.Count, 10)
				b = append(b, '\n')
				b = appendSums(b, f, order, s)
			default:
				b = appendSample(b, f.Name, "", f.LabelNames, order, s.Labels, "", 0)
				b = appendFloat(b, s.Value)
				b = append(b, '\n')
			}
		}
	}
	return b
}

func appendSums(b []byte, f Family, order []int, s Series) []byte {
	b = appendSample(b, f.Name, "_sum", f.LabelNames, order, s.Labels, "", 0)
	b = appendFloat(b, s.Hist.Sum)
	b = append(b, '\n')
	b = appendSample(b, f.Name, "_count", f.LabelNames, order, s.Labels, "", 0)
	b = strconv.AppendUint(b, s.Hist.Count, 10)
	return append(b, '\n')
}

// appendSample appends a sample's name and labels (sorted by name, the
// extra one — le, quantile — last) and the space before its value.
func appendSample(b []byte, name, suffix string, names []string, order []int, values []string, extra string, extraValue float64) []byte {
	b = append(b, name...)
	b = append(b, suffix...)
	if len(names) > 0 || extra != "" {
		b = append(b, '{')
		for n, i := range order {
			if n > 0 {
				b = append(b, ',')
			}
			b = append(b, names[i]...)
			b = append(b, `="`...)
			b = appendEscaped(b, values[i], true)
			b = append(b, '"')
		}
		if extra != "" {
			if len(names) > 0 {
				b = append(b, ',')
			}
			b = append(b, extra...)
			b = append(b, `="`...)
			b = appendFloat(b, extraValue)
			b = append(b, '"')
		}
		b = append(b, '}')
	}
	return append(b, ' ')
}

// appendEscaped escapes a HELP text (backslash, newline) or a label value
// (also the double quote).
func appendEscaped(b []byte, s string, quote bool) []byte {
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case c == '\\':
			b = append(b, `\\`...)
		case c == '\n':
			b = append(b, `\n`...)
		case c == '"' && quote:
			b = append(b, `\"`...)
		default:
			b = append(b, c)
		}
	}
	return b
}

func appendFloat(b []byte, f float64) []byte {
	switch {
	case math.IsInf(f, 1):
		return append(b, "+Inf"...)
	case math.IsInf(f, -1):
		return append(b, "-Inf"...)
	case math.IsNaN(f):
		return append(b, "NaN"...)
	}
	return strconv.AppendFloat(b, f, 'g', -1, 64)
}

// Counter is a value that only goes up.
type Counter struct{ bits atomic.Uint64 }

// Add adds v; a negative v is ignored (a counter never goes down).
func (c *Counter) Add(v float64) {
	if v < 0 || math.IsNaN(v) {
		return
	}
	addFloat(&c.bits, v)
}

// Inc adds 1.
func (c *Counter) Inc() { addFloat(&c.bits, 1) }

// Value returns the count.
func (c *Counter) Value() float64 { return math.Float64frombits(c.bits.Load()) }

// Gauge is a value that goes up and down.
type Gauge struct{ bits atomic.Uint64 }

// Inc adds 1.
func (g *Gauge) Inc() { addFloat(&g.bits, 1) }

// Dec subtracts 1.
func (g *Gauge) Dec() { addFloat(&g.bits, -1) }

// Value returns the value.
func (g *Gauge) Value() float64 { return math.Float64frombits(g.bits.Load()) }

func addFloat(bits *atomic.Uint64, v float64) {
	for {
		old := bits.Load()
		if bits.CompareAndSwap(old, math.Float64bits(math.Float64frombits(old)+v)) {
			return
		}
	}
}

// Histogram counts observations into buckets by upper bound.
type Histogram struct {
	bounds []float64 // sorted upper bounds, +Inf implied

	mu     sync.Mutex
	counts []uint64 // per bucket, not cumulative; the last is +Inf's
	sum    float64
	count  uint64
}

func newHistogram(bounds []float64) *Histogram {
	return &Histogram{bounds: bounds, counts: make([]uint64, len(bounds)+1)}
}

// Observe records v in the first bucket whose bound is at least v.
func (h *Histogram) Observe(v float64) {
	i, _ := slices.BinarySearch(h.bounds, v)
	h.mu.Lock()
	h.counts[i]++
	h.sum += v
	h.count++
	h.mu.Unlock()
}

func (h *Histogram) snapshot() *Distribution {
	h.mu.Lock()
	defer h.mu.Unlock()
	d := &Distribution{Bounds: h.bounds, Counts: make([]uint64, len(h.bounds)), Sum: h.sum, Count: h.count}
	var n uint64
	for i := range h.bounds {
		n += h.counts[i]
		d.Counts[i] = n
	}
	return d
}

// exponentialBuckets returns count bounds, the first start and each
// factor times the one before.
func exponentialBuckets(start, factor float64, count int) []float64 {
	out := make([]float64, count)
	for i := range out {
		out[i] = start
		start *= factor
	}
	return out
}

// vec is a family of series of one kind by label values. Callers bound
// the values they pass (see capped); the vector keeps every series it
// was asked for.
type vec[T any] struct {
	labels []string
	make   func() *T

	mu       sync.RWMutex
	children map[string]*child[T]
}

type child[T any] struct {
	values []string
	m      *T
}

func newVec[T any](labels []string, make func() *T) vec[T] {
	return vec[T]{labels: labels, make: make, children: map[string]*child[T]{}}
}

// with returns the series of values, made on first use. A count of
// values other than the labels' panics: a programming error.
func (v *vec[T]) with(values []string) *T {
	if len(values) != len(v.labels) {
		panic("metrics: " + strconv.Itoa(len(values)) + " label values for " + strconv.Itoa(len(v.labels)) + " labels")
	}
	key := strings.Join(values, "\xff")
	v.mu.RLock()
	c := v.children[key]
	v.mu.RUnlock()
	if c != nil {
		return c.m
	}
	v.mu.Lock()
	defer v.mu.Unlock()
	if c := v.children[key]; c != nil {
		return c.m
	}
	c = &child[T]{values: slices.Clone(values), m: v.make()}
	v.children[key] = c
	return c.m
}

func (v *vec[T]) each(f func(values []string, m *T)) {
	v.mu.RLock()
	defer v.mu.RUnlock()
	for _, c := range v.children {
		f(c.values, c.m)
	}
}

// CounterVec is a family of counters by label values.
type CounterVec struct{ vec[Counter] }

// WithLabelValues returns the counter of values, one per label.
func (v *CounterVec) WithLabelValues(values ...string) *Counter { return v.with(values) }

// HistogramVec is a family of histograms by label values.
type HistogramVec struct{ vec[Histogram] }

// WithLabelValues returns the histogram of values, one per label.
func (v *HistogramVec) WithLabelValues(values ...string) *Histogram { return v.with(values) }

// NewCounterVec registers a counter family with labels.
func (r *Registry) NewCounterVec(name, help string, labels ...string) *CounterVec {
	v := &CounterVec{newVec(labels, func() *Counter { return new(Counter) })}
	r.mustRegister(collectFunc(func(add func(Family)) error {
		f := Family{Name: name, Help: help, Type: TypeCounter, LabelNames: labels}
		v.each(func(values []string, c *Counter) {
			f.Series = append(f.Series, Series{Labels: values, Value: c.Value()})
		})
		add(f)
		return nil
	}), name)
	return v
}

// NewGauge registers a gauge without labels.
func (r *Registry) NewGauge(name, help string) *Gauge {
	g := new(Gauge)
	r.mustRegister(collectFunc(func(add func(Family)) error {
		add(Family{Name: name, Help: help, Type: TypeGauge, Series: []Series{{Value: g.Value()}}})
		return nil
	}), name)
	return g
}

// NewHistogram registers a histogram without labels, with bounds sorted
// ascending.
func (r *Registry) NewHistogram(name, help string, bounds []float64) *Histogram {
	h := newHistogram(bounds)
	r.mustRegister(collectFunc(func(add func(Family)) error {
		add(Family{Name: name, Help: help, Type: TypeHistogram, Series: []Series{{Hist: h.snapshot()}}})
		return nil
	}), name)
	return h
}

// NewHistogramVec registers a histogram family with labels, each with
// bounds sorted ascending.
func (r *Registry) NewHistogramVec(name, help string, bounds []float64, labels ...string) *HistogramVec {
	v := &HistogramVec{newVec(labels, func() *Histogram { return newHistogram(bounds) })}
	r.mustRegister(collectFunc(func(add func(Family)) error {
		f := Family{Name: name, Help: help, Type: TypeHistogram, LabelNames: labels}
		v.each(func(values []string, h *Histogram) {
			f.Series = append(f.Series, Series{Labels: values, Hist: h.snapshot()})
		})
		add(f)
		return nil
	}), name)
	return v
}

// NewConst registers a gauge of value 1 with fixed labels (an info
// metric: the build, the Go version).
func (r *Registry) NewConst(name, help string, labels, values []string) {
	r.mustRegister(collectFunc(func(add func(Family)) error {
		add(Family{Name: name, Help: help, Type: TypeGauge, LabelNames: labels, Series: []Series{{Labels: values, Value: 1}}})
		return nil
	}), name)
}
