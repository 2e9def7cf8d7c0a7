package authstore

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"

	"github.com/lanefleet/lanefleet/authprofile"
	"github.com/lanefleet/lanefleet/events"
	"github.com/lanefleet/lanefleet/internal/kvbucket"
)

// Defaults.
const (
	// DefaultBucket is the KV bucket holding auth-profile state.
	DefaultBucket = "auth"
	// DefaultMaxBytes caps the bucket: far more than the state of every
	// profile and model of a fleet.
	DefaultMaxBytes = 64 << 20
	// DefaultMaxAttempts bounds the compare-and-swap attempts of one update.
	DefaultMaxAttempts = 20
)

// publishEvery bounds how many watched changes wait for one publish.
const publishEvery = 64

// Key prefixes in the bucket.
const (
	profilePrefix = "p."
	goodPrefix    = "good."
)

// Errors callers branch on.
var (
	// ErrConflict means an update lost the compare-and-swap race
	// Config.MaxAttempts times in a row; the state was not changed.
	ErrConflict = errors.New("authstore: too many concurrent updates")
	// ErrClosed is returned by updates on a closed Store.
	ErrClosed = errors.New("authstore: store closed")
)

// limitBucket gives a bucket made before it had a byte limit its limit.
func limitBucket(ctx context.Context, js jetstream.JetStream, stream string, maxBytes int64) error {
	s, err := js.Stream(ctx, stream)
	if err != nil {
		return err
	}
	cfg := s.CachedInfo().Config
	if cfg.MaxBytes == maxBytes {
		return nil
	}
	cfg.MaxBytes = maxBytes
	_, err = js.UpdateStream(ctx, cfg)
	return err
}

// Config configures a Store.
type Config struct {
	// Bucket is the KV bucket; default DefaultBucket.
	Bucket string
	// Replicas of the bucket when Open creates it; default 1.
	Replicas int
	// MaxBytes caps the bucket; default DefaultMaxBytes, -1 = none. A full
	// bucket refuses new state (a run then keeps going without recording
	// its cooldown) and keeps what it holds.
	MaxBytes int64
	// Auth is the auth configuration and fleet policy every decision and
	// every Apply uses (authprofile.Config; FleetDefaults for the fleet).
	Auth authprofile.Config
	// MaxAttempts bounds the compare-and-swap attempts of one update;
	// default DefaultMaxAttempts.
	MaxAttempts int
	// Logger receives warnings about unreadable bucket entries and a stopped
	// watcher; the zero value (like zerolog.Nop()) discards them.
	Logger zerolog.Logger
	// Now is the clock; default time.Now.
	Now func() time.Time
}

