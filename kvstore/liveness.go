package kvstore

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/vmihailenco/msgpack/v5"
)

// The workers' liveness: every worker keeps one key, its life, in the
// bucket "workers" (file storage, so a lapse outlives a server restart;
// one value per key): written when the
// worker starts and again every heartbeat, each write with a per-key TTL,
// so the key lapses (the server writes a MaxAge marker, which the bucket's
// watchers see) once the worker stops beating for that long. A worker's
// leases name its life (LeaseInfo.Life): a worker that finds another's
// life ended takes over the lanes whose leases name it (Lanes.LeasesOf,
// Lanes.TakeOver) instead of waiting for those leases to lapse. A life is
// a fresh random key per worker process, so a worker restarted under the
// same id is a new life and never inherits the old one's death.

// DefaultLivenessBucket is the bucket of the workers' lives.
const DefaultLivenessBucket = "workers"

// Liveness defaults.
const (
	// DefaultLivenessEvery is how often a worker beats.
	DefaultLivenessEvery = 500 * time.Millisecond
	// DefaultLivenessTTL is how long a worker that stopped beating but
	// keeps its connection (paused, starved, partitioned from its
	// server's peers) stays alive to the others.
	DefaultLivenessTTL = 5 * time.Second
)

// ErrDeclaredDead means a worker's own heartbeat was refused: its life
// lapsed or another worker declared it dead, and its lanes are being
// taken over. The worker must stop every turn at once.
var ErrDeclaredDead = errors.New("kvstore: worker declared dead")

// LivenessConfig configures the liveness bucket.
type LivenessConfig struct {
	Bucket   string // default DefaultLivenessBucket
	Replicas int    // default 1
	// TTL is how long a life lasts after its last beat; default
	// DefaultLivenessTTL, at least 1s (the server's TTL granularity).
	TTL time.Duration
}

func (c LivenessConfig) withDefaults() LivenessConfig {
	if c.Bucket == "" {
		c.Bucket = DefaultLivenessBucket
	}
	c.Replicas = max(1, c.Replicas)
	if c.TTL == 0 {
		c.TTL = DefaultLivenessTTL
	}
	c.TTL = max(c.TTL, time.Second)
	return c
}

// Liveness is the bucket of the workers' lives.
type Liveness struct {
	js     jetstream.JetStream
	kv     jetstream.KeyValue
	cfg    LivenessConfig
	prefix string // "$KV.<bucket>."
}

// livenessMaxBytes caps the bucket: a life is about a hundred bytes, and
// every key goes away (its TTL, or a marker's).
const livenessMaxBytes = 16 << 20

// livenessMarkerTTL is how long the marker of a lapsed or declared life
// stays: long enough for every watcher to see it.
const livenessMarkerTTL = time.Minute

// OpenLiveness creates or binds the liveness bucket.
func OpenLiveness(ctx context.Context, js jetstream.JetStream, cfg LivenessConfig) (*Liveness, error) {
	cfg = cfg.withDefaults()
	kv, err := js.CreateOrUpdateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: cfg.Bucket, Description: "Lanefleet workers' liveness",
		History: 1, LimitMarkerTTL: livenessMarkerTTL, MaxBytes: livenessMaxBytes, Storage: jetstream.FileStorage, Replicas: cfg.Replicas})
	if err != nil && RacedCreate(err, func() error { var gerr error; kv, gerr = js.KeyValue(ctx, cfg.Bucket); return gerr }) {
		err = nil
	}
	if err != nil {
		return nil, fmt.Errorf("kvstore: open bucket %s: %w", cfg.Bucket, err)
	}
	// A beat refused is confirmed by a read: from the leader only.
	if _, err := configureStream(ctx, js, "KV_"+cfg.Bucket, livenessMaxBytes, DirectGet(cfg.Replicas)); err != nil {
		return nil, err
	}
	return &Liveness{js: js, kv: kv, cfg: cfg, prefix: "$KV." + cfg.Bucket + "."}, nil
}

// TTL returns how long a life lasts after its last beat.
func (v *Liveness) TTL() time.Duration { return v.cfg.TTL }

// Life is what a life's key says.
type Life struct {
	Worker  string `msgpack:"worker"`
	Started int64  `msgpack:"started"` // Unix ms
	// Left: the worker stopped after handing its lanes over (its last
	// write before End): the end that follows takes nothing over.
	Left bool `msgpack:"left,omitempty"`
}

// Pulse is one worker's life: Beat keeps it.
type Pulse struct {
	v     *Liveness
	key   string
	value []byte

	mu  sync.Mutex
	rev uint64
}

