package main

import (
	"context"
	"encoding/json"
	"strconv"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/lanefleet/lanefleet/events"
	"github.com/lanefleet/lanefleet/kvstore"
	"github.com/lanefleet/lanefleet/sessionindex"
)

// What the newest sessions hold, as on a live fleet's first pages.
const (
	// listingRunning sessions of the newest 100 run a turn now (a
	// registry entry, a lease, their message stored).
	listingRunning = 10
	// listingWaiting sessions of the newest 100 have a message waiting.
	listingWaiting = 5
	// listingEventful of the newest sessions have their latest runs'
	// events stored.
	listingEventful = 2000
)

// listingEntry is session i's index entry as a worker writes it when a
// turn commits (sessionindex.Summarize): its run, the lane's cursor, the
// state's summary.
func listingEntry(i int) []byte {
	data, _ := json.Marshal(sessionindex.Summarize(strconv.Itoa(i+1), true, uint64(i+1), &events.SessionState{Turns: int64(i%7 + 1)}))
	return data
}

// listingBusy makes some of the n sessions' newest ones busy: running
// (registered, leased by a live worker, its message stored, a start
// event) or with a message waiting, as on a live fleet's first page.
func listingBusy(ctx context.Context, js jetstream.JetStream, runs *kvstore.Runs, lns *kvstore.Lanes, n int, key func(int) string) error {
	// The newest sessions' two latest runs' events (a final event of
	// about a kilobyte each), as the event stream keeps them for a day.
	final := make([]byte, 1024)
	for i := max(n-listingEventful, 0); i < n; i++ {
		tok, err := events.KeyToken(key(i))
		if err != nil {
			return err
		}
		for r := range 2 {
			if _, err := js.PublishAsync(events.EventPrefix+tok+"."+strconv.Itoa(i+1-r), final, jetstream.WithStallWait(time.Minute)); err != nil {
				return err
			}
		}
	}
	select {
	case <-js.PublishAsyncComplete():
	case <-ctx.Done():
		return ctx.Err()
	}
	for j := range listingRunning + listingWaiting {
		i := n - 1 - j*100/(listingRunning+listingWaiting) // spread over the newest 100
		tok, err := events.KeyToken(key(i))
		if err != nil {
			return err
		}
		ack, err := js.Publish(ctx, events.InboundPrefix+tok, payload(i))
		if err != nil {
			return err
		}
		if j >= listingRunning {
			continue
		}
		run := strconv.FormatUint(ack.Sequence, 10)
		if _, err := js.Publish(ctx, events.EventPrefix+tok+"."+run, []byte("start")); err != nil {
			return err
		}
		if _, err := runs.Register(ctx, tok, kvstore.RunInfo{Session: key(i), RunID: run, Worker: "bench", StartedAt: time.Now().UnixMilli()}); err != nil {
			return err
		}
		if _, err := lns.Acquire(ctx, tok, kvstore.LeaseInfo{Worker: "bench", Acquired: time.Now().UnixMilli()}); err != nil {
			return err
		}
	}
	return nil
}
