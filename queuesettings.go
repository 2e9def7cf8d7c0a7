package lanefleet

import (
	"time"

	"github.com/lanefleet/lanefleet/events"
	"github.com/lanefleet/lanefleet/lanes/queue"
)

// QueueSettings are a session's queue settings as a client sets and reads
// them: what happens to its messages that name no mode, and for collect
// mode the debounce, cap and drop policy. A zero field is unset: the
// stored value or the default applies (mode followup; debounce 1 s, cap
// 20, drop summarize).
type QueueSettings struct {
	// Mode is steer, followup, collect, steer-backlog, interrupt, reject
	// or rollback (queue.Mode's names; the worker refuses others).
	Mode string
	// Debounce is set when non-nil (zero is a valid debounce).
	Debounce *time.Duration
	Cap      int
	// Drop is old, new or summarize (queue.DropPolicy's names).
	Drop string
}

// Wire returns the settings in their wire form (what a settings message
// carries and a lane stores).
func (s QueueSettings) Wire() *events.QueueSettings {
	q := &events.QueueSettings{Mode: s.Mode, Cap: s.Cap, Drop: s.Drop}
	if s.Debounce != nil {
		ms := s.Debounce.Milliseconds()
		q.DebounceMs = &ms
	}
	return q
}

// Overrides returns the settings as a layer for queue.Resolve (a mode or
// drop policy it does not know is unset).
func (s QueueSettings) Overrides() queue.Overrides {
	o := queue.Overrides{Cap: s.Cap, Debounce: s.Debounce}
	o.Mode, _ = queue.ParseMode(s.Mode)
	o.Drop, _ = queue.ParseDropPolicy(s.Drop)
	return o
}

// QueueSettingsFromWire returns queue settings in their wire form (nil =
// none) with their names made canonical ("coalesce" is collect): a name
// it does not know is dropped.
func QueueSettingsFromWire(q *events.QueueSettings) QueueSettings {
	if q == nil {
		return QueueSettings{}
	}
	s := QueueSettings{Cap: q.Cap}
	mode, _ := queue.ParseMode(q.Mode)
	drop, _ := queue.ParseDropPolicy(q.Drop)
	s.Mode, s.Drop = string(mode), string(drop)
	if q.DebounceMs != nil {
		d := time.Duration(*q.DebounceMs) * time.Millisecond
		s.Debounce = &d
	}
	return s
}
