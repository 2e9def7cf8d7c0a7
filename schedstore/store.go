package schedstore

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/lanefleet/lanefleet/kvstore"
	"github.com/lanefleet/lanefleet/schedule"
)

// Names of the schedules' bucket, stream, subjects and consumer.
const (
	DefaultBucket = "schedules"
	Stream        = "AGENT_SCHED"
	// TimerPrefix opens the subject of a schedule's pending server
	// message schedule: agent.sched.at.<id>.
	TimerPrefix = "agent.sched.at."
	// FirePrefix opens the subject the server publishes a due schedule
	// on: agent.sched.fire.<id>.
	FirePrefix = "agent.sched.fire."
	// SubjectPrefix covers both.
	SubjectPrefix = "agent.sched."
	ConsumerName  = "schedules"
)

// Defaults.
const (
	DefaultMaxBytes = 64 << 20 // the bucket
	// MaxSchedules bounds how many schedules a fleet holds (Add refuses
	// more with ErrFull).
	MaxSchedules = 10_000
	// maxStreamMsg bounds a message of AGENT_SCHED (a timer or a firing:
	// the schedule id and the schedule headers).
	maxStreamMsg = 512
	// streamMaxBytes bounds AGENT_SCHED: a timer and a firing message per
	// schedule. Message schedules require DiscardOld, so the bound must
	// never be reached: it fits MaxSchedules of each with room to spare.
	streamMaxBytes = 4 * MaxSchedules * maxStreamMsg
	// ackWait is how long a firing waits on a worker that took it and
	// went silent before another worker gets it: a live handler renews it
	// (InProgress) while it works. Far below the inbound stream's
	// de-duplication window, so a firing sent again after a crash is
	// still a duplicate. It was 30 s without renewal, so a SIGKILLed
	// worker's firing came back 30 s late.
	ackWait = 5 * time.Second
	// historyRoom is what Add keeps free in a new record for a full
	// history (HistoryLen firings, each well under 2 KiB: a session key
	// and an error), so recording a firing never outgrows the record.
	historyRoom = schedule.HistoryLen * 2048
)

// Errors callers branch on.
var (
	// ErrNotFound means no schedule has the id.
	ErrNotFound = errors.New("schedstore: no such schedule")
	// ErrFull means the fleet holds MaxSchedules schedules.
	ErrFull = errors.New("schedstore: the fleet holds the most schedules it may")
	// ErrNoSchedules means no worker has made the schedules' bucket and
	// stream (every worker runs with --no-schedules, or none ran yet).
	ErrNoSchedules = errors.New("schedstore: this fleet keeps no schedules (start a worker without --no-schedules)")
	// ErrUnsupported means the NATS server has no message schedules
	// (before 2.12).
	ErrUnsupported = errors.New("schedstore: the NATS server does not support message schedules (nats-server 2.12 or later)")
)

// Config configures the bucket and the stream.
type Config struct {
	Bucket   string // default DefaultBucket
	Replicas int    // default 1
	MaxBytes int64  // the bucket; 0 = DefaultMaxBytes, -1 = none
	// Now is the clock (default time.Now).
	Now func() time.Time
}

