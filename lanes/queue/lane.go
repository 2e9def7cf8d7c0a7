package queue

import "time"

// TurnKind says how a drained turn was built.
type TurnKind string

// Turn kinds.
const (
	// TurnSingle runs one queued message.
	TurnSingle TurnKind = "single"
	// TurnCollected runs every queued message merged into one prompt.
	TurnCollected TurnKind = "collected"
	// TurnSummary runs only the overflow summary of summarised messages.
	TurnSummary TurnKind = "summary"
)

// Turn is one turn drained from the queue.
type Turn struct {
	// Kind says how the turn was built.
	Kind TurnKind
	// Prompt is the text to run.
	Prompt string
	// Items are the queued messages the turn answers, oldest first (none
	// for a summary turn). A collected turn runs with the run settings
	// (model, thinking level…) of its last item, as the reference does.
	Items []Item
	// Route is where the reply goes: the item's route, or for a collected
	// turn the first non-empty value of each routing field.
	Route Route
}

// Outcome is what Lane.Offer did with an arriving message.
type Outcome struct {
	Decision
	// Queued is true when the message was queued as a follow-up.
	Queued bool
	// Dropped lists messages that will not get a turn of their own: the
	// arriving one when refused (duplicate, cap, reject, heartbeat), and
	// queued ones evicted by the cap or cleared by an interrupt.
	Dropped []Dropped
}

// Lane is the queue state machine of one session lane. Its owner calls
// Offer for each arriving message and, whenever no turn is running, Next to
// get the next queued turn once ReadyAt has passed. A Lane is not safe for
// concurrent use; the lane's single owner drives it.
type Lane struct {
	settings Settings
	pending  Pending
	// individual is set when a collect drain met mixed routes: the rest
	// of the drain goes one message per turn (reference behaviour).
	individual bool
}

// NewLane returns an empty lane with settings s (zero fields take the
// defaults).
func NewLane(s Settings) *Lane { return &Lane{settings: s.normalized()} }

// Settings returns the lane's settings.
func (l *Lane) Settings() Settings { return l.settings }

// SetSettings changes the lane's settings; queued messages stay queued.
func (l *Lane) SetSettings(s Settings) { l.settings = s.normalized() }

// Len returns the number of queued messages.
func (l *Lane) Len() int { return len(l.pending.Items) }

// Pending returns a copy of the queue state.
func (l *Lane) Pending() Pending {
	p := l.pending
	p.Items = append([]Item(nil), p.Items...)
	p.SummaryLines = append([]string(nil), p.SummaryLines...)
	return p
}

// Offer decides what to do with a message arriving at now, given whether a
// turn is active and can take steered input, and applies the queue side of
// the decision: it queues the message for ActionEnqueue and
// ActionSteerAndEnqueue and clears the queue for ActionInterrupt. The owner
// carries out the rest: run the message (ActionRunNow, ActionInterrupt after
// aborting), inject it (ActionSteer; call Enqueue if injection fails), or
// report the refusal in Dropped.
func (l *Lane) Offer(it Item, active, streaming bool, now time.Time) Outcome {
	busy := Busy{Active: active, Streaming: streaming, Queued: l.Len() > 0 || l.pending.DroppedCount > 0}
	out := Outcome{Decision: Decide(l.settings.Mode, busy, it.Heartbeat)}
	switch out.Action {
	case ActionInterrupt:
		for _, q := range l.pending.Items {
			out.Dropped = append(out.Dropped, Dropped{Item: q, Reason: ReasonInterrupted})
		}
		l.pending.Items = nil
		l.pending.clearSummary()
		l.individual = false
	case ActionEnqueue, ActionSteerAndEnqueue:
		queued, dropped := l.Enqueue(it, now)
		out.Queued = queued
		out.Dropped = append(out.Dropped, dropped...)
	case ActionDrop, ActionReject:
		out.Dropped = append(out.Dropped, Dropped{Item: it, Reason: out.Reason})
	}
	return out
}

// Enqueue queues it as a follow-up under the lane's cap and drop policy.
// It reports whether it was queued; Dropped holds it when refused
// (duplicate or drop policy new) and any queued messages evicted for it.
func (l *Lane) Enqueue(it Item, now time.Time) (bool, []Dropped) {
	dup := l.pending.Duplicate(it, l.settings.Dedupe)
	ok, evicted := l.pending.Add(it, l.settings, now)
	if !ok {
		reason := ReasonCapRefused
		if dup {
			reason = ReasonDuplicate
		}
		return false, append(evicted, Dropped{Item: it, Reason: reason})
	}
	return true, evicted
}

// ReadyAt returns when the queue may be drained (the debounce time after
// the last queued message) and false when there is nothing to drain.
func (l *Lane) ReadyAt() (time.Time, bool) {
	if len(l.pending.Items) == 0 && l.pending.SummaryPrompt(l.settings) == "" {
		return time.Time{}, false
	}
	return l.pending.LastEnqueuedAt.Add(l.settings.Debounce), true
}

