package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/spf13/cobra"

	"github.com/lanefleet/lanefleet"
	"github.com/lanefleet/lanefleet/governance"
)

// budgetCommand manages budgets: they live in the budgets bucket, which
// the admin role writes.
func budgetCommand(c *common) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "budget",
		Short: "Budgets of tenants, agents, auth profiles and sessions: set, show, reset, list (the admin role)",
		Long: `A budget limits a tenant's (every session whose key starts with "<tenant>:"), an agent's
(every session it runs), an auth profile's (every call made with it) or one session's model
calls, in USD priced from the model catalog, tokens and turns, over a window:
total, day, month (UTC) or rolling=DUR (e.g. rolling=1h, rolling=7d). Each call reserves its
worst case first; at the cap the turn ends with a budget_reached error and the session pauses:
its later messages wait in its queue, and run once the budget is raised or reset. An auth
profile's budget pauses nothing: a call that does not fit moves to another of the provider's
auth profiles with room, and the turn ends with budget_reached only when none has.
Every change is audited in the AGENT_AUDIT stream.`,
		Args: noArgs,
	}
	cmd.AddCommand(budgetSetCommand(c), budgetShowCommand(c), budgetResetCommand(c), budgetListCommand(c))
	return cmd
}

// budgetSetCommand is `budget set`: a budget's limits, window and soft limit.
func budgetSetCommand(c *common) *cobra.Command {
	var scope scopeFlags
	var usd float64
	var tokens, turns int64
	var window string
	var soft int
	var who string
	set := &cobra.Command{
		Use:   "set (--tenant T | --agent ID | --auth-profile ID | --session KEY) [--usd X] [--tokens N] [--turns N] [--window total|day|month|rolling=DUR] [--soft PCT]",
		Short: "Set a budget's limits (0 = that dimension is not limited); raising a reached budget resumes its sessions",
		Args:  noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			s, err := scope.scope()
			if err != nil {
				return err
			}
			l := governance.Limits{Max: governance.Amount{Tokens: tokens, Turns: turns}, SoftPct: soft}
			if l.Max.USD, err = governance.USD(usd); err != nil {
				return usagef("budget set: --usd: %v", err)
			}
			if l.Window, err = governance.ParseWindow(window); err != nil {
				return usagef("budget set: --window: %v", err)
			}
			if err := l.Validate(); err != nil {
				return usagef("budget set: %v", err)
			}
			return c.withClient(cmd, "budget set", func(ctx context.Context, cl *lanefleet.Client) error {
				old, now, err := cl.SetBudget(ctx, s, l, c.who(who))
				if err != nil {
					return err
				}
				return c.printChange(s, old, now)
			})
		},
	}
	scope.register(set)
	set.Flags().Float64Var(&usd, "usd", 0, "money limit in US dollars")
	set.Flags().Int64Var(&tokens, "tokens", 0, "token limit (input, output and cache tokens alike)")
	set.Flags().Int64Var(&turns, "turns", 0, "turn limit")
	set.Flags().StringVar(&window, "window", "total", "window: total, day, month or rolling=DUR")
	set.Flags().IntVar(&soft, "soft", 0, "soft limit, percent of each limit (1-99): a budget_warning event and metric when reached")
	set.Flags().StringVar(&who, "who", "", "who makes the change, for the audit (default $USER@host and the NATS user)")
	c.jsonFlag(set, "print the budget before and after as JSON")
	return set
}

// budgetShowCommand is `budget show`.
func budgetShowCommand(c *common) *cobra.Command {
	var showScope scopeFlags
	show := &cobra.Command{
		Use:   "show (--tenant T | --agent ID | --auth-profile ID | --session KEY)",
		Short: "Show a budget: its limits, what its window used, the calls in flight, whether it is paused",
		Args:  noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			s, err := showScope.scope()
			if err != nil {
				return err
			}
			return c.withClient(cmd, "budget show", func(ctx context.Context, cl *lanefleet.Client) error {
				st, found, err := cl.Budget(ctx, s)
				if err != nil {
					return err
				}
				if c.asJSON {
					return json.NewEncoder(c.stdout).Encode(map[string]any{"scope": s, "found": found, "budget": st, "paused": st.Paused(time.Now())})
				}
				if !found || !st.Limits.Limited() {
					fmt.Fprintf(c.stdout, "%s has no budget\n", s)
					return nil
				}
				printBudget(c.stdout, s, st, time.Now())
				return nil
			})
		},
	}
	showScope.register(show)
	c.jsonFlag(show, "print JSON")
	return show
}

// budgetResetCommand is `budget reset`: it forgets what a budget's window used.
func budgetResetCommand(c *common) *cobra.Command {
	var resetScope scopeFlags
	var resetWho string
	reset := &cobra.Command{
		Use:   "reset (--tenant T | --agent ID | --auth-profile ID | --session KEY)",
		Short: "Forget what a budget's window used (its limits stay); resumes its paused sessions",
		Args:  noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			s, err := resetScope.scope()
			if err != nil {
				return err
			}
			return c.withClient(cmd, "budget reset", func(ctx context.Context, cl *lanefleet.Client) error {
				old, now, err := cl.ResetBudget(ctx, s, c.who(resetWho))
				if err != nil {
					return err
				}
				return c.printChange(s, old, now)
			})
		},
	}
	resetScope.register(reset)
	reset.Flags().StringVar(&resetWho, "who", "", "who makes the change, for the audit (default $USER@host and the NATS user)")
	c.jsonFlag(reset, "print the budget before and after as JSON")
	return reset
}

