package gateway

import (
	"cmp"
	"errors"
	"net/http"
	"time"

	"github.com/lanefleet/lanefleet/gateway/auth"
	"github.com/lanefleet/lanefleet/gateway/route"
	"github.com/lanefleet/lanefleet/governance"
)

// Budgets: an admin reads, sets, resets and removes any tenant's, agent's,
// auth profile's or session's budget (each change audited under the token's name); a caller
// reads the budgets over the sessions it reaches: its tenants' (GET
// /api/budgets) and its sessions' own.

// BudgetAmount is what a budget counts, dollars as a decimal number.
type BudgetAmount struct {
	USD    float64 `json:"usd"`
	Tokens int64   `json:"tokens"`
	Turns  int64   `json:"turns"`
}

// BudgetLimits is a budget as an operator sets it (PUT's body): zero
// limits nothing in its dimension; window is total, day, month or
// rolling=DUR (default total); softPct a warning at that percentage.
type BudgetLimits struct {
	USD     float64 `json:"usd,omitempty"`
	Tokens  int64   `json:"tokens,omitempty"`
	Turns   int64   `json:"turns,omitempty"`
	Window  string  `json:"window,omitempty"`
	SoftPct int     `json:"softPct,omitempty"`
}

// BudgetReply is one budget: its scope, limits, what its window used,
// what calls in flight (and workers' leases) hold, and whether its
// sessions are paused.
type BudgetReply struct {
	Kind     string       `json:"kind"` // tenant, agent, profile or session
	Name     string       `json:"name"`
	Limits   BudgetLimits `json:"limits"`
	Used     BudgetAmount `json:"used"`
	Reserved BudgetAmount `json:"reserved"`
	Paused   bool         `json:"paused"`
}

// BudgetsReply lists budgets.
type BudgetsReply struct {
	Budgets []BudgetReply `json:"budgets"`
}

func (s *Server) budgetRoutes() []route.Route {
	h := func(f http.HandlerFunc) http.Handler { return f }
	return []route.Route{
		{Method: "GET", Pattern: "/api/budgets", Reach: route.Caller, Handler: h(s.listBudgets)},
		{Method: "GET", Pattern: "/api/budgets/tenants/{tenant}", Reach: route.Fleet, Handler: h(s.getBudget)},
		{Method: "PUT", Pattern: "/api/budgets/tenants/{tenant}", Reach: route.Fleet, Handler: h(s.setBudget)},
		{Method: "DELETE", Pattern: "/api/budgets/tenants/{tenant}", Reach: route.Fleet, Handler: h(s.removeBudget)},
		{Method: "POST", Pattern: "/api/budgets/tenants/{tenant}/reset", Reach: route.Fleet, Handler: h(s.resetBudget)},
		{Method: "GET", Pattern: "/api/budgets/agents/{agent}", Reach: route.Fleet, Handler: h(s.getBudget)},
		{Method: "PUT", Pattern: "/api/budgets/agents/{agent}", Reach: route.Fleet, Handler: h(s.setBudget)},
		{Method: "DELETE", Pattern: "/api/budgets/agents/{agent}", Reach: route.Fleet, Handler: h(s.removeBudget)},
		{Method: "POST", Pattern: "/api/budgets/agents/{agent}/reset", Reach: route.Fleet, Handler: h(s.resetBudget)},
		{Method: "GET", Pattern: "/api/budgets/profiles/{profile}", Reach: route.Fleet, Handler: h(s.getBudget)},
		{Method: "PUT", Pattern: "/api/budgets/profiles/{profile}", Reach: route.Fleet, Handler: h(s.setBudget)},
		{Method: "DELETE", Pattern: "/api/budgets/profiles/{profile}", Reach: route.Fleet, Handler: h(s.removeBudget)},
		{Method: "POST", Pattern: "/api/budgets/profiles/{profile}/reset", Reach: route.Fleet, Handler: h(s.resetBudget)},
		{Method: "GET", Pattern: "/api/budgets/sessions/{key}", Reach: route.Session, Handler: h(s.getBudget)},
		{Method: "PUT", Pattern: "/api/budgets/sessions/{key}", Reach: route.Fleet, Handler: h(s.setBudget)},
		{Method: "DELETE", Pattern: "/api/budgets/sessions/{key}", Reach: route.Fleet, Handler: h(s.removeBudget)},
		{Method: "POST", Pattern: "/api/budgets/sessions/{key}/reset", Reach: route.Fleet, Handler: h(s.resetBudget)},
	}
}

// budgetScope is the budget the path names: a session the caller must
// reach (404 else, as for every session route), or a tenant, an agent or
// an auth profile (admins only: the route says so).
func budgetScope(w http.ResponseWriter, r *http.Request) (governance.Scope, bool) {
	var sc governance.Scope
	if t := r.PathValue("tenant"); t != "" {
		sc = governance.Scope{Kind: governance.ScopeTenant, Name: t}
	} else if a := r.PathValue("agent"); a != "" {
		sc = governance.Scope{Kind: governance.ScopeAgent, Name: a}
	} else if p := r.PathValue("profile"); p != "" {
		sc = governance.Scope{Kind: governance.ScopeProfile, Name: p}
	} else {
		key, ok := session(w, r)
		if !ok {
			return sc, false
		}
		sc = governance.Scope{Kind: governance.ScopeSession, Name: key}
	}
	if err := sc.Validate(); err != nil {
		writeProblem(w, r, newProblem(http.StatusBadRequest, CodeInvalidInput, err.Error()))
		return sc, false
	}
	return sc, true
}

