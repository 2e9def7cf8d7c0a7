package lanes

import (
	"context"
	"strings"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"

	"github.com/lanefleet/lanefleet/events"
)

// paused reports whether the session of key is paused (Config.Paused).
func (w *Worker) paused(key string) bool { return w.cfg.Paused != nil && w.cfg.Paused(key) }

// tenant is the session's tenant (Config.Tenant), "" without one.
func (w *Worker) tenant(key string) string {
	if w.cfg.Tenant == nil {
		return ""
	}
	return w.cfg.Tenant(key)
}

// Wake takes up the lanes with messages whose session match accepts and
// that are no longer paused, nobody holding their lease: called when a
// pause ends (a budget raised or reset), so their queued messages run
// without being sent again. Every worker may call it for the same pause;
// the lease decides who drains each lane. A lane this worker has no slot
// for now is left to the sweep. It returns how many lanes it took.
func (w *Worker) Wake(ctx context.Context, match func(key string) bool) int {
	if w.shuttingDown.Load() {
		return 0
	}
	info, err := w.streams.Inbound.Info(ctx, jetstream.WithSubjectFilter(events.InboundPrefix+"*"))
	if err != nil {
		w.log.Warn().Err(err).Msg("wake: list lanes")
		return 0
	}
	n := 0
	for subj := range info.State.Subjects {
		if ctx.Err() != nil || w.shuttingDown.Load() {
			break
		}
		token := strings.TrimPrefix(subj, events.InboundPrefix)
		key, err := events.TokenKey(token)
		if err != nil || !match(key) || w.paused(key) {
			continue
		}
		if _, held, err := w.lanes.Holder(ctx, token); err != nil || held {
			continue
		}
		if !w.sweepLane(ctx, token, key, subj, zerolog.InfoLevel, "wake: the session is no longer paused") {
			break
		}
		w.stats.Woken.Add(1)
		n++
	}
	return n
}
