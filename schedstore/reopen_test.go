package schedstore

import (
	"testing"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

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
	spy := natstest.Connect(t, b.url)
	seen := make(chan *nats.Msg, 64)
	for _, subj := range []string{"$JS.API.STREAM.UPDATE.>", "spy.mark"} {
		if _, err := spy.ChanSubscribe(subj, seen); err != nil {
			t.Fatal(err)
		}
	}
	if err := spy.Flush(); err != nil {
		t.Fatal(err)
	}
	nc := natstest.Connect(t, b.url)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	updates := func() []string {
		t.Helper()
		if err := nc.Publish("spy.mark", nil); err != nil {
			t.Fatal(err)
		}
		var subjects []string
		for {
			select {
			case m := <-seen:
				if m.Subject == "spy.mark" {
					return subjects
				}
				subjects = append(subjects, m.Subject)
			case <-t.Context().Done():
				t.Fatal("the mark never came")
			}
		}
	}
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
