package kvstore

import (
	"errors"
	"reflect"
	"testing"
	"time"

	"github.com/lanefleet/lanefleet/internal/natstest"
)

// TestLeases: Leases reads many lanes' leases as Lease reads each (a held
// lane, a released one, one never held, one whose value does not read, a
// token asked twice), in one Direct Get where the bucket allows one.
func TestLeases(t *testing.T) {
	t.Parallel()
	b := setupWith(t, Config{LeaseTTL: time.Second, MarkerTTL: time.Minute})
	ctx, lanes, nc := t.Context(), b.lanes, b.js.Conn()
	if _, err := lanes.Acquire(ctx, "held", LeaseInfo{Worker: "w1", Acquired: 7}); err != nil {
		t.Fatal(err)
	}
	l, err := lanes.Acquire(ctx, "released", LeaseInfo{Worker: "w2"})
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := lanes.kv.Put(ctx, leaseKey("garbled"), []byte{0xc1}); err != nil {
		t.Fatal(err)
	}
	spy := natstest.Spy(t, nc.ConnectedUrl(), "$JS.API.>")
	tokens := []string{"held", "released", "never", "garbled", "held"}
	spy(nc)
	got, err := lanes.Leases(ctx, tokens)
	if err != nil {
		t.Fatal(err)
	}
	if reqs := spy(nc); len(reqs) != 1 {
		t.Errorf("Leases of %d lanes sent %v, want one request", len(tokens), reqs)
	}
	for i, tok := range tokens {
		st, err := lanes.Lease(ctx, tok)
		if !reflect.DeepEqual(got[i].State, st) || !errors.Is(got[i].Err, ErrCorrupt) != (err == nil) {
			t.Errorf("%s: Leases %+v (%v), Lease %+v (%v)", tok, got[i].State, got[i].Err, st, err)
		}
	}
	if !got[0].State.Held || got[0].State.Holder.Worker != "w1" || got[1].State.Held || got[2].State.Held || got[3].Err == nil {
		t.Fatalf("leases: %+v", got)
	}
}
