package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/lanefleet/lanefleet"
	"github.com/lanefleet/lanefleet/admin"
	"github.com/lanefleet/lanefleet/events"
	"github.com/lanefleet/lanefleet/kvstore"
	"github.com/lanefleet/lanefleet/lanes/sessionsvc"
)

// The operators' commands. backlog is a session's own (its sender may ask);
// sessions, dlq and auth go through the workers' admin service, which only
// the admin role reaches.

// adminDenied words an admin operation the user may not ask for.
func adminDenied(cmd string, err error) error {
	if errors.Is(err, lanefleet.ErrPermission) {
		return fmt.Errorf("%s: this NATS user may not ask the admin service (that takes the admin role: `worker permissions --role admin`): %w", cmd, err)
	}
	return err
}

func sessionsCommand(c *common) *cobra.Command {
	limit := 0
	cmd := &cobra.Command{
		Use:   "sessions [--limit N]",
		Short: "List the sessions with recent activity: last activity, backlog, the run running (the admin role)",
		Args:  noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if limit < 0 || limit > admin.LimitMax {
				return usagef("sessions: --limit must be 0 to %d", admin.LimitMax)
			}
			cl, ctx, done, err := c.open(cmd.Context())
			if err != nil {
				return err
			}
			defer done()
			rep, err := cl.SessionsPage(ctx, admin.SessionsRequest{Limit: limit, State: true})
			if err != nil {
				return adminDenied("sessions", err)
			}
			return printSessions(rep, c.asJSON, time.Now(), c.stdout)
		},
	}
	c.jsonFlag(cmd, "print one JSON object per session")
	cmd.Flags().IntVar(&limit, "limit", 0, fmt.Sprintf("most sessions listed (default %d)", admin.LimitDefault))
	cmd.AddCommand(forgetCommand(c))
	return cmd
}

// forgetCommand is "sessions forget KEY".
func forgetCommand(c *common) *cobra.Command {
	return &cobra.Command{
		Use:   "forget KEY",
		Short: "Delete an idle session's transcript, settings and run events (the admin role)",
		Long: `forget deletes a session's transcript, stored settings and state, its lane
records and its run events, when no turn of it runs and no message waits for it
(stop it first). Its next message starts a new conversation.`,
		Args: func(_ *cobra.Command, args []string) error {
			if len(args) != 1 {
				return usagef("sessions forget: give one session key")
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			cl, ctx, done, err := c.open(cmd.Context())
			if err != nil {
				return err
			}
			defer done()
			rep, err := cl.Forget(ctx, args[0])
			if err != nil {
				return adminDenied("sessions forget", err)
			}
			_, err = fmt.Fprintf(c.stdout, "forgot %s: %d records, %d run events\n", rep.Session, rep.Keys, rep.Events)
			return err
		},
	}
}

// lineageText is what sessions and runs add to a session's line: its
// pending sub-agents, the session that spawned it, its schedules.
func lineageText(children int, parent string, schedules int) string {
	var b strings.Builder
	switch {
	case children == 1:
		b.WriteString(", 1 sub-agent pending")
	case children > 1:
		fmt.Fprintf(&b, ", %d sub-agents pending", children)
	}
	if parent != "" {
		b.WriteString(", sub-agent of " + display(parent))
	}
	switch {
	case schedules == 1:
		b.WriteString(", 1 schedule")
	case schedules > 1:
		fmt.Fprintf(&b, ", %d schedules", schedules)
	}
	return b.String()
}

func printSessions(rep admin.SessionsReply, asJSON bool, now time.Time, w io.Writer) error {
	if asJSON {
		enc := json.NewEncoder(w)
		for _, s := range rep.Sessions {
			if err := enc.Encode(s); err != nil {
				return err
			}
		}
		return nil
	}
	if len(rep.Sessions) == 0 {
		fmt.Fprintln(w, "no sessions")
		return nil
	}
	for _, s := range rep.Sessions {
		running := "idle"
		switch {
		case s.Running == "":
		case kvstore.Holding(s.Holding) == kvstore.HoldingUnresponsive:
			running = fmt.Sprintf("run %s on %s, unresponsive: its lease lapses within %s, then another worker takes the run over",
				s.Running, s.Worker, waitText(time.Duration(s.LapsesInMs)*time.Millisecond))
		case kvstore.Holding(s.Holding) == kvstore.HoldingLapsed:
			running = "run " + s.Running + " on " + s.Worker + ", lapsed: that worker holds the lane no more; the run starts again when a worker takes the lane"
		default:
			running = "running run " + s.Running + " on " + s.Worker
		}
		fmt.Fprintf(w, "%-28s %-10s last %s ago (run %s), %d stored, %s%s\n", display(s.Key), s.Fingerprint,
			ago(now, s.LastActivity), s.LastRun, s.Stored, running, lineageText(s.Children, s.Parent, s.Schedules))
	}
	switch {
	case rep.Total > len(rep.Sessions):
		fmt.Fprintf(w, "… %d sessions in all (--limit)\n", rep.Total)
	case rep.Total < 0 && rep.Next != "":
		fmt.Fprintln(w, "… more sessions (--limit)")
	}
	return nil
}

func backlogCommand(c *common) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "backlog --session KEY",
		Short: "Say what waits on a session's lane: messages not yet answered, the oldest, the worker holding it",
		Args:  noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := c.checkSession("backlog"); err != nil {
				return err
			}
			cl, ctx, done, err := c.open(cmd.Context())
			if err != nil {
				return err
			}
			defer done()
			b, err := cl.Backlog(ctx, c.session)
			if err != nil {
				return err
			}
			if c.asJSON {
				return json.NewEncoder(c.stdout).Encode(b)
			}
			more := ""
			if b.More {
				more = " or more"
			}
			fmt.Fprintf(c.stdout, "session %s: %d waiting%s", display(c.session), b.Waiting, more)
			if b.OldestRun != "" {
				fmt.Fprintf(c.stdout, ", oldest run %s stored %s ago", b.OldestRun, ago(time.Now(), b.OldestAt))
			}
			fmt.Fprintln(c.stdout, holderText(b, time.Now()))
			return nil
		},
	}
	c.sessionFlag(cmd)
	c.jsonFlag(cmd, "print JSON")
	return cmd
}

