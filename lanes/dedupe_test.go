package lanes

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/lanefleet/lanefleet/events"
)

// publishID publishes text in mode to key's lane with the message id id
// (Lanefleet-Msg-Id) and returns its run.
func (f *fleet) publishID(t *testing.T, key, text, mode, id string) uint64 {
	t.Helper()
	subj, _ := events.InboundSubject(key)
	data, ct, _ := events.EncodeInbound(&events.Inbound{Text: text, Mode: mode}, false)
	m := nats.NewMsg(subj)
	m.Data = data
	m.Header.Set(events.HeaderContentType, ct)
	m.Header.Set(events.HeaderLaneMsgID, id)
	ack, err := f.js.PublishMsg(t.Context(), m)
	if err != nil {
		t.Fatal(err)
	}
	return ack.Sequence
}

// TestDuplicatesRunOnce: a message whose id an earlier message of its lane
// used is not run: its run ends pointing at the first one's, whether the
// first is still queued ahead of it, was answered by the same owner, or by
// an earlier owner (the ids ride on the lane's records); a resent
// interrupt does not cut the turn its first copy started. The same id on
// another lane is that lane's own. (queue's TestIDs covers the window.)
func TestDuplicatesRunOnce(t *testing.T) {
	t.Parallel()
	f := newFleet(t, 5*time.Second, 5*time.Second)
	started, release := make(chan struct{}), make(chan struct{})
	echo := &echoHandler{}
	var once sync.Once
	f.startWorker(t, HandlerFunc(func(ctx context.Context, t *Turn) (*Outcome, error) {
		if t.Inbound.Text == "hold" {
			once.Do(func() { close(started) })
			select {
			case <-release:
			case <-ctx.Done(): // cut
				return nil, context.Cause(ctx)
			}
		}
		return echo.HandleTurn(ctx, t)
	}), Config{})

	// Queued behind its first copy; and a resent interrupt while the turn
	// its first copy started runs.
	first := f.publishID(t, "d", "hold", "interrupt", "x")
	<-started
	again := f.publishID(t, "d", "hold", "interrupt", "x")
	queued := f.publishID(t, "d", "q", "", "y")
	queuedAgain := f.publishID(t, "d", "q", "", "y")
	close(release)
	if ev := f.waitFinal(t, "d", first); finalErr(ev) != "" || ev.Data.Result.Payloads[0].Text != "ok hold" {
		t.Fatalf("the first copy's turn ended %+v: its resend cut it", ev.Data.Result)
	}
	for dup, orig := range map[uint64]uint64{again: first, queuedAgain: queued} {
		if ev := f.waitFinal(t, "d", dup); ev.Data.Result.Meta.MergedInto != fmt.Sprint(orig) || len(ev.Data.Result.Payloads) != 0 {
			t.Fatalf("run %d ended %+v, want it pointing at %d", dup, ev.Data.Result, orig)
		}
	}
	// The lane is released meanwhile; its next owner knows the ids from
	// the record.
	tok, _ := events.KeyToken("d")
	waitFor(t, "the lane released", func() bool {
		_, held, err := f.lanes.Holder(t.Context(), tok)
		return err == nil && !held
	})
	later := f.publishID(t, "d", "q", "", "y")
	if ev := f.waitFinal(t, "d", later); ev.Data.Result.Meta.MergedInto != fmt.Sprint(queued) {
		t.Fatalf("a resend to the next owner ended %+v, want it pointing at %d", ev.Data.Result, queued)
	}
	// Another lane's message with the same id is its own.
	other := f.publishID(t, "e", "mine", "", "y")
	if ev := f.waitFinal(t, "e", other); ev.Data.Result.Payloads[0].Text != "ok mine" {
		t.Fatalf("another lane's message ended %+v", ev.Data.Result)
	}
	if got := f.transcriptTexts(t, "d"); fmt.Sprint(got) != "[hold ok hold q ok q]" {
		t.Fatalf("transcript %q: each message once", got)
	}

}
