package lanes

import (
	"context"
	"errors"
	"fmt"
	"math"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/lanefleet/lanefleet/events"
	"github.com/lanefleet/lanefleet/kvstore"
)

// StreamConfig sizes the fleet's streams and the dispatch consumer. Every
// worker of a fleet must use the same values.
//
// Every stream has a byte limit (0 = its default, -1 = none), so no client
// can fill the store. A full inbound stream refuses new messages (the
// sender's publish fails with "maximum bytes exceeded") while turns go on
// and free its space; a full dead-letter stream refuses new dead letters; a
// full event stream drops its oldest events (they are replayable, not
// kept). The defaults with the lanes bucket's (kvstore) fit a single node's
// default 8 GiB store, so each stream meets its own limit before the store
// is full and what is stored stays.
//
// Each lane (one session's subject) gets a share of the inbound stream, so
// that one sender cannot fill it for everyone: a lane holding LaneCap
// messages refuses its own sender's next one ("maximum messages per subject
// exceeded", discard new per subject) and nobody else's. JetStream bounds
// messages per subject, not bytes, so the lane's byte bound is kept in
// messages: the stream refuses a message larger than MaxPayload plus
// HeaderRoom, and a lane holds at most LaneMaxBytes of such messages.
type StreamConfig struct {
	Replicas        int           // 1 (single node) or 3 (cluster); default 1
	InboundMaxAge   time.Duration // safety net for unprocessed messages; default 7 days
	InboundMaxBytes int64         // cap on unprocessed inbound messages; default 1 GiB
	DedupeWindow    time.Duration // Nats-Msg-Id dedupe window; default 2 minutes
	EventMaxAge     time.Duration // how long run events stay replayable; default 24h
	EventMaxBytes   int64         // cap on the event stream; default 1 GiB
	AckWait         time.Duration // dispatch AckWait; default 30s
	MaxAckPending   int           // ≥ 1.5 × Σ 5 × each worker's Concurrency (slots and deliveries waiting for one); default 100,000
	DeadMaxAge      time.Duration // dead letters kept; default 30 days
	DeadMaxBytes    int64         // cap on dead letters; default 256 MiB
	DispatchName    string        // durable consumer name; default "dispatch"
	// LaneMaxMsgs bounds the messages one lane holds (waiting, running,
	// or processed and not yet deleted); 0 = DefaultLaneMaxMsgs, -1 =
	// no bound.
	LaneMaxMsgs int64
	// LaneMaxBytes bounds the bytes one lane holds, as LaneMaxBytes /
	// (MaxPayload + HeaderRoom) messages; 0 = an eighth of InboundMaxBytes
	// (none when that has none), -1 = no bound. It may not exceed
	// InboundMaxBytes.
	LaneMaxBytes int64
	// MaxPayload is the fleet's largest inbound payload (Config.MaxPayload;
	// default events.DefaultMaxPayload): the inbound stream refuses a
	// message larger than it plus HeaderRoom.
	MaxPayload int
}

// StreamConfig defaults.
const (
	DefaultAckWait         = 30 * time.Second
	DefaultMaxAckPending   = 100000
	DefaultInboundMaxBytes = 1 << 30
	DefaultEventMaxBytes   = 1 << 30
	DefaultDeadMaxBytes    = 256 << 20
	DefaultLaneMaxMsgs     = 1000
)

// HeaderRoom is what an inbound message may hold in headers besides its
// payload (content type, message id, trace context).
const HeaderRoom = 64 << 10

// laneMinMsgs is the fewest messages a lane may hold, whatever its byte
// bound: the one running, the next, and the trigger an owner keeps.
const laneMinMsgs = 4

// maxBytes maps a limit's configured value to JetStream's: 0 is the
// default, a negative value none.
func maxBytes(v, def int64) int64 {
	switch {
	case v == 0:
		return def
	case v < 0:
		return -1
	}
	return v
}