// holderText says who holds a session's lane, as backlog prints it: the
// holder, unless it stopped answering or its lease lapsed.
func holderText(b sessionsvc.BacklogReply, now time.Time) string {
	l := b.Lease
	switch {
	case l != nil && l.Lapsed:
		return fmt.Sprintf("; no worker holds the lane: the lease of its last worker lapsed %s ago (that worker stopped without releasing it); the next worker to take the lane runs what waits",
			waitText(time.Duration(l.LapsedAgoMs)*time.Millisecond))
	case b.Holder == "":
		return "; lane idle"
	case l != nil && l.Unresponsive:
		return fmt.Sprintf("; lane held by %s for %s, but it stopped answering: its lease was not renewed for %s and lapses within %s, then another worker takes the lane",
			b.Holder, ago(now, b.HeldSince), waitText(time.Duration(l.RenewedAgoMs)*time.Millisecond), waitText(time.Duration(l.LapsesInMs)*time.Millisecond))
	}
	return fmt.Sprintf("; lane held by %s for %s", b.Holder, ago(now, b.HeldSince))
}

func dlqCommand(c *common) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "dlq",
		Short: "List, show, replay or purge dead letters (the admin role)",
		Args:  noArgs,
	}
	cmd.AddCommand(dlqListCommand(c), dlqShowCommand(c), dlqSelectCommand(c, "replay"), dlqSelectCommand(c, "purge"))
	return cmd
}

func dlqListCommand(c *common) *cobra.Command {
	var (
		reason string
		limit  int
	)
	cmd := &cobra.Command{
		Use:   "list [--reason R] [--limit N]",
		Short: "List dead letters, oldest first, without their data",
		Args:  noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if limit < 0 {
				return usagef("dlq list: --limit must not be negative")
			}
			if reason != "" {
				if err := events.CheckDeadReason(reason); err != nil {
					return usagef("dlq list: --reason %w", err)
				}
			}
			cl, ctx, done, err := c.open(cmd.Context())
			if err != nil {
				return err
			}
			defer done()
			q := admin.DeadListRequest{Reason: reason}
			n := 0
			for {
				if limit > 0 {
					q.Limit = min(limit-n, admin.LimitMax)
				}
				page, err := cl.DeadLetters(ctx, q)
				if err != nil {
					return adminDenied("dlq list", err)
				}
				for _, d := range page.Letters {
					if err := printDead(c.stdout, d, c.asJSON); err != nil {
						return err
					}
				}
				n += len(page.Letters)
				if !page.More || (limit > 0 && n >= limit) {
					break
				}
				q.After = page.Next
			}
			if n == 0 && !c.asJSON {
				fmt.Fprintln(c.stdout, "no dead letters")
			}
			return nil
		},
	}
	c.jsonFlag(cmd, "print one JSON object per dead letter")
	cmd.Flags().StringVar(&reason, "reason", "", "only this reason (poison, invalid, bad-lane)")
	cmd.Flags().IntVar(&limit, "limit", 0, "most dead letters listed (default all)")
	return cmd
}