func (c Config) withDefaults() Config {
	if c.Bucket == "" {
		c.Bucket = DefaultBucket
	}
	if c.Replicas <= 0 {
		c.Replicas = 1
	}
	switch {
	case c.MaxBytes == 0:
		c.MaxBytes = DefaultMaxBytes
	case c.MaxBytes < 0:
		c.MaxBytes = -1
	}
	if c.MaxAttempts <= 0 {
		c.MaxAttempts = DefaultMaxAttempts
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	return c
}

// Store is the fleet's auth-profile state: a KV bucket and an in-memory copy
// of it that a watcher keeps current. It is safe for concurrent use.
type Store struct {
	kv  jetstream.KeyValue
	cfg Config
	log zerolog.Logger

	cache cache
	locks [64]chan struct{} // per-key stripes: local writers queue instead of racing

	watcher jetstream.KeyWatcher
	cancel  context.CancelFunc // ends the watcher's context
	done    chan struct{}      // closed when the watch loop has returned
	closing atomic.Bool
	stop    sync.Once

	conflicts atomic.Int64 // lost compare-and-swaps, for tests and benchmarks
}

// Open creates the bucket when it is missing (or binds to it), loads every
// entry and starts watching the bucket. It returns once the initial load is
// complete, so the Store already knows every state the bucket held. Close
// stops the watcher. Open returns the KV error, wrapped, when the bucket
// cannot be created, bound or watched, and ctx's cause when ctx ends first.
func Open(ctx context.Context, js jetstream.JetStream, cfg Config) (*Store, error) {
	cfg = cfg.withDefaults()
	kv, err := kvbucket.Open(ctx, js, jetstream.KeyValueConfig{
		Bucket:      cfg.Bucket,
		Description: "Lanefleet auth-profile state: cooldowns, disables, counters, last good",
		History:     1,
		Storage:     jetstream.FileStorage,
		Replicas:    cfg.Replicas,
		MaxBytes:    cfg.MaxBytes,
	})
	if err == nil {
		err = limitBucket(ctx, js, "KV_"+cfg.Bucket, cfg.MaxBytes)
	}
	if err != nil {
		return nil, fmt.Errorf("authstore: open bucket %s: %w", cfg.Bucket, err)
	}
	s := &Store{
		kv:   kv,
		cfg:  cfg,
		log:  cfg.Logger.With().Str("bucket", cfg.Bucket).Logger(),
		done: make(chan struct{}),
	}
	s.cache.init()
	for i := range s.locks {
		s.locks[i] = make(chan struct{}, 1)
	}

	// nats.go unsubscribes a watcher when its context ends (and keeps the
	// context for recreating the consumer), so the watcher's context must
	// outlive ctx, which only bounds the opening.
	wctx, cancel := context.WithCancel(context.Background())
	detach := context.AfterFunc(ctx, cancel)
	w, err := kv.WatchAll(wctx)
	if err != nil {
		cancel()
		return nil, fmt.Errorf("authstore: watch bucket %s: %w", cfg.Bucket, err)
	}
	s.watcher, s.cancel = w, cancel
	if err := s.load(ctx); err != nil {
		_ = w.Stop()
		for range w.Updates() { // closed once the subscription is gone
		}
		cancel()
		return nil, err
	}
	go s.watch()
	if !detach() { // ctx ended, and with it the watcher's context
		_ = s.Close()
		return nil, fmt.Errorf("authstore: open bucket %s: %w", cfg.Bucket, context.Cause(ctx))
	}
	return s, nil
}

// load consumes the watcher's initial values up to its end marker and
// publishes them at once.
func (s *Store) load(ctx context.Context) error {
	for {
		select {
		case e, ok := <-s.watcher.Updates():
			if !ok {
				return fmt.Errorf("authstore: load bucket %s: watcher closed", s.cfg.Bucket)
			}
			if e == nil {
				s.cache.publish()
				return nil
			}
			s.observe(e)
		case <-ctx.Done():
			return fmt.Errorf("authstore: load bucket %s: %w", s.cfg.Bucket, context.Cause(ctx))
		}
	}
}

// watch applies the bucket's changes until the watcher is stopped. Changes
// arriving in a burst are published together, at least every
// publishEvery changes.
func (s *Store) watch() {
	defer close(s.done)
	updates := s.watcher.Updates()
	pending := 0
	for e := range updates {
		if e == nil {
			continue
		}
		s.observe(e)
		if pending++; pending >= publishEvery || len(updates) == 0 {
			s.cache.publish()
			pending = 0
		}
	}
	s.cache.publish()
	if !s.closing.Load() {
		s.log.Warn().Msg("authstore: watcher stopped; other workers' changes are no longer seen")
	}
}

// Closing tells the Store it is about to be closed: its watcher ending
// from now on (its connection closed first) is not reported as a loss.
func (s *Store) Closing() { s.closing.Store(true) }

// Close stops the watcher and waits for it. The Store's in-memory states
// stay readable; updates return ErrClosed.
func (s *Store) Close() error {
	s.stop.Do(func() {
		s.closing.Store(true)
		_ = s.watcher.Stop() // fails only when the connection is already closed, which stops it too
	})
	<-s.done
	s.cancel()
	return nil
}

// observe records one bucket entry from the watcher.
func (s *Store) observe(e jetstream.KeyValueEntry) {
	key, rev := e.Key(), e.Revision()
	deleted := e.Operation() != jetstream.KeyValuePut
	switch {
	case strings.HasPrefix(key, profilePrefix):
		id, err := events.TokenKey(key[len(profilePrefix):])
		if err != nil {
			s.log.Warn().Str("key", key).Uint64("revision", rev).Err(err).Msg("authstore: skipping entry with an unreadable profile key")
			return
		}
		var st authprofile.State
		if !deleted {
			st, err = decodeState(e.Value())
			if err != nil {
				// Writers treat such a value as an empty state and overwrite
				// it, so readers do the same.
				s.log.Warn().Str("profile", id).Uint64("revision", rev).Int("bytes", len(e.Value())).Err(err).
					Msg("authstore: malformed profile state in bucket; treating it as empty")
			}
		}
		s.cache.setState(key, id, st, rev)
	case strings.HasPrefix(key, goodPrefix):
		prov, err := events.TokenKey(key[len(goodPrefix):])
		if err != nil {
			s.log.Warn().Str("key", key).Uint64("revision", rev).Err(err).Msg("authstore: skipping entry with an unreadable provider key")
			return
		}
		var id string
		if !deleted {
			if err := json.Unmarshal(e.Value(), &id); err != nil {
				s.log.Warn().Str("provider", prov).Uint64("revision", rev).Int("bytes", len(e.Value())).Err(err).
					Msg("authstore: malformed last-good entry in bucket; ignoring it")
				id = ""
			}
		}
		s.cache.setGood(key, prov, id, rev)
	case strings.HasPrefix(key, oauthPrefix):
		// OAuth tokens (LoadOAuth) are read from the bucket when used,
		// never kept or logged here.
	default:
		s.log.Warn().Str("key", key).Uint64("revision", rev).Msg("authstore: skipping unknown key in bucket")
	}
}

// decodeState reads a stored State. JSON null is the empty state.
func decodeState(data []byte) (authprofile.State, error) {
	var st authprofile.State
	if err := json.Unmarshal(data, &st); err != nil {
		return authprofile.State{}, err
	}
	return st, nil
}

// view is one published, immutable copy of the bucket's contents.
type view struct {
	usage map[string]authprofile.State // profile id → state
	good  map[string]string            // provider → profile id
}

// cache is the in-memory copy of the bucket. Writers (the watcher and local
// updates) change private maps under mu and publish them as an immutable
// view; readers load the view without locking. A map is cloned before the
// first change after it was published (copy on write), so readers never see
// a change in progress.
type cache struct {
	mu     sync.Mutex
	revs   map[string]uint64 // bucket key → newest revision seen, deletes included
	usage  map[string]authprofile.State
	good   map[string]string
	shared bool          // usage and good are published: clone before changing
	dirty  bool          // changed since the last publish
	notify chan struct{} // closed at the next publish

	view atomic.Pointer[view]
}

func (c *cache) init() {
	c.revs = map[string]uint64{}
	c.usage = map[string]authprofile.State{}
	c.good = map[string]string{}
	c.notify = make(chan struct{})
	c.view.Store(&view{usage: c.usage, good: c.good})
	c.shared = true
}

// fresh reports whether rev is newer than what the cache holds for key; the
// caller holds mu. The watcher may deliver an entry after a local update
// already recorded a newer revision of the same key.
func (c *cache) fresh(key string, rev uint64) bool {
	if rev <= c.revs[key] {
		return false
	}
	c.revs[key] = rev
	if c.shared {
		c.usage = maps.Clone(c.usage)
		c.good = maps.Clone(c.good)
		c.shared = false
	}
	c.dirty = true
	return true
}

// setState records profile id's state at revision rev (a zero State for a
// deleted key).
func (c *cache) setState(key, id string, st authprofile.State, rev uint64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.fresh(key, rev) {
		return
	}
	if isZero(st) {
		delete(c.usage, id)
	} else {
		c.usage[id] = st
	}
}

// setGood records provider prov's last good profile ("" = none).
func (c *cache) setGood(key, prov, id string, rev uint64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.fresh(key, rev) {
		return
	}
	if id == "" {
		delete(c.good, prov)
	} else {
		c.good[prov] = id
	}
}

// publish makes the changes visible to readers and wakes waiters.
func (c *cache) publish() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.dirty {
		return
	}
	c.view.Store(&view{usage: c.usage, good: c.good})
	c.shared, c.dirty = true, false
	close(c.notify)
	c.notify = make(chan struct{})
}