func (c Config) withDefaults() Config {
	if c.Bucket == "" {
		c.Bucket = DefaultBucket
	}
	if c.Replicas == 0 {
		c.Replicas = 1
	}
	if c.MaxBytes == 0 {
		c.MaxBytes = DefaultMaxBytes
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	return c
}

// Store is the schedules' bucket and stream.
type Store struct {
	js     jetstream.JetStream
	kv     jetstream.KeyValue
	stream jetstream.Stream
	now    func() time.Time
}

// Open creates or binds the bucket and the stream. It is safe to call
// from every worker and client.
func Open(ctx context.Context, js jetstream.JetStream, cfg Config) (*Store, error) {
	cfg = cfg.withDefaults()
	kv, err := ensureBucket(ctx, js, jetstream.KeyValueConfig{
		Bucket:       cfg.Bucket,
		Description:  "Lanefleet schedules: one record per schedule",
		History:      1,
		Replicas:     cfg.Replicas,
		MaxBytes:     cfg.MaxBytes,
		MaxValueSize: schedule.MaxRecordBytes,
		Storage:      jetstream.FileStorage,
	})
	if err != nil {
		return nil, fmt.Errorf("schedstore: bucket %s: %w", cfg.Bucket, err)
	}
	// Not updated when it already has this configuration (EnsureStream):
	// every worker opens the store at start.
	st, err := kvstore.EnsureStream(ctx, js, jetstream.StreamConfig{
		Name:        Stream,
		Description: "Lanefleet schedule timers (server message schedules) and their firings",
		Subjects:    []string{SubjectPrefix + ">"},
		Retention:   jetstream.LimitsPolicy,
		Storage:     jetstream.FileStorage,
		Replicas:    cfg.Replicas,
		MaxBytes:    streamMaxBytes,
		// A timer and a firing message per schedule, each replacing the
		// last (rollups): the stream never holds more, so its bound
		// (which drops the oldest: message schedules require DiscardOld)
		// is never reached while Add keeps to MaxSchedules.
		AllowRollup:       true,
		AllowMsgSchedules: true,
		Discard:           jetstream.DiscardOld,
		MaxMsgSize:        maxStreamMsg,
	})
	if err != nil {
		return nil, fmt.Errorf("schedstore: stream %s: %w", Stream, err)
	}
	if info := st.CachedInfo(); info != nil && !info.Config.AllowMsgSchedules {
		return nil, ErrUnsupported // an older server dropped the field
	}
	return &Store{js: js, kv: kv, stream: st, now: cfg.Now}, nil
}

// ensureBucket opens the bucket cfg describes, creating it, or updating
// it when its configuration differs in what cfg sets. An update is not
// sent for nothing: every worker opens the store at start, and an update
// rewrites the bucket stream's store configuration under the consumers
// other workers are making (nats-server v2.15.2 raced
// fileStore.UpdateConfig against a consumer's store being made, seen
// under -race in this package's two-worker tests).
func ensureBucket(ctx context.Context, js jetstream.JetStream, cfg jetstream.KeyValueConfig) (jetstream.KeyValue, error) {
	if kv, err := js.KeyValue(ctx, cfg.Bucket); err == nil {
		if st, err := kv.Status(ctx); err == nil && sameBucket(cfg, st.Config()) {
			return kv, nil
		}
	}
	return js.CreateOrUpdateKeyValue(ctx, cfg)
}

// sameBucket reports whether a bucket configured as have already has
// what cfg sets (the server's defaults for what cfg leaves zero).
func sameBucket(cfg, have jetstream.KeyValueConfig) bool {
	orDefault := func(v, def int64) int64 {
		if v == 0 {
			return def
		}
		return v
	}
	return have.Description == cfg.Description && have.History == max(cfg.History, 1) &&
		have.Replicas == max(cfg.Replicas, 1) && have.Storage == cfg.Storage &&
		have.MaxBytes == orDefault(cfg.MaxBytes, -1) && int64(have.MaxValueSize) == orDefault(int64(cfg.MaxValueSize), -1) &&
		have.TTL == cfg.TTL
}

// Bind opens the bucket and stream the workers made (a client's way in:
// it never changes their configuration). ErrNoSchedules when they do not
// exist.
func Bind(ctx context.Context, js jetstream.JetStream, cfg Config) (*Store, error) {
	cfg = cfg.withDefaults()
	kv, err := js.KeyValue(ctx, cfg.Bucket)
	if errors.Is(err, jetstream.ErrBucketNotFound) {
		return nil, fmt.Errorf("%w: no bucket %s", ErrNoSchedules, cfg.Bucket)
	}
	if err != nil {
		return nil, fmt.Errorf("schedstore: bucket %s: %w", cfg.Bucket, err)
	}
	st, err := js.Stream(ctx, Stream)
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		return nil, fmt.Errorf("%w: no stream %s", ErrNoSchedules, Stream)
	}
	if err != nil {
		return nil, fmt.Errorf("schedstore: stream %s: %w", Stream, err)
	}
	return &Store{js: js, kv: kv, stream: st, now: cfg.Now}, nil
}

