package schedstore

import (
	"testing"

	"github.com/lanefleet/lanefleet/internal/natstest"
)

// TestReopenSendsNoUpdate: a second worker opening the store (every
// worker does at start) sends the server no stream update for the bucket
// or the timers' stream, which already have their configuration (a spy
// counts the $JS.API.STREAM.UPDATE requests up to a mark published after
// the Open on the same connection); a bucket whose limit changed is
// updated.
func TestReopenSendsNoUpdate(t *testing.T) {
	t.Parallel()
	b := setup(t)
	updatesBy := natstest.Spy(t, b.url, "$JS.API.STREAM.UPDATE.>")
	js := natstest.JetStream(t, b.url)
	nc := js.Conn()
	updates := func() []string { t.Helper(); return updatesBy(nc) }
	if _, err := Open(t.Context(), js, Config{}); err != nil {
		t.Fatal(err)
	}
	if u := updates(); len(u) != 0 {
		t.Errorf("a second Open sent updates %v, want none", u)
	}
	if _, err := Open(t.Context(), js, Config{MaxBytes: 1 << 20}); err != nil {
		t.Fatal(err)
	}
	if u := updates(); len(u) != 1 {
		t.Errorf("an Open with a new bucket limit sent updates %v, want the bucket's", u)
	}
}
