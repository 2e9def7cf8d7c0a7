package admin

import (
	"cmp"
	"context"
	"errors"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/lanefleet/lanefleet/events"
	"github.com/lanefleet/lanefleet/kvstore"
	"github.com/lanefleet/lanefleet/lanes/sessionsvc"
	"github.com/lanefleet/lanefleet/sessionindex"
)

// lane is what the listing learns about one lane token.
type lane struct {
	token    string
	key      string
	runs     int
	lastRun  uint64 // the newest run with stored events
	stored   int
	newest   uint64 // the newest stored inbound message
	running  string
	worker   string
	activity int64
	// entry is the session's index entry, when listed from the index.
	entry *sessionindex.Record
	// evTop and evNext are the two newest runs with stored events.
	evTop, evNext uint64
	// lease is, for a running run, its lane's lease (readLeases).
	lease *kvstore.LeaseRead
	// runAt is, when the page's events were read together (lanesOf),
	// when each run with stored events last published one (Unix ms).
	runAt map[uint64]int64
}

// addRun counts a run with stored events.
func (l *lane) addRun(seq uint64) {
	l.runs++
	l.lastRun = max(l.lastRun, seq)
	switch {
	case seq > l.evTop:
		l.evTop, l.evNext = seq, l.evTop
	case seq > l.evNext && seq != l.evTop:
		l.evNext = seq
	}
}

// setRunning notes the run the registry says runs the lane now.
func (l *lane) setRunning(r kvstore.RunInfo) {
	l.running, l.worker = r.RunID, r.Worker
	if seq, err := strconv.ParseUint(r.RunID, 10, 64); err == nil {
		l.lastRun = max(l.lastRun, seq)
	}
}

// fromEntry completes an indexed session's lane: with its events expired
// and nothing waiting or running, the index says when it last ran.
func (l *lane) fromEntry(e sessionindex.Entry) {
	if l.order() > 0 {
		return
	}
	if seq, err := strconv.ParseUint(e.Run, 10, 64); err == nil {
		l.lastRun = seq
	}
	l.activity = e.At.UnixMilli()
}

// summarized reports whether the lane's index entry says its state now,
// as its cursor would: the entry was written at a commit, and every run
// with stored events but the running one is one that commit (or an
// earlier one) consumed, so no commit came after it. A newer run's
// commit whose entry is on its way, or was never written, leaves its run
// past the entry's cursor: its cursor is read (describe).
func (l *lane) summarized() bool {
	if l.entry == nil || !l.entry.Committed {
		return false
	}
	done := l.evTop
	if l.running != "" && strconv.FormatUint(done, 10) == l.running {
		done = l.evNext
	}
	return done <= l.entry.Through
}

// order is the lane's place in a listing: its newest run or message
// (run ids are inbound stream sequences, so this orders lanes by their
// last message without reading any).
func (l *lane) order() uint64 { return max(l.lastRun, l.newest) }

// before reports whether a lists before b: newest first, then by token.
func before(a, b *lane) int {
	if c := cmp.Compare(b.order(), a.order()); c != 0 {
		return c
	}
	return strings.Compare(a.token, b.token)
}

// Bounds of a listing request.
const (
	maxQueryBytes  = 256
	maxAfterBytes  = 300
	readsAtOnce    = 8 // per-session reads a request makes at once
	maxOffsetValue = 1 << 20
)

// lanesIn returns the lanes with run events still stored, messages
// stored on their lane, or a run running now, whose session scope allows
// and whose key contains query (lower-case; "" any), sorted newest first.
// Lanes with stored messages have their newest message read (to order
// them: a lane whose messages wait has no events yet).
func (s *Service) lanesIn(ctx context.Context, scope *Scope, query string) ([]*lane, error) {
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
		get(tok).addRun(seq)
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
			get(tok).setRunning(r)
		}
	}
	list := make([]*lane, 0, len(lanes))
	for _, l := range lanes {
		key, err := events.TokenKey(l.token)
		if err != nil || !scope.Allows(key) || (query != "" && !strings.Contains(strings.ToLower(key), query)) {
			continue
		}
		l.key = key
		list = append(list, l)
	}
	for _, l := range list {
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
	slices.SortFunc(list, before)
	return list, nil
}

// pageCursor is the opaque position of a listing's last session:
// "<order>.<token>".
func pageCursor(l *lane) string { return strconv.FormatUint(l.order(), 10) + "." + l.token }

// parseCursor reads a pageCursor as a lane to list after.
func parseCursor(c string) (*lane, bool) {
	o, tok, ok := strings.Cut(c, ".")
	n, err := strconv.ParseUint(o, 10, 64)
	if !ok || err != nil || tok == "" {
		return nil, false
	}
	return &lane{token: tok, lastRun: n}, true
}

// sessions lists the sessions with run events still stored, messages
// stored on their lane, or a run running now, newest first, a page at a
// time. The times, leases and states are read for the page's sessions
// only.
func (s *Service) sessions(ctx context.Context, data []byte) (any, error) {
	var q SessionsRequest
	if err := sessionsvc.DecodeRequestMax(data, &q, MaxScopedRequestBytes); err != nil {
		return nil, badRequest("%v", err)
	}
	return s.list(ctx, q)
}