func (c StreamConfig) withDefaults() StreamConfig {
	if c.Replicas == 0 {
		c.Replicas = 1
	}
	if c.InboundMaxAge == 0 {
		c.InboundMaxAge = 7 * 24 * time.Hour
	}
	if c.DedupeWindow == 0 {
		c.DedupeWindow = 2 * time.Minute
	}
	if c.EventMaxAge == 0 {
		c.EventMaxAge = 24 * time.Hour
	}
	c.InboundMaxBytes = maxBytes(c.InboundMaxBytes, DefaultInboundMaxBytes)
	c.EventMaxBytes = maxBytes(c.EventMaxBytes, DefaultEventMaxBytes)
	c.DeadMaxBytes = maxBytes(c.DeadMaxBytes, DefaultDeadMaxBytes)
	if c.AckWait == 0 {
		c.AckWait = DefaultAckWait
	}
	if c.MaxAckPending == 0 {
		c.MaxAckPending = DefaultMaxAckPending
	}
	if c.DeadMaxAge == 0 {
		c.DeadMaxAge = 30 * 24 * time.Hour
	}
	if c.DispatchName == "" {
		c.DispatchName = "dispatch"
	}
	if c.MaxPayload <= 0 {
		c.MaxPayload = events.DefaultMaxPayload
	}
	if c.LaneMaxMsgs == 0 {
		c.LaneMaxMsgs = DefaultLaneMaxMsgs
	}
	if c.LaneMaxBytes == 0 {
		c.LaneMaxBytes = -1
		if c.InboundMaxBytes > 0 {
			c.LaneMaxBytes = c.InboundMaxBytes / 8
		}
	}
	return c
}

// validate checks a configuration with its defaults.
func (c StreamConfig) validate() error {
	if c.LaneMaxBytes > 0 && c.InboundMaxBytes > 0 && c.LaneMaxBytes > c.InboundMaxBytes {
		return fmt.Errorf("lanes: a lane's byte limit (%d) is larger than the inbound stream's (%d): one session could fill it for everyone", c.LaneMaxBytes, c.InboundMaxBytes)
	}
	return nil
}

// maxMsgSize is the largest message the inbound stream stores, headers
// included.
func (c StreamConfig) maxMsgSize() int32 {
	return int32(min(int64(c.MaxPayload)+HeaderRoom, math.MaxInt32))
}

// LaneCap is how many messages one lane may hold (-1: no bound): the
// smaller of LaneMaxMsgs and what LaneMaxBytes holds of the largest
// message, and at least laneMinMsgs.
func (c StreamConfig) LaneCap() int64 {
	c = c.withDefaults()
	n := c.LaneMaxMsgs
	if c.LaneMaxBytes > 0 {
		byBytes := c.LaneMaxBytes / int64(c.maxMsgSize())
		if n < 0 || byBytes < n {
			n = byBytes
		}
	}
	if n < 0 {
		return -1
	}
	return max(n, laneMinMsgs)
}

// Streams are the fleet's JetStream assets.
type Streams struct {
	Inbound  jetstream.Stream
	Events   jetstream.Stream
	Dead     jetstream.Stream
	Dispatch jetstream.Consumer
	cfg      StreamConfig

	// laneMu guards laneCap: the per-lane cap the inbound stream has as
	// far as this worker set it, cfg.LaneCap() or, while a lane holds
	// more than that, more (see safeLaneCap).
	laneMu  sync.Mutex
	laneCap int64
}

// EnsureStreams creates or updates the inbound, event and dead-letter streams
// and the dispatch consumer. It is safe to call from every worker at start-up.
//
// The inbound stream's per-lane cap (StreamConfig.LaneCap) is never set
// below what a lane holds: JetStream deletes a subject's oldest messages
// when its cap is lowered under them, which would lose messages waiting on
// a lane. Until such a lane has drained, the cap stays above it, and the
// sweep lowers it (Streams.TightenLaneCap).
func EnsureStreams(ctx context.Context, js jetstream.JetStream, cfg StreamConfig) (*Streams, error) {
	cfg = cfg.withDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	in, laneCap, err := ensureInbound(ctx, js, cfg.inboundStream(), cfg.LaneCap())
	if err != nil {
		return nil, err
	}
	ev, err := ensureStream(ctx, js, cfg.eventStream())
	if err != nil {
		return nil, err
	}
	dead, err := ensureStream(ctx, js, cfg.deadStream())
	if err != nil {
		return nil, err
	}
	cons, err := in.CreateOrUpdateConsumer(ctx, cfg.dispatchConsumer())
	if err != nil {
		return nil, fmt.Errorf("lanes: dispatch consumer: %w", err)
	}
	return &Streams{Inbound: in, Events: ev, Dead: dead, Dispatch: cons, cfg: cfg, laneCap: laneCap}, nil
}

