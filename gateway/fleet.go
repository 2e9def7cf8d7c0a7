package gateway

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/lanefleet/lanefleet"
	"github.com/lanefleet/lanefleet/admin"
	"github.com/lanefleet/lanefleet/events"
	"github.com/lanefleet/lanefleet/lanes/sessionsvc"
)

// FleetEveryDefault is how often GET /api/fleet/events sends the fleet's
// state (Config.FleetEvery).
const FleetEveryDefault = 2 * time.Second

// fleetWait bounds the gathering of one fleet snapshot.
const fleetWait = 5 * time.Second

// FleetReply is the body of GET /api/fleet and the data of each event of
// GET /api/fleet/events.
type FleetReply struct {
	At      time.Time     `json:"at"`
	Workers []FleetWorker `json:"workers"`
	Backlog uint64        `json:"backlog"` // messages stored on the inbound stream: waiting or being run
	// StoredBytes is their size.
	StoredBytes  uint64        `json:"storedBytes"`
	DeadLetters  uint64        `json:"deadLetters"`
	AuthProfiles []AuthProfile `json:"authProfiles"`
}

// FleetWorker is one worker as it answered.
type FleetWorker struct {
	ID           string    `json:"id"`
	Version      string    `json:"version"`
	SlotsUsed    int       `json:"slotsUsed"`
	SlotsTotal   int       `json:"slotsTotal"`
	LanesHeld    int       `json:"lanesHeld"`
	LanesWaiting int       `json:"lanesWaiting"`
	TurnsTotal   int64     `json:"turnsTotal"`
	TurnsPerSec  float64   `json:"turnsPerSec"`
	LastSeen     time.Time `json:"lastSeen"`
}

// AuthProfile is an auth profile's state, as the console shows it.
type AuthProfile struct {
	ID       string `json:"id"`
	Provider string `json:"provider"`
	// State is "ok", "cooldown" (the profile, or some of its models:
	// Reason "models") or "disabled".
	State string `json:"state"`
	// CooldownUntil is when it is usable again; null when it is.
	CooldownUntil *time.Time `json:"cooldownUntil"`
	Reason        string     `json:"reason"`
	Failures      int        `json:"failures"`
}

// authProfileOf is the console's view of an admin auth profile at now.
func authProfileOf(p admin.AuthProfile, now time.Time) AuthProfile {
	out := AuthProfile{ID: p.ID, Provider: p.Provider, State: "ok", Failures: p.ErrorCount}
	until := int64(0)
	switch {
	case p.DisabledUntil > now.UnixMilli():
		out.State, out.Reason, until = "disabled", p.DisabledReason, max(p.DisabledUntil, p.CooldownUntil)
	case p.Cooling || p.CooldownUntil > now.UnixMilli():
		out.State, until = "cooldown", p.CooldownUntil
		out.Reason = mostFailures(p.FailureCounts)
	case len(p.Models) > 0:
		out.State, out.Reason = "cooldown", "models"
		for _, u := range p.Models {
			until = max(until, u)
		}
	}
	if until > 0 {
		t := time.UnixMilli(until).UTC()
		out.CooldownUntil = &t
	}
	return out
}

// mostFailures is the failure reason counted most ("" for none).
func mostFailures(counts map[string]int) string {
	best, n := "", 0
	for r, c := range counts {
		if c > n || (c == n && r < best) {
			best, n = r, c
		}
	}
	return best
}

// fleetSnapshot asks the fleet for its state: every worker's stats, the
// streams' counts and the auth profiles, at once.
func (s *Server) fleetSnapshot(ctx context.Context) (FleetReply, error) {
	ctx, cancel := context.WithTimeout(ctx, fleetWait)
	defer cancel()
	var (
		wg       sync.WaitGroup
		workers  []admin.WorkerStats
		state    admin.FleetReply
		auth     admin.AuthStatusReply
		errW     error
		errS     error
		errA     error
		answered = time.Now()
	)
	wg.Go(func() { workers, errW = s.cfg.Client.Workers(ctx, lanefleet.WorkersQuery{}) })
	wg.Go(func() { state, errS = s.cfg.Client.FleetState(ctx) })
	wg.Go(func() { auth, errA = s.cfg.Client.AuthStatus(ctx) })
	wg.Wait()
	if err := errors.Join(errW, errS); err != nil {
		return FleetReply{}, err
	}
	rep := FleetReply{At: time.Now().UTC(), Workers: make([]FleetWorker, 0, len(workers)), Backlog: state.Backlog,
		StoredBytes: state.BacklogBytes, DeadLetters: state.DeadLetters, AuthProfiles: []AuthProfile{}}
	for _, w := range workers {
		rep.Workers = append(rep.Workers, FleetWorker{ID: w.Worker, Version: w.Version, SlotsUsed: w.SlotsUsed, SlotsTotal: w.SlotsTotal,
			LanesHeld: w.LanesHeld, LanesWaiting: w.LanesWaiting, TurnsTotal: w.Turns, TurnsPerSec: w.TurnsPerSec, LastSeen: answered.UTC()})
	}
	if errA == nil {
		rep.AuthProfiles = authProfiles(auth)
	} else {
		// A worker without auth profiles answers 503: the rest stands.
		s.log.Debug().Err(errA).Msg("gateway: fleet: auth status")
	}
	return rep, nil
}

