package fleet

import (
	"context"
	"time"

	"github.com/lanefleet/lanefleet/schedstore"
	"github.com/lanefleet/lanefleet/schedule"
)

// openSchedules opens the schedules' bucket and stream (package
// schedstore).
func (m *Member) openSchedules(ctx context.Context) error {
	st, err := schedstore.Open(ctx, m.JS, schedstore.Config{Replicas: m.cfg.Replicas, MaxBytes: m.cfg.Limits.Schedules})
	if err != nil {
		return err
	}
	m.schedules = st
	return nil
}

// runSchedules fires the fleet's due schedules (one worker each, through
// the shared consumer) until ctx ends.
func (m *Member) runSchedules(ctx context.Context) {
	log := m.log.With().Str("component", "schedules").Logger()
	f, err := schedstore.NewFirer(ctx, schedstore.FirerConfig{Store: m.schedules, Runs: m.Runs, Log: log,
		Observe: func(o schedule.Outcome, n int, late time.Duration) { m.obs.metrics.ScheduleDue(string(o), n, late) }})
	if err != nil {
		if ctx.Err() == nil {
			log.Error().Err(err).Msg("schedules: not fired by this worker")
		}
		return
	}
	if err := f.Run(ctx); err != nil && ctx.Err() == nil {
		log.Error().Err(err).Msg("schedules: not fired by this worker")
	}
}

// scheduled counts the schedules that send to each session, by key, for
// the admin service's listing (an agent's schedule, which sends to a new
// session each firing, counts for none). Schedules that do not decode are
// left out.
func (m *Member) scheduled(ctx context.Context) (map[string]int, error) {
	if m.schedules == nil {
		return nil, nil
	}
	list, _, err := m.schedules.List(ctx)
	if err != nil {
		return nil, err
	}
	out := make(map[string]int, len(list))
	for _, sc := range list {
		if sc.Session != "" {
			out[sc.Session]++
		}
	}
	return out, nil
}
