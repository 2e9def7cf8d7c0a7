package runner

import (
	"context"

	"github.com/lanefleet/lanefleet/compaction"
	"github.com/lanefleet/lanefleet/message"
)

// PiCompactor is the Compactor of pi's algorithm (package compaction): the
// threshold trigger of its Settings and summaries by the session's model.
type PiCompactor struct {
	Settings compaction.Settings
}

// Compact implements Compactor.
func (c PiCompactor) Compact(ctx context.Context, req CompactRequest) (message.Entry, error) {
	res, err := compaction.Compact(ctx, compaction.Request{Provider: req.Provider, Model: req.Model, APIKey: req.APIKey,
		Entries: req.Entries, Settings: c.Settings, Trigger: compaction.Trigger(req.Trigger)})
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
