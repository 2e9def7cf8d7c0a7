package fleet

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/rs/zerolog"

	"github.com/lanefleet/lanefleet/budgetstore"
	"github.com/lanefleet/lanefleet/compaction"
	"github.com/lanefleet/lanefleet/events"
	"github.com/lanefleet/lanefleet/governance"
	"github.com/lanefleet/lanefleet/kvstore"
	"github.com/lanefleet/lanefleet/message"
	"github.com/lanefleet/lanefleet/metrics"
	"github.com/lanefleet/lanefleet/provider"
	"github.com/lanefleet/lanefleet/runner"
)

// settleTimeout bounds recording a call's use (the run's context may be
// over: an interrupted call's use counts too).
const settleTimeout = 10 * time.Second

// defaultMaxOutput is what a call asks at most when neither it nor its
// model says (the adapters' DefaultMaxTokens).
const defaultMaxOutput = 32000

// budgets is the member's tenant governance: the runner's Admission (a
// reservation of each call's worst case before it, its settle after), the
// lanes' Paused and Tenant, and the wake of paused lanes when a budget
// changes. Policy is package governance's; the bucket budgetstore's.
type budgets struct {
	rule governance.TenantRule
	// agent is the agent a session's turns run as ("" = none: agents off,
	// or the default agent is not defined).
	agent   func(key string) string
	store   *budgetstore.Store
	metrics *metrics.Metrics
	log     zerolog.Logger
	now     func() time.Time

	// changes carries the scopes whose budget changed from the store's
	// watcher to run, which wakes lanes; paused remembers the scopes seen
	// paused, so only a pause that ended wakes anything.
	changes chan governance.Scope
	mu      sync.Mutex
	paused  map[governance.Scope]bool
	// rates are the provider rate limits (Config.RateLimits).
	rates []governance.RateRule
}

// openBudgets opens the budgets bucket and watches it.
func (m *Member) openBudgets(ctx context.Context) error {
	cfg := m.cfg
	b := &budgets{rule: m.Tenants(), agent: m.agentID, metrics: m.obs.metrics,
		log: cfg.Logger, now: time.Now, changes: make(chan governance.Scope, 256), paused: map[governance.Scope]bool{}}
	ttl := cfg.LeaseTTL
	if ttl <= 0 {
		ttl = budgetstore.ReservationTTLDefault
	}
	s, err := budgetstore.Open(ctx, m.JS, budgetstore.Config{BucketConfig: budgetstore.BucketConfig{Replicas: cfg.Replicas, MaxBytes: cfg.Limits.Budgets},
		Worker: cfg.WorkerID, ReservationTTL: ttl, OnChange: b.changed, Logger: cfg.Logger})
	if err != nil {
		return err
	}
	b.store = s
	m.budgets = b
	return b.setRates(ctx, cfg.RateLimits)
}

// Budgeted reports whether this member knows a budget on s (its watch of
// the budgets bucket delivered it): false with governance off.
func (m *Member) Budgeted(s governance.Scope) bool {
	return m.budgets != nil && m.budgets.store.Limited(s)
}

// QuotaSet reports whether this member knows a quota on tenant (its watch
// of the budgets bucket delivered it).
func (m *Member) QuotaSet(tenant string) bool {
	return m.budgets != nil && m.budgets.store.Quota(tenant).Turns > 0
}

// agentID is the id of the agent a session's turns run as (agentOf), ""
// for none.
func (m *Member) agentID(key string) string {
	if a, _ := m.agentOf(key); a != nil {
		return a.ID
	}
	return ""
}

// Tenant is a session key's tenant ("" = none), for the lanes.
func (b *budgets) Tenant(key string) string { return b.rule.Tenant(key) }

// agentOf is the agent a session's turns run as, "" for none.
func (b *budgets) agentOf(key string) string {
	if b.agent == nil {
		return ""
	}
	return b.agent(key)
}

// scopes are the budgets that pause a session (governance.Scopes).
func (b *budgets) scopes(tenant, key string) []governance.Scope {
	return governance.Scopes(tenant, b.agentOf(key), key)
}