// authProfiles maps an auth status to the console's view.
func authProfiles(st admin.AuthStatusReply) []AuthProfile {
	now := time.UnixMilli(st.Now)
	if st.Now == 0 {
		now = time.Now()
	}
	out := make([]AuthProfile, 0, len(st.Profiles))
	for _, p := range st.Profiles {
		out = append(out, authProfileOf(p, now))
	}
	return out
}

func (s *Server) fleet(w http.ResponseWriter, r *http.Request) {
	rep, err := s.fleetSnapshot(r.Context())
	if err != nil {
		s.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, rep)
}

// fleetEvents streams the fleet's state as server-sent events ("event:
// fleet", the JSON of GET /api/fleet) at once and then every
// Config.FleetEvery, until the client leaves, the stream is idle (a
// fleet that does not answer) or the gateway shuts down. A snapshot the
// fleet fails is an "event: error" with a problem, and the stream goes on.
func (s *Server) fleetEvents(w http.ResponseWriter, r *http.Request) {
	if n := s.streams.Add(1); n > int64(s.cfg.MaxStreams) {
		s.streams.Add(-1)
		p := newProblem(http.StatusServiceUnavailable, CodeOverloaded, "this gateway holds as many streams as it may; try another, or later")
		p.RetryAfter = 5
		writeProblem(w, r, p)
		return
	}
	s.metrics.streams.Inc()
	defer func() {
		s.streams.Add(-1)
		s.metrics.streams.Dec()
	}()
	ctx, cancel := context.WithCancelCause(r.Context())
	defer cancel(nil)
	now := time.Now()
	st := &stream{last: now, event: now, cancel: cancel, w: w, rc: http.NewResponseController(w)}
	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-cache")
	h.Set("X-Accel-Buffering", "no")
	w.WriteHeader(http.StatusOK)
	if err := st.write([]byte(": fleet\n\n"), s.cfg.WriteTimeout); err != nil {
		return
	}
	s.hub.add(st)
	defer s.hub.remove(st)
	t := time.NewTicker(s.cfg.FleetEvery)
	defer t.Stop()
	for {
		var msg []byte
		rep, err := s.fleetSnapshot(ctx)
		if ctx.Err() != nil {
			return
		}
		if err != nil {
			p := problemOf(err)
			b, _ := json.Marshal(p)
			msg = append(append([]byte("event: error\ndata: "), b...), "\n\n"...)
		} else {
			b, _ := json.Marshal(rep)
			msg = append(append([]byte("event: fleet\ndata: "), b...), "\n\n"...)
			st.mu.Lock()
			st.event = time.Now()
			st.mu.Unlock()
		}
		if err := st.write(msg, s.cfg.WriteTimeout); err != nil {
			return
		}
		select {
		case <-ctx.Done():
			return
		case <-s.stopping:
			return
		case <-t.C:
		}
	}
}

func (s *Server) listAuthProfiles(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := readCtx(r)
	defer cancel()
	st, err := s.cfg.Client.AuthStatus(ctx)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"authProfiles": authProfiles(st)})
}

// maxProfileID bounds an auth profile id in a path.
const maxProfileID = 256

func (s *Server) resetAuthProfile(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	if id == "" || len(id) > maxProfileID || strings.ContainsAny(id, "\x00\r\n") {
		writeProblem(w, r, newProblem(http.StatusNotFound, CodeNotFound, "no such auth profile"))
		return
	}
	ctx, cancel := readCtx(r)
	defer cancel()
	rep, err := s.cfg.Client.ResetAuthProfile(ctx, id)
	if errors.Is(err, lanefleet.ErrNotFound) {
		writeProblem(w, r, newProblem(http.StatusNotFound, CodeNotFound, "no such auth profile"))
		return
	}
	if err != nil {
		s.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"id": rep.Profile, "cleared": rep.Cleared})
}

// badRequestOf returns the problem of a request the fleet refused as
// malformed (a cursor it does not know), or nil.
func badRequestOf(err error) *Problem {
	var se *sessionsvc.Error
	if errors.As(err, &se) && se.Code == sessionsvc.CodeBadRequest {
		return newProblem(http.StatusBadRequest, CodeInvalidInput, se.Description)
	}
	return nil
}

// forget deletes an idle session's stored state (admin): 409
// session_busy while a turn of it runs or a message waits.
func (s *Server) forget(w http.ResponseWriter, r *http.Request) {
	key := r.PathValue("key")
	if err := events.ValidateKey(key); err != nil {
		writeProblem(w, r, newProblem(http.StatusBadRequest, CodeInvalidInput, "session key: "+err.Error()))
		return
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(r.Context()), readTimeout)
	defer cancel()
	rep, err := s.cfg.Client.Forget(ctx, key)
	if errors.Is(err, lanefleet.ErrSessionRunning) {
		writeProblem(w, r, newProblem(http.StatusConflict, CodeSessionBusy, "a turn of the session runs or a message waits for it: stop it, or try again when it is idle"))
		return
	}
	if err != nil {
		s.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"session": rep.Session, "keys": rep.Keys, "events": rep.Events})
}
