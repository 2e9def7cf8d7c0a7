// Package kvbucket opens a JetStream key-value bucket that any worker of a
// fleet may be the first to create: one home for the bind, create, and
// bind-again-after-a-lost-race steps the stores (agentstore, authstore,
// budgetstore) each wrote out.
package kvbucket

import (
	"context"
	"errors"

	"github.com/nats-io/nats.go/jetstream"
)

// Open binds to the bucket cfg.Bucket, creating it with cfg when it is
// missing; when another worker creates it first, Open binds to theirs. An
// existing bucket is bound as it is, whatever cfg says. The error is the
// KV's, unwrapped: the caller says which store it is.
func Open(ctx context.Context, js jetstream.JetStream, cfg jetstream.KeyValueConfig) (jetstream.KeyValue, error) {
	kv, err := js.KeyValue(ctx, cfg.Bucket)
	if errors.Is(err, jetstream.ErrBucketNotFound) {
		kv, err = js.CreateKeyValue(ctx, cfg)
		if err != nil {
			// Another worker may have created it first. JetStream tells
			// the loser "already exists", or "insufficient storage
			// resources" when the store is reserved in full, so the error
			// alone does not tell (kvstore.RacedCreate): bind to see.
			if bound, berr := js.KeyValue(ctx, cfg.Bucket); berr == nil {
				return bound, nil
			}
		}
	}
	return kv, err
}
