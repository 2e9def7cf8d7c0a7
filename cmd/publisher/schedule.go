package main

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/spf13/cobra"

	"github.com/lanefleet/lanefleet"
	"github.com/lanefleet/lanefleet/events"
	"github.com/lanefleet/lanefleet/schedule"
)

// scheduleCommand manages schedules: records in the schedules bucket,
// which the admin role writes; the workers fire them.
func scheduleCommand(c *common) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "schedule",
		Short: "Schedules: messages sent to a session on a cron, an interval or once (the admin role)",
		Long: `A schedule sends a message to a session (or to a fresh session of an agent per firing)
on a cron expression in a time zone, every interval, or once at a time. The workers fire it:
each due time is sent once, whatever fails; the overlap policy decides what a firing does
while the previous firing's turn has not ended (skip, buffer-one, allow) and the catch-up
policy what happens to times missed while no worker ran (one, all, none). Every due time is
recorded in the schedule's history: fired (with its run id), skipped, missed or failed.`,
		Args: noArgs,
	}
	cmd.AddCommand(scheduleAddCommand(c), scheduleListCommand(c))
	cmd.AddCommand(scheduleIDCommands(c)...)
	return cmd
}

// scheduleAddCommand is `schedule add`: it stores a new schedule and
// prints its id.
func scheduleAddCommand(c *common) *cobra.Command {
	var (
		agent, cron, zone, at string
		every                 time.Duration
		overlap, catchUp      string
		mode, model, thinking string
		authProfile           string
		heartbeat             bool
		images                []string
	)
	add := &cobra.Command{
		Use:   "add (--session KEY | --agent NAME) (--cron EXPR [--tz ZONE] | --every DUR | --at TIME) [--overlap skip|buffer-one|allow] [--catch-up one|all|none] [message flags] TEXT|-",
		Short: "Add a schedule and print its id",
		RunE: func(cmd *cobra.Command, args []string) error {
			text, err := messageText(args, c.stdin)
			if err != nil {
				return err
			}
			n := lanefleet.NewSchedule{Session: c.session, Agent: agent, Cron: cron, Zone: zone, Every: every,
				Overlap: schedule.Overlap(overlap), CatchUp: schedule.CatchUp(catchUp),
				Message: events.Inbound{Text: text, Mode: mode, Model: model, Thinking: thinking, AuthProfile: authProfile, Heartbeat: heartbeat}}
			if (c.session == "") == (agent == "") {
				return usagef("schedule add: give --session KEY or --agent NAME")
			}
			if at != "" {
				if n.At, err = time.Parse(time.RFC3339, at); err != nil {
					return usagef("schedule add: --at %q: want RFC 3339, e.g. 2026-12-01T09:00:00+01:00", at)
				}
			}
			for _, path := range images {
				mt, data, err := readImage("schedule add", path)
				if err != nil {
					return err
				}
				n.Message.Images = append(n.Message.Images, events.Image{MimeType: mt, Data: base64.StdEncoding.EncodeToString(data)})
			}
			return c.withSchedules(cmd, "schedule add", func(ctx context.Context, cl *lanefleet.Client) error {
				sc, err := cl.AddSchedule(ctx, n)
				if errors.Is(err, schedule.ErrBadSpec) || errors.Is(err, schedule.ErrBadRecord) {
					return usageError{fmt.Errorf("schedule add: %w", err)}
				}
				if err != nil {
					return err
				}
				if c.asJSON {
					return json.NewEncoder(c.stdout).Encode(sc.Public())
				}
				fmt.Fprintln(c.stdout, sc.ID)
				return nil
			})
		},
	}
	c.sessionFlag(add)
	fs := add.Flags()
	fs.StringVar(&agent, "agent", "", "send each firing to a fresh session of this agent: agent:NAME:schedule:ID:UNIXTIME")
	fs.StringVar(&cron, "cron", "", `five-field cron expression (minute hour day-of-month month day-of-week) or @hourly, @daily, @weekly, @monthly, @yearly`)
	fs.StringVar(&zone, "tz", "", "IANA time zone of --cron (default UTC), e.g. Europe/Paris")
	fs.DurationVar(&every, "every", 0, "fire every DUR (at least 1s), counted from now")
	fs.StringVar(&at, "at", "", "fire once, at this RFC 3339 time")
	fs.StringVar(&overlap, "overlap", "skip", "while the previous firing's turn has not ended: skip, buffer-one (one waits) or allow")
	fs.StringVar(&catchUp, "catch-up", "one", "times missed while no worker ran: one (fire once), all (each, up to 100) or none")
	fs.StringVar(&mode, "mode", "", "the message's queue mode (followup, collect, steer, interrupt, ...)")
	fs.StringVar(&model, "model", "", "the message's model provider/model-id")
	fs.StringVar(&thinking, "thinking", "", "the message's thinking level")
	fs.StringVar(&authProfile, "auth-profile", "", "run the firings' turns on this auth profile only")
	fs.BoolVar(&heartbeat, "heartbeat", false, "send heartbeats: each runs if the session is idle and is dropped if it is busy")
	fs.StringArrayVar(&images, "image", nil, "attach an image file (repeatable)")
	c.jsonFlag(add, "print the stored schedule as JSON")

	return add
}

