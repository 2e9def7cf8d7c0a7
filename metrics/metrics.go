// Package metrics holds a fleet member's metrics and serves them, with
// health and readiness, on one HTTP listener:
//
//	/metrics  Prometheus text exposition
//	/healthz  200 while the process is up
//	/readyz   200 while the member is connected, its streams answer and it takes lanes
//
// The member feeds it from its edges (the turn handler, the providers, the
// event sink, the lane worker's counters, the stream state at scrape); no
// label ever holds a session key, and the labels a sender can influence
// (model, tool) are capped in how many values they take.
//
// metrics.go holds the member's families and what records into them;
// expose.go the counters, gauges and histograms, their registry and the
// text format writer (the gateway's families use them too); runtime.go
// the Go runtime's and the process's families; http.go the listener.
package metrics

import (
	"context"
	"strings"
	"sync"
	"time"

	"github.com/lanefleet/lanefleet/events"
	"github.com/lanefleet/lanefleet/internal/version"
	"github.com/lanefleet/lanefleet/message"
)

// Namespace prefixes every metric.
const Namespace = "lanefleet"

// MaxLabelValues bounds the distinct values of a label a sender can
// influence (the model a message asks for, a tool name); later values
// are counted as "other".
const MaxLabelValues = 200

// Turn outcomes (lanefleet_turns_total{outcome}).
const (
	OutcomeOK        = "ok"         // the run ended with a reply
	OutcomeToolCalls = "tool_calls" // it stopped for client tool calls or an approval
	OutcomeError     = "error"      // it ended with an error result (lanefleet_turn_errors_total says which)
	OutcomeAborted   = "aborted"    // cancelled: interrupted, or the worker stopped
	OutcomeFailed    = "failed"     // the handler failed: the lane retries the turn
)

// outcomes are the turn outcomes, each exposed from the start.
var outcomes = []string{OutcomeOK, OutcomeToolCalls, OutcomeError, OutcomeAborted, OutcomeFailed}

// Compaction reasons (lanefleet_compactions_total{reason}).
const (
	CompactionThreshold = "threshold" // the context passed the compaction threshold
	CompactionOverflow  = "overflow"  // the provider refused an overflowing context; the request is retried
	CompactionFailed    = "failed"    // the compaction failed
)

// tokenKinds are the kinds of lanefleet_tokens_total.
var tokenKinds = []string{"input", "output", "cache_read", "cache_write"}

// Metrics are a member's collectors. The zero value is not usable; New
// returns one. A nil *Metrics records nothing, so callers need not check.
type Metrics struct {
	reg *Registry

	turns        *CounterVec
	turnErrors   *CounterVec
	turnDuration *Histogram
	firstEvent   *Histogram
	queueWait    *HistogramVec
	provReqs     *CounterVec
	provLatency  *HistogramVec
	tokens       *CounterVec
	cost         *CounterVec
	toolCalls    *CounterVec
	compactions  *CounterVec
	budget       *CounterVec
	budgetSpend  *CounterVec
	rateWaits    *CounterVec
	rateWaitSecs *CounterVec
	schedDue     *CounterVec
	schedLate    *Histogram

	models    capped
	tools     capped
	tenants   capped
	providers capped

	mu       sync.Mutex
	expected map[string]bool // providers of the configured models (Expect)
}

