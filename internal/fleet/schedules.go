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
