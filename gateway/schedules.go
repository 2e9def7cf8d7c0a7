package gateway

import (
	"context"
	"errors"
	"net/http"
	"time"

	"github.com/lanefleet/lanefleet"
	"github.com/lanefleet/lanefleet/events"
	"github.com/lanefleet/lanefleet/gateway/route"
	"github.com/lanefleet/lanefleet/schedstore"
	"github.com/lanefleet/lanefleet/schedule"
)

// scheduleRoutes are the schedules' routes: fleet operations, admins only
// (the gateway's NATS user needs the admin role for them).
func (s *Server) scheduleRoutes() []route.Route {
	h := func(f http.HandlerFunc) http.Handler { return f }
	return []route.Route{
		{Method: "GET", Pattern: "/api/schedules", Reach: route.Fleet, Handler: h(s.listSchedules)},
		{Method: "POST", Pattern: "/api/schedules", Reach: route.Fleet, Handler: h(s.addSchedule)},
		{Method: "GET", Pattern: "/api/schedules/{id}", Reach: route.Fleet, Handler: h(s.getSchedule)},
		{Method: "DELETE", Pattern: "/api/schedules/{id}", Reach: route.Fleet, Handler: h(s.removeSchedule)},
		{Method: "POST", Pattern: "/api/schedules/{id}/pause", Reach: route.Fleet, Handler: h(s.pauseSchedule)},
		{Method: "POST", Pattern: "/api/schedules/{id}/resume", Reach: route.Fleet, Handler: h(s.resumeSchedule)},
		{Method: "GET", Pattern: "/api/schedules/{id}/history", Reach: route.Fleet, Handler: h(s.scheduleHistory)},
	}
}

// ScheduleRequest is the body of POST /api/schedules: where, when, the
// policies and the message (see docs/schedules.md).
type ScheduleRequest struct {
	Session     string `json:"session,omitempty"`
	Agent       string `json:"agent,omitempty"`
	Cron        string `json:"cron,omitempty"`
	TZ          string `json:"tz,omitempty"`
	Every       string `json:"every,omitempty"` // a Go duration: "5m", "1h30m"
	At          string `json:"at,omitempty"`    // RFC 3339
	Overlap     string `json:"overlap,omitempty"`
	CatchUp     string `json:"catchUp,omitempty"`
	Text        string `json:"text"`
	Mode        string `json:"mode,omitempty"`
	Model       string `json:"model,omitempty"`
	Thinking    string `json:"thinking,omitempty"`
	AuthProfile string `json:"authProfile,omitempty"`
	Heartbeat   bool   `json:"heartbeat,omitempty"`
}

// SchedulesReply is the body of GET /api/schedules.
type SchedulesReply struct {
	Schedules []*schedule.Schedule `json:"schedules"`
	// Errors name the records that do not decode.
	Errors []string `json:"errors"`
}

// HistoryReply is the body of GET /api/schedules/{id}/history.
type HistoryReply struct {
	History []schedule.Firing `json:"history"`
}

func (s *Server) listSchedules(w http.ResponseWriter, r *http.Request) {
	answer(s, w, r, func(ctx context.Context) (SchedulesReply, error) {
		all, bad, err := s.cfg.Client.Schedules(ctx)
		rep := SchedulesReply{Schedules: []*schedule.Schedule{}, Errors: []string{}}
		for _, sc := range all {
			rep.Schedules = append(rep.Schedules, sc.Public())
		}
		for _, e := range bad {
			rep.Errors = append(rep.Errors, e.Error())
		}
		return rep, scheduleErr(err)
	})
}

func (s *Server) addSchedule(w http.ResponseWriter, r *http.Request) {
	var q ScheduleRequest
	if !decodeJSON(w, r, &q) {
		return
	}
	n := lanefleet.NewSchedule{Session: q.Session, Agent: q.Agent, Cron: q.Cron, Zone: q.TZ,
		Overlap: schedule.Overlap(q.Overlap), CatchUp: schedule.CatchUp(q.CatchUp),
		Message: events.Inbound{Text: q.Text, Mode: q.Mode, Model: q.Model, Thinking: q.Thinking, AuthProfile: q.AuthProfile, Heartbeat: q.Heartbeat}}
	if q.Every != "" {
		d, err := time.ParseDuration(q.Every)
		if err != nil || d <= 0 {
			writeProblem(w, r, newProblem(http.StatusBadRequest, CodeInvalidInput, "every must be a positive duration such as 5m or 1h30m"))
			return
		}
		n.Every = d
	}
	if q.At != "" {
		t, err := time.Parse(time.RFC3339, q.At)
		if err != nil {
			writeProblem(w, r, newProblem(http.StatusBadRequest, CodeInvalidInput, "at must be an RFC 3339 time such as 2026-12-01T09:00:00+01:00"))
			return
		}
		n.At = t
	}
	ctx, cancel := readCtx(r)
	defer cancel()
	sc, err := s.cfg.Client.AddSchedule(ctx, n)
	if err != nil {
		if errors.Is(err, schedule.ErrBadSpec) || errors.Is(err, schedule.ErrBadRecord) {
			err = &events.DecodeError{Field: "schedule", Reason: err.Error()} // what was sent is invalid
		}
		s.fail(w, r, scheduleErr(err))
		return
	}
	writeJSON(w, http.StatusCreated, sc.Public())
}

func (s *Server) getSchedule(w http.ResponseWriter, r *http.Request) {
	answer(s, w, r, func(ctx context.Context) (*schedule.Schedule, error) {
		sc, err := s.cfg.Client.Schedule(ctx, r.PathValue("id"))
		if err != nil {
			return nil, scheduleErr(err)
		}
		return sc.Public(), nil
	})
}

func (s *Server) scheduleHistory(w http.ResponseWriter, r *http.Request) {
	answer(s, w, r, func(ctx context.Context) (HistoryReply, error) {
		sc, err := s.cfg.Client.Schedule(ctx, r.PathValue("id"))
		if err != nil {
			return HistoryReply{}, scheduleErr(err)
		}
		return HistoryReply{History: append([]schedule.Firing{}, sc.History...)}, nil
	})
}

func (s *Server) pauseSchedule(w http.ResponseWriter, r *http.Request) {
	answer(s, w, r, func(ctx context.Context) (*schedule.Schedule, error) {
		sc, err := s.cfg.Client.PauseSchedule(ctx, r.PathValue("id"))
		if err != nil {
			return nil, scheduleErr(err)
		}
		return sc.Public(), nil
	})
}

func (s *Server) resumeSchedule(w http.ResponseWriter, r *http.Request) {
	answer(s, w, r, func(ctx context.Context) (*schedule.Schedule, error) {
		sc, err := s.cfg.Client.ResumeSchedule(ctx, r.PathValue("id"))
		if err != nil {
			return nil, scheduleErr(err)
		}
		return sc.Public(), nil
	})
}

func (s *Server) removeSchedule(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := readCtx(r)
	defer cancel()
	if err := s.cfg.Client.RemoveSchedule(ctx, r.PathValue("id")); err != nil {
		s.fail(w, r, scheduleErr(err))
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

// scheduleErr maps the schedules' errors onto the problems problemOf
// knows: an unknown id is not found, a fleet without schedules no fleet.
func scheduleErr(err error) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, schedstore.ErrNotFound):
		return errors.Join(err, lanefleet.ErrNotFound)
	case errors.Is(err, schedstore.ErrNoSchedules):
		return errors.Join(err, lanefleet.ErrNoFleet)
	}
	return err
}
