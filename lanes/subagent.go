package lanes

import (
	"context"
	"fmt"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/vmihailenco/msgpack/v5"

	"github.com/lanefleet/lanefleet/events"
	"github.com/lanefleet/lanefleet/kvstore"
	"github.com/lanefleet/lanefleet/lanes/queue"
	"github.com/lanefleet/lanefleet/subagent"
)

// Sub-agents (package subagent has the rules). A child session adopts the
// parent its spawn message names (Config.Lineage decides whether it may);
// the first turn of it that commits with none of its own children pending
// owes the parent its completion. That message rides in the turn's record
// (kvstore.Record.Outbox), written in the same fenced write that commits
// the turn, and is published to the parent's lane before the turn's final
// event, by the committing owner or, if it died first, by the lane's next
// owner, which publishes what a committed record owes (publishRecordFinals)
// before the lane goes on. Its message id comes from the child's run, so a
// second publish (a crash between the two) is dropped by the stream, and
// the parent's lane runs a completion only for a child it has pending,
// which the completion's turn takes off: one delivery, whatever dies.

// Stops. A session's stop is passed on to its pending children: the stop
// run's commit marks each of them stopped (events.Child.Stopped) and its
// record's outbox carries a stop for each child's lane (a batch: an
// Outbox with no session, see stopsOutbox), published like a completion
// by whoever publishes the record's final event. A stopped child's turn is
// cut, and its completion says it was stopped (events.SubagentStopped);
// the parent takes such a completion off without a turn (the fleet's
// handler answers it with subagent.StoppedText) and counts its use. A
// spawn message the stop dropped before it ran is adopted all the same,
// so that child, too, tells its parent it was stopped.

// lineage applies a turn's sub-agent bookkeeping to st, the session's
// state after the turn (shared: copied before a change): the parent a
// spawn message names, the children the turn spawned, the completion it
// received; a stop's passing on to the pending children; then the
// completion the session owes its own parent, if that is now due. It
// returns the state and the record's outbox.
func (o *owner) lineage(st *events.SessionState, p *plan, out *Outcome) (*events.SessionState, *kvstore.Outbox, error) {
	next := events.SessionState{}
	if st != nil {
		next = *st
	}
	changed := false
	if in := p.run.in; next.Parent == nil && o.spawnedBy(in) != nil {
		changed = subagent.Adopt(&next, in)
	}
	for _, d := range p.dropped {
		// A spawn an interrupt or a stop dropped before it ran: the
		// child still owes its parent a completion.
		if next.Parent == nil && o.spawnedBy(d.c.in) != nil {
			changed = subagent.Adopt(&next, d.c.in) || changed
		}
	}
	// stopped: a stop ended this session's work (the stop's own run, the
	// turn a stop cut, or a completion of a child a stop passed on to).
	stopped := p.verb == queue.VerbStop || o.lane.stopped.run == p.run.runID()
	if p.verb == queue.VerbRun && p.in == p.run.in {
		if _, ok := subagent.StoppedChild(&next, p.run.in); ok && o.completion(p.run.in) != nil {
			stopped = true
		}
	}
	if len(out.Spawned) > 0 {
		subagent.Add(&next, out.Spawned)
		changed = true
	}
	if r := o.received(p); r != nil && subagent.Received(&next, r) {
		changed = true
	}
	for _, d := range p.dropped {
		// A completion an interrupt or a stop dropped: the child is no
		// longer pending, and its use counts.
		if r := o.completion(d.c.in); r != nil && subagent.Received(&next, r) {
			changed = true
		}
	}
	if res := out.Result; res != nil && res.Meta.StopReason == events.StopYielded {
		res.Meta.Waiting = len(next.Children)
	}
	var ob *kvstore.Outbox
	if p.verb == queue.VerbStop {
		if marked := subagent.Stop(&next); len(marked) > 0 {
			var err error
			if ob, err = o.stopsOutbox(p.run.runID(), marked); err != nil {
				return nil, nil, err
			}
			if res := out.Result; res != nil && len(res.Payloads) == 1 {
				res.Payloads[0].Text += fmt.Sprintf("; stopping %d sub-agent(s)", len(marked))
			}
			changed = true
		}
	}
	if parent, id, msg, ok := subagent.Completion(o.cfg.SealKey, o.key, p.run.runID(), &next, out.Result, stopped); ok && ob == nil {
		data, _, err := events.EncodeInbound(msg, false)
		if err != nil {
			return nil, nil, fmt.Errorf("lanes: encode a completion: %w", err)
		}
		ob = &kvstore.Outbox{Session: parent, ID: id, Data: data}
		delivered := *next.Parent
		delivered.Delivered = true
		next.Parent = &delivered
		changed = true
	}
	if !changed {
		return st, nil, nil
	}
	return &next, ob, nil
}

// stopsOutbox is the outbox of a stop run that passes the stop on to
// children: a batch (Session "") whose Data is the stops, each an Outbox
// of its own.
func (o *owner) stopsOutbox(run string, children []events.Child) (*kvstore.Outbox, error) {
	stops := make([]kvstore.Outbox, 0, len(children))
	for _, c := range children {
		id := subagent.StopID(o.cfg.SealKey, o.key, run, c.Session)
		data, _, err := events.EncodeInbound(&events.Inbound{ID: id, Stop: true}, false)
		if err != nil {
			return nil, fmt.Errorf("lanes: encode a sub-agent's stop: %w", err)
		}
		stops = append(stops, kvstore.Outbox{Session: c.Session, ID: id, Data: data})
	}
	data, err := msgpack.Marshal(stops)
	if err != nil {
		return nil, fmt.Errorf("lanes: encode a stop's outbox: %w", err)
	}
	return &kvstore.Outbox{ID: "stops-" + run, Data: data}, nil
}

