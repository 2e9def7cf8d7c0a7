package agentstore

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/lanefleet/lanefleet/agents"
	"github.com/lanefleet/lanefleet/internal/kvbucket"
)

// Defaults.
const (
	// DefaultBucket is the KV bucket of the definitions.
	DefaultBucket = "agents"
	// DefaultFilesBucket is the object store of the workspaces' files.
	DefaultFilesBucket = "agent-files"
	// DefaultMaxBytes caps the definitions' bucket.
	DefaultMaxBytes = 16 << 20
	// DefaultFilesMaxBytes caps the files' object store.
	DefaultFilesMaxBytes = 64 << 20
	// MaxAgents bounds the agents List reads (and a worker caches).
	MaxAgents = 10000
)

// ErrNotFound is returned for an agent or a file that does not exist.
var ErrNotFound = errors.New("agentstore: not found")

// BucketConfig configures the buckets.
type BucketConfig struct {
	Bucket        string // default DefaultBucket
	FilesBucket   string // default DefaultFilesBucket
	Replicas      int    // when a bucket is created; default 1
	MaxBytes      int64  // the definitions' bucket; default DefaultMaxBytes, -1 = none
	FilesMaxBytes int64  // the files' object store; default DefaultFilesMaxBytes, -1 = none
}

func (c BucketConfig) withDefaults() BucketConfig {
	if c.Bucket == "" {
		c.Bucket = DefaultBucket
	}
	if c.FilesBucket == "" {
		c.FilesBucket = DefaultFilesBucket
	}
	c.Replicas = max(c.Replicas, 1)
	if c.MaxBytes == 0 {
		c.MaxBytes = DefaultMaxBytes
	}
	if c.FilesMaxBytes == 0 {
		c.FilesMaxBytes = DefaultFilesMaxBytes
	}
	return c
}

// Bucket is the definitions' bucket.
type Bucket struct {
	kv  jetstream.KeyValue
	cfg BucketConfig
}

// OpenBucket creates the definitions' bucket when it is missing, or binds
// to it. It returns the KV error, wrapped.
func OpenBucket(ctx context.Context, js jetstream.JetStream, cfg BucketConfig) (*Bucket, error) {
	cfg = cfg.withDefaults()
	kv, err := kvbucket.Open(ctx, js, jetstream.KeyValueConfig{
		Bucket:       cfg.Bucket,
		Description:  "Lanefleet named agents: one definition per agent id",
		History:      5,
		Storage:      jetstream.FileStorage,
		Replicas:     cfg.Replicas,
		MaxBytes:     cfg.MaxBytes,
		MaxValueSize: agents.MaxRecordBytes,
	})
	if err != nil {
		return nil, fmt.Errorf("agentstore: open bucket %s: %w", cfg.Bucket, err)
	}
	return &Bucket{kv: kv, cfg: cfg}, nil
}

// Put stores a definition (validated first: errors wrap agents.ErrInvalid)
// and returns its revision.
func (b *Bucket) Put(ctx context.Context, a *agents.Agent) (uint64, error) {
	rec, err := agents.Encode(a)
	if err != nil {
		return 0, err
	}
	rev, err := b.kv.Put(ctx, a.ID, rec)
	if err != nil {
		return 0, fmt.Errorf("agentstore: put %s: %w", a.ID, err)
	}
	return rev, nil
}

// Get reads a definition and its revision; ErrNotFound when there is none.
// A stored record that does not decode returns its agents.ErrInvalid
// error.
func (b *Bucket) Get(ctx context.Context, id string) (*agents.Agent, uint64, error) {
	if err := agents.ValidID(id); err != nil {
		return nil, 0, err
	}
	e, err := b.kv.Get(ctx, id)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return nil, 0, fmt.Errorf("%w: agent %s", ErrNotFound, id)
	}
	if err != nil {
		return nil, 0, fmt.Errorf("agentstore: get %s: %w", id, err)
	}
	a, err := decodeEntry(e.Key(), e.Value())
	if err != nil {
		return nil, e.Revision(), err
	}
	return a, e.Revision(), nil
}

// decodeEntry decodes a bucket entry, refusing a record stored under
// another agent's key.
func decodeEntry(key string, v []byte) (*agents.Agent, error) {
	a, err := agents.Decode(v)
	if err != nil {
		return nil, fmt.Errorf("agentstore: agent %.80q: %w", key, err)
	}
	if a.ID != key {
		return nil, fmt.Errorf("agentstore: agent %.80q: %w: the record is agent %q's", key, agents.ErrInvalid, a.ID)
	}
	return a, nil
}

// List reads every definition (at most MaxAgents), sorted by id. A record
// that does not decode is left out and its error returned in bad.
func (b *Bucket) List(ctx context.Context) (list []*agents.Agent, bad []error, err error) {
	keys, err := b.kv.ListKeys(ctx)
	if err != nil {
		return nil, nil, fmt.Errorf("agentstore: list: %w", err)
	}
	var ids []string
	for k := range keys.Keys() {
		if len(ids) < MaxAgents {
			ids = append(ids, k)
		}
	}
	slices.Sort(ids)
	for _, id := range ids {
		a, _, err := b.Get(ctx, id)
		switch {
		case errors.Is(err, ErrNotFound):
		case errors.Is(err, agents.ErrInvalid):
			bad = append(bad, err)
		case err != nil:
			return nil, nil, err
		default:
			list = append(list, a)
		}
	}
	return list, bad, nil
}

// Delete removes a definition; ErrNotFound when there is none. Its
// workspace's files stay (another agent may share them; Files.Delete
// removes them).
func (b *Bucket) Delete(ctx context.Context, id string) error {
	if err := agents.ValidID(id); err != nil {
		return err
	}
	if _, err := b.kv.Get(ctx, id); errors.Is(err, jetstream.ErrKeyNotFound) {
		return fmt.Errorf("%w: agent %s", ErrNotFound, id)
	}
	if err := b.kv.Delete(ctx, id); err != nil {
		return fmt.Errorf("agentstore: delete %s: %w", id, err)
	}
	return nil
}
