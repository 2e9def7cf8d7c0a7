package lanefleet

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/micro"

	"github.com/lanefleet/lanefleet/admin"
)

// Defaults of WorkersQuery.
const (
	WorkersQuietDefault = 200 * time.Millisecond
	WorkersWaitDefault  = 2 * time.Second
	WorkersMaxDefault   = 1000
	// workerReplyMax bounds one worker's STATS reply (a few hundred
	// bytes in practice).
	workerReplyMax = 64 << 10
)

// WorkersQuery bounds how long Workers gathers the workers' answers.
type WorkersQuery struct {
	// Expect stops the gathering once this many workers answered (0 =
	// not known).
	Expect int
	// Quiet stops it this long after the last answer; default
	// WorkersQuietDefault.
	Quiet time.Duration
	// Wait bounds it in all (and ctx); default WorkersWaitDefault.
	Wait time.Duration
	// Max is the most answers taken; default WorkersMaxDefault.
	Max int
}

// Workers asks every worker how it is doing (slots, lanes, turns, its
// version) and returns the answers that came within q's bounds, sorted by
// worker id. It asks micro's STATS of the admin service
// ($SRV.STATS.lanefleet-admin), which every worker answers, so only the
// admin role may: ErrPermission otherwise. ErrNoFleet means no worker
// serves it.
func (c *Client) Workers(ctx context.Context, q WorkersQuery) ([]admin.WorkerStats, error) {
	q.Quiet = cmp.Or(q.Quiet, WorkersQuietDefault)
	q.Wait = cmp.Or(q.Wait, WorkersWaitDefault)
	q.Max = cmp.Or(q.Max, WorkersMaxDefault)
	subj, err := micro.ControlSubject(micro.StatsVerb, admin.Name, "")
	if err != nil {
		return nil, fmt.Errorf("lanefleet: workers: %w", err)
	}
	ctx, cancel := context.WithTimeout(ctx, q.Wait)
	defer cancel()
	before := c.nc.LastError()
	// An inbox of its own, not one under the request mux's prefix (whose
	// wildcard subscription would take a second copy of every answer).
	inbox := c.nc.NewInbox()
	ch := make(chan *nats.Msg, 64)
	sub, err := c.nc.ChanSubscribe(inbox, ch)
	if err != nil {
		return nil, fmt.Errorf("lanefleet: workers: %w", err)
	}
	defer func() { _ = sub.Unsubscribe() }()
	_ = sub.SetPendingLimits(q.Max+16, (q.Max+16)*workerReplyMax)
	if err := c.nc.PublishRequest(subj, inbox, nil); err != nil {
		return nil, fmt.Errorf("lanefleet: workers: %w", err)
	}
	if err := c.nc.FlushWithContext(ctx); err != nil {
		return nil, fmt.Errorf("lanefleet: workers: %w", err)
	}
	for _, what := range []string{"Publish to", "Subscription to"} {
		s := subj
		if what == "Subscription to" {
			s = inbox
		}
		if err := c.denied(before, what, s); err != nil {
			return nil, fmt.Errorf("%w (%s is for the admin role)", err, subj)
		}
	}
	byID := map[string]admin.WorkerStats{}
	var quiet <-chan time.Time
	for len(byID) < q.Max && (q.Expect <= 0 || len(byID) < q.Expect) {
		select {
		case m := <-ch:
			if m.Header.Get("Status") == "503" {
				return nil, fmt.Errorf("%w: no worker answers %s", ErrNoFleet, subj)
			}
			if ws, ok := workerOf(m.Data); ok {
				byID[ws.Worker] = ws
			}
			quiet = time.After(q.Quiet)
		case <-quiet:
			return sortedWorkers(byID), nil
		case <-ctx.Done():
			return sortedWorkers(byID), nil
		}
	}
	return sortedWorkers(byID), nil
}

// workerOf reads a worker's stats from its admin service's STATS reply.
func workerOf(data []byte) (admin.WorkerStats, bool) {
	var st micro.Stats
	if len(data) > workerReplyMax || json.Unmarshal(data, &st) != nil || st.Name != admin.Name {
		return admin.WorkerStats{}, false
	}
	for _, ep := range st.Endpoints {
		if ep == nil || ep.Name != admin.StatsEndpoint || len(ep.Data) == 0 {
			continue
		}
		var ws admin.WorkerStats
		if json.Unmarshal(ep.Data, &ws) != nil {
			return admin.WorkerStats{}, false
		}
		if ws.Worker == "" {
			ws.Worker = st.Metadata["worker"]
		}
		return ws, ws.Worker != ""
	}
	return admin.WorkerStats{}, false
}

func sortedWorkers(m map[string]admin.WorkerStats) []admin.WorkerStats {
	out := make([]admin.WorkerStats, 0, len(m))
	for _, w := range m {
		out = append(out, w)
	}
	slices.SortFunc(out, func(a, b admin.WorkerStats) int { return cmp.Compare(a.Worker, b.Worker) })
	return out
}
