package lanes

import (
	"context"
	"errors"
	"fmt"
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
}

// StreamConfig defaults.
const (
	DefaultAckWait         = 30 * time.Second
	DefaultMaxAckPending   = 100000
	DefaultInboundMaxBytes = 1 << 30
	DefaultEventMaxBytes   = 1 << 30
	DefaultDeadMaxBytes    = 256 << 20
)

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
	return c
}

// Streams are the fleet's JetStream assets.
type Streams struct {
	Inbound  jetstream.Stream
	Events   jetstream.Stream
	Dead     jetstream.Stream
	Dispatch jetstream.Consumer
	cfg      StreamConfig
}

// EnsureStreams creates or updates the inbound, event and dead-letter streams
// and the dispatch consumer. It is safe to call from every worker at start-up.
func EnsureStreams(ctx context.Context, js jetstream.JetStream, cfg StreamConfig) (*Streams, error) {
	cfg = cfg.withDefaults()
	in, err := ensureStream(ctx, js, jetstream.StreamConfig{
		Name:        events.InboundStream,
		Description: "Lanefleet inbound messages, one subject per session lane",
		// agent.in.> and not agent.in.*: a message on a subject that
		// cannot be a lane (agent.in.a.b) is stored, and dispatch
		// dead-letters it instead of it vanishing unseen.
		Subjects:   []string{events.InboundPrefix + ">"},
		Retention:  jetstream.LimitsPolicy, // not WorkQueue: the dispatch ack must not delete
		Storage:    jetstream.FileStorage,
		Replicas:   cfg.Replicas,
		MaxAge:     cfg.InboundMaxAge,
		MaxBytes:   cfg.InboundMaxBytes,
		Duplicates: cfg.DedupeWindow,
		// GetMsg decides ownership: leader reads only. At R1 the leader
		// is the only copy, and Direct Get reads it without queueing
		// behind every other JetStream API request (kvstore.DirectGet).
		AllowDirect: kvstore.DirectGet(cfg.Replicas),
		// Full: refuse what is new, keep what was accepted.
		Discard: jetstream.DiscardNew,
	})
	if err != nil {
		return nil, err
	}
	evCfg := jetstream.StreamConfig{
		Name:        events.EventStream,
		Description: "Lanefleet run events, agent.ev.<lane>.<run>",
		Subjects:    []string{events.EventPrefix + ">"},
		Retention:   jetstream.LimitsPolicy,
		Storage:     jetstream.FileStorage,
		Replicas:    cfg.Replicas,
		MaxAge:      cfg.EventMaxAge,
		MaxBytes:    cfg.EventMaxBytes,
		Discard:     jetstream.DiscardOld,
		AllowDirect: kvstore.DirectGet(cfg.Replicas), // a run's last event decides its fence
	}
	if cfg.Replicas == 1 {
		// Events are replayable and losable: acknowledge before the write
		// reaches disk (R1 only), so deltas never wait on fsync.
		evCfg.PersistMode = jetstream.AsyncPersistMode
	}
	ev, err := ensureStream(ctx, js, evCfg)
	if err != nil {
		return nil, err
	}
	dead, err := ensureStream(ctx, js, jetstream.StreamConfig{
		Name:        events.DeadStream,
		Description: "Lanefleet dead letters: inbound messages that could not be processed",
		Subjects:    []string{events.DeadPrefix + ">"},
		Retention:   jetstream.LimitsPolicy,
		Storage:     jetstream.FileStorage,
		Replicas:    cfg.Replicas,
		MaxAge:      cfg.DeadMaxAge,
		MaxBytes:    cfg.DeadMaxBytes,
		Discard:     jetstream.DiscardNew,
	})
	if err != nil {
		return nil, err
	}
	cons, err := in.CreateOrUpdateConsumer(ctx, jetstream.ConsumerConfig{
		Durable:       cfg.DispatchName,
		Description:   "wakes workers for lanes with pending messages",
		AckPolicy:     jetstream.AckExplicitPolicy,
		AckWait:       cfg.AckWait,
		MaxDeliver:    -1,
		FilterSubject: events.InboundPrefix + ">",
		MaxAckPending: cfg.MaxAckPending,
		Replicas:      cfg.Replicas,
		DeliverPolicy: jetstream.DeliverAllPolicy,
	})
	if err != nil {
		return nil, fmt.Errorf("lanes: dispatch consumer: %w", err)
	}
	return &Streams{Inbound: in, Events: ev, Dead: dead, Dispatch: cons, cfg: cfg}, nil
}

func ensureStream(ctx context.Context, js jetstream.JetStream, cfg jetstream.StreamConfig) (jetstream.Stream, error) {
	s, err := js.CreateStream(ctx, cfg)
	if errors.Is(err, jetstream.ErrStreamNameAlreadyInUse) {
		s, err = js.UpdateStream(ctx, cfg)
	}
	if err != nil {
		return nil, fmt.Errorf("lanes: stream %s: %w", cfg.Name, err)
	}
	return s, nil
}