// entry returns the cached state of key with its revision (0 = never seen).
func (c *cache) entry(key, id string) (authprofile.State, uint64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.usage[id], c.revs[key]
}

// revision returns the newest revision seen for key and a channel closed at
// the next publish.
func (c *cache) revision(key string) (uint64, <-chan struct{}) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.revs[key], c.notify
}

func isZero(st authprofile.State) bool {
	return st.LastUsed == 0 && st.CooldownUntil == 0 && st.DisabledUntil == 0 && st.DisabledReason == "" &&
		st.ErrorCount == 0 && len(st.FailureCounts) == 0 && st.LastFailureAt == 0 && len(st.Models) == 0 &&
		st.LastProbeAt == 0 && st.FailedRun == "" && st.RetryUntil == 0
}

// profileKey is the bucket key of a profile's state.
func profileKey(id string) (string, error) {
	tok, err := events.KeyToken(id)
	if err != nil {
		return "", fmt.Errorf("authstore: profile id %q: %w", id, err)
	}
	return profilePrefix + tok, nil
}

// goodKey is the bucket key of a provider's last good profile.
func goodKey(prov string) (string, error) {
	tok, err := events.KeyToken(prov)
	if err != nil {
		return "", fmt.Errorf("authstore: provider %q: %w", prov, err)
	}
	return goodPrefix + tok, nil
}
