package fleet

import (
	"context"

	"github.com/lanefleet/lanefleet/lanes"
	"github.com/lanefleet/lanefleet/sessionindex"
)

// laneIndex tells the session index what the lanes say of sessions'
// activity (lanes.Config.Index): each run's start and commit, with the
// state summary the listing shows, a new session's first message
// delivered, and a forgotten session's end.
type laneIndex struct{ x *sessionindex.Index }

// Touch writes the session's entry without waiting.
func (l laneIndex) Touch(a lanes.Activity) {
	l.x.Touch(a.Key, sessionindex.Summarize(a.Run, a.Committed, a.Through, a.State))
}

// Queued lists a session whose first message waits, unless it is listed.
func (l laneIndex) Queued(key, run string) { l.x.Queued(key, run) }

// Forgotten removes the session's entry.
func (l laneIndex) Forgotten(ctx context.Context, key string) { l.x.Forgotten(ctx, key) }