// newID returns a fresh schedule id: 20 hex digits.
func newID() string {
	var b [10]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// Add stores a new schedule and arms its first firing. The caller fills
// the target, spec, policies and message; Add sets the id, the secret,
// the creation and last-handled times (now: nothing before it is due) and
// the next due time. An @every schedule counts from now rounded up to a
// second. Errors wrap schedule.ErrBadRecord (and ErrBadSpec) for an
// invalid schedule.
func (s *Store) Add(ctx context.Context, sc *schedule.Schedule) (*schedule.Schedule, error) {
	now := s.now()
	c := *sc
	c.ID = newID()
	var secret [16]byte
	_, _ = rand.Read(secret[:])
	c.Secret = hex.EncodeToString(secret[:])
	c.CreatedMs = now.UnixMilli()
	c.LastDueMs = now.UnixMilli()
	c.History, c.LastRun, c.LastSession = nil, "", ""
	if c.Spec.EveryMs > 0 {
		c.Spec.AnchorMs = ceilSecond(now).UnixMilli()
	}
	if c.Spec.AtMs > 0 && !time.UnixMilli(c.Spec.AtMs).After(now) {
		return nil, fmt.Errorf("%w: @at %s is not in the future", schedule.ErrBadSpec, time.UnixMilli(c.Spec.AtMs).UTC().Format(time.RFC3339))
	}
	tm, err := c.Spec.Compile()
	if err != nil {
		return nil, err
	}
	next, ok := tm.Next(now)
	if !ok {
		return nil, fmt.Errorf("%w: %s never fires", schedule.ErrBadSpec, c.Spec)
	}
	c.NextMs = next.UnixMilli()
	b, err := c.Encode()
	if err != nil {
		return nil, err
	}
	if len(b) > schedule.MaxRecordBytes-historyRoom {
		// Else its first firings would be sent, then refused by the
		// record write (ErrBadRecord), unrecorded and never re-armed.
		return nil, fmt.Errorf("%w: %d bytes stored (at most %d, room for the history kept)", schedule.ErrBadRecord, len(b), schedule.MaxRecordBytes-historyRoom)
	}
	status, err := s.kv.Status(ctx)
	if err != nil {
		return nil, fmt.Errorf("schedstore: add: %w", err)
	}
	if status.Values() >= MaxSchedules {
		return nil, fmt.Errorf("%w (%d)", ErrFull, MaxSchedules)
	}
	// Armed first: a schedule stored but never armed would never fire;
	// a timer whose record is missing fires into nothing.
	if err := s.arm(ctx, c.ID, next); err != nil {
		return nil, err
	}
	if _, err := s.kv.Create(ctx, c.ID, b); err != nil {
		return nil, fmt.Errorf("schedstore: add %s: %w", c.ID, err)
	}
	return &c, nil
}

// Get reads a schedule and its revision. Errors: ErrNotFound,
// schedule.ErrBadRecord for a corrupt record, the store's.
func (s *Store) Get(ctx context.Context, id string) (*schedule.Schedule, uint64, error) {
	if !schedule.ValidID(id) {
		return nil, 0, fmt.Errorf("%w: %q", ErrNotFound, clip(id))
	}
	e, err := s.kv.Get(ctx, id)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return nil, 0, fmt.Errorf("%w: %s", ErrNotFound, id)
	}
	if err != nil {
		return nil, 0, fmt.Errorf("schedstore: get %s: %w", id, err)
	}
	sc, err := schedule.Decode(e.Value())
	if err != nil {
		return nil, 0, fmt.Errorf("schedstore: schedule %s: %w", id, err)
	}
	if sc.ID != id {
		return nil, 0, fmt.Errorf("schedstore: schedule %s: %w: the record names %s", id, schedule.ErrBadRecord, sc.ID)
	}
	return sc, e.Revision(), nil
}

// List reads every schedule, by id, and the ids of records that do not
// decode (each with its error). At most MaxSchedules are read.
func (s *Store) List(ctx context.Context) ([]*schedule.Schedule, []error, error) {
	keys, err := s.kv.ListKeys(ctx)
	if err != nil {
		return nil, nil, fmt.Errorf("schedstore: list: %w", err)
	}
	var ids []string
	for k := range keys.Keys() {
		if len(ids) < MaxSchedules {
			ids = append(ids, k)
		}
	}
	slices.Sort(ids)
	var (
		out  []*schedule.Schedule
		errs []error
	)
	for _, id := range ids {
		sc, _, err := s.Get(ctx, id)
		switch {
		case errors.Is(err, ErrNotFound):
		case errors.Is(err, schedule.ErrBadRecord):
			errs = append(errs, err)
		case err != nil:
			return nil, nil, err
		default:
			out = append(out, sc)
		}
	}
	return out, errs, nil
}