// Paused reports whether a session is paused by a budget it is under, or
// waits because its tenant runs as many turns as its quota allows.
func (b *budgets) Paused(key string) bool {
	tenant := b.rule.Tenant(key)
	if b.store.QuotaFull(tenant, b.now()) {
		return true
	}
	if !b.store.Any() {
		return false
	}
	_, p := b.store.Paused(b.scopes(tenant, key), b.now())
	return p
}

// scopePaused reports whether sc's sessions are paused: its budget, or
// for a tenant its quota.
func (b *budgets) scopePaused(sc governance.Scope) bool {
	if sc.Kind == governance.ScopeTenant && b.store.QuotaFull(sc.Name, b.now()) {
		return true
	}
	_, p := b.store.Paused([]governance.Scope{sc}, b.now())
	return p
}

// takeTurn counts a turn of key's tenant against its quota (waiting while
// it is full) and returns what releases it.
func (b *budgets) takeTurn(ctx context.Context, key string) (func(), error) {
	if b == nil {
		return func() {}, nil
	}
	return b.store.TakeTurn(ctx, b.rule.Tenant(key))
}

// PauseNotice is what the sender of a message that waits on a paused
// session reads at once (the lanes' Config.PauseNotice).
func (b *budgets) PauseNotice(key string) string {
	tenant := b.rule.Tenant(key)
	if b.store.QuotaFull(tenant, b.now()) {
		return fmt.Sprintf("Quota reached: tenant %s runs %d turns at once, as many as its quota allows. "+
			"This message waits in the queue, and runs when one of them ends (publisher quota set --tenant %s --turns N changes the quota).",
			tenant, b.store.Quota(tenant).Turns, tenant)
	}
	sc, ok := b.store.Paused(b.scopes(tenant, key), b.now())
	if !ok {
		return ""
	}
	st, _, err := b.store.Cached(sc)
	if u, ok := errors.AsType[*budgetstore.UnreadableError](err); ok {
		return unreadableText(u)
	}
	return fmt.Sprintf("Budget reached: the %s budget (%s) has no room for more model calls. "+
		"The session is paused: this message waits in the queue, and runs once an operator raises or resets the budget (publisher budget set|reset %s).",
		sc, st.Limits, scopeFlag(sc))
}

// Admit waits for room in the provider rate limits the call falls under
// (ratelimits.go), then reserves its worst case against the budgets of its
// session and tenant. Without any it costs a map lookup.
func (b *budgets) Admit(ctx context.Context, call runner.AdmitCall) (runner.Admitted, error) {
	if !b.store.Any() {
		return nil, nil
	}
	rate, err := b.admitRate(ctx, call)
	if err != nil || rate == nil {
		if err != nil {
			return nil, err
		}
		return b.admitBudget(ctx, call)
	}
	adm, err := b.admitBudget(ctx, call)
	if err != nil {
		rate.release() // the call is not made: it counts nothing
		return nil, err
	}
	rate.budget = adm
	return rate, nil
}

// admitBudget reserves a call's worst case against the budgets of its
// session, tenant, agent and auth profile, and, for a sub-agent's, of
// every session it was spawned under (a parent's budget counts its
// children's calls).
func (b *budgets) admitBudget(ctx context.Context, call runner.AdmitCall) (runner.Admitted, error) {
	tenant := b.rule.Tenant(call.SessionKey)
	scopes := governance.CallScopes(tenant, b.agentOf(call.SessionKey), call.SessionKey, call.AuthProfile)
	for _, a := range call.Lineage {
		// The lineage is sealed, and sub-agents stay in their tenant;
		// a session of another tenant is never charged all the same.
		if b.rule.Tenant(a) == tenant && a != call.SessionKey {
			scopes = append(scopes, governance.Scope{Kind: governance.ScopeSession, Name: a})
		}
	}
	if !b.store.Limits(scopes) {
		return nil, nil
	}
	req := call.Request
	need := governance.WorstCase(req.Model.Cost, inputTokens(req), maxOutput(req), call.FirstCall)
	h, err := b.store.Reserve(ctx, scopes, need, nil)
	if r, ok := errors.AsType[*budgetstore.ReachedError](err); ok && r.Scope.Kind == governance.ScopeProfile {
		if mv := b.moveBudget(ctx, call, need, r); mv != nil {
			return nil, mv
		}
	}
	if r, ok := errors.AsType[*budgetstore.ReachedError](err); ok {
		b.metrics.BudgetEvent(tenant, metrics.BudgetReached)
		return nil, &runner.AdmitRefusal{Kind: events.KindBudgetReached, Text: reachedText(r, call.SessionKey)}
	}
	if u, ok := errors.AsType[*budgetstore.UnreadableError](err); ok {
		// Fail closed: a budget nobody can read limits everything.
		b.metrics.BudgetEvent(tenant, metrics.BudgetReached)
		return nil, &runner.AdmitRefusal{Kind: events.KindBudgetReached, Text: unreadableText(u)}
	}
	if err != nil && ctx.Err() == nil && (kvstore.Transient(err) || errors.Is(err, budgetstore.ErrConflict)) {
		return nil, &runner.AdmitUnavailable{Err: err}
	}
	if err != nil {
		return nil, err
	}
	return &admitted{b: b, h: h, tenant: tenant, cost: req.Model.Cost, first: call.FirstCall}, nil
}

