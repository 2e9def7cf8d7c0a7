package lanefleet

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/lanefleet/lanefleet/admin"
	"github.com/lanefleet/lanefleet/internal/backoff"
	"github.com/lanefleet/lanefleet/lanes/sessionsvc"
)

// Operations for operators. Backlog is a session's (its sender and viewers
// may ask); the others are fleet-wide and go through the admin service
// (package admin), which only the admin role may reach: ErrPermission
// otherwise.

// ErrNotFound means the admin service knows no such dead letter or auth
// profile.
var ErrNotFound = errors.New("lanefleet: not found")

// Backlog says what waits on a session's lane: the messages after its last
// committed turn, the oldest of them and the worker holding the lane.
func (c *Client) Backlog(ctx context.Context, session string) (sessionsvc.BacklogReply, error) {
	var rep sessionsvc.BacklogReply
	err := c.call(ctx, session, sessionsvc.OpBacklog, nil, &rep)
	return rep, err
}

// Runs lists a page of a session's runs whose events are still stored,
// newest first, each with its state, start and end, duration, model and
// cost: q.Limit of them (sessionsvc.RunsLimitDefault when 0), before
// q.Before (the previous page's Next). Its sender and viewers may ask.
func (c *Client) Runs(ctx context.Context, session string, q sessionsvc.RunsRequest) (sessionsvc.RunsReply, error) {
	var rep sessionsvc.RunsReply
	body, err := json.Marshal(q)
	if err != nil {
		return rep, err
	}
	err = c.call(ctx, session, sessionsvc.OpRuns, body, &rep)
	return rep, err
}

// Sessions lists the sessions with recent activity, most recent first, at
// most limit (0 = the service's default).
func (c *Client) Sessions(ctx context.Context, limit int) (admin.SessionsReply, error) {
	var rep admin.SessionsReply
	err := c.admin(ctx, admin.OpSessions, admin.SessionsRequest{Limit: limit}, &rep, true)
	return rep, err
}

// SessionsPage lists a page of the sessions with recent activity, most
// recent first, as q asks: within a scope, matching a query, after the
// previous page, with their states.
func (c *Client) SessionsPage(ctx context.Context, q admin.SessionsRequest) (admin.SessionsReply, error) {
	var rep admin.SessionsReply
	err := c.admin(ctx, admin.OpSessions, q, &rep, true)
	return rep, err
}

// Approvals lists the tool calls waiting for the user's approval in the
// sessions of q's scope, newest first.
func (c *Client) Approvals(ctx context.Context, q admin.ApprovalsRequest) (admin.ApprovalsReply, error) {
	var rep admin.ApprovalsReply
	err := c.admin(ctx, admin.OpApprovals, q, &rep, true)
	return rep, err
}

// FleetState says what the fleet's streams hold: the messages waiting
// or running, and the dead letters.
func (c *Client) FleetState(ctx context.Context) (admin.FleetReply, error) {
	var rep admin.FleetReply
	err := c.admin(ctx, admin.OpFleet, nil, &rep, true)
	return rep, err
}

// ErrSessionRunning means a session cannot be forgotten now: a turn of it
// runs or a message waits for it (Forget).
var ErrSessionRunning = errors.New("lanefleet: the session is running or has a message waiting")

// Forget deletes a session's transcript, settings, lane records and run
// events, when no turn of it runs and no message waits
// (ErrSessionRunning otherwise). Its next message starts a new
// conversation. Admin role only.
func (c *Client) Forget(ctx context.Context, session string) (admin.ForgetReply, error) {
	var rep admin.ForgetReply
	err := c.admin(ctx, admin.OpForget, admin.ForgetRequest{Session: session}, &rep, false)
	var se *sessionsvc.Error
	if errors.As(err, &se) && se.Code == admin.CodeBusy {
		return rep, fmt.Errorf("%w: %s", ErrSessionRunning, se.Description)
	}
	return rep, err
}

// DeadLetters lists a page of dead letters without their data.
func (c *Client) DeadLetters(ctx context.Context, q admin.DeadListRequest) (admin.DeadListReply, error) {
	var rep admin.DeadListReply
	err := c.admin(ctx, admin.OpDeadList, q, &rep, true)
	return rep, err
}