// Begin starts a new life for worker under key (random, see NewLife).
func (v *Liveness) Begin(ctx context.Context, key string, life Life) (*Pulse, error) {
	if !validLife(key) {
		return nil, fmt.Errorf("kvstore: life %q: not a life key", key)
	}
	val, err := msgpack.Marshal(life)
	if err != nil {
		return nil, err
	}
	rev, err := v.kv.Create(ctx, key, val, jetstream.KeyTTL(v.cfg.TTL))
	if err != nil {
		return nil, fmt.Errorf("kvstore: begin life %s: %w", key, err)
	}
	return &Pulse{v: v, key: key, value: val, rev: rev}, nil
}

// Beat renews the life for another TTL. ErrDeclaredDead: the life is over
// (it lapsed, or a worker declared it dead): the worker's leases are being
// taken over.
func (p *Pulse) Beat(ctx context.Context) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	for attempt := 0; ; attempt++ {
		ack, err := p.v.js.Publish(ctx, p.v.prefix+p.key, p.value,
			jetstream.WithExpectLastSequencePerSubject(p.rev), jetstream.WithMsgTTL(p.v.cfg.TTL))
		if err == nil {
			p.rev = ack.Sequence
			return nil
		}
		busy, mismatch := WriteConflict(err)
		switch {
		case busy && attempt < maxConflicts:
			if perr := pause(ctx, attempt); perr != nil {
				return fmt.Errorf("kvstore: beat %s: %w", p.key, err)
			}
			continue
		case mismatch:
			// Our own beat whose answer was lost moved the key on: adopt
			// it. Anything else ended the life.
			if e, gerr := p.v.kv.Get(ctx, p.key); gerr == nil && e.Operation() == jetstream.KeyValuePut && string(e.Value()) == string(p.value) && attempt < maxConflicts {
				p.rev = e.Revision()
				continue
			}
			return fmt.Errorf("%w: life %s: %v", ErrDeclaredDead, p.key, err)
		}
		return fmt.Errorf("kvstore: beat %s: %w", p.key, err)
	}
}

// End ends the life of a worker that stopped after handing its lanes
// over: a last write that says so (Life.Left), then the key's purge. A
// life already over is not an error.
func (p *Pulse) End(ctx context.Context, life Life) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	life.Left = true
	val, err := msgpack.Marshal(life)
	if err != nil {
		return err
	}
	ack, err := p.v.js.Publish(ctx, p.v.prefix+p.key, val,
		jetstream.WithExpectLastSequencePerSubject(p.rev), jetstream.WithMsgTTL(p.v.cfg.TTL))
	if err == nil {
		p.rev = ack.Sequence
		err = p.v.kv.Purge(ctx, p.key, jetstream.LastRevision(p.rev), jetstream.PurgeTTL(livenessMarkerTTL))
	}
	if _, mismatch := WriteConflict(err); mismatch {
		return nil
	}
	if err != nil {
		return fmt.Errorf("kvstore: end life %s: %w", p.key, err)
	}
	return nil
}

// Declare ends another worker's life at revision rev (the one its watcher
// last saw), found dead: its connection is gone. It reports false when the
// life moved on since (it beat again: alive) or is already over.
func (v *Liveness) Declare(ctx context.Context, key string, rev uint64) (bool, error) {
	err := v.kv.Purge(ctx, key, jetstream.LastRevision(rev), jetstream.PurgeTTL(livenessMarkerTTL))
	if err == nil {
		return true, nil
	}
	if busy, mismatch := WriteConflict(err); busy || mismatch {
		return false, nil
	}
	return false, fmt.Errorf("kvstore: declare %s dead: %w", key, err)
}

// LifeEvent is one change of a life, as a watcher sees it.
type LifeEvent struct {
	Key  string
	Rev  uint64
	Life Life // zero when Ended
	// Ended: the life lapsed (its TTL ran out) or was declared over or
	// ended by its worker.
	Ended bool
}

// Watch calls fn for every life's current state and then every change,
// until ctx ends; ready is called once the current states were seen.
func (v *Liveness) Watch(ctx context.Context, fn func(LifeEvent), ready func()) error {
	w, err := v.kv.WatchAll(ctx)
	if err != nil {
		return fmt.Errorf("kvstore: watch lives: %w", err)
	}
	defer func() {
		// Without its server, the unsubscribe would wait out a request
		// timeout: the connection's close ends the watch then.
		if v.js.Conn().IsConnected() {
			_ = w.Stop()
		}
	}()
	for {
		select {
		case <-ctx.Done():
			return nil
		case e, ok := <-w.Updates():
			if !ok {
				return nil
			}
			if e == nil {
				if ready != nil {
					ready()
				}
				continue
			}
			ev := LifeEvent{Key: e.Key(), Rev: e.Revision(), Ended: e.Operation() != jetstream.KeyValuePut}
			if !ev.Ended {
				_ = msgpack.Unmarshal(e.Value(), &ev.Life) // an unreadable life is still a life
			}
			fn(ev)
		}
	}
}

// validLife reports whether key can be a life key: lowercase hex, 8 to 64
// characters.
func validLife(key string) bool {
	if len(key) < 8 || len(key) > 64 {
		return false
	}
	return strings.Trim(key, "0123456789abcdef") == ""
}

