package lanefleet

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/lanefleet/lanefleet/events"
	"github.com/lanefleet/lanefleet/schedstore"
	"github.com/lanefleet/lanefleet/schedule"
)

// Schedule operations act on the fleet's schedules bucket and stream
// directly (package schedstore): they need the permissions of the admin
// role. The workers fire the schedules (see docs/schedules.md).

// NewSchedule describes a schedule to add: where it sends, when, its
// policies and its message.
type NewSchedule struct {
	// Session receives every firing; or Agent names the agent whose fresh
	// session each firing gets (agent:<agent>:schedule:<id>:<unix>).
	Session string
	Agent   string
	// Exactly one of Cron (five fields or a macro such as @daily, in
	// Zone, an IANA name, default UTC), Every (at least a second) and At.
	Cron  string
	Zone  string
	Every time.Duration
	At    time.Time
	// Overlap and CatchUp default to skip and one.
	Overlap schedule.Overlap
	CatchUp schedule.CatchUp
	// Text and the message's options (Mode, Model, Thinking, AuthProfile,
	// Heartbeat, Images); an id and session are set per firing.
	Message events.Inbound
}

// AddSchedule stores a schedule and arms its first firing; it returns the
// schedule as stored, with its id and next due time. Errors wrap
// schedule.ErrBadSpec or schedule.ErrBadRecord for an invalid schedule,
// schedstore.ErrFull, schedstore.ErrUnsupported (a NATS server before
// 2.12), or the store's (ErrPermission: not the admin role).
func (c *Client) AddSchedule(ctx context.Context, n NewSchedule) (*schedule.Schedule, error) {
	o, err := schedule.ParseOverlap(string(n.Overlap))
	if err != nil {
		return nil, err
	}
	cu, err := schedule.ParseCatchUp(string(n.CatchUp))
	if err != nil {
		return nil, err
	}
	sc := &schedule.Schedule{Session: n.Session, Agent: n.Agent, Overlap: o, CatchUp: cu, Message: n.Message,
		Spec: schedule.Spec{Cron: n.Cron, Zone: n.Zone, EveryMs: n.Every.Milliseconds()}}
	if n.Every > 0 && sc.Spec.EveryMs == 0 {
		sc.Spec.EveryMs = -1 // under a millisecond: refused as too short
	}
	if !n.At.IsZero() {
		sc.Spec.AtMs = n.At.UnixMilli()
	}
	st, err := c.schedules(ctx)
	if err != nil {
		return nil, err
	}
	return st.Add(ctx, sc)
}

// Schedules lists the fleet's schedules by id, and the errors of records
// that do not decode.
func (c *Client) Schedules(ctx context.Context) ([]*schedule.Schedule, []error, error) {
	st, err := c.schedules(ctx)
	if err != nil {
		return nil, nil, err
	}
	return st.List(ctx)
}

// Schedule reads one schedule, its state and run history (the newest
// schedule.HistoryLen firings). schedstore.ErrNotFound: no such id.
func (c *Client) Schedule(ctx context.Context, id string) (*schedule.Schedule, error) {
	st, err := c.schedules(ctx)
	if err != nil {
		return nil, err
	}
	sc, _, err := st.Get(ctx, id)
	return sc, err
}

// PauseSchedule stops a schedule's firings until ResumeSchedule.
func (c *Client) PauseSchedule(ctx context.Context, id string) (*schedule.Schedule, error) {
	return c.setPaused(ctx, id, true)
}

// ResumeSchedule resumes a paused schedule from now: the times that
// passed while it was paused are not caught up.
func (c *Client) ResumeSchedule(ctx context.Context, id string) (*schedule.Schedule, error) {
	return c.setPaused(ctx, id, false)
}

func (c *Client) setPaused(ctx context.Context, id string, paused bool) (*schedule.Schedule, error) {
	st, err := c.schedules(ctx)
	if err != nil {
		return nil, err
	}
	return st.SetPaused(ctx, id, paused)
}

// RemoveSchedule deletes a schedule: it fires no more.
func (c *Client) RemoveSchedule(ctx context.Context, id string) error {
	st, err := c.schedules(ctx)
	if err != nil {
		return err
	}
	return st.Remove(ctx, id)
}

func (c *Client) schedules(ctx context.Context) (*schedstore.Store, error) {
	js, err := jetstream.New(c.nc)
	if err != nil {
		return nil, fmt.Errorf("lanefleet: schedules: %w", err)
	}
	st, err := schedstore.Bind(ctx, js, schedstore.Config{})
	if err != nil {
		if errors.Is(c.nc.LastError(), nats.ErrPermissionViolation) {
			return nil, fmt.Errorf("%w: schedules take the admin role: %w", ErrPermission, err)
		}
		return nil, fmt.Errorf("lanefleet: schedules: %w", err)
	}
	return st, nil
}