// scheduleListCommand is `schedule list`.
func scheduleListCommand(c *common) *cobra.Command {
	list := &cobra.Command{
		Use:   "list",
		Short: "List the schedules: id, target, timing, policies, state, next due time",
		Args:  noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return c.withSchedules(cmd, "schedule list", func(ctx context.Context, cl *lanefleet.Client) error {
				all, bad, err := cl.Schedules(ctx)
				if err != nil {
					return err
				}
				for _, e := range bad {
					fmt.Fprintf(c.stderr, "warning: %v\n", e)
				}
				if c.asJSON {
					shown := make([]*schedule.Schedule, 0, len(all))
					for _, sc := range all {
						shown = append(shown, sc.Public())
					}
					return json.NewEncoder(c.stdout).Encode(shown)
				}
				if len(all) == 0 {
					fmt.Fprintln(c.stdout, "no schedules")
					return nil
				}
				for _, sc := range all {
					fmt.Fprintf(c.stdout, "%s  %s  %s  overlap %s, catch-up %s  %s\n", sc.ID, target(sc), sc.Spec, sc.Overlap, sc.CatchUp, state(sc))
				}
				return nil
			})
		},
	}
	c.jsonFlag(list, "print JSON")

	return list
}

// scheduleIDCommands are the commands on one schedule by its id: show,
// pause, resume, rm and history.
func scheduleIDCommands(c *common) []*cobra.Command {
	byID := func(use, short string, op func(ctx context.Context, cl *lanefleet.Client, id string) error) *cobra.Command {
		cmd := &cobra.Command{
			Use:   use + " ID",
			Short: short,
			Args: func(cmd *cobra.Command, args []string) error {
				if len(args) != 1 {
					return usagef("schedule %s: give one schedule id", use)
				}
				return nil
			},
			RunE: func(cmd *cobra.Command, args []string) error {
				return c.withSchedules(cmd, "schedule "+use, func(ctx context.Context, cl *lanefleet.Client) error {
					return op(ctx, cl, args[0])
				})
			},
		}
		return cmd
	}
	show := byID("show", "Show a schedule: its message, timing, policies, state and latest firings", func(ctx context.Context, cl *lanefleet.Client, id string) error {
		sc, err := cl.Schedule(ctx, id)
		if err != nil {
			return err
		}
		if c.asJSON {
			return json.NewEncoder(c.stdout).Encode(sc.Public())
		}
		printSchedule(c.stdout, sc)
		return nil
	})
	c.jsonFlag(show, "print JSON")
	pause := byID("pause", "Pause a schedule: it fires nothing until resumed", func(ctx context.Context, cl *lanefleet.Client, id string) error {
		sc, err := cl.PauseSchedule(ctx, id)
		if err != nil {
			return err
		}
		fmt.Fprintf(c.stdout, "%s: %s\n", sc.ID, state(sc))
		return nil
	})
	resume := byID("resume", "Resume a paused schedule from now (times passed while paused are not caught up)", func(ctx context.Context, cl *lanefleet.Client, id string) error {
		sc, err := cl.ResumeSchedule(ctx, id)
		if err != nil {
			return err
		}
		fmt.Fprintf(c.stdout, "%s: %s\n", sc.ID, state(sc))
		return nil
	})
	rm := byID("rm", "Remove a schedule: it fires no more", func(ctx context.Context, cl *lanefleet.Client, id string) error {
		if err := cl.RemoveSchedule(ctx, id); err != nil {
			return err
		}
		fmt.Fprintf(c.stdout, "%s: removed\n", id)
		return nil
	})
	history := byID("history", "A schedule's firings, newest last: due time, outcome, run id", func(ctx context.Context, cl *lanefleet.Client, id string) error {
		sc, err := cl.Schedule(ctx, id)
		if err != nil {
			return err
		}
		if c.asJSON {
			return json.NewEncoder(c.stdout).Encode(append([]schedule.Firing{}, sc.History...)) // [] rather than null, as the gateway answers
		}
		printFirings(c.stdout, sc.History)
		return nil
	})
	c.jsonFlag(history, "print JSON")
	return []*cobra.Command{show, pause, resume, rm, history}
}

