package lanes

import (
	"context"
	"testing"
	"time"

	"github.com/lanefleet/lanefleet/events"
)

// TestQuietLaneSkipsTheRead: a turn whose steer poll found the lane empty,
// and whose watch saw nothing arrive after it, ends its drain without
// reading the lane again; a message that arrives after the poll is read
// and run by the same owner, without letting the lane go in between.
func TestQuietLaneSkipsTheRead(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name    string
		arrive  bool // a message arrives after the poll, before the turn ends
		skips   int64
		acquire int64
	}{
		{"quiet", false, 1, 1},
		{"arrival after the poll", true, 0, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			f := newFleet(t, 5*time.Second, 5*time.Second)
			const key = "quiet"
			polled, published := make(chan struct{}), make(chan struct{})
			h := &echoHandler{hook: func(turn *Turn) error {
				if turn.Inbound.Text != "first" {
					return nil
				}
				if got := turn.Steer(context.Background()); len(got) != 0 {
					t.Errorf("steer poll found %d messages", len(got))
				}
				close(polled)
				<-published
				return nil
			}}
			w := f.runWorker(t, h, Config{})
			first := f.publish(t, key, "first")
			<-polled
			var second uint64
			if tc.arrive {
				second = f.publish(t, key, "second")
			}
			close(published)
			f.waitFinal(t, key, first)
			if tc.arrive {
				f.waitFinal(t, key, second)
			}
			// The drain has ended once the lane is released.
			waitFor(t, "the lane released", func() bool { return w.Stats().Released.Load() >= 1 })
			st := w.Stats()
			if st.QuietSkips.Load() != tc.skips || st.Acquired.Load() != tc.acquire {
				t.Fatalf("quiet skips %d, leases %d; want %d, %d", st.QuietSkips.Load(), st.Acquired.Load(), tc.skips, tc.acquire)
			}
		})
	}
}

// TestLinger: an owner keeps an empty lane after a turn for Config.Linger,
// so a session's next message goes on under the same lease; an owner never
// lingers while another lane waits for its slot.
func TestLinger(t *testing.T) {
	t.Parallel()
	t.Run("next message", func(t *testing.T) {
		t.Parallel()
		f := newFleet(t, 5*time.Second, 5*time.Second)
		h := &echoHandler{hook: func(turn *Turn) error {
			turn.Steer(context.Background()) // as the runner does after a reply
			return nil
		}}
		w := f.runWorker(t, h, Config{Linger: time.Minute})
		f.waitFinal(t, "s", f.publish(t, "s", "one"))
		waitFor(t, "the owner lingering", func() bool { return w.lingering.Load() > 0 })
		f.waitFinal(t, "s", f.publish(t, "s", "two"))
		st := w.Stats()
		if st.Acquired.Load() != 1 || st.LingerHits.Load() != 1 {
			t.Fatalf("leases %d, linger hits %d; want one lease for both turns", st.Acquired.Load(), st.LingerHits.Load())
		}
	})
	t.Run("a cut of the drain's second turn", func(t *testing.T) {
		t.Parallel()
		// One watch serves the drain's turns: an interrupt cuts the
		// turn running now, not the one before.
		f := newFleet(t, 5*time.Second, 5*time.Second)
		started := make(chan struct{})
		h := &echoHandler{hook: func(turn *Turn) error {
			turn.Steer(context.Background())
			return nil
		}}
		w := f.runWorker(t, HandlerFunc(func(ctx context.Context, turn *Turn) (*Outcome, error) {
			if turn.Inbound.Text == "two" {
				close(started)
				<-ctx.Done()
				return nil, context.Cause(ctx)
			}
			return h.HandleTurn(ctx, turn)
		}), Config{Linger: time.Minute})
		f.waitFinal(t, "c", f.publish(t, "c", "one"))
		waitFor(t, "the owner lingering", func() bool { return w.lingering.Load() > 0 })
		two := f.publish(t, "c", "two")
		<-started
		three := f.publishMode(t, "c", "three", "interrupt")
		if e := f.waitFinal(t, "c", two).Data.Result.Meta.Error; e == nil || e.Kind != events.KindInterrupted {
			t.Fatalf("the second turn's error %+v, want interrupted", e)
		}
		if got := f.waitFinal(t, "c", three).Data.Result.Payloads[0].Text; got != "ok three" {
			t.Fatalf("the interrupting message answered %q", got)
		}
		if n := w.Stats().Acquired.Load(); n != 1 {
			t.Fatalf("%d leases, want the three turns under one", n)
		}
	})
	t.Run("a lane waits for the slot", func(t *testing.T) {
		t.Parallel()
		f := newFleet(t, 5*time.Second, 5*time.Second)
		started, release := make(chan struct{}), make(chan struct{})
		h := &echoHandler{hook: func(turn *Turn) error {
			if turn.Inbound.Text == "hold" {
				close(started)
				<-release
			}
			turn.Steer(context.Background())
			return nil
		}}
		w := f.runWorker(t, h, Config{Linger: time.Hour, Concurrency: 1})
		f.publish(t, "a", "hold")
		<-started
		b := f.publish(t, "b", "waits")
		waitFor(t, "b waiting for the slot", func() bool { return w.Stats().Waited.Load() >= 1 })
		close(release)
		// With an hour's linger, b runs only if a did not linger.
		f.waitFinal(t, "b", b)
	})
}
