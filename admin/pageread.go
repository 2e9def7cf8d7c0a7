package admin

import (
	"context"
	"errors"
	"strconv"
	"strings"

	"github.com/lanefleet/lanefleet/events"
	"github.com/lanefleet/lanefleet/internal/directget"
	"github.com/lanefleet/lanefleet/kvstore"
	"github.com/lanefleet/lanefleet/sessionindex"
)

// batched reports whether a page's sessions are read together (lanesOf):
// the event and inbound streams answer Direct Gets (at R1,
// kvstore.DirectGet), so one multi-last get each reads what the page's
// sessions have stored there (and one the run registry's entries, or a
// read each where its stream answers none: Runs.Active). Else each
// session is read by itself (laneOf).
func (s *Service) batched() bool {
	return s.cfg.JS != nil && s.cfg.Events.CachedInfo().Config.AllowDirect && s.cfg.Inbound.CachedInfo().Config.AllowDirect
}

// lanesOf reads what the listing says of a page's indexed sessions, as
// laneOf reads one, in a few requests whatever the page or the fleet
// holds: one multi-last get of the page's runs' events (the last event of
// each run: which runs have events, the newest, and when it last
// published; session by session when that is too much, pageEvents), one
// of their lanes' newest messages, one of their run registry entries;
// then, for the lanes with messages stored only, their count (a stream
// info request each, which carries no message). Falls back to laneOf per session when the streams answer no
// Direct Get (batched).
func (s *Service) lanesOf(ctx context.Context, entries []sessionindex.Entry) ([]*lane, error) {
	list := make([]*lane, len(entries))
	if len(entries) == 0 {
		return list, nil // a page of nothing asks nothing
	}
	if !s.batched() {
		err := each(ctx, len(entries), func(ctx context.Context, i int) error {
			l, err := s.laneOf(ctx, entries[i])
			list[i] = l
			return err
		})
		return list, err
	}
	byToken := make(map[string]*lane, len(entries))
	evFilters := make([]string, len(entries))
	inFilters := make([]string, len(entries))
	for i, e := range entries {
		list[i] = &lane{token: e.Token, key: e.Key, entry: &entries[i].Record, runAt: map[uint64]int64{}}
		byToken[e.Token] = list[i]
		evFilters[i] = events.EventPrefix + e.Token + ".*"
		inFilters[i] = events.InboundPrefix + e.Token
	}
	var evs, ins []directget.Msg
	var runs []kvstore.RunRead
	err := each(ctx, 3, func(ctx context.Context, i int) error {
		var err error
		switch i {
		case 0:
			evs, err = s.pageEvents(ctx, evFilters)
		case 1:
			ins, err = s.lastOf(ctx, events.InboundStream, directget.Request{MultiLast: inFilters, Meta: true})
		case 2:
			if s.cfg.Runs != nil {
				tokens := make([]string, len(entries))
				for i, e := range entries {
					tokens[i] = e.Token
				}
				runs, err = s.cfg.Runs.Active(ctx, tokens)
				if err != nil {
					s.log.Warn().Err(err).Msg("admin: sessions: run registry")
					runs, err = nil, nil
				}
			}
		}
		return err
	})
	if err != nil {
		return nil, err
	}
	if evs == nil {
		// Too much to read together: each session's runs are counted
		// by itself.
		err := each(ctx, len(list), func(ctx context.Context, i int) error {
			list[i].runAt = nil // describe reads the newest run's last event
			return s.runsOf(ctx, list[i])
		})
		if err != nil {
			return nil, err
		}
	}
	for _, m := range evs {
		tok, run, _ := strings.Cut(strings.TrimPrefix(m.Subject, events.EventPrefix), ".")
		seq, err := strconv.ParseUint(run, 10, 64)
		l := byToken[tok]
		if l == nil || err != nil {
			continue
		}
		l.addRun(seq)
		l.runAt[seq] = m.Time.UnixMilli()
	}
	var waiting []*lane
	for _, m := range ins {
		if l := byToken[strings.TrimPrefix(m.Subject, events.InboundPrefix)]; l != nil {
			l.newest, l.activity = m.Seq, m.Time.UnixMilli()
			waiting = append(waiting, l)
		}
	}
	for i, r := range runs { // in entries' order
		switch {
		case r.Err != nil:
			s.log.Warn().Err(r.Err).Msg("admin: sessions: run registry")
		case r.Running:
			list[i].setRunning(r.Info)
		}
	}
	// The stored counts of the lanes with messages stored (storedOf, as
	// laneOf).
	err = each(ctx, len(waiting), func(ctx context.Context, i int) error {
		var err error
		waiting[i].stored, err = s.storedOf(ctx, waiting[i].token)
		return err
	})
	if err != nil {
		return nil, err
	}
	for i, l := range list {
		l.fromEntry(entries[i])
	}
	return list, nil
}

// pageEventsMax bounds what a page's events read returns: the last event
// of each of its sessions' runs whose events are stored (a run's final
// event, a kilobyte or a few), so about a thousand runs.
const pageEventsMax = 2 << 20

// pageEvents reads the last event of each run the filters (a page's
// sessions' agent.ev.<token>.*) match, in one request; nil (and no error)
// when they match more than directget.MultiLastMax runs or their events
// more than pageEventsMax bytes: then each session's are counted by
// itself (runsOf), as the listing did before.
func (s *Service) pageEvents(ctx context.Context, filters []string) ([]directget.Msg, error) {
	rep, err := directget.Get(ctx, s.cfg.JS.Conn(), directget.Subject(s.cfg.JS, events.EventStream),
		directget.Request{MultiLast: filters, MaxBytes: pageEventsMax, Meta: true}, directget.MultiLastMax)
	switch {
	case errors.Is(err, directget.ErrTooMany), err == nil && rep.Pending > 0:
		return nil, nil
	case err != nil:
		return nil, err
	case rep.Msgs == nil:
		return []directget.Msg{}, nil
	}
	return rep.Msgs, nil
}

// lastOf reads the last message of every subject of stream that
// req.MultiLast's filters match (directget.Last).
func (s *Service) lastOf(ctx context.Context, stream string, req directget.Request) ([]directget.Msg, error) {
	return directget.Last(ctx, s.cfg.JS.Conn(), directget.Subject(s.cfg.JS, stream), req)
}
