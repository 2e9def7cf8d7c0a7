package lanes

import (
	"context"
	"strconv"
	"strings"
	"sync"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"

	"github.com/lanefleet/lanefleet/events"
)

// paused reports whether the session of key is paused (Config.Paused).
func (c *Config) paused(key string) bool { return c.Paused != nil && c.Paused(key) }

// maxPauseNotices bounds the waiting messages one owner notices at a
// time, and maxNoticedLanes the lanes whose noticed messages a worker
// remembers (past it, it forgets them all: a message may be noticed
// twice, each notice checked against the run's last event).
const (
	maxPauseNotices = 64
	maxNoticedLanes = 4096
)

// pauseNotices remembers, per lane token, the last message noticed while
// its session was paused.
type pauseNotices struct {
	mu   sync.Mutex
	last map[string]uint64
}

// since is the last message of token noticed (0: none).
func (p *pauseNotices) since(token string) uint64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.last[token]
}

// noted records that the messages of token up to seq were noticed.
func (p *pauseNotices) noted(token string, seq uint64) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.last == nil || len(p.last) >= maxNoticedLanes {
		p.last = map[string]uint64{}
	}
	p.last[token] = max(p.last[token], seq)
}

// noticePaused tells the senders of a paused session's waiting messages,
// from head on, why they wait (Config.PauseNotice): a lifecycle paused
// event on each message's run, once (not when its run's last event is
// one already, or it finished).
func (o *owner) noticePaused(ctx context.Context, head *jetstream.RawStreamMsg) {
	if o.cfg.PauseNotice == nil {
		return
	}
	text := o.cfg.PauseNotice(o.key)
	if text == "" {
		return
	}
	from := o.notices.since(o.token)
	raw := head
	for n := 0; raw != nil && n < maxPauseNotices && ctx.Err() == nil; n++ {
		if raw.Sequence > from {
			run := strconv.FormatUint(raw.Sequence, 10)
			em := o.newEmitter(ctx, run, o.log, isJSON(raw))
			st, err := em.Open(ctx, o.lease.Revision())
			if err == nil && !st.Finished && st.LastPhase != events.PhasePaused {
				err = em.Publish(ctx, events.StreamLifecycle, events.EventData{Phase: events.PhasePaused, Text: text}, st.Attempt)
			}
			if err != nil {
				o.log.Debug().Err(err).Str("run_id", run).Msg("paused notice")
				return
			}
			o.notices.noted(o.token, raw.Sequence)
		}
		next, err := o.next(ctx, raw.Sequence)
		if err != nil {
			return
		}
		raw = next
	}
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
		if err != nil || !match(key) || w.cfg.paused(key) {
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