// received is the completion a turn ran (nil = none): its own message's,
// when the handler ran it.
func (o *owner) received(p *plan) *events.SubagentResult {
	if p.verb != queue.VerbRun || p.run.in == nil || p.in != p.run.in {
		return nil
	}
	return o.completion(p.run.in)
}

// completion is in's sub-agent completion if the fleet sealed it for this
// session (nil = none: not a completion, or one a sender forged).
func (o *owner) completion(in *events.Inbound) *events.SubagentResult {
	if in == nil || in.Subagent == nil || !subagent.CompletionSealed(o.cfg.SealKey, o.key, in) {
		return nil
	}
	return in.Subagent
}

// spawnedBy is the parent in names if it is a spawn message the fleet
// sealed for this session and the lineage is allowed (nil = none).
func (o *owner) spawnedBy(in *events.Inbound) *events.Parent {
	if in == nil || in.Parent == nil || in.Parent.Session == o.key || o.cfg.Lineage == nil ||
		!o.cfg.Lineage(o.key, in.Parent.Session) || !subagent.SpawnSealed(o.cfg.SealKey, o.key, in.Parent) {
		return nil
	}
	return in.Parent
}

// unsealedLineage is why the turn's message is not run when it carries
// sub-agent lineage the fleet did not seal ("" = it may run): only
// workers spawn sub-agents and deliver their completions.
func (o *owner) unsealedLineage(p *plan) string {
	switch {
	case p.in == nil:
		return ""
	case p.in.Subagent != nil && o.completion(p.in) == nil:
		return "a sub-agent completion the fleet did not deliver (only workers deliver completions; it lacks the fleet's seal): it was not run"
	case p.in.Parent != nil && !subagent.SpawnSealed(o.cfg.SealKey, o.key, p.in.Parent):
		return "a sub-agent spawn the fleet did not make (only a worker's sessions_spawn names a parent; it lacks the fleet's seal): it was not run"
	}
	return ""
}

// unknownCompletion reports whether the turn's message is a completion of
// a child the session does not have pending (delivered already, or never
// spawned here): it is not run.
func (o *owner) unknownCompletion(p *plan) bool {
	return p.in != nil && p.in.Subagent != nil && !subagent.Pending(o.lane.cursor.State, p.in.Subagent.Session)
}

// parentOf is the parent of the session whose turn p is (nil = none):
// the one it adopted, or the one its spawn message names.
func (o *owner) parentOf(p *plan) *events.Parent {
	if st := o.lane.cursor.State; st != nil && st.Parent != nil {
		return st.Parent
	}
	return o.spawnedBy(p.run.in)
}

// deliver publishes a committed turn's outbox message onto its session's
// lane, or, for a batch (no session: a stop passed on, stopsOutbox), each
// of its messages onto theirs. A second publish of any is dropped.
func (w *Worker) deliver(ctx context.Context, ob *kvstore.Outbox) error {
	if ob == nil {
		return nil
	}
	if ob.Session == "" {
		var batch []kvstore.Outbox
		if err := msgpack.Unmarshal(ob.Data, &batch); err != nil {
			return fmt.Errorf("lanes: a committed turn's outbox %s does not decode: %w", ob.ID, err)
		}
		for i := range batch {
			if batch[i].Session == "" {
				continue // never nested
			}
			if err := w.deliver(ctx, &batch[i]); err != nil {
				return err
			}
		}
		return nil
	}
	if _, err := PublishInbound(ctx, w.js, ob.Session, ob.Data, ob.ID, ob.ID, nil); err != nil {
		return err
	}
	w.stats.Delivered.Add(1)
	return nil
}

// PublishInbound publishes an encoded inbound message (msgpack) onto
// session key's lane with publishID as the stream's de-duplication key
// (Nats-Msg-Id: a second publish within the window is dropped and acked
// with the first one's sequence) and laneID as the lane's
// (Lanefleet-Msg-Id), and returns its sequence (its run). Only ids nobody
// else can know make a publishID: the stream's de-duplication is
// stream-wide.
//
// hdr's headers (a trace context, say) ride along; nil = none.
func PublishInbound(ctx context.Context, js jetstream.JetStream, key string, data []byte, publishID, laneID string, hdr nats.Header) (uint64, error) {
	subj, err := events.InboundSubject(key)
	if err != nil {
		return 0, fmt.Errorf("lanes: publish to %q: %w", key, err)
	}
	m := nats.NewMsg(subj)
	for k, v := range hdr {
		m.Header[k] = v
	}
	m.Data = data
	m.Header.Set(events.HeaderContentType, events.ContentMsgpack)
	m.Header.Set(events.HeaderMsgID, publishID)
	m.Header.Set(events.HeaderLaneMsgID, laneID)
	ctx, cancel := context.WithTimeout(ctx, readTimeout)
	defer cancel()
	ack, err := js.PublishMsg(ctx, m)
	if err != nil {
		return 0, fmt.Errorf("lanes: publish to %s: %w", events.Fingerprint(key), err)
	}
	return ack.Sequence, nil
}
