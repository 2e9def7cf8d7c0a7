package lanes

import (
	"cmp"
	"context"
	"errors"
	"maps"
	"slices"
	"time"

	"github.com/lanefleet/lanefleet/kvstore"
	"github.com/lanefleet/lanefleet/retention"
)

// The retention pass's retry list: the lanes it moved past after their
// forget kept failing (retention.Skip), stored in the lanes bucket
// (kvstore.Retry) so that a worker taking the pass over keeps them.

// retryList is the retention pass's retry list (kvstore.Retry) as one pass
// reads and changes it.
type retryList struct {
	by      map[string]kvstore.Retry
	rev     uint64
	changed bool
	// skipped are the stream sequences of the lanes this pass put on the
	// list: the position passes them only once the list is stored.
	skipped []uint64
}

// loadRetries reads the retry list; one that does not decode (written by
// something other than a worker) is started anew.
func (w *Worker) loadRetries(ctx context.Context) (*retryList, error) {
	rs, rev, err := w.lanes.RetentionRetries(ctx)
	if err != nil && !errors.Is(err, kvstore.ErrCorrupt) {
		return nil, err
	}
	l := &retryList{by: make(map[string]kvstore.Retry, len(rs)), rev: rev, changed: err != nil}
	for _, r := range rs {
		l.by[r.Token] = r
	}
	return l, nil
}

func (l *retryList) len() int { return len(l.by) }

// due returns up to n listed lanes whose wait is over at now, those waiting
// longest first.
func (l *retryList) due(now time.Time, n int) []string {
	var rs []kvstore.Retry
	for _, r := range l.by {
		if r.Next <= now.UnixMilli() {
			rs = append(rs, r)
		}
	}
	slices.SortFunc(rs, func(a, b kvstore.Retry) int {
		return cmp.Or(cmp.Compare(a.Next, b.Next), cmp.Compare(a.Token, b.Token))
	})
	out := make([]string, 0, min(n, len(rs)))
	for _, r := range rs[:min(n, len(rs))] {
		out = append(out, r.Token)
	}
	return out
}

// failed notes another failed forget of a listed lane, which waits longer
// for its next try, and reports whether the lane is listed.
func (l *retryList) failed(token string, now time.Time) bool {
	r, ok := l.by[token]
	if !ok {
		return false
	}
	r.Tries++
	r.Next = now.Add(retention.RetryAfter(r.Tries)).UnixMilli()
	l.by[token], l.changed = r, true
	return true
}

// skip lists a lane the pass moves past (at stream sequence seq) after
// tries failed forgets.
func (l *retryList) skip(token string, seq uint64, tries int, now time.Time) {
	l.by[token] = kvstore.Retry{Token: token, Tries: tries, Next: now.Add(retention.RetryAfter(tries)).UnixMilli()}
	l.changed = true
	l.skipped = append(l.skipped, seq)
}

// done takes a lane whose forget went through off the list; one kept for
// a write after the cutoff waits until the cutoff passes that write, as
// the pass may already have moved past it.
func (l *retryList) done(token string, out forgotten, cutoff, now time.Time) {
	r, ok := l.by[token]
	if !ok {
		return
	}
	if !out.later.IsZero() {
		r.Next = now.Add(out.later.Sub(cutoff)).UnixMilli() + 1
		l.by[token] = r
	} else {
		delete(l.by, token)
	}
	l.changed = true
}

// firstSkipped is the lowest sequence of a lane this pass listed, or seq
// when it listed none.
func (l *retryList) firstSkipped(seq uint64) uint64 {
	for _, s := range l.skipped {
		seq = min(seq, s)
	}
	return seq
}

// store writes the list if the pass changed it.
func (l *retryList) store(ctx context.Context, lanes *kvstore.Lanes) error {
	if !l.changed {
		return nil
	}
	rs := slices.SortedFunc(maps.Values(l.by), func(a, b kvstore.Retry) int { return cmp.Compare(a.Token, b.Token) })
	return lanes.SetRetentionRetries(ctx, rs, l.rev)
}