// New returns a member's families registered on a registry of their own,
// with the Go runtime's and the process's.
func New() *Metrics {
	m := &Metrics{reg: NewRegistry()}
	f := factory{m.reg}
	m.turns = f.counterVec("turns_total", "Turns run by this worker, by outcome (ok, tool_calls, error, aborted, failed).", "outcome")
	m.turnErrors = f.counterVec("turn_errors_total", "Turns that ended with an error result, by error kind.", "kind")
	m.turnDuration = f.histogram("turn_duration_seconds", "How long a turn ran on this worker, from its start to its result.", exponentialBuckets(0.1, 2, 13))
	m.firstEvent = f.histogram("first_event_seconds", "Time from a message's arrival in the inbound stream to its turn's first reply delta (assistant or thinking): what a user waits for the first token.", exponentialBuckets(0.05, 2, 13))
	m.queueWait = f.histogramVec("queue_wait_seconds", "Time from a message's arrival in the inbound stream to the start of its turn (its wait for a slot), by the session's tenant (\"none\" without one).", exponentialBuckets(0.01, 2.5, 12), "tenant")
	m.provReqs = f.counterVec("provider_requests_total", "Model calls, by provider, model and outcome (ok, or the failover reason: rate_limit, overloaded, auth, timeout, ...).", "provider", "model", "outcome")
	m.provLatency = f.histogramVec("provider_latency_seconds", "How long a model call took, to its last streamed byte.", exponentialBuckets(0.1, 2, 13), "provider", "model")
	m.tokens = f.counterVec("tokens_total", "Tokens of model calls, by provider, model and kind (input, output, cache_read, cache_write).", "provider", "model", "kind")
	m.cost = f.counterVec("cost_usd_total", "Cost of model calls in USD, priced from the model catalog.", "provider", "model")
	m.toolCalls = f.counterVec("tool_calls_total", "Tool calls run by this worker, by tool and outcome (ok, error); client tools' results are tool=\"client\".", "tool", "outcome")
	m.compactions = f.counterVec("compactions_total", "Transcript compactions, by reason (threshold, overflow, failed).", "reason")
	m.budget = f.counterVec("budget_events_total", "Budget events of model calls with a budget, by tenant (\"none\" for a session budget without a tenant) and event: reached (a call refused, the session paused) or soft_limit (a warning).", "tenant", "event")
	m.budgetSpend = f.counterVec("budget_spend_usd_total", "USD settled against budgets, by tenant, priced from the model catalog.", "tenant")
	m.rateWaits = f.counterVec("rate_limit_waits_total", "Model calls that waited for room in a fleet-wide provider rate limit (--rate-limit), by tenant and provider.", "tenant", "provider")
	m.rateWaitSecs = f.counterVec("rate_limit_wait_seconds_total", "Time model calls waited for room in a fleet-wide provider rate limit, by tenant and provider.", "tenant", "provider")
	m.schedDue = f.counterVec("schedule_due_total", "Schedules' due times this worker handled, by outcome: fired, skipped (overlap policy), missed (catch-up policy) or failed (the lane refused it).", "outcome")
	m.schedLate = f.histogram("schedule_lateness_seconds", "How late after its due time a schedule's firing was sent (catch-up firings after an outage included).", exponentialBuckets(0.01, 2.5, 12))
	bi := version.Get()
	m.reg.NewConst(Namespace+"_build_info", "The running build: 1, with its version, commit and Go version.",
		[]string{"version", "commit", "goversion"}, []string{bi.Version, bi.Revision, bi.Go})
	m.reg.RegisterRuntime()
	m.models.max, m.tools.max, m.tenants.max, m.providers.max = MaxLabelValues, MaxLabelValues, MaxLabelValues, MaxLabelValues
	// Label values known now are exposed at 0 from the start: a panel or
	// an alert on their rate then shows 0, not "No data".
	for _, o := range outcomes {
		m.turns.WithLabelValues(o)
	}
	for _, r := range []string{CompactionThreshold, CompactionOverflow, CompactionFailed} {
		m.compactions.WithLabelValues(r)
	}
	for _, o := range []string{"fired", "skipped", "missed", "failed"} {
		m.schedDue.WithLabelValues(o)
	}
	return m
}

