package runner

import (
	"github.com/lanefleet/lanefleet/events"
	"github.com/lanefleet/lanefleet/message"
)

// addUsage counts a model call's usage in the attempt's and the run's.
func (ru *run) addUsage(out *attemptOut, u *message.Usage) {
	if u == nil || u.IsZero() {
		return
	}
	out.usage = out.usage.Add(*u)
	out.usage.Extra = nil
	ru.usage = ru.usage.Add(*u)
	ru.usage.Extra = nil
}

// usageOf is u for an event's meta.
func usageOf(u message.Usage) *events.UsageMeta {
	return &events.UsageMeta{Input: u.Input, Output: u.Output, CacheRead: u.CacheRead, CacheWrite: u.CacheWrite, Total: u.Total(),
		Cost: costMeta(u.Cost)}
}

// UsageMeta is u for a result's or a session's meta, nil when there was
// no usage.
func UsageMeta(u message.Usage) *events.UsageMeta {
	if u.IsZero() {
		return nil
	}
	return usageOf(u)
}

// usageAcc is the reference's usage accumulator of one model's run
// (runtime spec §3.2 step 3, §3.3): each attempt's usage (the sum of its
// model calls, or its last reply's when it has none) is merged, and the
// last call's usage is remembered. The result reports the last merged
// attempt's input and cache counts, the output of every attempt, and a
// total of the last call's when it has one. The cost is every attempt's.
type usageAcc struct {
	sum                                   message.Usage
	lastIn, lastCacheRead, lastCacheWrite int64
	merged                                bool
	// last is the last call's usage (the reference's last run prompt
	// usage): its reply's, else its attempt's.
	last message.Usage
}

// merge adds one attempt: attempt is the sum of its calls' usage, lastCall
// its last reply's.
func (a *usageAcc) merge(attempt, lastCall message.Usage) {
	u := attempt
	if u.IsZero() {
		u = lastCall
	}
	if u.IsZero() {
		return
	}
	a.merged = true
	a.sum = a.sum.Add(u)
	a.sum.Extra = nil
	a.lastIn, a.lastCacheRead, a.lastCacheWrite = u.Input, u.CacheRead, u.CacheWrite
	a.last = lastCall
	if lastCall.IsZero() {
		a.last = u
	}
}

// total is the result's usage, nil when nothing was merged.
func (a *usageAcc) total() *events.UsageMeta {
	if !a.merged {
		return nil
	}
	t := a.last.TotalTokens
	if t <= 0 {
		t = a.lastIn + a.lastCacheRead + a.lastCacheWrite + a.sum.Output
	}
	return &events.UsageMeta{Input: a.lastIn, Output: a.sum.Output, CacheRead: a.lastCacheRead, CacheWrite: a.lastCacheWrite, Total: t,
		Cost: costMeta(a.sum.Cost)}
}

// lastCall is the result's last-call usage, nil when there was none.
func (a *usageAcc) lastCall() *events.UsageMeta {
	if !a.merged {
		return nil
	}
	return usageOf(a.last)
}

// promptTokens is the last call's prompt: its input and cache counts.
func (a *usageAcc) promptTokens() int64 {
	return a.last.Input + a.last.CacheRead + a.last.CacheWrite
}