func (s *Server) getBudget(w http.ResponseWriter, r *http.Request) {
	sc, ok := budgetScope(w, r)
	if !ok {
		return
	}
	st, found, err := s.cfg.Client.Budget(r.Context(), sc)
	if err != nil {
		writeProblem(w, r, budgetProblem(err))
		return
	}
	if !found {
		writeProblem(w, r, newProblem(http.StatusNotFound, CodeNotFound, "no budget on "+sc.String()))
		return
	}
	writeJSON(w, http.StatusOK, budgetReply(sc, st))
}

// listBudgets answers the budgets the caller reaches: an admin's every
// tenant's, agent's, auth profile's and session's (at most 1000), another
// caller's the tenants its session prefixes name ("acme:" reaches tenant
// acme's sessions).
func (s *Server) listBudgets(w http.ResponseWriter, r *http.Request) {
	p := auth.FromContext(r.Context())
	var scopes []governance.Scope
	if p.IsAdmin() {
		var err error
		if scopes, err = s.cfg.Client.Budgets(r.Context()); err != nil {
			writeProblem(w, r, budgetProblem(err))
			return
		}
	} else {
		scopes = callerTenants(p, s.cfg.Tenants)
	}
	rep := BudgetsReply{Budgets: []BudgetReply{}}
	for _, sc := range scopes {
		st, found, err := s.cfg.Client.Budget(r.Context(), sc)
		if err != nil {
			writeProblem(w, r, budgetProblem(err))
			return
		}
		if found {
			rep.Budgets = append(rep.Budgets, budgetReply(sc, st))
		}
	}
	writeJSON(w, http.StatusOK, rep)
}

// callerTenants are the tenants whose every session p reaches: a prefix
// that is a whole tenant prefix under the fleet's rule ("acme:" with the
// default separator).
func callerTenants(p *auth.Principal, rule governance.TenantRule) []governance.Scope {
	sep := cmp.Or(rule.Separator, governance.TenantSeparatorDefault)
	var out []governance.Scope
	for _, pre := range p.Prefixes {
		if name := rule.Tenant(pre); name != "" && pre == name+sep {
			out = append(out, governance.Scope{Kind: governance.ScopeTenant, Name: name})
		}
	}
	return out
}

func (s *Server) setBudget(w http.ResponseWriter, r *http.Request) {
	sc, ok := budgetScope(w, r)
	if !ok {
		return
	}
	var in BudgetLimits
	if !decodeJSON(w, r, &in) {
		return
	}
	l, err := in.limits()
	if err != nil {
		writeProblem(w, r, newProblem(http.StatusBadRequest, CodeInvalidInput, err.Error()))
		return
	}
	_, st, err := s.cfg.Client.SetBudget(r.Context(), sc, l, auth.FromContext(r.Context()).Name)
	if err != nil {
		writeProblem(w, r, budgetProblem(err))
		return
	}
	writeJSON(w, http.StatusOK, budgetReply(sc, st))
}

func (s *Server) resetBudget(w http.ResponseWriter, r *http.Request) {
	sc, ok := budgetScope(w, r)
	if !ok {
		return
	}
	_, st, err := s.cfg.Client.ResetBudget(r.Context(), sc, auth.FromContext(r.Context()).Name)
	if err != nil {
		writeProblem(w, r, budgetProblem(err))
		return
	}
	writeJSON(w, http.StatusOK, budgetReply(sc, st))
}

func (s *Server) removeBudget(w http.ResponseWriter, r *http.Request) {
	sc, ok := budgetScope(w, r)
	if !ok {
		return
	}
	if _, _, err := s.cfg.Client.RemoveBudget(r.Context(), sc, auth.FromContext(r.Context()).Name); err != nil {
		writeProblem(w, r, budgetProblem(err))
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

// limits validates in as governance's limits.
func (in BudgetLimits) limits() (governance.Limits, error) {
	usd, err := governance.USD(in.USD)
	if err != nil {
		return governance.Limits{}, err
	}
	win, err := governance.ParseWindow(in.Window)
	if err != nil {
		return governance.Limits{}, err
	}
	l := governance.Limits{Max: governance.Amount{USD: usd, Tokens: in.Tokens, Turns: in.Turns}, Window: win, SoftPct: in.SoftPct}
	return l, l.Validate()
}

func budgetReply(sc governance.Scope, st governance.State) BudgetReply {
	now := time.Now()
	amount := func(a governance.Amount) BudgetAmount {
		return BudgetAmount{USD: a.USD.Dollars(), Tokens: a.Tokens, Turns: a.Turns}
	}
	l := st.Limits
	return BudgetReply{Kind: string(sc.Kind), Name: sc.Name, Paused: st.Paused(now),
		Limits: BudgetLimits{USD: l.Max.USD.Dollars(), Tokens: l.Max.Tokens, Turns: l.Max.Turns, Window: l.Window.String(), SoftPct: l.SoftPct},
		Used:   amount(st.UsedNow(now)), Reserved: amount(st.ReservedNow(now))}
}

// budgetProblem is the problem of a budget operation's error.
func budgetProblem(err error) *Problem {
	for _, bad := range []error{governance.ErrBadAmount, governance.ErrBadLimits, governance.ErrBadWindow, governance.ErrBadScope, governance.ErrBadName} {
		if errors.Is(err, bad) {
			return newProblem(http.StatusBadRequest, CodeInvalidInput, err.Error())
		}
	}
	return problemOf(err)
}