// Expect exposes the series of the configured models (references
// "provider/model": the default model, the fallbacks) at 0 before their
// first call: their successful calls, tokens by kind and cost, and their
// providers' auth-profile cooldowns. A reference without a provider is
// skipped. The models count towards MaxLabelValues.
func (m *Metrics) Expect(models ...string) {
	if m == nil {
		return
	}
	for _, ref := range models {
		prov, model, ok := strings.Cut(ref, "/")
		if !ok || prov == "" || model == "" || m.models.value(ref) == other {
			continue
		}
		m.provReqs.WithLabelValues(prov, model, "ok")
		for _, k := range tokenKinds {
			m.tokens.WithLabelValues(prov, model, k)
		}
		m.cost.WithLabelValues(prov, model)
		m.mu.Lock()
		if m.expected == nil {
			m.expected = map[string]bool{}
		}
		m.expected[prov] = true
		m.mu.Unlock()
	}
}

// expectedProviders returns the providers of the models Expect named.
func (m *Metrics) expectedProviders() []string {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := make([]string, 0, len(m.expected))
	for p := range m.expected {
		out = append(out, p)
	}
	return out
}

// Registry returns the registry the families are on.
func (m *Metrics) Registry() *Registry { return m.reg }

// factory registers the member's families under Namespace.
type factory struct{ reg *Registry }

func (f factory) counterVec(name, help string, labels ...string) *CounterVec {
	return f.reg.NewCounterVec(Namespace+"_"+name, help, labels...)
}

func (f factory) histogram(name, help string, buckets []float64) *Histogram {
	return f.reg.NewHistogram(Namespace+"_"+name, help, buckets)
}

func (f factory) histogramVec(name, help string, buckets []float64, labels ...string) *HistogramVec {
	return f.reg.NewHistogramVec(Namespace+"_"+name, help, buckets, labels...)
}

// TurnEnded records a turn's end: its outcome (Outcome*), the error kind
// of an OutcomeError, and how long it ran.
func (m *Metrics) TurnEnded(outcome, errKind string, d time.Duration) {
	if m == nil {
		return
	}
	m.turns.WithLabelValues(outcome).Inc()
	if outcome == OutcomeError && errKind != "" {
		m.turnErrors.WithLabelValues(errKind).Inc()
	}
	m.turnDuration.Observe(d.Seconds())
}

// QueueWait records how long a message of tenant's ("" = none) waited
// for its turn; tenants past MaxLabelValues are "other".
func (m *Metrics) QueueWait(tenant string, d time.Duration) {
	if m != nil {
		m.queueWait.WithLabelValues(m.tenant(tenant)).Observe(max(d, 0).Seconds())
	}
}

// FirstEvent records how long a message waited for its first reply delta.
func (m *Metrics) FirstEvent(d time.Duration) {
	if m != nil {
		m.firstEvent.Observe(max(d, 0).Seconds())
	}
}

// ProviderCall records a model call: its outcome ("ok" or a failover
// reason), duration, and the usage of the message it returned (nil when
// none).
func (m *Metrics) ProviderCall(prov, model, outcome string, d time.Duration, u *message.Usage) {
	if m == nil {
		return
	}
	model = m.models.value(prov + "/" + model)
	if model == other {
		prov = other
	} else {
		model = model[len(prov)+1:]
	}
	m.provReqs.WithLabelValues(prov, model, outcome).Inc()
	m.provLatency.WithLabelValues(prov, model).Observe(d.Seconds())
	if u == nil {
		return
	}
	for i, n := range []int64{u.Input, u.Output, u.CacheRead, u.CacheWrite} {
		if n > 0 {
			m.tokens.WithLabelValues(prov, model, tokenKinds[i]).Add(float64(n))
		}
	}
	if c := u.Cost.Total; c > 0 {
		m.cost.WithLabelValues(prov, model).Add(c)
	}
}

// ToolCall records a tool call's end.
func (m *Metrics) ToolCall(tool string, failed bool) {
	if m == nil {
		return
	}
	outcome := "ok"
	if failed {
		outcome = "error"
	}
	m.toolCalls.WithLabelValues(m.tools.value(tool), outcome).Inc()
}

// Budget events (BudgetEvent).
const (
	BudgetReached   = "reached"
	BudgetSoftLimit = "soft_limit"
)

