package lanefleet

import (
	"context"
	"fmt"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/lanefleet/lanefleet/budgetstore"
	"github.com/lanefleet/lanefleet/governance"
)

// Budget operations act on the fleet's budgets bucket directly (package
// budgetstore): they need the permissions of the admin role. Every change
// is audited in the AGENT_AUDIT stream with who made it and the budget
// before and after.

// TenantBudget names a tenant's budget for the budget operations.
func TenantBudget(tenant string) governance.Scope {
	return governance.Scope{Kind: governance.ScopeTenant, Name: tenant}
}

// SessionBudget names a session's budget for the budget operations.
func SessionBudget(key string) governance.Scope {
	return governance.Scope{Kind: governance.ScopeSession, Name: key}
}

// AgentBudget names an agent's budget (every session of the agent) for
// the budget operations.
func AgentBudget(id string) governance.Scope {
	return governance.Scope{Kind: governance.ScopeAgent, Name: id}
}

// ProfileBudget names an auth profile's budget (every model call made
// with it) for the budget operations.
func ProfileBudget(id string) governance.Scope {
	return governance.Scope{Kind: governance.ScopeProfile, Name: id}
}

// SetBudget gives a budget new limits (a zero limit does not limit its
// dimension; all zero removes every limit), keeping what its window used;
// raising a reached budget resumes its paused sessions, whose queued
// messages then run. who is recorded in the audit. It returns the budget
// before and after; errors are governance's validation errors
// (governance.ErrBadLimits, ErrBadWindow, ErrBadScope) or the store's.
func (c *Client) SetBudget(ctx context.Context, s governance.Scope, l governance.Limits, who string) (old, now governance.State, err error) {
	b, err := c.budgets(ctx)
	if err != nil {
		return old, now, err
	}
	return b.Set(ctx, s, l, who)
}

// ResetBudget forgets what a budget's window used (its limits stay) and
// resumes its paused sessions; audited as who's.
func (c *Client) ResetBudget(ctx context.Context, s governance.Scope, who string) (old, now governance.State, err error) {
	b, err := c.budgets(ctx)
	if err != nil {
		return old, now, err
	}
	return b.Reset(ctx, s, who)
}

// Budget reads a budget: its limits, what its window used, the
// reservations of calls in flight and whether it is paused (State.Paused);
// found is false when the scope has none.
func (c *Client) Budget(ctx context.Context, s governance.Scope) (st governance.State, found bool, err error) {
	b, err := c.budgets(ctx)
	if err != nil {
		return st, false, err
	}
	return b.Get(ctx, s)
}

// RemoveBudget takes a budget's limits away (its calls are no longer
// limited; what it used stays on record) and resumes its paused sessions;
// audited as who's.
func (c *Client) RemoveBudget(ctx context.Context, s governance.Scope, who string) (old, now governance.State, err error) {
	b, err := c.budgets(ctx)
	if err != nil {
		return old, now, err
	}
	return b.Remove(ctx, s, who)
}

// Budgets lists the budget records of tenants, agents, auth profiles and
// sessions, in that order (at most budgetstore.MaxList in all; provider
// rate limits are not listed).
func (c *Client) Budgets(ctx context.Context) ([]governance.Scope, error) {
	b, err := c.budgets(ctx)
	if err != nil {
		return nil, err
	}
	return b.List(ctx, governance.ScopeTenant, governance.ScopeAgent, governance.ScopeProfile, governance.ScopeSession)
}

func (c *Client) budgets(ctx context.Context) (*budgetstore.Bucket, error) {
	js, err := jetstream.New(c.nc)
	if err != nil {
		return nil, fmt.Errorf("lanefleet: budgets: %w", err)
	}
	return budgetstore.OpenBucket(ctx, js, budgetstore.BucketConfig{})
}

// SetQuota sets a tenant's quota: how many of its turns may run at once
// across the fleet (0 = no quota); the others wait in their sessions'
// queues. Audited as who's. It returns the quota before and after.
func (c *Client) SetQuota(ctx context.Context, tenant string, q governance.Quota, who string) (old, now governance.QuotaState, err error) {
	b, err := c.budgets(ctx)
	if err != nil {
		return old, now, err
	}
	return b.SetQuota(ctx, tenant, q, who)
}

// Quota reads a tenant's quota and the turns holding it; found is false
// when it has none.
func (c *Client) Quota(ctx context.Context, tenant string) (st governance.QuotaState, found bool, err error) {
	b, err := c.budgets(ctx)
	if err != nil {
		return st, false, err
	}
	return b.GetQuota(ctx, tenant)
}
