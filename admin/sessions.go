package admin

import (
	"cmp"
	"context"
	"errors"
	"slices"
	"strconv"
	"strings"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/lanefleet/lanefleet/events"
	"github.com/lanefleet/lanefleet/kvstore"
)

// lane is what the listing learns about one lane token.
type lane struct {
	token    string
	runs     int
	lastRun  uint64 // the newest run with stored events
	stored   int
	newest   uint64 // the newest stored inbound message
	running  string
	worker   string
	activity int64
}

// sessions lists the sessions with run events still stored, messages
// stored on their lane, or a run running now, newest first. Run ids are
// inbound stream sequences, so the newest run of each lane orders the
// lanes by their last message without reading any message; the times are
// then read for the listed lanes only.
func (s *Service) sessions(ctx context.Context, data []byte) (any, error) {
	var q SessionsRequest
	if err := decode(data, &q); err != nil {
		return nil, err
	}
	n, err := limit(q.Limit)
	if err != nil {
		return nil, err
	}
	lanes := map[string]*lane{}
	get := func(tok string) *lane {
		l := lanes[tok]
		if l == nil {
			l = &lane{token: tok}
			lanes[tok] = l
		}
		return l
	}
	// Runs with stored events: one subject per run, agent.ev.<tok>.<run>.
	// Only the run subjects (four tokens): not their fence markers
	// (agent.ev.<tok>.<run>.fence), which would double the listing.
	evInfo, err := s.cfg.Events.Info(ctx, jetstream.WithSubjectFilter(events.EventPrefix+"*.*"))
	if err != nil {
		return nil, err
	}
	for subj := range evInfo.State.Subjects {
		tok, run, ok := strings.Cut(strings.TrimPrefix(subj, events.EventPrefix), ".")
		seq, err := strconv.ParseUint(run, 10, 64)
		if !ok || err != nil || strings.Contains(run, ".") {
			continue
		}
		l := get(tok)
		l.runs++
		l.lastRun = max(l.lastRun, seq)
	}
	// Messages stored on lanes.
	inInfo, err := s.cfg.Inbound.Info(ctx, jetstream.WithSubjectFilter(events.InboundPrefix+">"))
	if err != nil {
		return nil, err
	}
	for subj, count := range inInfo.State.Subjects {
		tok := strings.TrimPrefix(subj, events.InboundPrefix)
		if strings.Contains(tok, ".") {
			continue // not a lane: dispatch dead-letters it
		}
		get(tok).stored = int(count)
	}
	// Runs running now.
	if s.cfg.Runs != nil {
		active, err := s.cfg.Runs.List(ctx)
		if err != nil {
			s.log.Warn().Err(err).Msg("admin: sessions: run registry")
		}
		for _, r := range active {
			tok, err := events.KeyToken(r.Session)
			if err != nil {
				continue
			}
			l := get(tok)
			l.running, l.worker = r.RunID, r.Worker
			if seq, err := strconv.ParseUint(r.RunID, 10, 64); err == nil {
				l.lastRun = max(l.lastRun, seq)
			}
		}
	}
	// The newest stored message of lanes with stored messages orders them
	// too (a lane whose messages wait has no events yet).
	for _, l := range lanes {
		if l.stored == 0 {
			continue
		}
		m, err := s.cfg.Inbound.GetLastMsgForSubject(ctx, events.InboundPrefix+l.token)
		if err == nil {
			l.newest, l.activity = m.Sequence, m.Time.UnixMilli()
		} else if !errors.Is(err, jetstream.ErrMsgNotFound) {
			return nil, err
		}
	}
	list := make([]*lane, 0, len(lanes))
	for _, l := range lanes {
		if _, err := events.TokenKey(l.token); err == nil {
			list = append(list, l)
		}
	}
	slices.SortFunc(list, func(a, b *lane) int {
		if c := cmp.Compare(max(b.lastRun, b.newest), max(a.lastRun, a.newest)); c != 0 {
			return c
		}
		return strings.Compare(a.token, b.token)
	})
	rep := SessionsReply{Total: len(list), Sessions: []Session{}}
	for _, l := range list[:min(n, len(list))] {
		key, _ := events.TokenKey(l.token)
		if l.lastRun > 0 && l.lastRun >= l.newest {
			m, err := s.cfg.Events.GetLastMsgForSubject(ctx, events.EventPrefix+l.token+"."+strconv.FormatUint(l.lastRun, 10))
			if err == nil {
				l.activity = max(l.activity, m.Time.UnixMilli())
			} else if !errors.Is(err, jetstream.ErrMsgNotFound) {
				return nil, err
			}
		}
		sess := Session{Key: key, Fingerprint: events.Fingerprint(key), LastActivity: l.activity, Runs: l.runs, Stored: l.stored,
			Running: l.running, Worker: l.worker}
		if l.running != "" && s.cfg.Lanes != nil {
			// The registry keeps a dead worker's entry for its TTL; the
			// lane's lease says whether the worker still runs it.
			lease, err := s.cfg.Lanes.Lease(ctx, l.token)
			if err == nil {
				now := s.cfg.Now()
				h := lease.HeldBy(l.worker, now)
				sess.Holding = string(h)
				if h == kvstore.HoldingUnresponsive {
					sess.LapsesInMs = max(lease.Expires().Sub(now), 0).Milliseconds()
				}
			} else if !errors.Is(err, kvstore.ErrCorrupt) {
				return nil, err
			}
		}
		if last := max(l.lastRun, l.newest); last > 0 {
			sess.LastRun = strconv.FormatUint(last, 10)
		}
		rep.Sessions = append(rep.Sessions, sess)
	}
	return rep, nil
}