// inboundStream is the inbound stream's configuration, but for its
// per-lane cap (set by ensureInbound).
func (c StreamConfig) inboundStream() jetstream.StreamConfig {
	return jetstream.StreamConfig{
		Name:        events.InboundStream,
		Description: "Lanefleet inbound messages, one subject per session lane",
		// agent.in.> and not agent.in.*: a message on a subject that
		// cannot be a lane (agent.in.a.b) is stored, and dispatch
		// dead-letters it instead of it vanishing unseen.
		Subjects:   []string{events.InboundPrefix + ">"},
		Retention:  jetstream.LimitsPolicy, // not WorkQueue: the dispatch ack must not delete
		Storage:    jetstream.FileStorage,
		Replicas:   c.Replicas,
		MaxAge:     c.InboundMaxAge,
		MaxBytes:   c.InboundMaxBytes,
		Duplicates: c.DedupeWindow,
		// GetMsg decides ownership: leader reads only. At R1 the leader
		// is the only copy, and Direct Get reads it without queueing
		// behind every other JetStream API request (kvstore.DirectGet).
		AllowDirect: kvstore.DirectGet(c.Replicas),
		// Full: refuse what is new, keep what was accepted. So does a
		// full lane (its cap is set by ensureInbound).
		Discard:    jetstream.DiscardNew,
		MaxMsgSize: c.maxMsgSize(),
	}
}

// eventStream is the event stream's configuration.
func (c StreamConfig) eventStream() jetstream.StreamConfig {
	evCfg := jetstream.StreamConfig{
		Name:        events.EventStream,
		Description: "Lanefleet run events, agent.ev.<lane>.<run>",
		Subjects:    []string{events.EventPrefix + ">"},
		Retention:   jetstream.LimitsPolicy,
		Storage:     jetstream.FileStorage,
		Replicas:    c.Replicas,
		MaxAge:      c.EventMaxAge,
		MaxBytes:    c.EventMaxBytes,
		Discard:     jetstream.DiscardOld,
		AllowDirect: kvstore.DirectGet(c.Replicas), // a run's last event decides its fence
	}
	if c.Replicas == 1 {
		// Events are replayable and losable: acknowledge before the write
		// reaches disk (R1 only), so deltas never wait on fsync.
		evCfg.PersistMode = jetstream.AsyncPersistMode
	}
	return evCfg
}

// deadStream is the dead-letter stream's configuration.
func (c StreamConfig) deadStream() jetstream.StreamConfig {
	return jetstream.StreamConfig{
		Name:        events.DeadStream,
		Description: "Lanefleet dead letters: inbound messages that could not be processed",
		Subjects:    []string{events.DeadPrefix + ">"},
		Retention:   jetstream.LimitsPolicy,
		Storage:     jetstream.FileStorage,
		Replicas:    c.Replicas,
		MaxAge:      c.DeadMaxAge,
		MaxBytes:    c.DeadMaxBytes,
		Discard:     jetstream.DiscardNew,
	}
}

// dispatchConsumer is the dispatch consumer's configuration.
func (c StreamConfig) dispatchConsumer() jetstream.ConsumerConfig {
	return jetstream.ConsumerConfig{
		Durable:       c.DispatchName,
		Description:   "wakes workers for lanes with pending messages",
		AckPolicy:     jetstream.AckExplicitPolicy,
		AckWait:       c.AckWait,
		MaxDeliver:    -1,
		FilterSubject: events.InboundPrefix + ">",
		MaxAckPending: c.MaxAckPending,
		Replicas:      c.Replicas,
		DeliverPolicy: jetstream.DeliverAllPolicy,
	}
}

// laneCapMargin is how far above the fullest lane a cap is set while that
// lane holds more than the configured cap: room for what its sender stores
// between the count and the update, which the cap must not delete (a
// quarter of a smaller cap).
const laneCapMargin = 16

// withLaneCap sets a stream configuration's per-subject cap (n ≤ 0: none),
// refusing new messages of a subject at its cap.
func withLaneCap(c jetstream.StreamConfig, n int64) jetstream.StreamConfig {
	c.MaxMsgsPerSubject, c.DiscardNewPerSubject = max(n, -1), n > 0
	if n <= 0 {
		c.MaxMsgsPerSubject = -1
	}
	return c
}