// Next takes the next turn off the queue if the debounce time has passed by
// now. In collect mode that is every queued message merged into one prompt
// (with the overflow summary), unless their routes differ, in which case
// messages go one per turn until the queue is empty. In the other modes a
// pending overflow summary goes first as its own turn, then one message per
// turn. The taken messages leave the queue: the caller runs the turn (and
// re-offers its items if it must retry them).
func (l *Lane) Next(now time.Time) (Turn, bool) {
	at, ok := l.ReadyAt()
	if !ok {
		l.individual = false
		return Turn{}, false
	}
	if now.Before(at) {
		return Turn{}, false
	}
	t, ok := l.take()
	if len(l.pending.Items) == 0 {
		l.individual = false
	}
	return t, ok
}

func (l *Lane) take() (Turn, bool) {
	p := &l.pending
	summary := p.SummaryPrompt(l.settings)
	if l.settings.Mode == ModeCollect && len(p.Items) > 0 {
		if !l.individual && crossRoutes(p.Items) {
			l.individual = true
		}
		if !l.individual {
			items := p.Items
			p.Items = nil
			p.clearSummary()
			prompts := make([]string, len(items))
			for i, it := range items {
				prompts[i] = it.Prompt
			}
			return Turn{Kind: TurnCollected, Prompt: CollectPrompt(prompts, summary), Items: items, Route: mergeRoutes(items)}, true
		}
		return l.takeOne(), true
	}
	if summary != "" {
		p.clearSummary()
		t := Turn{Kind: TurnSummary, Prompt: summary}
		if len(p.Items) > 0 {
			t.Route = p.Items[0].Route
		}
		return t, true
	}
	if len(p.Items) == 0 {
		return Turn{}, false
	}
	return l.takeOne(), true
}

func (l *Lane) takeOne() Turn {
	it := l.pending.Items[0]
	l.pending.Items = append(l.pending.Items[:0:0], l.pending.Items[1:]...)
	return Turn{Kind: TurnSingle, Prompt: it.Prompt, Items: []Item{it}, Route: it.Route}
}

// crossRoutes reports whether items go to more than one destination. Items
// without any routing are ignored; a partly routed item (no channel or no
// recipient) counts as a different destination.
func crossRoutes(items []Item) bool {
	var key *Route
	for i := range items {
		r := items[i].Route
		if r == (Route{}) {
			continue
		}
		if r.Channel == "" || r.To == "" {
			return true
		}
		if key == nil {
			key = &items[i].Route
			continue
		}
		if *key != r {
			return true
		}
	}
	return false
}

// mergeRoutes takes the first non-empty value of each routing field.
func mergeRoutes(items []Item) Route {
	var r Route
	for _, it := range items {
		if r.Channel == "" {
			r.Channel = it.Route.Channel
		}
		if r.To == "" {
			r.To = it.Route.To
		}
		if r.AccountID == "" {
			r.AccountID = it.Route.AccountID
		}
		if r.ThreadID == "" {
			r.ThreadID = it.Route.ThreadID
		}
	}
	return r
}

// Batch is the next turn built from messages read straight from the lane's
// stream at a turn boundary.
type Batch struct {
	// Turn is the turn to run.
	Turn Turn
	// Dropped are messages that get no turn of their own, with the reason:
	// evicted by the cap (with drop policy summarize their summary lines
	// are in this turn's prompt, or the turn is the summary), refused at
	// the cap (drop policy new) or duplicates. The owner records the
	// reason and deletes them from the stream.
	Dropped []Dropped
	// Through is the highest Seq such that every pending message up to it
	// is in Turn.Items or Dropped: once the turn is done the lane cursor
	// may advance to it. Dropped messages beyond it are already settled
	// (deleted by the owner); the rest stay pending.
	Through uint64
}

// Collect builds the next turn from pending, the messages waiting in the
// lane (oldest first, as read from the stream), under s: the messages are
// queued one by one under the cap and drop policy, then one turn is drained
// as Lane.Next would (debounce is the caller's: see ReadyAt). It reports
// false when pending is empty.
func Collect(pending []Item, s Settings) (Batch, bool) {
	l := NewLane(s)
	var b Batch
	for _, it := range pending {
		_, dropped := l.Enqueue(it, it.At)
		b.Dropped = append(b.Dropped, dropped...)
	}
	t, ok := l.take()
	if !ok {
		return Batch{}, false
	}
	b.Turn = t
	done := make(map[uint64]bool, len(t.Items)+len(b.Dropped))
	for _, it := range t.Items {
		done[it.Seq] = true
	}
	for _, d := range b.Dropped {
		done[d.Item.Seq] = true
	}
	for _, it := range pending {
		if !done[it.Seq] {
			break
		}
		b.Through = it.Seq
	}
	return b, true
}

// ReadyAt returns when messages that arrived last at lastArrival may be
// drained under s (the debounce time later).
func ReadyAt(lastArrival time.Time, s Settings) time.Time {
	return lastArrival.Add(s.normalized().Debounce)
}
