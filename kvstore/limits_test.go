package kvstore

import (
	"testing"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/lanefleet/lanefleet/internal/natstest"
)

// TestBucketLimits: the lanes and runs buckets get their byte limits when
// created, and a lanes bucket made without one (by an older worker) gets
// it when opened, keeping its records and the leader-only reads.
func TestBucketLimits(t *testing.T) {
	t.Parallel()
	srv := natstest.Start(t)
	js := natstest.JetStream(t, srv.URL)
	kv, err := js.CreateKeyValue(t.Context(), jetstream.KeyValueConfig{Bucket: DefaultBucket})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := kv.Put(t.Context(), "t.tx.1", []byte("kept")); err != nil {
		t.Fatal(err)
	}
	maxBytes := func(name string) int64 {
		t.Helper()
		s, err := js.Stream(t.Context(), name)
		if err != nil {
			t.Fatal(err)
		}
		return s.CachedInfo().Config.MaxBytes
	}
	if got := maxBytes("KV_" + DefaultBucket); got != -1 {
		t.Fatalf("an unlimited bucket has max bytes %d", got)
	}
	l, err := Open(t.Context(), js, Config{})
	if err != nil {
		t.Fatal(err)
	}
	info, err := l.Stream().Info(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if info.Config.MaxBytes != DefaultMaxBytes || !info.Config.AllowDirect || info.Config.Discard != jetstream.DiscardNew || info.State.Msgs != 1 {
		t.Fatalf("lanes bucket: max bytes %d, direct %v, discard %v, %d msgs", info.Config.MaxBytes, info.Config.AllowDirect, info.Config.Discard, info.State.Msgs)
	}
	if _, err := Open(t.Context(), js, Config{MaxBytes: 1 << 20}); err != nil {
		t.Fatal(err)
	}
	if got := maxBytes("KV_" + DefaultBucket); got != 1<<20 {
		t.Fatalf("lanes bucket reopened with 1 MiB has max bytes %d", got)
	}
	if _, err := OpenRuns(t.Context(), js, RunsConfig{}); err != nil {
		t.Fatal(err)
	}
	if got := maxBytes("KV_" + DefaultRunsBucket); got != DefaultRunsMaxBytes {
		t.Fatalf("runs bucket has max bytes %d", got)
	}
}
