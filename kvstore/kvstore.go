// Package kvstore is the lane store: the NATS adapter for Lanefleet's per-lane state: one
// JetStream KV bucket ("lanes") holding, for every lane token T,
//
//	T.lease      the owner's lease (per-key TTL; its revision is the fencing token)
//	T.cursor     the last processed inbound sequence and the turn in flight
//	T.tx.<seq>   one transcript record per inbound message (pi session entries)
//
// (The runs' step journals live in a stream of their own, StepsStream: see
// Journal.)
//
// Keeping all three in one stream lets every durable write of an owner carry
// the header Nats-Expected-Last-Subject-Sequence-Subject = T.lease: the server
// rejects the write when the lease has moved on, so a stale owner (a zombie
// after a GC pause or partition) can never write. Direct Get is disabled on a
// replicated bucket's stream so ownership decisions read from the stream
// leader (at one replica the leader is the only copy: see DirectGet).
package kvstore

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// Defaults.
const (
	DefaultBucket    = "lanes"
	DefaultLeaseTTL  = 30 * time.Second
	DefaultMarkerTTL = time.Minute
	// DefaultMaxBytes caps the lanes bucket: the largest share of a single
	// node's default 8 GiB store, so the transcripts are never what fills
	// it first.
	DefaultMaxBytes = 4 << 30
)

// Errors callers branch on.
var (
	// ErrHeld means another owner holds the lease (confirmed by a leader read).
	ErrHeld = errors.New("kvstore: lease held by another owner")
	// ErrLeaseLost means a renewal or fenced write was rejected because the
	// lease is no longer ours.
	ErrLeaseLost = errors.New("kvstore: lease lost")
)

// Config configures the lanes bucket.
type Config struct {
	Bucket    string        // default DefaultBucket
	Replicas  int           // default 1
	LeaseTTL  time.Duration // default DefaultLeaseTTL; at least 1s
	MarkerTTL time.Duration // how long delete markers live; default DefaultMarkerTTL
	// MaxBytes caps the bucket; default DefaultMaxBytes, -1 = none. A full
	// bucket refuses new writes (turns cannot commit) and keeps every record.
	MaxBytes int64
	// StepsMaxBytes caps the step journal stream (StepsStream); default
	// DefaultStepsMaxBytes, -1 = none. A full journal drops its oldest steps.
	StepsMaxBytes int64
}

func (c Config) withDefaults() Config {
	if c.Bucket == "" {
		c.Bucket = DefaultBucket
	}
	if c.Replicas == 0 {
		c.Replicas = 1
	}
	if c.LeaseTTL == 0 {
		c.LeaseTTL = DefaultLeaseTTL
	}
	if c.LeaseTTL < time.Second {
		c.LeaseTTL = time.Second
	}
	if c.MarkerTTL == 0 {
		c.MarkerTTL = DefaultMarkerTTL
	}
	switch {
	case c.MaxBytes == 0:
		c.MaxBytes = DefaultMaxBytes
	case c.MaxBytes < 0:
		c.MaxBytes = -1
	}
	switch {
	case c.StepsMaxBytes == 0:
		c.StepsMaxBytes = DefaultStepsMaxBytes
	case c.StepsMaxBytes < 0:
		c.StepsMaxBytes = -1
	}
	return c
}

// Lanes is the lanes bucket.
type Lanes struct {
	js     jetstream.JetStream
	kv     jetstream.KeyValue
	stream jetstream.Stream
	steps  jetstream.Stream // the step journals (nil for a reader bound to a fleet without one)
	cfg    Config
	prefix string // "$KV.<bucket>."
	// released: the lanes this process released, and their markers (see
	// Release); nil for a reader (Bind), which takes no lease.
	released *releasedRevs
	// testHookScan, when set (tests), runs in ScanBatch between its
	// consumer's count and its fetch.
	testHookScan func()
}

// Open creates the bucket when missing, makes sure its stream serves reads
// from the leader only, and binds to it; it creates or updates the step
// journal stream (StepsStream) too.
func Open(ctx context.Context, js jetstream.JetStream, cfg Config) (*Lanes, error) {
	cfg = cfg.withDefaults()
	_, err := js.KeyValue(ctx, cfg.Bucket)
	if errors.Is(err, jetstream.ErrBucketNotFound) {
		_, err = js.CreateKeyValue(ctx, jetstream.KeyValueConfig{
			Bucket:         cfg.Bucket,
			Description:    "Lanefleet lanes: leases, cursors, transcripts",
			History:        1,
			Storage:        jetstream.FileStorage,
			Replicas:       cfg.Replicas,
			LimitMarkerTTL: cfg.MarkerTTL,
			MaxBytes:       cfg.MaxBytes,
		})
		if err != nil && RacedCreate(err, func() error { _, err := js.KeyValue(ctx, cfg.Bucket); return err }) {
			err = nil // another worker created it first
		}
	}
	if err != nil {
		return nil, fmt.Errorf("kvstore: open bucket %s: %w", cfg.Bucket, err)
	}
	streamName := "KV_" + cfg.Bucket
	stream, err := configureStream(ctx, js, streamName, cfg.MaxBytes, DirectGet(cfg.Replicas))
	if err != nil {
		return nil, err
	}
	steps, err := ensureSteps(ctx, js, cfg)
	if err != nil {
		return nil, err
	}
	kv, err := js.KeyValue(ctx, cfg.Bucket)
	if err != nil {
		return nil, fmt.Errorf("kvstore: bind bucket %s: %w", cfg.Bucket, err)
	}
	return &Lanes{js: js, kv: kv, stream: stream, steps: steps, cfg: cfg, prefix: "$KV." + cfg.Bucket + ".", released: &releasedRevs{}}, nil
}

