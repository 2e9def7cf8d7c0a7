package admin

import (
	"context"
	"errors"
	"strconv"
	"strings"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/lanefleet/lanefleet/events"
	"github.com/lanefleet/lanefleet/sessionindex"
)

// Bounds of a listing read from the session index.
const (
	// IndexScanMax bounds the index entries one request reads when it
	// must look at each (a query, a scope that is not one group's
	// prefix): a page that did not fill within them says Partial, and
	// Next goes on from where it stopped.
	IndexScanMax = 20_000
	// IndexOffsetMax is the largest offset a listing from the index
	// takes (an offset reads the entries it skips): beyond it, page with
	// After.
	IndexOffsetMax = 10_000
	// lookupKeysMax is the most single keys a scope without prefixes has
	// read one by one; a larger scope is looked at entry by entry.
	lookupKeysMax = 64
)

// indexCursor is the cursor of a listing from the index: "i<sequence>".
func indexCursor(seq uint64) string { return "i" + strconv.FormatUint(seq, 10) }

// parseIndexCursor reads an indexCursor.
func parseIndexCursor(c string) (uint64, bool) {
	n, err := strconv.ParseUint(strings.TrimPrefix(c, "i"), 10, 64)
	return n, err == nil && strings.HasPrefix(c, "i") && n > 0
}

// indexPlan is how a listing reads the index: the subject filter the
// server applies, what is looked at entry by entry, and whether the
// sessions found can be counted without reading them.
type indexPlan struct {
	filter string
	keep   func(sessionindex.Entry) bool
	keys   []string // a scope of single keys: read one by one (lookup)
	lookup bool     // the scope is keys only: keys are read, not the index
	exact  bool     // filter is the scope, no query: countable
}

// planIndex chooses how a request with scope and query (lower case) reads
// the index.
func planIndex(scope *Scope, query string) indexPlan {
	p := indexPlan{filter: sessionindex.Prefix + "*.*", exact: true}
	if scope != nil {
		switch {
		case len(scope.Prefixes) == 0 && len(scope.Keys) <= lookupKeysMax:
			// No keys (a scope that reaches nothing) reads none.
			p.keys, p.lookup = scope.Keys, true
		case len(scope.Keys) == 0:
			// One group's prefixes narrow the read to the group.
			filter, exact := sessionindex.Filter(scope.Prefixes[0])
			for _, pre := range scope.Prefixes[1:] {
				f, e := sessionindex.Filter(pre)
				if f != filter {
					filter, exact = sessionindex.Prefix+"*.*", false
					break
				}
				exact = exact && e
			}
			p.filter, p.exact = filter, exact
		default:
			p.exact = false
		}
	}
	if query != "" {
		p.exact = false
	}
	if !p.exact {
		p.keep = func(e sessionindex.Entry) bool {
			return scope.Allows(e.Key) && (query == "" || strings.Contains(strings.ToLower(e.Key), query))
		}
	}
	return p
}

// indexRead is what readIndex found: entries newest first, how many the
// plan matches (-1: not counted), the cursor of the next page (0: none),
// and whether the scan stopped before the page filled.
type indexRead struct {
	entries []sessionindex.Entry
	total   int
	next    uint64
	partial bool
	indexed int // the whole index's entries (not a lookup's)
}

// readIndex reads up to limit of plan's entries below sequence before (0:
// from the newest), newest first: its keys one by one when the plan is a
// lookup (counted when read from the newest), else the index through its
// filter, looking at up to IndexScanMax entries (limit when more).
func (s *Service) readIndex(ctx context.Context, plan indexPlan, before uint64, limit int) (indexRead, error) {
	if !plan.lookup {
		page, err := s.cfg.Index.Newest(ctx, sessionindex.Query{Before: before, Filter: plan.filter, Limit: limit,
			Keep: plan.keep, MaxScan: max(IndexScanMax, limit)})
		if err != nil {
			return indexRead{}, err
		}
		return indexRead{entries: page.Entries, total: -1, next: page.Next, partial: page.Partial, indexed: page.Indexed}, nil
	}
	found, err := s.cfg.Index.Lookup(ctx, plan.keys)
	if err != nil {
		return indexRead{}, err
	}
	var kept []sessionindex.Entry
	for _, e := range found {
		if (before == 0 || e.Seq < before) && (plan.keep == nil || plan.keep(e)) {
			kept = append(kept, e)
		}
	}
	r := indexRead{entries: kept[:min(limit, len(kept))], total: -1}
	if before == 0 {
		r.total = len(kept)
	}
	if len(kept) > limit && limit > 0 {
		r.next = kept[limit-1].Seq
	}
	return r, nil
}