// moveBudget finds, for a call its auth profile's budget has no room for
// (r), the first of its alternates whose budget has room for need (or
// that has none), and moves the call to it; nil when none has.
func (b *budgets) moveBudget(ctx context.Context, call runner.AdmitCall, need governance.Amount, r *budgetstore.ReachedError) *runner.AdmitMove {
	for _, alt := range call.Alternates {
		h, err := b.store.TryReserve(ctx, []governance.Scope{{Kind: governance.ScopeProfile, Name: alt}}, need)
		if err != nil {
			continue
		}
		// The next attempt admits the call with alt itself.
		if _, err := h.Settle(context.WithoutCancel(ctx), governance.Amount{}); err != nil {
			b.log.Warn().Err(err).Msg("budget: release a call that moved to another auth profile")
		}
		b.log.Info().Str("from", call.AuthProfile).Str("to", alt).Msg("budget: a call moves to another auth profile, its own profile's budget has no room")
		return &runner.AdmitMove{Profile: alt, Reason: provider.ReasonBilling,
			Text: fmt.Sprintf("Budget reached: the %s budget (%s) has no room for this model call; it moves to auth profile %s, which has room.", r.Scope, r.Limits, alt)}
	}
	return nil
}

// reachedText is what the user of session, paused by r, reads. An auth
// profile's budget pauses no session (its calls may use another profile):
// the text says the call was refused. A sub-agent refused by the budget
// of a session above it reads that its turn ends and that session pauses.
func reachedText(r *budgetstore.ReachedError, session string) string {
	flag := scopeFlag(r.Scope)
	if r.Scope.Kind == governance.ScopeSession && r.Scope.Name != session {
		return fmt.Sprintf("Budget reached: the %s budget (%s), which counts the model calls of the sub-agents under it, has no room for this model call (%s). "+
			"This sub-agent's turn ends here; the session that spawned it is paused, and runs again once an operator raises or resets that budget (publisher budget set|reset %s).",
			r.Scope, r.Limits, strings.TrimPrefix(r.Exceeded.Error(), "governance: "), flag)
	}
	if r.Scope.Kind == governance.ScopeProfile {
		return fmt.Sprintf("Budget reached: the %s budget (%s) has no room for this model call (%s), and the run has no other auth profile with room to use instead. "+
			"Calls made with this profile are refused until an operator raises or resets the budget (publisher budget set|reset %s); the session is not paused.",
			r.Scope, r.Limits, strings.TrimPrefix(r.Exceeded.Error(), "governance: "), flag)
	}
	return fmt.Sprintf("Budget reached: the %s budget (%s) has no room for this model call (%s). "+
		"The session is paused: messages sent now wait in its queue, and run once an operator raises or resets the budget (publisher budget set|reset %s).",
		r.Scope, r.Limits, strings.TrimPrefix(r.Exceeded.Error(), "governance: "), flag)
}

// unreadableText is what the user of a session under an unreadable budget
// reads.
func unreadableText(u *budgetstore.UnreadableError) string {
	return fmt.Sprintf("Budget unreadable: the %s budget (key %s of the %s bucket) does not decode, so no model call is made under it (%v). "+
		"The session is paused: messages sent now wait in its queue, and run once an operator sets the budget again (publisher budget set %s).",
		u.Scope, u.Key, u.Bucket, u.Err, scopeFlag(u.Scope))
}

