package sessionsvc

import (
	"cmp"
	"context"
	"errors"
	"slices"
	"strconv"
	"strings"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/lanefleet/lanefleet/events"
)

// runs lists a page of the lane's runs that have events stored, newest
// first. The event stream is the listing's source: one request lists the
// lane's run subjects (agent.ev.<lane>.<run>, not their fence markers),
// and each run of the page costs two reads, its first event (when it
// started) and its last (its final: state, model, cost, duration). The
// transcript records would outlive the events but hold each turn's whole
// transcript and miss the runs that committed none (merged, refused,
// dropped, running); the listing shows the runs whose timelines can be
// replayed.
func (s *Service) runs(ctx context.Context, r request) (any, error) {
	var q RunsRequest
	if err := DecodeRequest(r.data, &q); err != nil {
		return nil, badRequest("%v", err)
	}
	n := q.Limit
	switch {
	case n < 0:
		return nil, badRequest("limit %d is negative", n)
	case n == 0:
		n = RunsLimitDefault
	}
	n = min(n, RunsLimitMax)
	var before uint64
	if q.Before != "" {
		seq, err := parseRun(q.Before)
		if err != nil {
			return nil, err
		}
		before = seq
	}
	prefix := events.EventPrefix + r.token + "."
	// One token after the lane's: the runs, not their fence markers or
	// notes (agent.ev.<lane>.<run>.fence, .uncounted).
	info, err := s.cfg.Events.Info(ctx, jetstream.WithSubjectFilter(prefix+"*"))
	if err != nil {
		return nil, err
	}
	all := make([]uint64, 0, len(info.State.Subjects))
	for subj := range info.State.Subjects {
		seq, err := strconv.ParseUint(strings.TrimPrefix(subj, prefix), 10, 64)
		if err == nil && seq > 0 {
			all = append(all, seq)
		}
	}
	slices.SortFunc(all, func(a, b uint64) int { return cmp.Compare(b, a) })
	start := 0
	if before > 0 {
		start, _ = slices.BinarySearchFunc(all, before, func(e, t uint64) int { return cmp.Compare(t, e) })
		if start < len(all) && all[start] == before {
			start++
		}
	}
	page := all[start:min(start+n, len(all))]
	rep := RunsReply{Runs: make([]RunSummary, 0, len(page)), Total: len(all)}
	if start+len(page) < len(all) && len(page) > 0 {
		rep.Next = strconv.FormatUint(page[len(page)-1], 10)
	}
	for _, seq := range page {
		run := strconv.FormatUint(seq, 10)
		sum, ok, err := s.runSummary(ctx, prefix+run, run)
		if err != nil {
			return nil, err
		}
		if ok {
			rep.Runs = append(rep.Runs, sum)
		}
	}
	return rep, nil
}

// runSummary reads a run's first and last stored events; ok is false when
// they are gone (expired since the listing) or do not decode.
func (s *Service) runSummary(ctx context.Context, subj, run string) (RunSummary, bool, error) {
	sum := RunSummary{RunID: run, State: RunRunning}
	first, err := s.cfg.Events.GetMsg(ctx, 1, jetstream.WithGetMsgSubject(subj))
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return sum, false, nil
	}
	if err != nil {
		return sum, false, err
	}
	last, err := s.cfg.Events.GetLastMsgForSubject(ctx, subj)
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return sum, false, nil
	}
	if err != nil {
		return sum, false, err
	}
	ev, err := events.DecodeEvent(last.Header.Get(events.HeaderContentType), last.Data)
	if err != nil {
		s.log.Debug().Err(err).Str("subject", subj).Msg("lane service: runs: skip a run whose last event does not decode")
		return sum, false, nil
	}
	sum.StartedAt, sum.Attempt = first.Time.UnixMilli(), ev.Attempt
	if fe, err := events.DecodeEvent(first.Header.Get(events.HeaderContentType), first.Data); err == nil && fe.TS > 0 {
		sum.StartedAt = fe.TS
	}
	switch {
	case ev.Terminal():
		summarizeFinal(&sum, ev)
	case ev.Stream == events.StreamLifecycle && ev.Data.Phase == events.PhaseEnd:
		sum.State, sum.EndedAt = RunDone, ev.TS // its final is in its turn's record only
	case ev.Stream == events.StreamLifecycle && ev.Data.Phase == events.PhaseError:
		sum.State, sum.EndedAt = RunFailed, ev.TS
	}
	return sum, true, nil
}

// summarizeFinal fills a summary from its run's final event.
func summarizeFinal(sum *RunSummary, ev *events.Event) {
	sum.State, sum.EndedAt = RunDone, ev.TS
	res := ev.Data.Result
	if res == nil {
		return
	}
	m := res.Meta
	sum.DurationMs = m.DurationMs
	if am := m.AgentMeta; am != nil {
		sum.Provider, sum.Model = am.Provider, am.Model
		if am.Usage != nil && am.Usage.Cost != nil {
			sum.CostUSD = am.Usage.Cost.Total
		}
	}
	switch {
	case m.MergedInto != "":
		sum.State, sum.MergedInto = RunMerged, m.MergedInto
	case m.Error != nil:
		sum.State, sum.Error = RunFailed, m.Error.Kind
	case len(m.PendingToolCalls) > 0:
		sum.State = RunWaiting
	}
}
