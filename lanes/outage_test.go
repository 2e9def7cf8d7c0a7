package lanes

import (
	"context"
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
// store error, and the run's later events count it (StoreErrors).
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
			if final.Attempt != 2 || final.StoreErrors != 1 {
				t.Fatalf("final of attempt %d counting %d store errors, want attempt 2 and 1", final.Attempt, final.StoreErrors)
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