// scopeFlag is the publisher budget flag naming sc.
func scopeFlag(sc governance.Scope) string {
	switch sc.Kind {
	case governance.ScopeSession:
		return "--session " + fmt.Sprintf("%q", sc.Name)
	case governance.ScopeAgent:
		return "--agent " + sc.Name
	case governance.ScopeProfile:
		return "--auth-profile " + fmt.Sprintf("%q", sc.Name)
	}
	return "--tenant " + sc.Name
}

// admitted settles one admitted call.
type admitted struct {
	b      *budgets
	h      *budgetstore.Hold
	tenant string
	cost   provider.ModelCost
	first  bool
}

func (a *admitted) Settle(u message.Usage) string {
	real := governance.Real(a.cost, u, a.first)
	ctx, cancel := context.WithTimeout(context.Background(), settleTimeout)
	defer cancel()
	soft, err := a.h.Settle(ctx, real)
	if err != nil {
		a.b.log.Warn().Err(err).Msg("budget: a call's use was not recorded (its reservation expires)")
	}
	a.b.metrics.BudgetSpend(a.tenant, real.USD.Dollars())
	var warn []string
	for sc, dims := range soft {
		a.b.metrics.BudgetEvent(a.tenant, metrics.BudgetSoftLimit)
		warn = append(warn, fmt.Sprintf("the %s budget reached its soft limit (%s)", sc, strings.Join(dims, ", ")))
	}
	if len(warn) == 0 {
		return ""
	}
	return "Budget warning: " + strings.Join(warn, "; ") + "."
}

// inputTokens estimates a request's input: its messages (as pi counts
// them), its system prompt and its tools' definitions, at four characters
// a token.
func inputTokens(req *provider.Request) int64 {
	n := int64(len(req.SystemPrompt)+3) / 4
	for _, m := range req.Messages {
		n += int64(compaction.EstimateTokens(m))
	}
	if len(req.Tools) > 0 {
		data, _ := json.Marshal(req.Tools)
		n += int64(len(data)+3) / 4
	}
	return n
}

// maxOutput is the most output a request may get.
func maxOutput(req *provider.Request) int64 {
	if req.MaxTokens > 0 {
		return int64(req.MaxTokens)
	}
	if m := req.Model.MaxTokens; m > 0 && m < defaultMaxOutput {
		return int64(m)
	}
	return defaultMaxOutput
}

// changed is the store's OnChange: it hands the scope to run without
// blocking the watcher (a full queue drops it: the sweep still finds the
// lanes once they are no longer paused).
func (b *budgets) changed(sc governance.Scope) {
	select {
	case b.changes <- sc:
	default:
	}
}

// run wakes the lanes of every scope whose pause ended, until ctx ends.
func (b *budgets) run(ctx context.Context, wake func(ctx context.Context, match func(key string) bool) int) {
	for {
		select {
		case <-ctx.Done():
			return
		case sc := <-b.changes:
			if sc.Kind == governance.ScopeProfile || sc.Kind == governance.ScopeRate {
				continue // they pause no session (admitBudget, admitRate)
			}
			now := b.scopePaused(sc)
			b.mu.Lock()
			was := b.paused[sc]
			if now {
				b.paused[sc] = true
			} else {
				delete(b.paused, sc)
			}
			b.mu.Unlock()
			if !was || now {
				continue
			}
			n := wake(ctx, func(key string) bool {
				switch sc.Kind {
				case governance.ScopeSession:
					return key == sc.Name
				case governance.ScopeAgent:
					return b.agentOf(key) == sc.Name
				}
				return b.rule.Tenant(key) == sc.Name
			})
			b.log.Info().Str("budget", sc.String()).Int("lanes", n).Msg("budget no longer reached: paused lanes woken")
		}
	}
}

// Tenants is the member's tenant rule (--tenant-separator, tenants off):
// which tenant a session key belongs to.
func (m *Member) Tenants() governance.TenantRule {
	return governance.TenantRule{Separator: m.cfg.TenantSeparator, Off: m.cfg.NoTenants}
}