// ListSessions lists sessions as the sessions operation does, in process:
// for the worker's own session tools, whose NATS user may not request the
// admin service. cfg needs Inbound and Events; Runs and Lanes add what
// they add to the operation's answer.
func ListSessions(ctx context.Context, cfg Config, q SessionsRequest) (SessionsReply, error) {
	if cfg.Inbound == nil || cfg.Events == nil {
		return SessionsReply{}, errors.New("admin: Inbound and Events are required")
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	s := &Service{cfg: cfg, log: cfg.Logger}
	return s.list(ctx, q)
}

// list answers a sessions request.
func (s *Service) list(ctx context.Context, q SessionsRequest) (SessionsReply, error) {
	n, err := limit(q.Limit)
	if err != nil {
		return SessionsReply{}, err
	}
	switch {
	case len(q.Query) > maxQueryBytes:
		return SessionsReply{}, badRequest("q is over %d bytes", maxQueryBytes)
	case len(q.After) > maxAfterBytes:
		return SessionsReply{}, badRequest("after is over %d bytes", maxAfterBytes)
	case q.Offset < 0 || q.Offset > maxOffsetValue:
		return SessionsReply{}, badRequest("offset %d is out of range", q.Offset)
	case q.After != "" && q.Offset != 0:
		return SessionsReply{}, badRequest("after and offset exclude each other")
	}
	if s.cfg.Index != nil {
		return s.listIndexed(ctx, q, n)
	}
	list, err := s.lanesIn(ctx, q.Scope, strings.ToLower(q.Query))
	if err != nil {
		return SessionsReply{}, err
	}
	start := min(q.Offset, len(list))
	if q.After != "" {
		after, ok := parseCursor(q.After)
		if !ok {
			return SessionsReply{}, badRequest("after is not a listing's next")
		}
		start, _ = slices.BinarySearchFunc(list, after, func(l, target *lane) int {
			if before(l, target) <= 0 {
				return -1
			}
			return 1
		})
	}
	page := list[start:min(start+n, len(list))]
	rep := SessionsReply{Total: len(list)}
	if start+len(page) < len(list) && len(page) > 0 {
		rep.Next = pageCursor(page[len(page)-1])
	}
	return s.describePage(ctx, rep, page, q.State)
}

// describePage fills rep with what the listing says of each session of
// page, reading their details (and, with state, the schedules once).
func (s *Service) describePage(ctx context.Context, rep SessionsReply, page []*lane, state bool) (SessionsReply, error) {
	rep.Sessions = make([]Session, len(page))
	var (
		scheduled map[string]int
		err       error
	)
	if state && s.cfg.Scheduled != nil {
		if scheduled, err = s.cfg.Scheduled(ctx); err != nil {
			return SessionsReply{}, err
		}
	}
	if err := s.readLeases(ctx, page); err != nil {
		return SessionsReply{}, err
	}
	err = each(ctx, len(page), func(ctx context.Context, i int) error {
		sess, err := s.describe(ctx, page[i], state)
		sess.Schedules = scheduled[sess.Key]
		rep.Sessions[i] = sess
		return err
	})
	if err != nil {
		return SessionsReply{}, err
	}
	return rep, nil
}

// readLeases reads the leases of the page's running sessions' lanes, all
// in one request where the bucket allows (kvstore.Lanes.Leases).
func (s *Service) readLeases(ctx context.Context, page []*lane) error {
	if s.cfg.Lanes == nil {
		return nil
	}
	var running []*lane
	var tokens []string
	for _, l := range page {
		if l.running != "" {
			running = append(running, l)
			tokens = append(tokens, l.token)
		}
	}
	if len(tokens) == 0 {
		return nil
	}
	leases, err := s.cfg.Lanes.Leases(ctx, tokens)
	if err != nil {
		return err
	}
	for i, l := range running {
		l.lease = &leases[i]
	}
	return nil
}

// describe reads what a listing says of one session: its last activity,
// how its running run's worker holds the lane (its lease read for the
// page: readLeases), and with state its
// state, turns, cost, pending sub-agents and parent.
func (s *Service) describe(ctx context.Context, l *lane, state bool) (Session, error) {
	switch {
	case l.lastRun == 0 || l.lastRun < l.newest:
	case l.runAt != nil: // the page's events were read together
		if at, ok := l.runAt[l.lastRun]; ok {
			l.activity = max(l.activity, at)
		}
	default:
		m, err := s.cfg.Events.GetLastMsgForSubject(ctx, events.EventPrefix+l.token+"."+strconv.FormatUint(l.lastRun, 10))
		if err == nil {
			l.activity = max(l.activity, m.Time.UnixMilli())
		} else if !errors.Is(err, jetstream.ErrMsgNotFound) {
			return Session{}, err
		}
	}
	sess := Session{Key: l.key, Fingerprint: events.Fingerprint(l.key), LastActivity: l.activity, Runs: l.runs, Stored: l.stored,
		Running: l.running, Worker: l.worker}
	if l.lease != nil && l.lease.Err == nil {
		// The registry keeps a dead worker's entry for its TTL; the
		// lane's lease says whether the worker still runs it.
		now := s.cfg.Now()
		h := l.lease.State.HeldBy(l.worker, now)
		sess.Holding = string(h)
		if h == kvstore.HoldingUnresponsive {
			sess.LapsesInMs = max(l.lease.State.Expires().Sub(now), 0).Milliseconds()
		}
	}
	if last := l.order(); last > 0 {
		sess.LastRun = strconv.FormatUint(last, 10)
	}
	if state && (s.cfg.Lanes != nil || l.entry != nil) {
		// The index's entry of a committed turn that no run since
		// committed after says what the lane's cursor says.
		sum := l.entry
		if !l.summarized() {
			if s.cfg.Lanes == nil {
				return sess, nil
			}
			cur, err := s.cfg.Lanes.Cursor(ctx, l.token)
			if err != nil && !errors.Is(err, kvstore.ErrCorrupt) {
				return Session{}, err
			}
			rec := sessionindex.Summarize("", true, cur.Seq, cur.State)
			sum = &rec
		}
		switch {
		case l.running != "":
			sess.State = StateRunning
		case l.newest > sum.Through:
			sess.State = StateQueued
		default:
			sess.State = StateIdle
		}
		sess.Turns, sess.Approvals, sess.Children, sess.Parent, sess.CostUSD = sum.Turns, sum.Approvals, sum.Children, sum.Parent, sum.CostUSD
	}
	return sess, nil
}

// approvals lists the calls waiting for approval in the scope's sessions:
// the most recent ApprovalScanMax sessions' newest records say which.
func (s *Service) approvals(ctx context.Context, data []byte) (any, error) {
	var q ApprovalsRequest
	if err := sessionsvc.DecodeRequestMax(data, &q, MaxScopedRequestBytes); err != nil {
		return nil, badRequest("%v", err)
	}
	n, err := limit(q.Limit)
	if err != nil {
		return nil, err
	}
	if s.cfg.Lanes == nil {
		return nil, &sessionsvc.Error{Code: sessionsvc.CodeUnavailable, Description: "this worker reads no lanes"}
	}
	list, err := s.recent(ctx, q.Scope, ApprovalScanMax)
	if err != nil {
		return nil, err
	}
	found := make([][]Approval, len(list))
	err = each(ctx, len(list), func(ctx context.Context, i int) error {
		rec, at, ok, err := s.cfg.Lanes.Newest(ctx, list[i].token)
		if errors.Is(err, kvstore.ErrCorrupt) || !ok {
			return nil
		}
		if err != nil {
			return err
		}
		found[i] = approvalsOf(list[i].key, rec, at.UnixMilli())
		return nil
	})
	if err != nil {
		return nil, err
	}
	rep := ApprovalsReply{Approvals: []Approval{}, Scanned: len(list)}
	for _, f := range found {
		rep.Approvals = append(rep.Approvals, f...)
	}
	slices.SortStableFunc(rep.Approvals, func(a, b Approval) int { return cmp.Compare(b.RequestedAt, a.RequestedAt) })
	if len(rep.Approvals) > n {
		rep.Approvals, rep.More = rep.Approvals[:n], true
	}
	return rep, nil
}

// approvalsOf returns the calls a session's newest record leaves waiting
// for approval, with their arguments from the record's final event.
func approvalsOf(key string, rec kvstore.Record, at int64) []Approval {
	if rec.State == nil || len(rec.State.Approvals) == 0 {
		return nil
	}
	args := map[string]string{}
	if len(rec.Final) > 0 {
		if ev, err := events.DecodeEvent(events.ContentMsgpack, rec.Final); err == nil && ev.Data.Result != nil {
			for _, c := range ev.Data.Result.Meta.PendingToolCalls {
				args[c.ID] = c.Arguments
			}
		}
	}
	run := rec.RunID
	if run == "" {
		run = strconv.FormatUint(rec.InboundSeq, 10)
	}
	out := make([]Approval, 0, len(rec.State.Approvals))
	for _, a := range rec.State.Approvals {
		out = append(out, Approval{Session: key, Run: run, Call: a.ID, Tool: a.Name, Arguments: args[a.ID], RequestedAt: at})
	}
	return out
}

// each calls f for 0..n-1, readsAtOnce at a time, and returns the first
// error (the calls after it are cancelled).
func each(ctx context.Context, n int, f func(ctx context.Context, i int) error) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var (
		wg    sync.WaitGroup
		mu    sync.Mutex
		first error
	)
	sem := make(chan struct{}, readsAtOnce)
	for i := 0; i < n && ctx.Err() == nil; i++ {
		select {
		case sem <- struct{}{}:
		case <-ctx.Done():
			continue
		}
		wg.Go(func() {
			defer func() { <-sem }()
			if err := f(ctx, i); err != nil {
				mu.Lock()
				if first == nil {
					first = err
				}
				mu.Unlock()
				cancel()
			}
		})
	}
	wg.Wait()
	if first != nil {
		return first
	}
	return ctx.Err()
}
