package integration

import (
	"context"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/lanefleet/lanefleet/events"
	"github.com/lanefleet/lanefleet/kvstore"
)

// leaseWatch follows the lanes bucket's lease keys as the server stores
// them (a KV watch): who holds each lane now. Unlike holders, which reads
// every lease at each poll, it misses no lease however busy the machine is.
type leaseWatch struct {
	mu     sync.Mutex
	holder map[string]string // lease key → its holder's worker id ("" = none)
	moved  chan struct{}     // closed (and replaced) at each change
}

// watchLeases starts following the leases of the default lanes bucket; it
// stops when the test ends.
func watchLeases(t *testing.T, js jetstream.JetStream) *leaseWatch {
	t.Helper()
	ctx, cancel := context.WithCancel(t.Context())
	kv, err := js.KeyValue(ctx, kvstore.DefaultBucket)
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	w, err := kv.Watch(ctx, "*.lease")
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	lw := &leaseWatch{holder: map[string]string{}, moved: make(chan struct{})}
	done := make(chan struct{})
	t.Cleanup(func() { cancel(); _ = w.Stop(); <-done })
	go func() {
		defer close(done)
		for {
			var e jetstream.KeyValueEntry
			select {
			case <-ctx.Done():
				return
			case u, ok := <-w.Updates():
				if !ok {
					return
				}
				if u == nil {
					continue // the current values were all seen
				}
				e = u
			}
			worker := ""
			if e.Operation() == jetstream.KeyValuePut {
				var info kvstore.LeaseInfo
				if events.UnmarshalMsgpack(e.Value(), &info) == nil {
					worker = info.Worker
				}
			}
			lw.mu.Lock()
			lw.holder[e.Key()] = worker
			close(lw.moved)
			lw.moved = make(chan struct{})
			lw.mu.Unlock()
		}
	}()
	return lw
}

// heldBy returns the lane tokens worker id holds now, and a channel closed
// at the next change.
func (lw *leaseWatch) heldBy(id string) (tokens []string, moved <-chan struct{}) {
	lw.mu.Lock()
	defer lw.mu.Unlock()
	for key, worker := range lw.holder {
		if worker == id {
			tokens = append(tokens, strings.TrimSuffix(key, ".lease"))
		}
	}
	slices.Sort(tokens)
	return tokens, lw.moved
}

// waitHeld waits until worker id holds at least least lanes, waking at
// each lease change, and returns their tokens; it fails the test after
// timeout.
func (lw *leaseWatch) waitHeld(t *testing.T, id string, least int, timeout time.Duration) []string {
	t.Helper()
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	for {
		held, moved := lw.heldBy(id)
		if len(held) >= least {
			return held
		}
		select {
		case <-moved:
		case <-deadline.C:
			t.Fatalf("worker %s holds %d lanes, not %d, after %v", id, len(held), least, timeout)
		case <-t.Context().Done():
			t.Fatalf("worker %s holds %d lanes, not %d: %v", id, len(held), least, t.Context().Err())
		}
	}
}
