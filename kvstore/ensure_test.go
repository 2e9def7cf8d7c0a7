package kvstore

import (
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/lanefleet/lanefleet/internal/natstest"
)

// TestEnsureStreamUpdatesOnlyChanges: ensuring a stream that already has
// its configuration sends the server no update (a spy subscription counts
// the $JS.API.STREAM.UPDATE requests), whatever defaults the server
// filled in; a changed configuration, or a field set on the stream by
// hand, is updated.
func TestEnsureStreamUpdatesOnlyChanges(t *testing.T) {
	t.Parallel()
	js := connect(t)
	nc := js.Conn()
	spied := natstest.Spy(t, nc.ConnectedUrl(), "$JS.API.STREAM.UPDATE.>")
	// updates counts the update requests js sent since it was last called.
	updates := func() int { t.Helper(); return len(spied(nc)) }
	steps := jetstream.StreamConfig{ // as ensureSteps makes it
		Name: StepsStream, Description: "steps", Subjects: []string{StepsPrefix + ">"}, Retention: jetstream.LimitsPolicy,
		Storage: jetstream.FileStorage, Replicas: 1, MaxAge: StepTTL, MaxBytes: DefaultStepsMaxBytes, Discard: jetstream.DiscardOld,
		MaxMsgsPerSubject: 1, AllowDirect: true,
	}
	for _, cfg := range []jetstream.StreamConfig{
		steps,
		// Every limit left to the server's defaults.
		{Name: "BARE", Subjects: []string{"bare.>"}},
		// A duplicate window the server takes from MaxAge.
		{Name: "SHORT", Subjects: []string{"short.*"}, MaxAge: 30 * time.Second, MaxMsgSize: 1 << 20, Duplicates: 0},
		// Limits given, and metadata of our own.
		{Name: "SET", Subjects: []string{"set.a", "set.b"}, MaxBytes: -1, MaxMsgs: 100, Duplicates: time.Minute, Metadata: map[string]string{"owner": "test"}},
	} {
		t.Run(cfg.Name, func(t *testing.T) {
			if _, err := EnsureStream(t.Context(), js, cfg); err != nil {
				t.Fatal(err)
			}
			if n := updates(); n != 1 {
				t.Fatalf("new stream: %d updates, want the one refused (no stream yet)", n)
			}
			for range 2 {
				s, err := EnsureStream(t.Context(), js, cfg)
				if err != nil {
					t.Fatal(err)
				}
				if n := updates(); n != 0 {
					t.Fatalf("unchanged stream: %d updates; has %+v", n, s.CachedInfo().Config)
				}
			}
			changed := cfg
			changed.Description = "changed"
			s, err := EnsureStream(t.Context(), js, changed)
			if err != nil {
				t.Fatal(err)
			}
			if n := updates(); n != 1 || s.CachedInfo().Config.Description != "changed" {
				t.Fatalf("changed stream: %d updates, description %q", n, s.CachedInfo().Config.Description)
			}
			// A field set by hand, which cfg leaves at its default, is
			// put back.
			byHand := changed
			byHand.AllowRollup = true
			if _, err := js.UpdateStream(t.Context(), byHand); err != nil {
				t.Fatal(err)
			}
			updates()
			if s, err = EnsureStream(t.Context(), js, changed); err != nil {
				t.Fatal(err)
			}
			if n := updates(); n != 1 || s.CachedInfo().Config.AllowRollup {
				t.Fatalf("stream set by hand: %d updates, rollup %v", n, s.CachedInfo().Config.AllowRollup)
			}
		})
	}
}