// listIndexed answers a sessions request from the session index: the
// page's entries, newest activity first, then each listed session's
// details read as the listing without an index reads them.
func (s *Service) listIndexed(ctx context.Context, q SessionsRequest, n int) (SessionsReply, error) {
	var before uint64
	if q.After != "" {
		var ok bool
		if before, ok = parseIndexCursor(q.After); !ok {
			return SessionsReply{}, badRequest("after is not a listing's next")
		}
	}
	if q.Offset > IndexOffsetMax {
		return SessionsReply{}, badRequest("offset %d is over %d: page with after (a listing's next)", q.Offset, IndexOffsetMax)
	}
	plan := planIndex(q.Scope, strings.ToLower(q.Query))
	read, err := s.readIndex(ctx, plan, before, q.Offset+n)
	if err != nil {
		return SessionsReply{}, err
	}
	rep := SessionsReply{Total: read.total, Partial: read.partial}
	if read.next > 0 {
		rep.Next = indexCursor(read.next)
	}
	if !plan.lookup && plan.exact && plan.filter == sessionindex.Prefix+"*.*" {
		// The whole index counts at no cost (its stream's state, read
		// for the page); a tenant's count cost the server a walk of its
		// sessions.
		rep.Total = read.indexed
	}
	list, err := s.lanesOf(ctx, read.entries[min(q.Offset, len(read.entries)):])
	if err != nil {
		return SessionsReply{}, err
	}
	return s.describePage(ctx, rep, list, q.State)
}

// laneOf reads what the listing says of an indexed session by itself:
// its runs with stored events, its stored messages, and its running run
// (each a read of that session's subjects or keys only).
func (s *Service) laneOf(ctx context.Context, e sessionindex.Entry) (*lane, error) {
	l := &lane{token: e.Token, key: e.Key, entry: &e.Record}
	if err := s.runsOf(ctx, l); err != nil {
		return nil, err
	}
	stored, err := s.storedOf(ctx, e.Token)
	if err != nil {
		return nil, err
	}
	l.stored = stored
	if l.stored > 0 {
		m, err := s.cfg.Inbound.GetLastMsgForSubject(ctx, events.InboundPrefix+e.Token)
		if err == nil {
			l.newest, l.activity = m.Sequence, m.Time.UnixMilli()
		} else if !errors.Is(err, jetstream.ErrMsgNotFound) {
			return nil, err
		}
	}
	if s.cfg.Runs != nil {
		r, ok, err := s.cfg.Runs.Get(ctx, e.Token)
		if err != nil {
			s.log.Warn().Err(err).Msg("admin: sessions: run registry")
		} else if ok {
			l.setRunning(r)
		}
	}
	l.fromEntry(e)
	return l, nil
}

// storedOf counts a lane's stored messages from the inbound stream's
// subject counts: no message is read (a Direct Get would carry one whole,
// up to the server's MaxPayload, to count those after it).
func (s *Service) storedOf(ctx context.Context, token string) (int, error) {
	subject := events.InboundPrefix + token
	info, err := s.cfg.Inbound.Info(ctx, jetstream.WithSubjectFilter(subject))
	if err != nil {
		return 0, err
	}
	return int(info.State.Subjects[subject]), nil
}

// runsOf counts the lane's runs with stored events (their subjects), which
// say which is newest.
func (s *Service) runsOf(ctx context.Context, l *lane) error {
	evInfo, err := s.cfg.Events.Info(ctx, jetstream.WithSubjectFilter(events.EventPrefix+l.token+".*"))
	if err != nil {
		return err
	}
	for subj := range evInfo.State.Subjects {
		seq, err := strconv.ParseUint(strings.TrimPrefix(subj, events.EventPrefix+l.token+"."), 10, 64)
		if err != nil {
			continue
		}
		l.addRun(seq)
	}
	return nil
}

// recent returns the scope's n most recently active sessions (their
// token and key), newest first: from the index when there is one.
func (s *Service) recent(ctx context.Context, scope *Scope, n int) ([]*lane, error) {
	if s.cfg.Index == nil {
		list, err := s.lanesIn(ctx, scope, "")
		return list[:min(len(list), n)], err
	}
	read, err := s.readIndex(ctx, planIndex(scope, ""), 0, n)
	if err != nil {
		return nil, err
	}
	list := make([]*lane, len(read.entries))
	for i, e := range read.entries {
		list[i] = &lane{token: e.Token, key: e.Key}
	}
	return list, nil
}

// SeedIndex fills a session index made now (cfg.Index) with the sessions
// the fleet stores, as a listing without an index finds them (run events
// still stored, messages on their lane, runs running), oldest first so
// that the index orders them as that listing did; a session a turn
// touched meanwhile keeps its entry. It reads every session's subjects
// once: run it in the background when the index is created.
func SeedIndex(ctx context.Context, cfg Config) (int, error) {
	if cfg.Inbound == nil || cfg.Events == nil || cfg.Index == nil {
		return 0, errors.New("admin: Inbound, Events and Index are required")
	}
	s := &Service{cfg: cfg, log: cfg.Logger}
	list, err := s.lanesIn(ctx, nil, "")
	if err != nil {
		return 0, err
	}
	for i := len(list) - 1; i >= 0; i-- {
		run := ""
		if o := list[i].order(); o > 0 {
			run = strconv.FormatUint(o, 10)
		}
		if err := cfg.Index.Seed(ctx, list[i].key, run); err != nil {
			return len(list) - 1 - i, err
		}
	}
	return len(list), nil
}
