// Package governance is the pure policy of tenant governance: which tenant a
// session belongs to, and whether a model call fits a budget. It takes
// values and returns values; the KV adapter (package budgetstore) stores a
// budget's State under compare-and-set and the wiring (internal/fleet) asks
// it before every model call.
//
// A budget limits money (USD, priced from the model catalog), tokens and
// turns over a window (total, day, month, or rolling=DUR) for one scope: a
// tenant, a session, an agent (every session of it) or an auth profile
// (every call made with it; scope.go). Before each model call the caller reserves the call's
// worst case (the request's input tokens and its max output tokens, priced);
// the reservation fits only if what the window used, plus every live
// reservation, plus this one stays within every limit. After the call the
// reservation is settled: its real usage is added and the reservation
// removed. A reservation carries its worker and an expiry; a worker renews
// its reservations while a call runs, so a dead worker's reservations stop
// counting when they expire (Prune).
//
// A budget whose limit is used up, or whose reservation did not fit
// (State.Refused), pauses its sessions (Paused) until the refused call fits
// again: an operator raised or reset the budget, another call's
// reservation was settled for less, or the window moved on. A reservation
// that would fit but for other calls in flight does not pause anything: it
// waits for them (ExceededError.Held).
//
// Files:
//
//	tenant.go   the tenant of a session key (TenantRule)
//	scope.go    what a budget applies to, and the budgets a session's calls fall under
//	window.go   budget windows (total, day, month, rolling=DUR) and their starts
//	budget.go   amounts, limits, a budget's State: reserve, settle, prune, pause, the soft limit
//	price.go    the worst case and the real cost of a call, in nano-dollars
//	lease.go    a worker's lease on a budget: the chunks it takes and keeps
//	quota.go    a tenant's turns at once across the fleet
//	rate.go     provider rate limits (requests and tokens a minute) as budgets, and provider headers' caps
package governance