// BudgetEvent records a budget event (Budget*) of a tenant's call ("" =
// none); tenants past MaxLabelValues are "other".
func (m *Metrics) BudgetEvent(tenant, event string) {
	if m != nil {
		m.budget.WithLabelValues(m.tenant(tenant), event).Inc()
	}
}

// RateWait records a model call of tenant's ("" = none) on provider that
// waited d for room in a provider rate limit.
func (m *Metrics) RateWait(tenant, provider string, d time.Duration) {
	if m != nil {
		p := m.providers.value(provider)
		m.rateWaits.WithLabelValues(m.tenant(tenant), p).Inc()
		m.rateWaitSecs.WithLabelValues(m.tenant(tenant), p).Add(d.Seconds())
	}
}

// BudgetSpend records USD settled against a tenant's or its session's
// budget.
func (m *Metrics) BudgetSpend(tenant string, usd float64) {
	if m != nil && usd > 0 {
		m.budgetSpend.WithLabelValues(m.tenant(tenant)).Add(usd)
	}
}

// ScheduleDue records n of a schedule's due times handled with outcome
// (fired, skipped, missed, failed) and, for a firing, how late it was
// sent.
func (m *Metrics) ScheduleDue(outcome string, n int, late time.Duration) {
	if m == nil {
		return
	}
	m.schedDue.WithLabelValues(outcome).Add(float64(n))
	if outcome == "fired" {
		m.schedLate.Observe(max(late, 0).Seconds())
	}
}

func (m *Metrics) tenant(t string) string {
	if t == "" {
		return "none"
	}
	return m.tenants.value(t)
}

// Compaction records a compaction by reason (Compaction*).
func (m *Metrics) Compaction(reason string) {
	if m != nil {
		m.compactions.WithLabelValues(reason).Inc()
	}
}

// other is the label value past MaxLabelValues.
const other = "other"

// capped hands out label values, the first max distinct ones as they are
// and "other" after.
type capped struct {
	mu   sync.Mutex
	max  int
	seen map[string]bool
}

func (c *capped) value(v string) string {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.seen[v] {
		return v
	}
	if len(c.seen) >= c.max {
		return other
	}
	if c.seen == nil {
		c.seen = map[string]bool{}
	}
	c.seen[v] = true
	return v
}

// State is what the member reads at scrape time.
type State struct {
	// LanesActive returns the lanes the worker runs now.
	LanesActive func() int
	// LanesWaiting returns the lanes waiting on this worker for a slot.
	LanesWaiting func() int
	// Backlog returns the messages stored in the inbound stream (fleet
	// wide: every worker reports the same).
	Backlog func(ctx context.Context) (uint64, error)
	// Cooldowns returns the auth profiles in cooldown or disabled now, by
	// provider; the providers of the models Expect named are exposed
	// with 0 when it leaves them out.
	Cooldowns func() map[string]int
	// DeadLetters returns the dead letters this worker stored, by reason;
	// every reason (events.DeadReasons) is exposed, with 0 when it has none.
	DeadLetters func() map[string]int64
	// DeadLetterFailures returns how often a dead letter could not be
	// stored (the message stayed on its lane, to be tried again).
	DeadLetterFailures func() int64
	// LaneEvents returns the lane worker's counters by event (acquired,
	// released, merged, dropped, aborted, swept, naks, follower_acks,
	// yields, waited, handed_back).
	LaneEvents func() map[string]int64
}

// Watch registers the families that read st at every scrape. A second
// Watch is an error.
func (m *Metrics) Watch(st State) error {
	c := &stateCollector{st: st, m: m}
	names := make([]string, 0, len(stateFamilies))
	for _, f := range stateFamilies {
		names = append(names, f.Name)
	}
	return m.reg.register(collectFunc(c.collect), names...)
}

// scrapeTimeout bounds what a scrape waits for the stream state.
const scrapeTimeout = 2 * time.Second