// ensureInbound creates the inbound stream with the per-lane cap target,
// or updates it, with a cap no lane holds more than (safeLaneCap). It
// returns the cap set.
func ensureInbound(ctx context.Context, js jetstream.JetStream, want jetstream.StreamConfig, target int64) (jetstream.Stream, int64, error) {
	// Looked up before any create, as kvstore.EnsureStream does.
	s, err := js.Stream(ctx, want.Name)
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		s, err = js.CreateStream(ctx, withLaneCap(want, target))
		if err == nil {
			return s, target, nil
		}
		if kvstore.RacedCreate(err, func() (lerr error) { s, lerr = js.Stream(ctx, want.Name); return lerr }) {
			err = nil // another worker's, just now
		}
	}
	if err != nil {
		return nil, 0, fmt.Errorf("lanes: stream %s: %w", want.Name, err)
	}
	n, err := safeLaneCap(ctx, s, target)
	if err != nil {
		return nil, 0, err
	}
	// Not updated when it already has this configuration: every worker
	// ensures it at start, under the consumers the others are making
	// (kvstore.EnsureStream says why).
	if s, err = kvstore.EnsureStream(ctx, js, withLaneCap(want, n)); err != nil {
		return nil, 0, fmt.Errorf("lanes: stream %s: %w", want.Name, err)
	}
	return s, n, nil
}

// safeLaneCap is the per-lane cap to give the inbound stream s, whose
// cached configuration is current, on the way to target: target itself,
// unless that would lower the cap under a lane's messages (JetStream would
// delete the oldest of them); then the fullest lane's count plus
// laneCapMargin, and never more than the cap s has.
func safeLaneCap(ctx context.Context, s jetstream.Stream, target int64) (int64, error) {
	cur := s.CachedInfo().Config.MaxMsgsPerSubject
	if target <= 0 || (cur > 0 && target >= cur) {
		return target, nil // no cap, or not a lower one: nothing is deleted
	}
	info, err := s.Info(ctx, jetstream.WithSubjectFilter(events.InboundPrefix+">"))
	if err != nil {
		return 0, fmt.Errorf("lanes: count the messages of each lane: %w", err)
	}
	var fullest uint64
	for _, n := range info.State.Subjects {
		fullest = max(fullest, n)
	}
	n := max(target, int64(fullest)+min(laneCapMargin, max(target/4, 1)))
	if cur > 0 {
		n = min(n, cur)
	}
	return n, nil
}

// LaneCap returns the per-lane cap the inbound stream has (as this worker
// last set it; -1: none).
func (s *Streams) LaneCap() int64 {
	s.laneMu.Lock()
	defer s.laneMu.Unlock()
	return s.laneCap
}

// TightenLaneCap lowers the inbound stream's per-lane cap towards the
// configured one when a lane held more than that when it was set, as far
// as no lane holds more now. It does nothing when the cap is the
// configured one.
func (s *Streams) TightenLaneCap(ctx context.Context, js jetstream.JetStream) error {
	s.laneMu.Lock()
	defer s.laneMu.Unlock()
	target := s.cfg.LaneCap()
	if s.laneCap == target {
		return nil
	}
	info, err := s.Inbound.Info(ctx)
	if err != nil {
		return fmt.Errorf("lanes: stream %s: %w", events.InboundStream, err)
	}
	n, err := safeLaneCap(ctx, s.Inbound, target)
	if err != nil {
		return err
	}
	if n != info.Config.MaxMsgsPerSubject {
		if _, err := js.UpdateStream(ctx, withLaneCap(info.Config, n)); err != nil {
			return fmt.Errorf("lanes: stream %s: %w", events.InboundStream, err)
		}
	}
	s.laneCap = n
	return nil
}

func ensureStream(ctx context.Context, js jetstream.JetStream, cfg jetstream.StreamConfig) (jetstream.Stream, error) {
	s, err := kvstore.EnsureStream(ctx, js, cfg)
	if err != nil {
		return nil, fmt.Errorf("lanes: stream %s: %w", cfg.Name, err)
	}
	return s, nil
}