// SetPaused pauses or resumes a schedule. A paused schedule fires nothing
// (its due times are not missed: they are not due). Resuming counts from
// now: the times that passed while it was paused are not caught up, and
// the next due time is armed. It returns the schedule as stored.
func (s *Store) SetPaused(ctx context.Context, id string, paused bool) (*schedule.Schedule, error) {
	return s.update(ctx, id, func(sc *schedule.Schedule) (time.Time, error) {
		if sc.Paused == paused {
			return time.Time{}, nil
		}
		sc.Paused = paused
		if paused {
			return time.Time{}, nil
		}
		now := s.now()
		if sc.NextMs == 0 {
			return time.Time{}, nil // over: nothing to resume
		}
		sc.LastDueMs = now.UnixMilli()
		tm, err := sc.Timer()
		if err != nil {
			return time.Time{}, err
		}
		next, ok := tm.Next(now)
		if !ok {
			sc.NextMs = 0
			return time.Time{}, nil
		}
		sc.NextMs = next.UnixMilli()
		return next, nil
	})
}

// update applies change to a schedule with compare-and-set, retried on a
// concurrent write, then arms the time change returns (zero: none).
func (s *Store) update(ctx context.Context, id string, change func(*schedule.Schedule) (time.Time, error)) (*schedule.Schedule, error) {
	for range 10 {
		sc, rev, err := s.Get(ctx, id)
		if err != nil {
			return nil, err
		}
		arm, err := change(sc)
		if err != nil {
			return nil, err
		}
		b, err := sc.Encode()
		if err != nil {
			return nil, err
		}
		if _, err := s.kv.Update(ctx, id, b, rev); err != nil {
			if errors.Is(err, jetstream.ErrKeyExists) {
				continue // a firing or another change came first
			}
			return nil, fmt.Errorf("schedstore: update %s: %w", id, err)
		}
		if !arm.IsZero() {
			if err := s.arm(ctx, id, arm); err != nil {
				return nil, err
			}
		}
		return sc, nil
	}
	return nil, fmt.Errorf("schedstore: update %s: changed concurrently 10 times", id)
}

// Remove deletes a schedule and its timer: it fires no more.
func (s *Store) Remove(ctx context.Context, id string) error {
	if _, _, err := s.Get(ctx, id); err != nil && !errors.Is(err, schedule.ErrBadRecord) {
		return err
	}
	if err := s.kv.Delete(ctx, id); err != nil {
		return fmt.Errorf("schedstore: remove %s: %w", id, err)
	}
	for _, subj := range []string{TimerPrefix + id, FirePrefix + id} {
		if err := s.stream.Purge(ctx, jetstream.WithPurgeSubject(subj)); err != nil {
			return fmt.Errorf("schedstore: remove %s: purge %s: %w", id, subj, err)
		}
	}
	return nil
}

// arm sets the schedule's server timer to fire at t (rounded up to a
// second, the server's resolution), replacing any pending one.
func (s *Store) arm(ctx context.Context, id string, t time.Time) error {
	m := nats.NewMsg(TimerPrefix + id)
	m.Data = []byte(id)
	_, err := s.js.PublishMsg(ctx, m,
		jetstream.WithScheduleAt(ceilSecond(t)),
		jetstream.WithScheduleTarget(FirePrefix+id),
		jetstream.WithScheduleRollup(), // one firing message per schedule
	)
	if err != nil {
		return fmt.Errorf("schedstore: arm %s at %s: %w", id, t.UTC().Format(time.RFC3339), err)
	}
	return nil
}

// armed returns the ids whose timer is pending in the stream.
func (s *Store) armed(ctx context.Context) (map[string]bool, error) {
	info, err := s.stream.Info(ctx, jetstream.WithSubjectFilter(TimerPrefix+">"))
	if err != nil {
		return nil, fmt.Errorf("schedstore: pending timers: %w", err)
	}
	out := make(map[string]bool, len(info.State.Subjects))
	for subj := range info.State.Subjects {
		out[strings.TrimPrefix(subj, TimerPrefix)] = true
	}
	return out, nil
}

func ceilSecond(t time.Time) time.Time {
	if r := t.Truncate(time.Second); !r.Equal(t) {
		return r.Add(time.Second)
	}
	return t
}

func clip(s string) string {
	if len(s) > 64 {
		return s[:64] + "…"
	}
	return s
}