// The families read from State, their series left empty.
var (
	famLanes    = Family{Name: Namespace + "_lanes_active", Type: TypeGauge, Help: "Lanes this worker runs now (turns running or draining)."}
	famWaiting  = Family{Name: Namespace + "_lanes_waiting", Type: TypeGauge, Help: "Lanes waiting on this worker for a slot (every slot busy); a lane that has run its turn budget yields its slot to the first of them."}
	famBacklog  = Family{Name: Namespace + "_inbound_backlog_messages", Type: TypeGauge, Help: "Messages stored in the inbound stream, fleet-wide: waiting, running, or processed and not purged yet (every worker reports the same; take the max)."}
	famCooldown = Family{Name: Namespace + "_auth_profile_cooldowns", Type: TypeGauge, Help: "Auth profiles in cooldown or disabled now, by provider (fleet-wide state of this worker's profiles).", LabelNames: []string{"provider"}}
	famDead     = Family{Name: Namespace + "_dead_letters_total", Type: TypeCounter, Help: "Dead letters this worker stored, by reason (poison, invalid, bad-lane).", LabelNames: []string{"reason"}}
	famDeadFail = Family{Name: Namespace + "_dead_letter_failures_total", Type: TypeCounter, Help: "Dead letters this worker could not store (the dead-letter stream full or unavailable); each time the message stayed on its lane, which waits behind it, and is tried again."}
	famLaneEv   = Family{Name: Namespace + "_lane_events_total", Type: TypeCounter, Help: "The lane worker's counters: lanes acquired and released, messages merged or dropped without a turn, messages not run as duplicates of an earlier one of their session, attempts aborted, lanes swept, naks, deliveries acked as followers, slots yielded to waiting lanes, deliveries that waited for a slot and that were handed back while waiting.", LabelNames: []string{"event"}}
	famScrapeOK = Family{Name: Namespace + "_inbound_backlog_scrape_ok", Type: TypeGauge, Help: "1 when the last scrape read the inbound stream's state, 0 when it failed."}

	stateFamilies = []Family{famLanes, famWaiting, famBacklog, famCooldown, famDead, famDeadFail, famLaneEv, famScrapeOK}
)

type stateCollector struct {
	st State
	m  *Metrics
}

// with returns f holding series.
func with(f Family, series ...Series) Family {
	f.Series = series
	return f
}

func (c *stateCollector) collect(add func(Family)) error {
	if f := c.st.LanesActive; f != nil {
		add(with(famLanes, Series{Value: float64(f())}))
	}
	if f := c.st.LanesWaiting; f != nil {
		add(with(famWaiting, Series{Value: float64(f())}))
	}
	if f := c.st.Backlog; f != nil {
		ctx, cancel := context.WithTimeout(context.Background(), scrapeTimeout)
		n, err := f(ctx)
		cancel()
		ok := 0.0
		if err == nil {
			ok = 1
			add(with(famBacklog, Series{Value: float64(n)}))
		}
		add(with(famScrapeOK, Series{Value: ok}))
	}
	if f := c.st.Cooldowns; f != nil {
		cooling := f()
		var series []Series
		for _, prov := range c.m.expectedProviders() {
			if _, ok := cooling[prov]; !ok {
				series = append(series, Series{Labels: []string{prov}})
			}
		}
		for prov, n := range cooling {
			series = append(series, Series{Labels: []string{prov}, Value: float64(n)})
		}
		add(with(famCooldown, series...))
	}
	if f := c.st.DeadLetters; f != nil {
		dead := f()
		var series []Series
		for _, reason := range events.DeadReasons() {
			if _, ok := dead[reason]; !ok {
				series = append(series, Series{Labels: []string{reason}})
			}
		}
		for reason, n := range dead {
			series = append(series, Series{Labels: []string{reason}, Value: float64(n)})
		}
		add(with(famDead, series...))
	}
	if f := c.st.DeadLetterFailures; f != nil {
		add(with(famDeadFail, Series{Value: float64(f())}))
	}
	if f := c.st.LaneEvents; f != nil {
		var series []Series
		for ev, n := range f() {
			series = append(series, Series{Labels: []string{ev}, Value: float64(n)})
		}
		add(with(famLaneEv, series...))
	}
	return nil
}
