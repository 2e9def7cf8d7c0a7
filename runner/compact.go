package runner

import (
	"context"
	"maps"
	"time"

	"github.com/lanefleet/lanefleet/compaction"
	"github.com/lanefleet/lanefleet/events"
	"github.com/lanefleet/lanefleet/guard"
	"github.com/lanefleet/lanefleet/message"
	"github.com/lanefleet/lanefleet/sessionfile"
)

// PiCompactor is the Compactor of pi's algorithm (package compaction): the
// threshold trigger of its Settings and summaries by the session's model.
type PiCompactor struct {
	Settings compaction.Settings
}

// Compact implements Compactor.
func (c PiCompactor) Compact(ctx context.Context, req CompactRequest) (message.Entry, error) {
	res, err := compaction.Compact(ctx, compaction.Request{Provider: req.Provider, Model: req.Model, APIKey: req.APIKey,
		Entries: req.Entries, Settings: c.Settings, Trigger: compaction.Trigger(req.Trigger), CustomInstructions: req.Focus})
	if err != nil {
		return message.Entry{}, err
	}
	return res.Entry, nil
}

// Due implements Compactor: pi's threshold, context tokens above the window
// minus the reserve.
func (c PiCompactor) Due(msgs []message.Message, contextWindow int) bool {
	if !c.Settings.Enabled || contextWindow <= 0 {
		return false
	}
	return compaction.ShouldCompact(compaction.ContextTokens(msgs), contextWindow, c.Settings)
}

// compact runs an overflow compaction for the loop.
func (ru *run) compact(ctx context.Context, req attemptReq, trigger string) bool {
	if ru.r.cfg.Compactor == nil {
		return false
	}
	return ru.compactWith(ctx, req, trigger)
}

func (ru *run) compactWith(ctx context.Context, req attemptReq, trigger string) bool {
	ru.sink.Emit(events.StreamCompaction, events.EventData{Phase: events.PhaseStart})
	cctx, cancel := context.WithTimeout(ctx, ru.r.cfg.CompactionTimeout)
	defer cancel()
	e, err := ru.r.cfg.Compactor.Compact(cctx, CompactRequest{Model: *req.model, Provider: admitted(ru.r.cfg, ru.sink, ru.in, req.profile, req.prov), APIKey: req.key,
		Entries: ru.entries(), Trigger: trigger})
	if err != nil {
		ru.r.cfg.Logger.Warn().Err(err).Str("trigger", trigger).Msg("compaction failed")
		ru.sink.Emit(events.StreamCompaction, events.EventData{Phase: events.PhaseEnd, Error: err.Error()})
		return false
	}
	ru.b.addEntry(e)
	ru.sink.Emit(events.StreamCompaction, events.EventData{Phase: events.PhaseEnd, WillRetry: trigger == "overflow"})
	return true
}

// truncate shortens oversized tool results (overflow recovery §11.3, the
// pass guard.TruncateToolResults makes) on the session's current branch.
// This turn's entries are not stored yet and are cut in place. An oversized
// result of an earlier turn is stored in that turn's record, which is never
// rewritten; instead, as the reference rewrites its session file, the turn
// branches: it re-appends every entry of the branch from that result on,
// with the results cut, as a new branch off the result's parent, and this
// turn's entries follow. The session's leaf is then on the cut branch, so
// later turns read the cut results and never pay for this recovery again.
func (ru *run) truncate(_ context.Context, window int) int {
	n := truncateEntries(ru.b.entries, window)
	own := make(map[string]bool, len(ru.b.entries))
	for _, e := range ru.b.entries {
		own[e.ID] = true
	}
	path := sessionfile.Branch(ru.entries())
	first := -1
	for i, e := range path {
		if own[e.ID] {
			break
		}
		if e.Message != nil && guard.HasOversizedToolResult([]message.Message{*e.Message}, window) {
			first = i
			break
		}
	}
	if first < 0 {
		return n
	}
	copies := rebranch(path[first:], own, ru.r.cfg.Now())
	n += truncateEntries(copies, window)
	if len(ru.b.entries) > 0 {
		last := copies[len(copies)-1].ID
		ru.b.entries[0].ParentID = &last
	} else {
		ru.b.parent = copies[len(copies)-1].ID
	}
	ru.b.entries = append(copies, ru.b.entries...)
	ru.base, ru.branched = nil, true
	return n
}