// HeldLease is one lane's lease as LeasesOf found it.
type HeldLease struct {
	Token string
	Rev   uint64
	Info  LeaseInfo
}

// LeasesOf returns the leases in force that name life (LeaseInfo.Life):
// the last message of every lease key (an ephemeral consumer on the
// leader, deleted after), those that are not markers and name it. A lease
// key exists only for lanes held now or let go within the bucket's
// MarkerTTL, so the pass costs what the fleet's recent activity does.
func (l *Lanes) LeasesOf(ctx context.Context, life string) ([]HeldLease, error) {
	for try := 1; ; try++ {
		out, whole, err := l.leasesOf(ctx, life)
		if err != nil || whole {
			return out, err
		}
		if try == scanTries {
			return out, fmt.Errorf("kvstore: leases of %s: a fetch came back empty with leases pending, %d times", life, try)
		}
	}
}

// scanTries is how many scans LeasesOf makes when a fetch comes back
// empty while its consumer still counted leases pending.
const scanTries = 3

// leasesOf is one scan of the lease keys; whole is false when a fetch
// came back empty while leases were pending: the server answered after
// the client stopped waiting (a loaded server), and with no acks what it
// delivered then is gone from the consumer, so only a new scan sees it.
func (l *Lanes) leasesOf(ctx context.Context, life string) (out []HeldLease, whole bool, err error) {
	cons, err := l.stream.CreateConsumer(ctx, jetstream.ConsumerConfig{
		DeliverPolicy:     jetstream.DeliverLastPerSubjectPolicy,
		FilterSubject:     l.prefix + "*.lease",
		AckPolicy:         jetstream.AckNonePolicy,
		MemoryStorage:     true,
		Replicas:          1,
		InactiveThreshold: scanConsumerIdle,
	})
	if err != nil {
		return nil, false, fmt.Errorf("kvstore: leases of %s: %w", life, err)
	}
	defer func() {
		dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		_ = l.stream.DeleteConsumer(dctx, cons.CachedInfo().Name)
	}()
	pending := cons.CachedInfo().NumPending
	for pending > 0 {
		batch, err := cons.Fetch(int(min(pending, 1024)), jetstream.FetchMaxWait(scanWait))
		if err != nil {
			return out, false, fmt.Errorf("kvstore: leases of %s: %w", life, err)
		}
		n := 0
		for m := range batch.Messages() {
			n++
			meta, err := m.Metadata()
			if err != nil {
				return out, false, fmt.Errorf("kvstore: leases of %s: %w", life, err)
			}
			pending = meta.NumPending
			if h := m.Headers(); h.Get("KV-Operation") != "" || h.Get(jetstream.MarkerReasonHeader) != "" {
				continue
			}
			var info LeaseInfo
			if msgpack.Unmarshal(m.Data(), &info) != nil || info.Life != life {
				continue
			}
			tok := strings.TrimSuffix(strings.TrimPrefix(m.Subject(), l.prefix), ".lease")
			out = append(out, HeldLease{Token: tok, Rev: meta.Sequence.Stream, Info: info})
		}
		if err := batch.Error(); err != nil {
			return out, false, fmt.Errorf("kvstore: leases of %s: %w", life, err)
		}
		if n == 0 {
			return out, false, nil
		}
	}
	return out, true, nil
}

// TakeOver replaces a dead worker's lease (h, as LeasesOf found it) with
// one of info's, written with h's revision as expectation: the dead
// worker's writes, fenced by that revision, fail from then on exactly as
// after its lease lapsed. ErrHeld: the lease moved on since (its holder
// renewed or released it, or another worker took it over first).
func (l *Lanes) TakeOver(ctx context.Context, h HeldLease, info LeaseInfo) (*Lease, error) {
	info.From = h.Info.Worker
	val, err := msgpack.Marshal(info)
	if err != nil {
		return nil, err
	}
	for attempt := 0; ; attempt++ {
		ack, err := l.js.Publish(ctx, l.prefix+leaseKey(h.Token), val,
			jetstream.WithExpectLastSequencePerSubject(h.Rev), jetstream.WithMsgTTL(l.cfg.LeaseTTL))
		if err == nil {
			return &Lease{lanes: l, token: h.Token, value: val, rev: ack.Sequence}, nil
		}
		busy, mismatch := WriteConflict(err)
		switch {
		case busy && attempt < maxConflicts:
			if perr := pause(ctx, attempt); perr != nil {
				return nil, fmt.Errorf("kvstore: take over %s: %w", h.Token, err)
			}
			continue
		case mismatch:
			return nil, fmt.Errorf("%w: %s moved on since", ErrHeld, h.Token)
		}
		return nil, fmt.Errorf("kvstore: take over %s: %w", h.Token, err)
	}
}