// DeadLetter returns one dead letter with its headers and data;
// ErrNotFound when there is none with that sequence.
func (c *Client) DeadLetter(ctx context.Context, seq uint64) (admin.DeadLetter, error) {
	var rep admin.DeadLetter
	err := c.admin(ctx, admin.OpDeadShow, admin.DeadShowRequest{Seq: seq}, &rep, true)
	return rep, err
}

// ReplayDeadLetters publishes the selected dead letters again on their
// lanes, as new runs. A replay is idempotent: the same dead letter
// replayed twice is one message.
func (c *Client) ReplayDeadLetters(ctx context.Context, sel admin.DeadSelect) (admin.DeadReplayReply, error) {
	var rep admin.DeadReplayReply
	err := c.admin(ctx, admin.OpDeadReplay, sel, &rep, false)
	return rep, err
}

// PurgeDeadLetters deletes the selected dead letters.
func (c *Client) PurgeDeadLetters(ctx context.Context, sel admin.DeadSelect) (admin.DeadPurgeReply, error) {
	var rep admin.DeadPurgeReply
	err := c.admin(ctx, admin.OpDeadPurge, sel, &rep, false)
	return rep, err
}

// AuthStatus returns the auth profiles of the worker that answers, with
// their fleet-wide cooldowns.
func (c *Client) AuthStatus(ctx context.Context) (admin.AuthStatusReply, error) {
	var rep admin.AuthStatusReply
	err := c.admin(ctx, admin.OpAuthStatus, nil, &rep, true)
	return rep, err
}

// ResetAuthProfile clears a profile's cooldowns across the fleet;
// ErrNotFound when the answering worker knows no such profile.
func (c *Client) ResetAuthProfile(ctx context.Context, profile string) (admin.AuthResetReply, error) {
	var rep admin.AuthResetReply
	err := c.admin(ctx, admin.OpAuthReset, admin.AuthResetRequest{Profile: profile}, &rep, true)
	return rep, err
}

// admin asks the admin service for op with req (JSON; nil = empty) and
// decodes the reply into v. Like call, it waits a moment for a worker to
// answer and, when retry is set, repeats what passes.
func (c *Client) admin(ctx context.Context, op string, req, v any, retry bool) error {
	var body []byte
	if req != nil {
		var err error
		if body, err = json.Marshal(req); err != nil {
			return fmt.Errorf("lanefleet: %s: %w", op, err)
		}
	}
	subj := admin.Subject(op)
	start := time.Now()
	var noWorkerSince time.Time
	b := backoff.Counter{Policy: callBackoff}
	for {
		data, err := c.requestMsg(ctx, &nats.Msg{Subject: subj, Data: body}, admin.RequestTimeout+5*time.Second)
		if err == nil {
			if err := decodeReply(data, v); err != nil {
				return fmt.Errorf("lanefleet: %s: malformed reply: %w", op, err)
			}
			return nil
		}
		var se *sessionsvc.Error
		switch {
		case ctx.Err() != nil:
			return fmt.Errorf("lanefleet: %s: %w", op, context.Cause(ctx))
		case errors.Is(err, ErrPermission):
			return fmt.Errorf("%w (%s is an admin operation: the admin role)", err, subj)
		case errors.As(err, &se) && se.Code == admin.CodeNotFound:
			return fmt.Errorf("%w: %s", ErrNotFound, se.Description)
		case errors.Is(err, nats.ErrNoResponders):
			if noWorkerSince.IsZero() {
				noWorkerSince = time.Now()
			}
			if time.Since(noWorkerSince) >= noWorkerWait {
				return fmt.Errorf("%w: no worker answers %s", ErrNoFleet, subj)
			}
		case retry && transient(err) && time.Since(start) < callRetryBudget:
		default:
			return fmt.Errorf("lanefleet: %s: %w", op, err)
		}
		if err := b.Wait(ctx); err != nil {
			return fmt.Errorf("lanefleet: %s: %w", op, err)
		}
	}
}
