package kvbucket_test

import (
	"context"
	"sync"
	"testing"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/lanefleet/lanefleet/internal/kvbucket"
	"github.com/lanefleet/lanefleet/internal/natstest"
)

// TestOpenRace: workers opening a missing bucket at once all get it, one
// creating it and the others binding to it; a bucket that exists is bound
// as it is.
func TestOpenRace(t *testing.T) {
	t.Parallel()
	srv := natstest.Start(t)
	js, err := jetstream.New(natstest.Connect(t, srv.URL))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	cfg := jetstream.KeyValueConfig{Bucket: "race", History: 3, Storage: jetstream.MemoryStorage}
	var wg sync.WaitGroup
	errs := make([]error, 8)
	for i := range errs {
		wg.Go(func() { _, errs[i] = kvbucket.Open(ctx, js, cfg) })
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("opener %d: %v", i, err)
		}
	}
	other := cfg
	other.History = 1
	kv, err := kvbucket.Open(ctx, js, other)
	if err != nil {
		t.Fatal(err)
	}
	st, err := kv.Status(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if st.History() != 3 {
		t.Fatalf("history %d: the existing bucket was not bound as it is", st.History())
	}
}
