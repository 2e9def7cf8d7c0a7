package fleet

import (
	"context"
	"fmt"
	"os"
	"time"

	"github.com/lanefleet/lanefleet/admin"
	"github.com/lanefleet/lanefleet/lanes/sessionsvc"
	"github.com/lanefleet/lanefleet/provider"
)

// Run processes lanes and serves the lane service (lanes/service) until ctx
// is done, then stops gracefully and closes the connection and the embedded
// server.
func (m *Member) Run(ctx context.Context) error {
	defer m.close()
	defer m.bg.Wait() // the registry writes of the last turns, before the close
	// The lane service answers clients' reads of their sessions while the
	// member runs lanes.
	svc, err := sessionsvc.Serve(m.Conn, sessionsvc.Config{Lanes: m.Lanes, Inbound: m.Streams.Inbound, Events: m.Streams.Events,
		Worker: m.Worker.ID(), Logger: m.log})
	if err != nil {
		return fmt.Errorf("fleet: lane service: %w", err)
	}
	defer func() { _ = svc.Stop() }()
	// The admin service answers operators (admin role) fleet-wide, and
	// says how this worker does in micro's STATS.
	sampled, stopSampling := make(chan struct{}), make(chan struct{})
	go func() { defer close(sampled); m.sampleTurns(stopSampling) }()
	defer func() { close(stopSampling); <-sampled }()
	if m.indexNew {
		m.seedIndex(ctx)
	}
	adm, err := admin.Serve(m.Conn, admin.Config{JS: m.JS, Inbound: m.Streams.Inbound, Events: m.Streams.Events, Dead: m.Streams.Dead,
		Runs: m.Runs, Lanes: m.Lanes, Index: m.index, Auth: m.authBook(), Worker: m.Worker.ID(), Stats: m.workerStats, Forget: m.forget, Scheduled: m.scheduled, Logger: m.log})
	if err != nil {
		return fmt.Errorf("fleet: admin service: %w", err)
	}
	defer func() { _ = adm.Stop() }()
	if m.metricsSrv != nil {
		defer m.serveMetrics()()
	}
	// Jobs of their own until the worker stops, stopped in reverse order.
	for _, job := range m.backgroundJobs() {
		defer background(ctx, job)()
	}
	return m.Worker.Run(ctx)
}

// seedIndex fills the session index of a fleet that ran without one from
// the stored sessions, in the background: their listings come back once
// they are in it.
func (m *Member) seedIndex(ctx context.Context) {
	m.bg.Go(func() {
		n, err := admin.SeedIndex(ctx, admin.Config{Inbound: m.Streams.Inbound, Events: m.Streams.Events, Runs: m.Runs, Index: m.index, Logger: m.log})
		if err != nil && ctx.Err() == nil {
			m.log.Warn().Err(err).Int("sessions", n).Msg("session index: filling it from the stored sessions stopped")
		} else if n > 0 {
			m.log.Info().Int("sessions", n).Msg("session index: filled from the stored sessions")
		}
	})
}

// serveMetrics serves /metrics until stop closes the listener (within
// closeTimeout) and waits for it.
func (m *Member) serveMetrics() (stop func()) {
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := m.metricsSrv.Serve(); err != nil {
			m.log.Error().Err(err).Msg("metrics listener stopped")
		}
	}()
	return func() {
		ctx, cancel := context.WithTimeout(context.Background(), closeTimeout)
		defer cancel()
		_ = m.metricsSrv.Close(ctx)
		<-done
	}
}

// backgroundJobs are the member's jobs that run while its worker runs, in
// the order they start, each where it is configured: the remote tools'
// refresh, the idle release, the budgets' resumes, the schedules, the exec
// secret providers' refresh and the hooks' refresh.
func (m *Member) backgroundJobs() []func(context.Context) {
	var jobs []func(context.Context)
	if m.Tools != nil {
		jobs = append(jobs, func(ctx context.Context) {
			_ = m.Tools.Run(ctx) // refreshes the remote tools until cancelled
		})
	}
	if after := m.cfg.IdleRelease; after >= 0 {
		if after == 0 {
			after = IdleReleaseDefault
		}
		jobs = append(jobs, func(ctx context.Context) {
			m.releaseWhenIdle(ctx, after, m.Worker.Stats().Turns.Load)
		})
	}
	if m.budgets != nil {
		jobs = append(jobs, func(ctx context.Context) { m.budgets.run(ctx, m.Worker.Wake) })
	}
	if m.schedules != nil {
		jobs = append(jobs, m.runSchedules)
	}
	if m.secretExec != nil {
		jobs = append(jobs, m.refreshSecrets)
	}
	if m.Hooks != nil {
		jobs = append(jobs, func(ctx context.Context) {
			_ = m.Hooks.Run(ctx) // refreshes the hooks until cancelled
		})
	}
	return jobs
}

// refreshSecrets runs the exec secret providers' refreshes until ctx is
// done. A failed refresh keeps the last values; what it says names the
// provider, never what the command printed.
func (m *Member) refreshSecrets(ctx context.Context) {
	m.secretExec.Run(ctx, func(vals []provider.Secret) {
		var forms []string
		for _, v := range vals {
			forms = append(forms, secretForms(v.Reveal())...)
		}
		if len(forms) > 0 {
			m.cfg.Redactor.Add(forms...) // before any call uses them; one Add rebuilds the set once
		}
	}, func(err error) {
		m.log.Warn().Err(err).Msg("exec secret provider refresh failed; the last values stay in use")
	})
}

// background runs fn in a goroutine of its own; stop cancels the context
// fn was given and waits for fn to return.
func background(ctx context.Context, fn func(context.Context)) (stop func()) {
	bctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		fn(bctx)
	}()
	return func() { cancel(); <-done }
}

// MetricsAddr returns the address /metrics is served on, or "" when off.
func (m *Member) MetricsAddr() string {
	if m.metricsSrv == nil {
		return ""
	}
	return m.metricsSrv.Addr()
}

func (m *Member) close() {
	m.due.stop()
	if m.procs != nil {
		m.procs.Close() // before the workspaces' filesystem goes
	}
	if m.Conn != nil && !m.Conn.IsConnected() {
		// The server is gone: nothing to drain, and the auth store's
		// watch stops with the connection (it waited 5 s to unsubscribe,
		// then the connection's errors were logged after the worker had
		// stopped), so the store is told first that this is its end.
		if m.Auth != nil {
			m.Auth.Closing()
		}
		m.Conn.Close()
	}
	if m.oauth != nil {
		m.oauth.Close() // a refresh in flight stores its tokens first
	}
	if m.Auth != nil {
		_ = m.Auth.Close()
	}
	if m.budgets != nil {
		_ = m.budgets.store.Close()
	}
	if m.index != nil {
		_ = m.index.Close()
	}
	if m.agents != nil {
		_ = m.agents.Close()
	}
	if m.agentTmp != "" {
		_ = os.RemoveAll(m.agentTmp)
	}
	if m.Conn != nil && !m.Conn.IsClosed() {
		_ = m.Conn.Drain()
		deadline := time.Now().Add(closeTimeout)
		for !m.Conn.IsClosed() && time.Now().Before(deadline) {
			time.Sleep(10 * time.Millisecond)
		}
		m.Conn.Close()
	}
	if m.Server != nil {
		m.Server.Shutdown()
		m.Server.WaitForShutdown()
	}
	if err := m.storeLock.Close(); err != nil {
		m.log.Warn().Err(err).Msg("data directory lock")
	}
	if err := m.disk.Close(); err != nil {
		m.log.Warn().Err(err).Msg("workspace filesystem")
	}
}
