package kvstore

import (
	"bytes"
	"errors"
	"sync"
	"testing"
	"time"
)

// TestSealKey: workers that read the seal key at once, none stored yet,
// all get the same 32 bytes (the first store wins), and read them again
// later; a seal key of the wrong length is refused as corrupt, never
// replaced (replacing it would void every seal in flight).
func TestSealKey(t *testing.T) {
	t.Parallel()
	b := setup(t, time.Minute)
	const workers = 8
	keys := make([][]byte, workers)
	errs := make([]error, workers)
	var wg sync.WaitGroup
	for i := range workers {
		wg.Go(func() { keys[i], errs[i] = b.lanes.SealKey(t.Context()) })
	}
	wg.Wait()
	for i := range workers {
		if errs[i] != nil {
			t.Fatal(errs[i])
		}
		if len(keys[i]) != sealKeyBytes || !bytes.Equal(keys[i], keys[0]) {
			t.Fatalf("worker %d read %x, worker 0 %x", i, keys[i], keys[0])
		}
	}
	if again, err := b.lanes.SealKey(t.Context()); err != nil || !bytes.Equal(again, keys[0]) {
		t.Fatalf("read again: %x, %v", again, err)
	}
	if _, err := b.lanes.kv.Put(t.Context(), sealKey, []byte("short")); err != nil {
		t.Fatal(err)
	}
	if _, err := b.lanes.SealKey(t.Context()); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("a 5-byte key: %v, want ErrCorrupt", err)
	}
}