func printDead(w io.Writer, d admin.DeadLetter, asJSON bool) error {
	if asJSON {
		return json.NewEncoder(w).Encode(d)
	}
	who := d.Subject
	if d.Session != "" {
		who = "session " + display(d.Session)
	}
	run := ""
	if d.InboundSeq != 0 {
		run = " run " + strconv.FormatUint(d.InboundSeq, 10)
	}
	_, err := fmt.Fprintf(w, "%-6d %-9s %s %s%s, %d bytes: %s\n", d.Seq, d.Reason, time.UnixMilli(d.Time).Format(time.DateTime), who, run, d.Size, d.Error)
	return err
}

func dlqShowCommand(c *common) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "show SEQ",
		Short: "Show one dead letter with its headers and data",
		RunE: func(cmd *cobra.Command, args []string) error {
			seqs, err := parseSeqs("dlq show", args)
			if err != nil {
				return err
			}
			if len(seqs) != 1 {
				return usagef("dlq show: give one dead letter's sequence")
			}
			cl, ctx, done, err := c.open(cmd.Context())
			if err != nil {
				return err
			}
			defer done()
			d, err := cl.DeadLetter(ctx, seqs[0])
			if err != nil {
				return adminDenied("dlq show", err)
			}
			if c.asJSON {
				return json.NewEncoder(c.stdout).Encode(d)
			}
			if err := printDead(c.stdout, d, false); err != nil {
				return err
			}
			keys := make([]string, 0, len(d.Headers))
			for k := range d.Headers {
				keys = append(keys, k)
			}
			slices.Sort(keys)
			for _, k := range keys {
				fmt.Fprintf(c.stdout, "  %s: %s\n", k, strings.Join(d.Headers[k], ", "))
			}
			fmt.Fprintf(c.stdout, "%s\n", printable(d.Data))
			if d.Truncated {
				fmt.Fprintln(c.stdout, "… (truncated)")
			}
			return nil
		},
	}
	c.jsonFlag(cmd, "print JSON (the data base64)")
	return cmd
}

// dlqSelectCommand is dlq replay or dlq purge: of the dead letters named,
// of a reason, or all.
func dlqSelectCommand(c *common, verb string) *cobra.Command {
	var sel admin.DeadSelect
	short := "Purge dead letters: the sequences given, --reason R, or --all"
	if verb == "replay" {
		short = "Publish dead letters again on their lanes, as new runs (SEQ..., --reason R or --all); each is replayed once"
	}
	cmd := &cobra.Command{
		Use:   verb + " [SEQ...] [--reason R] [--all]",
		Short: short,
		RunE: func(cmd *cobra.Command, args []string) error {
			seqs, err := parseSeqs("dlq "+verb, args)
			if err != nil {
				return err
			}
			sel.Seqs = seqs
			if len(seqs) == 0 && sel.Reason == "" && !sel.All {
				return usagef("dlq %s: name the dead letters: SEQ..., --reason R or --all", verb)
			}
			if sel.Reason != "" {
				if err := events.CheckDeadReason(sel.Reason); err != nil {
					return usagef("dlq %s: --reason %w", verb, err)
				}
			}
			cl, ctx, done, err := c.open(cmd.Context())
			if err != nil {
				return err
			}
			defer done()
			if verb == "purge" {
				rep, err := cl.PurgeDeadLetters(ctx, sel)
				if err != nil {
					return adminDenied("dlq purge", err)
				}
				if c.asJSON {
					return json.NewEncoder(c.stdout).Encode(rep)
				}
				fmt.Fprintf(c.stdout, "purged %d dead letters\n", rep.Purged)
				return nil
			}
			rep, err := cl.ReplayDeadLetters(ctx, sel)
			if err != nil {
				return adminDenied("dlq replay", err)
			}
			if c.asJSON {
				return json.NewEncoder(c.stdout).Encode(rep)
			}
			for _, r := range rep.Replayed {
				fmt.Fprintf(c.stdout, "replayed %d: session %s run %s\n", r.Seq, display(r.Session), r.Run)
			}
			for _, s := range rep.Skipped {
				fmt.Fprintf(c.stdout, "skipped %d: %s\n", s.Seq, s.Why)
			}
			if rep.More {
				fmt.Fprintln(c.stdout, "… more to replay: run the command again")
			}
			if len(rep.Replayed) == 0 && len(rep.Skipped) == 0 {
				fmt.Fprintln(c.stdout, "nothing to replay")
			}
			return nil
		},
	}
	c.jsonFlag(cmd, "print JSON")
	cmd.Flags().StringVar(&sel.Reason, "reason", "", "the dead letters of this reason (poison, invalid, bad-lane)")
	cmd.Flags().BoolVar(&sel.All, "all", false, "every dead letter")
	if verb == "replay" {
		cmd.Flags().BoolVar(&sel.Keep, "keep", false, "keep the replayed dead letters (default: delete each once it is back on its lane)")
	}
	return cmd
}

