package authstore

import (
	"context"
	"testing"

	"github.com/nats-io/nats.go/jetstream"
)

// TestBucketLimit: the auth bucket gets its byte limit when created, and a
// bucket made without one gets it when opened.
func TestBucketLimit(t *testing.T) {
	t.Parallel()
	b := setup(t)
	js := b.js(t)
	if _, err := js.CreateKeyValue(context.Background(), jetstream.KeyValueConfig{Bucket: DefaultBucket}); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct{ cfg, want int64 }{{0, DefaultMaxBytes}, {1 << 20, 1 << 20}, {-1, -1}} {
		s := b.open(t, Config{MaxBytes: c.cfg})
		st, err := js.Stream(context.Background(), "KV_"+DefaultBucket)
		if err != nil {
			t.Fatal(err)
		}
		if got := st.CachedInfo().Config.MaxBytes; got != c.want {
			t.Fatalf("MaxBytes %d: bucket max bytes %d, want %d", c.cfg, got, c.want)
		}
		_ = s.Close()
	}
}