// DirectGet says whether a stream or bucket of this many replicas serves
// reads by Direct Get; the one rule for the fleet's streams. Reads that
// decide ownership must come from the stream leader: on a replicated
// stream Direct Get may be answered by a lagging follower, so it stays off
// there. An R1 stream has one copy, the leader, so Direct Get reads exactly
// what GetMsg through the JetStream API would, without the JSON API (about
// half the server's work of a read) and without the queue where API
// requests wait for the server's few API goroutines (GOMAXPROCS of them)
// behind every other, which held 1,000 turns in flight back.
func DirectGet(replicas int) bool { return replicas <= 1 }

// configureStream sets Direct Get on a bucket's stream as DirectGet says,
// so Get and GetMsg are answered by the stream leader and never by a
// lagging replica, and sets its byte limit (a bucket made before it had
// one gets it here).
func configureStream(ctx context.Context, js jetstream.JetStream, name string, maxBytes int64, direct bool) (jetstream.Stream, error) {
	s, err := js.Stream(ctx, name)
	if err != nil {
		return nil, fmt.Errorf("kvstore: stream %s: %w", name, err)
	}
	info := s.CachedInfo()
	if info.Config.AllowDirect == direct && info.Config.MaxBytes == maxBytes {
		return s, nil
	}
	cfg := info.Config
	cfg.AllowDirect = direct
	cfg.MaxBytes = maxBytes
	if _, err := js.UpdateStream(ctx, cfg); err != nil {
		return nil, fmt.Errorf("kvstore: configure %s: %w", name, err)
	}
	return js.Stream(ctx, name)
}

// LeaseTTL returns the configured lease lifetime.
func (l *Lanes) LeaseTTL() time.Duration { return l.cfg.LeaseTTL }

// Stream returns the bucket's underlying stream.
func (l *Lanes) Stream() jetstream.Stream { return l.stream }

func leaseKey(token string) string              { return token + ".lease" }
func recordKey(token string, seq uint64) string { return fmt.Sprintf("%s.tx.%d", token, seq) }

// isWrongLastSeq reports a failed expected-sequence check (10071 on R1,
// 10164 on replicated streams).
func isWrongLastSeq(err error) bool {
	var apiErr *jetstream.APIError
	if errors.As(err, &apiErr) {
		return apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequence || apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequenceConstant
	}
	return errors.Is(err, jetstream.ErrKeyExists) || errors.Is(err, jetstream.ErrKeyRevisionMismatch)
}

// Bind binds to an existing lanes bucket without creating or changing it,
// for readers such as clients printing a transcript.
func Bind(ctx context.Context, js jetstream.JetStream, bucket string) (*Lanes, error) {
	if bucket == "" {
		bucket = DefaultBucket
	}
	kv, err := js.KeyValue(ctx, bucket)
	if err != nil {
		return nil, fmt.Errorf("kvstore: bind bucket %s: %w", bucket, err)
	}
	stream, err := js.Stream(ctx, "KV_"+bucket)
	if err != nil {
		return nil, fmt.Errorf("kvstore: bind bucket %s: %w", bucket, err)
	}
	steps, err := js.Stream(ctx, StepsStream)
	if err != nil && !errors.Is(err, jetstream.ErrStreamNotFound) {
		return nil, fmt.Errorf("kvstore: bind %s: %w", StepsStream, err)
	}
	cfg := Config{Bucket: bucket}.withDefaults()
	return &Lanes{js: js, kv: kv, stream: stream, steps: steps, cfg: cfg, prefix: "$KV." + bucket + "."}, nil
}

// sealKey holds the fleet's seal key (SealKey), which no lane key can be
// (every lane key has a dot), so the retention pass never sees it.
const sealKey = "seal"

// SealKey returns the fleet's seal key: 32 random bytes the first worker
// stores in the bucket (create-only, so every worker reads the same) and
// that only workers and the admin role may read (the permission model
// opens the bucket to nobody else). Workers seal with it what only the
// fleet may say: a sub-agent's spawn lineage and its completion (package
// subagent).
func (l *Lanes) SealKey(ctx context.Context) ([]byte, error) {
	for range 3 {
		e, err := l.kv.Get(ctx, sealKey)
		if err == nil {
			if v := e.Value(); len(v) == sealKeyBytes {
				return slices.Clone(v), nil
			}
			return nil, fmt.Errorf("kvstore: the fleet's seal key (%s key %q) is %d bytes, want %d: %w", l.cfg.Bucket, sealKey, len(e.Value()), sealKeyBytes, ErrCorrupt)
		}
		if !errors.Is(err, jetstream.ErrKeyNotFound) {
			return nil, fmt.Errorf("kvstore: read the fleet's seal key: %w", err)
		}
		key := make([]byte, sealKeyBytes)
		_, _ = rand.Read(key) // crypto/rand.Read never fails (Go 1.24+)
		if _, err := l.kv.Create(ctx, sealKey, key); err == nil {
			return key, nil
		} else if !errors.Is(err, jetstream.ErrKeyExists) {
			return nil, fmt.Errorf("kvstore: store the fleet's seal key: %w", err)
		}
		// Another worker stored one first: read it.
	}
	return nil, errors.New("kvstore: the fleet's seal key: created and gone three times")
}

// sealKeyBytes is the seal key's length (subagent.KeyBytes).
const sealKeyBytes = 32