func parseSeqs(cmd string, args []string) ([]uint64, error) {
	out := make([]uint64, 0, len(args))
	for _, a := range args {
		n, err := strconv.ParseUint(a, 10, 64)
		if err != nil || n == 0 {
			return nil, usagef("%s: %q is not a dead letter's sequence (dlq list prints them)", cmd, a)
		}
		out = append(out, n)
	}
	return out, nil
}

func authCommand(c *common) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "auth",
		Short: "Auth profiles: their cooldowns, and clearing them (the admin role)",
		Args:  noArgs,
	}
	status := &cobra.Command{
		Use:   "status",
		Short: "List the auth profiles with their cooldowns, reasons and until-when",
		Args:  noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cl, ctx, done, err := c.open(cmd.Context())
			if err != nil {
				return err
			}
			defer done()
			rep, err := cl.AuthStatus(ctx)
			if err != nil {
				return adminDenied("auth status", err)
			}
			if c.asJSON {
				return json.NewEncoder(c.stdout).Encode(rep)
			}
			return printAuth(c.stdout, rep)
		},
	}
	c.jsonFlag(status, "print JSON")
	reset := &cobra.Command{
		Use:   "reset PROFILE",
		Short: "Clear a profile's cooldowns across the fleet",
		RunE: func(cmd *cobra.Command, args []string) error {
			if len(args) != 1 || args[0] == "" {
				return usagef("auth reset: give one profile id (auth status lists them)")
			}
			cl, ctx, done, err := c.open(cmd.Context())
			if err != nil {
				return err
			}
			defer done()
			rep, err := cl.ResetAuthProfile(ctx, args[0])
			if err != nil {
				return adminDenied("auth reset", err)
			}
			if rep.Cleared {
				fmt.Fprintf(c.stdout, "cleared the cooldowns of %s\n", rep.Profile)
			} else {
				fmt.Fprintf(c.stdout, "%s had no cooldown\n", rep.Profile)
			}
			return nil
		},
	}
	cmd.AddCommand(status, reset)
	return cmd
}

func printAuth(w io.Writer, rep admin.AuthStatusReply) error {
	if len(rep.Profiles) == 0 {
		fmt.Fprintf(w, "worker %s has no auth profiles\n", rep.Worker)
		return nil
	}
	now := time.UnixMilli(rep.Now)
	until := func(ms int64) string {
		return fmt.Sprintf("until %s (%s)", time.UnixMilli(ms).Format(time.TimeOnly), time.UnixMilli(ms).Sub(now).Round(time.Second))
	}
	fmt.Fprintf(w, "profiles of worker %s:\n", rep.Worker)
	for _, p := range rep.Profiles {
		state := "ok"
		switch {
		case p.DisabledUntil != 0:
			state = "disabled (" + p.DisabledReason + ") " + until(p.DisabledUntil)
		case p.CooldownUntil != 0:
			state = "cooling " + until(p.CooldownUntil)
		case p.Cooling:
			state = "cooling"
		}
		if rep.LastGood[p.Provider] == p.ID {
			state += ", last good"
		}
		fmt.Fprintf(w, "  %-28s %-10s %-8s %s", p.ID, p.Provider, p.Type, state)
		if p.ErrorCount > 0 {
			reasons := make([]string, 0, len(p.FailureCounts))
			for r, n := range p.FailureCounts {
				reasons = append(reasons, fmt.Sprintf("%s %d", r, n))
			}
			slices.Sort(reasons)
			fmt.Fprintf(w, "; %d errors (%s)", p.ErrorCount, strings.Join(reasons, ", "))
		}
		fmt.Fprintln(w)
		models := make([]string, 0, len(p.Models))
		for m := range p.Models {
			models = append(models, m)
		}
		slices.Sort(models)
		for _, m := range models {
			fmt.Fprintf(w, "      model %s cooling %s\n", m, until(p.Models[m]))
		}
	}
	return nil
}

// display shows a session key printable: a key is any UTF-8 string, so one
// with control characters is quoted.
func display(key string) string {
	if events.ValidateKey(key) != nil || strings.ContainsFunc(key, func(r rune) bool { return r < 0x20 || r == 0x7f }) || strings.ContainsAny(key, " \"'") {
		return strconv.Quote(key)
	}
	return key
}

// printable shows data as text when it is UTF-8 without control
// characters, else as a quoted Go string.
func printable(b []byte) string {
	s := string(b)
	if strings.ContainsFunc(s, func(r rune) bool { return (r < 0x20 && r != '\n' && r != '\t') || r == 0x7f || r == '\uFFFD' }) {
		return strconv.Quote(s)
	}
	return s
}

func ago(now time.Time, ms int64) string {
	if ms == 0 {
		return "?"
	}
	return now.Sub(time.UnixMilli(ms)).Round(100 * time.Millisecond).String()
}
