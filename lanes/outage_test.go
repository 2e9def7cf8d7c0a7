package lanes

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"

	"github.com/lanefleet/lanefleet/events"
	"github.com/lanefleet/lanefleet/kvstore"
)

// unreachable takes stream's subjects away, so that every write to it finds
// no stream to answer (nats: no responders, as while a stream has no
// leader) while everything it stores stays; restore gives them back.
func unreachable(t *testing.T, js jetstream.JetStream, stream string) (restore func()) {
	t.Helper()
	s, err := js.Stream(t.Context(), stream)
	if err != nil {
		t.Fatal(err)
	}
	cfg := s.CachedInfo().Config
	subjects := cfg.Subjects
	cfg.Subjects = []string{"unreachable." + stream + ".>"}
	if _, err := js.UpdateStream(t.Context(), cfg); err != nil {
		t.Fatal(err)
	}
	var once sync.Once
	return func() {
		once.Do(func() {
			cfg.Subjects = subjects
			if _, err := js.UpdateStream(context.Background(), cfg); err != nil {
				t.Errorf("restore %s: %v", stream, err)
			}
		})
	}
}

// hookFunc is a zerolog.Hook made of a function.
type hookFunc func(level zerolog.Level, msg string)

func (h hookFunc) Run(_ *zerolog.Event, level zerolog.Level, msg string) { h(level, msg) }

// TestStoreOutageSpendsNoAttempt: with MaxAttempts 1, a turn whose first
// attempt ends on a store that does not answer (its step journal's stream,
// or the lanes bucket its record goes to, have no responders until the
// turn failed) is run again once the store is back, and answered; it is not
// dead-lettered as poison. The attempt's aborted event says it ended on a
// store error, and a note on the run says it does not count.
func TestStoreOutageSpendsNoAttempt(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name   string
		stream string
		// journal: the handler writes a step (the store op the outage
		// fails); otherwise the outage fails the turn's record.
		journal bool
	}{
		{"step journal", kvstore.StepsStream, true},
		{"turn record", "KV_" + kvstore.DefaultBucket, false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			f := newFleet(t, 10*time.Second, 10*time.Second)
			var (
				mu      sync.Mutex
				restore func()
			)
			// The store comes back once the turn failed.
			f.logHook = hookFunc(func(_ zerolog.Level, msg string) {
				if msg != "turn failed; retrying" {
					return
				}
				mu.Lock()
				r := restore
				mu.Unlock()
				if r != nil {
					r()
				}
			})
			h := &echoHandler{hook: func(turn *Turn) error {
				if turn.Attempt == 1 {
					r := unreachable(t, f.js, tt.stream)
					mu.Lock()
					restore = r
					mu.Unlock()
					t.Cleanup(r)
				}
				if !tt.journal {
					return nil
				}
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				defer cancel()
				return turn.Steps().Put(ctx, 1, []byte("step"))
			}}
			f.startWorker(t, h, Config{MaxAttempts: 1, RetryDelay: time.Millisecond})
			seq := f.publish(t, "outage", "hi")
			evs := f.runEvents(t, "outage", seq)
			final := evs[len(evs)-1]
			if r := final.Data.Result; r.Meta.Error != nil || len(r.Payloads) != 1 || r.Payloads[0].Text != "ok hi" {
				t.Fatalf("final = %+v, want the answer", r)
			}
			if final.Attempt != 2 {
				t.Fatalf("final of attempt %d, want 2", final.Attempt)
			}
			// The run says so for the lane's next owners.
			tok, _ := events.KeyToken("outage")
			note, err := f.streams.Events.GetLastMsgForSubject(t.Context(), uncountedSubject(tok, fmt.Sprint(seq)))
			if err != nil || string(note.Data) != "1" {
				t.Fatalf("note of the attempt that does not count: %v, %v", note, err)
			}
			var aborted []string
			for _, ev := range evs {
				if ev.Data.Phase == events.PhaseAborted {
					aborted = append(aborted, ev.Data.Error)
				}
			}
			if len(aborted) != 1 || !strings.HasPrefix(aborted[0], "attempt 1 ended on a store error (it does not count toward the attempt limit): ") {
				t.Fatalf("aborted events say %q, want attempt 1's store error", aborted)
			}
			info, err := f.streams.Dead.Info(t.Context())
			if err != nil {
				t.Fatal(err)
			}
			if info.State.Msgs != 0 {
				t.Fatalf("%d dead letters, want none", info.State.Msgs)
			}
		})
	}
}

// TestLostLaneSpendsNoAttempt: with MaxAttempts 1, a turn whose worker,
// alive, loses the lane mid-turn (the lanes bucket does not answer its
// renewals until its lease has lapsed) is run again by the lane's next
// owner, and answered: the worker that lost the lane notes the attempt as
// one that does not count, and the next owner, which found the attempt
// ended without a word, waits for that note (Worker.noteGrace) before it
// would dead-letter the message. (Before, the attempt counted as a crash.)
func TestLostLaneSpendsNoAttempt(t *testing.T) {
	t.Parallel()
	f := newFleet(t, 10*time.Second, 2*time.Second)
	started := make(chan struct{})
	var once sync.Once
	echo := &echoHandler{}
	h := HandlerFunc(func(ctx context.Context, turn *Turn) (*Outcome, error) {
		if turn.Inbound.Text == "first" && turn.Attempt == 1 {
			once.Do(func() { close(started) })
			<-ctx.Done() // until the worker finds its lease lost
			return nil, context.Cause(ctx)
		}
		return echo.HandleTurn(ctx, turn)
	})
	f.startWorker(t, h, Config{MaxAttempts: 1, RetryDelay: time.Millisecond})
	f.startWorker(t, h, Config{MaxAttempts: 1, RetryDelay: time.Millisecond})
	first := f.publish(t, "lapse", "first")
	<-started
	tok, _ := events.KeyToken("lapse")
	restore := unreachable(t, f.js, "KV_"+kvstore.DefaultBucket)
	t.Cleanup(restore)
	waitFor(t, "the lease to lapse", func() bool {
		_, held, err := f.lanes.Holder(t.Context(), tok)
		return err == nil && !held
	})
	restore()
	second := f.publish(t, "lapse", "second")

	final := f.waitFinal(t, "lapse", first)
	if r := final.Data.Result; r.Meta.Error != nil || len(r.Payloads) != 1 || r.Payloads[0].Text != "ok first" || final.Attempt != 2 {
		t.Fatalf("final = %+v at attempt %d, want the answer at attempt 2", r, final.Attempt)
	}
	if r := f.waitFinal(t, "lapse", second).Data.Result; r.Meta.Error != nil || r.Payloads[0].Text != "ok second" {
		t.Fatalf("next message's final = %+v", r)
	}
	note, err := f.streams.Events.GetLastMsgForSubject(t.Context(), uncountedSubject(tok, fmt.Sprint(first)))
	if err != nil || string(note.Data) != "1" || !strings.Contains(note.Header.Get(events.HeaderError), "lost the session's lane") {
		t.Fatalf("note of the attempt that does not count: %v, %v", note, err)
	}
	info, err := f.streams.Dead.Info(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if info.State.Msgs != 0 {
		t.Fatalf("%d dead letters, want none", info.State.Msgs)
	}
}