// budgetListCommand is `budget list`.
func budgetListCommand(c *common) *cobra.Command {
	list := &cobra.Command{
		Use:   "list",
		Short: "List the budgets: tenants', agents', auth profiles' and sessions' (at most 1000)",
		Args:  noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return c.withClient(cmd, "budget list", func(ctx context.Context, cl *lanefleet.Client) error {
				scopes, err := cl.Budgets(ctx)
				if err != nil {
					return err
				}
				now := time.Now()
				var out []map[string]any
				for _, s := range scopes {
					st, found, err := cl.Budget(ctx, s)
					if err != nil {
						return err
					}
					if !found || !st.Limits.Limited() {
						continue // removed: only its use is on record
					}
					if c.asJSON {
						out = append(out, map[string]any{"scope": s, "budget": st, "paused": st.Paused(now)})
						continue
					}
					printBudget(c.stdout, s, st, now)
				}
				if c.asJSON {
					return json.NewEncoder(c.stdout).Encode(map[string]any{"budgets": out})
				}
				if len(scopes) == 0 {
					fmt.Fprintln(c.stdout, "no budgets")
				}
				return nil
			})
		},
	}
	c.jsonFlag(list, "print JSON")
	return list
}

// withClient opens the fleet's client for one budget command and runs fn;
// a permission error fn returns says what the command needs (budgetDenied).
func (c *common) withClient(cmd *cobra.Command, op string, fn func(context.Context, *lanefleet.Client) error) error {
	cl, ctx, done, err := c.open(cmd.Context())
	if err != nil {
		return err
	}
	defer done()
	if err := fn(ctx, cl); err != nil {
		return budgetDenied(op, err)
	}
	return nil
}

// scopeFlags are --tenant, --agent, --auth-profile and --session: exactly
// one names the budget.
type scopeFlags struct{ tenant, agent, profile, session string }

func (f *scopeFlags) register(cmd *cobra.Command) {
	cmd.Flags().StringVar(&f.tenant, "tenant", "", "the tenant's budget (a session key's prefix up to the first ':')")
	cmd.Flags().StringVar(&f.agent, "agent", "", "an agent's budget: every session the agent runs")
	cmd.Flags().StringVar(&f.profile, "auth-profile", "", "an auth profile's budget: every model call made with it")
	cmd.Flags().StringVar(&f.session, "session", "", "one session's budget, by its key")
}

func (f *scopeFlags) scope() (governance.Scope, error) {
	var s governance.Scope
	n := 0
	for _, v := range []string{f.tenant, f.agent, f.profile, f.session} {
		if v != "" {
			n++
		}
	}
	switch {
	case n != 1:
		return s, usagef("budget: give one of --tenant T, --agent ID, --auth-profile ID or --session KEY")
	case f.tenant != "":
		s = lanefleet.TenantBudget(f.tenant)
	case f.agent != "":
		s = lanefleet.AgentBudget(f.agent)
	case f.profile != "":
		s = lanefleet.ProfileBudget(f.profile)
	default:
		s = lanefleet.SessionBudget(f.session)
	}
	if err := s.Validate(); err != nil {
		return s, usagef("budget: %v", err)
	}
	return s, nil
}

// who names the operator for the audit.
func (c *common) who(flag string) string {
	if flag != "" {
		return flag
	}
	host, _ := os.Hostname()
	w := c.getenv("USER") + "@" + host
	if c.creds.User != "" {
		w += " (nats user " + c.creds.User + ")"
	}
	return w
}

func (c *common) printChange(s governance.Scope, old, now governance.State) error {
	if c.asJSON {
		return json.NewEncoder(c.stdout).Encode(map[string]any{"scope": s, "old": old, "new": now})
	}
	fmt.Fprintf(c.stdout, "%s: was %s, now %s\n", s, old.Limits, now.Limits)
	printBudget(c.stdout, s, now, time.Now())
	return nil
}

func printBudget(w io.Writer, s governance.Scope, st governance.State, now time.Time) {
	used, held := st.UsedNow(now), st.ReservedNow(now)
	fmt.Fprintf(w, "%s: %s", s, st.Limits)
	if st.Limits.SoftPct > 0 {
		fmt.Fprintf(w, ", soft limit %d%%", st.Limits.SoftPct)
	}
	fmt.Fprintf(w, "\n  used %s, %d tokens, %d turns; %d calls in flight holding %s\n", used.USD, used.Tokens, used.Turns, len(st.Reservations), held.USD)
	if st.Paused(now) {
		fmt.Fprintf(w, "  PAUSED: its sessions' messages wait until the budget is raised or reset\n")
	}
}

// budgetDenied words a budget operation the user may not do.
func budgetDenied(cmd string, err error) error {
	if errors.Is(err, lanefleet.ErrPermission) {
		return fmt.Errorf("%s: this NATS user may not change budgets (that takes the admin role): %w", cmd, err)
	}
	return err
}