// withSchedules opens the client for one schedule command and runs fn; a
// permission error says what the command needs.
func (c *common) withSchedules(cmd *cobra.Command, op string, fn func(context.Context, *lanefleet.Client) error) error {
	cl, ctx, done, err := c.open(cmd.Context())
	if err != nil {
		return err
	}
	defer done()
	err = fn(ctx, cl)
	var usage usageError
	switch {
	case err == nil, errors.As(err, &usage):
		return err
	case errors.Is(err, lanefleet.ErrPermission):
		return fmt.Errorf("%s: this NATS user may not manage schedules (that takes the admin role): %w", op, err)
	}
	return fmt.Errorf("%s: %w", op, err)
}

func target(sc *schedule.Schedule) string {
	if sc.Agent != "" {
		return "agent " + sc.Agent
	}
	return "session " + shellQuote(sc.Session)
}

func state(sc *schedule.Schedule) string {
	switch {
	case sc.Paused:
		return "paused"
	case sc.NextMs == 0:
		return "over"
	}
	return "next " + time.UnixMilli(sc.NextMs).UTC().Format(time.RFC3339)
}

func printSchedule(w io.Writer, sc *schedule.Schedule) {
	fmt.Fprintf(w, "%s: %s, %s\n", sc.ID, target(sc), sc.Spec)
	fmt.Fprintf(w, "  overlap %s, catch-up %s; %s\n", sc.Overlap, sc.CatchUp, state(sc))
	fmt.Fprintf(w, "  message: %q", sc.Message.Text)
	for _, o := range []struct{ k, v string }{{"mode", sc.Message.Mode}, {"model", sc.Message.Model}, {"thinking", sc.Message.Thinking}, {"auth profile", sc.Message.AuthProfile}} {
		if o.v != "" {
			fmt.Fprintf(w, ", %s %s", o.k, o.v)
		}
	}
	if sc.Message.Heartbeat {
		fmt.Fprint(w, ", heartbeat")
	}
	fmt.Fprintf(w, "\n  created %s\n", time.UnixMilli(sc.CreatedMs).UTC().Format(time.RFC3339))
	if len(sc.History) > 0 {
		fmt.Fprintln(w, "  latest firings:")
		printFirings(w, sc.History[max(0, len(sc.History)-5):])
	}
}

func printFirings(w io.Writer, h []schedule.Firing) {
	if len(h) == 0 {
		fmt.Fprintln(w, "no firings yet")
		return
	}
	for _, f := range h {
		due := time.UnixMilli(f.DueMs).UTC().Format(time.RFC3339)
		late := time.Duration(f.HandledMs-f.DueMs) * time.Millisecond
		switch f.Outcome {
		case schedule.Fired:
			fmt.Fprintf(w, "%s  fired    run %s of session %s (%v late)\n", due, printable([]byte(f.RunID)), display(f.Session), late.Round(time.Millisecond))
		case schedule.Missed:
			if f.Count > 1 {
				fmt.Fprintf(w, "%s  missed   %d due times up to this one (no worker ran; catch-up policy)\n", due, f.Count)
			} else {
				fmt.Fprintf(w, "%s  missed   (no worker ran; catch-up policy)\n", due)
			}
		case schedule.Skipped:
			fmt.Fprintf(w, "%s  skipped  (the previous firing's turn had not ended; overlap policy)\n", due)
		default:
			// The history is the record's bytes, unchecked by Validate: no
			// control characters reach the terminal.
			fmt.Fprintf(w, "%s  %-8s %s\n", due, printable([]byte(string(f.Outcome))), printable([]byte(f.Error)))
		}
	}
}
