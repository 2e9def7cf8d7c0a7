package main

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/spf13/cobra"

	"github.com/lanefleet/lanefleet"
	"github.com/lanefleet/lanefleet/governance"
)

// quotaCommand manages tenants' quotas, in the budgets bucket (the admin
// role).
func quotaCommand(c *common) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "quota",
		Short: "Quotas of tenants: how many of their turns run at once across the fleet (the admin role)",
		Long: `A quota caps how many of a tenant's turns run at once across every worker; its other
sessions' messages wait in their queues (each told so by a paused event) and run as turns end,
so one tenant's burst cannot take every slot of the fleet. Every change is audited in the
AGENT_AUDIT stream.`,
		Args: noArgs,
	}
	var tenant, who string
	var turns int
	set := &cobra.Command{
		Use:   "set --tenant T --turns N",
		Short: "Set a tenant's quota of turns at once (0 = no quota)",
		Args:  noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := governance.ValidName(tenant); err != nil {
				return usagef("quota set: --tenant: %v", err)
			}
			q := governance.Quota{Turns: turns}
			if err := q.Validate(); err != nil {
				return usagef("quota set: %v", err)
			}
			return c.withClient(cmd, "quota set", func(ctx context.Context, cl *lanefleet.Client) error {
				old, now, err := cl.SetQuota(ctx, tenant, q, c.who(who))
				if err != nil {
					return err
				}
				if c.asJSON {
					return json.NewEncoder(c.stdout).Encode(map[string]any{"tenant": tenant, "old": old, "new": now})
				}
				fmt.Fprintf(c.stdout, "tenant %s: %s (was %s)\n", tenant, quotaText(now.Quota), quotaText(old.Quota))
				return nil
			})
		},
	}
	set.Flags().StringVar(&tenant, "tenant", "", "the tenant")
	set.Flags().IntVar(&turns, "turns", 0, "turns of the tenant that may run at once across the fleet (0 = no quota)")
	set.Flags().StringVar(&who, "who", "", "who makes the change, for the audit (default $USER@host and the NATS user)")
	c.jsonFlag(set, "print the quota before and after as JSON")

	var showTenant string
	show := &cobra.Command{
		Use:   "show --tenant T",
		Short: "Show a tenant's quota and how many of its turns run now",
		Args:  noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := governance.ValidName(showTenant); err != nil {
				return usagef("quota show: --tenant: %v", err)
			}
			return c.withClient(cmd, "quota show", func(ctx context.Context, cl *lanefleet.Client) error {
				st, found, err := cl.Quota(ctx, showTenant)
				if err != nil {
					return err
				}
				now := time.Now()
				if c.asJSON {
					return json.NewEncoder(c.stdout).Encode(map[string]any{"tenant": showTenant, "found": found, "quota": st.Quota, "running": st.Running(now), "full": st.Full(now)})
				}
				if !found || st.Quota.Turns == 0 {
					fmt.Fprintf(c.stdout, "tenant %s has no quota\n", showTenant)
					return nil
				}
				full := ""
				if st.Full(now) {
					full = " FULL: its other messages wait"
				}
				fmt.Fprintf(c.stdout, "tenant %s: %s, %d running%s\n", showTenant, quotaText(st.Quota), st.Running(now), full)
				return nil
			})
		},
	}
	show.Flags().StringVar(&showTenant, "tenant", "", "the tenant")
	c.jsonFlag(show, "print JSON")
	cmd.AddCommand(set, show)
	return cmd
}

// quotaText describes q.
func quotaText(q governance.Quota) string {
	if q.Turns == 0 {
		return "no quota"
	}
	return fmt.Sprintf("%d turns at once", q.Turns)
}