// rebranch copies the stored entries of a branch tail (those not in own,
// this turn's) as a new chain off the tail's first parent, with fresh ids,
// as the reference re-appends a session branch: messages, compactions,
// thinking-level and model changes, custom entries and session info are
// kept, branch summaries and labels dropped. A compaction's first kept
// entry follows its copy.
func rebranch(tail []message.Entry, own map[string]bool, now time.Time) []message.Entry {
	ids := make(map[string]string, len(tail))
	parent := tail[0].ParentID
	ts := now.UTC().Format("2006-01-02T15:04:05.000Z")
	out := make([]message.Entry, 0, len(tail))
	for _, e := range tail {
		if own[e.ID] {
			break
		}
		switch e.Type {
		case message.EntryBranchSummary, message.EntryLabel, message.EntrySession:
			continue
		}
		c := e
		c.ID = sessionfile.NewEntryID()
		c.Timestamp = ts
		if parent != nil {
			p := *parent
			c.ParentID = &p
		}
		if e.Type == message.EntryCompaction {
			if first, ok := e.Fields["firstKeptEntryId"].(string); ok && ids[first] != "" {
				c.Fields = maps.Clone(e.Fields)
				c.Fields["firstKeptEntryId"] = ids[first]
			}
		}
		ids[e.ID] = c.ID
		parent = &c.ID
		out = append(out, c)
	}
	return out
}

// truncateEntries replaces, in es, the messages guard.TruncateToolResults
// cut, and returns how many it cut.
func truncateEntries(es []message.Entry, window int) int {
	idx := make([]int, 0, len(es))
	msgs := make([]message.Message, 0, len(es))
	for i := range es {
		if m := es[i].Message; m != nil {
			idx = append(idx, i)
			msgs = append(msgs, *m)
		}
	}
	out, res := guard.TruncateToolResults(msgs, window)
	for j, cuts := range res.PerMessage {
		for _, c := range cuts {
			if c.Truncated {
				es[idx[j]].Message = &out[j]
				break
			}
		}
	}
	return res.Truncated
}

// Compact compacts a session's transcript now (the chat command /compact):
// one summary request to the session's model (in.Inbound.Model, else the
// worker's default) on the profile a turn would start on, focus appended to
// the summary prompt, and the compaction entry as the turn's only entry. No
// prompt is added and no reply is asked of the model. A worker without a
// Compactor, a transcript with nothing to compact, or a summary that fails
// end the turn with an error result; the transcript is then unchanged.
// The turn's end or error event is the lane's: a compacted transcript's
// Output names its notice as EndText.
func (r *Runner) Compact(ctx context.Context, in Input, focus string, sink Sink) (*Output, error) {
	fail := func(msg string) *Output {
		return &Output{Result: &events.Result{Payloads: []events.Payload{{Text: msg, IsError: true}},
			Meta: events.Meta{Error: &events.RunError{Kind: "compaction_failure", Message: msg}}}}
	}
	if r.cfg.Compactor == nil {
		return fail("compaction is off on this worker"), nil
	}
	ref := in.Inbound.Model
	if ref == "" {
		ref = r.defaultModel(in.Settings)
	}
	m, prov, _, err := setupModel(r.cfg.Resolver, ref, r.cfg.Window)
	if err != nil {
		return fail(err.Error()), nil
	}
	l := &modelLoop{req: loopReq{model: &m, prov: prov, auth: r.cfg.Auth, preferred: in.Settings.AuthProfile, locked: locked(in.Settings), now: r.cfg.Now}}
	if err := l.resolveProfiles(ctx); err != nil {
		return fail(err.Error()), nil
	}
	key, err := l.key(ctx)
	if err != nil {
		return fail(err.Error()), nil
	}
	sink.Emit(events.StreamCompaction, events.EventData{Phase: events.PhaseStart})
	cctx, cancel := context.WithTimeout(ctx, r.cfg.CompactionTimeout)
	defer cancel()
	e, err := r.cfg.Compactor.Compact(cctx, CompactRequest{Model: m, Provider: admitted(r.cfg, sink, in, l.current(), prov), APIKey: key,
		Entries: in.History, Trigger: "manual", Focus: focus})
	if err != nil {
		if ctx.Err() != nil {
			return nil, context.Cause(ctx)
		}
		sink.Emit(events.StreamCompaction, events.EventData{Phase: events.PhaseEnd, Error: err.Error()})
		return fail("compaction failed: " + err.Error()), nil
	}
	sink.Emit(events.StreamCompaction, events.EventData{Phase: events.PhaseEnd})
	b := &builder{now: r.cfg.Now, parent: lastID(in.History)}
	b.addEntry(e)
	text := "Compacted: the transcript before this point is now a summary."
	return &Output{Entries: b.entries, Result: &events.Result{Payloads: []events.Payload{{Text: text}}}, AuthProfile: l.current(), EndText: text}, nil
}
