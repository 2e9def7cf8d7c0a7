package lanes

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"

	"github.com/lanefleet/lanefleet/events"
	"github.com/lanefleet/lanefleet/kvstore"
	"github.com/lanefleet/lanefleet/lanes/internal/slots"
	"github.com/lanefleet/lanefleet/retention"
)

// ErrShutdown is the cause of contexts cancelled because the worker shuts down.
var ErrShutdown = errors.New("lanes: worker shutting down")

// Config configures a Worker.
type Config struct {
	ID          string // worker id in logs, leases and events; default random
	Concurrency int    // lanes owned (turns running) at once; default DefaultConcurrency
	MaxPayload  int    // inbound payload limit in bytes; default events.DefaultMaxPayload
	// MaxInflightBytes bounds the payload bytes of the messages that
	// brought the lanes running here (their triggers): a lane takes a slot
	// only when its payload fits, else it waits in line like a lane
	// finding every slot busy. A payload larger than the budget runs
	// alone. It is what lets Concurrency be large (each turn in flight
	// keeps a few copies of its payload) while a sender of large messages
	// cannot fill every slot with one. 0 = DefaultMaxInflightBytes;
	// negative: no budget.
	MaxInflightBytes int64
	// MaxAttempts is how many attempts at one message may fail (its
	// handler failed, or its worker died mid-turn) before it is
	// dead-lettered as poison; an attempt that ended for no fault of the
	// message (a transient store error, its live worker losing the lane)
	// does not count (see UncountedToken). Default 3.
	MaxAttempts   int
	ShutdownGrace time.Duration // how long a shutdown lets running turns finish; default 10s
	RetryDelay    time.Duration // first delay before retrying a failed turn; default 500ms
	SweepEvery    time.Duration // how often stranded lanes are looked for; default the dispatch AckWait, <0 disables
	// SessionTTL forgets sessions untouched that long (package
	// retention), checked by the sweep; 0 keeps them forever.
	SessionTTL time.Duration
	// LaneTurnBudget is how many turns a lane runs before it yields its
	// slot to a lane that waits for one (fair scheduling; see the package
	// doc): 0 = DefaultLaneTurnBudget; negative turns fairness off (a lane
	// keeps its slot while it has messages, and a delivery that finds
	// every slot busy is handed back at once).
	LaneTurnBudget int
	// LaneTimeBudget, when positive, also yields the slot at the first
	// turn boundary after the lane has had it this long.
	LaneTimeBudget time.Duration
	// Linger is how long an owner keeps its lane after a turn that left it
	// empty, waiting for the session's next message: a client that
	// answers at once saves releasing and taking the lane again (two
	// lease writes and a read). The slot stays taken meanwhile, so no
	// owner lingers while a lane waits for one. 0 = DefaultLinger,
	// negative = none.
	Linger time.Duration
	// SetupConcurrency bounds how many lanes set up a turn at once
	// (lease, reads, fence, start event; see setupGate), so a burst of
	// sessions is set up in arrival order rather than all finishing late
	// together. 0 = four per core; negative = no bound.
	SetupConcurrency int
	// CheckSettings, when set, vets the run settings of a settings
	// message before they are stored (the fleet refuses a model it would
	// not run): a refusal ends the message's run with an invalid_input
	// error saying why, and nothing is stored.
	CheckSettings func(*events.RunSettings) error
	Logger        zerolog.Logger
	// Now reads the clock the lane's decisions use (when a turn ended, how
	// long a lane has had its slot or waited in line, a message's age,
	// the retention cutoff, event times); default time.Now. Timers and
	// deadlines of network calls use the wall clock.
	Now func() time.Time
	// setupKeep replaces gateKeep (tests).
	setupKeep time.Duration
	// deadRetry replaces deadRetryDelay (tests).
	deadRetry time.Duration
}

// Config defaults.
const (
	// DefaultConcurrency lets one worker keep a thousand model calls in
	// flight: a turn waiting on its model costs ~85 KB and 3 goroutines
	// (lanebench -scenario inflight), and DefaultMaxInflightBytes bounds
	// what large payloads can add.
	DefaultConcurrency = 1024
	// DefaultMaxInflightBytes: 1,024 turns of 64 KiB messages at once, or
	// 16 of the largest (4 MiB; ~23 MB of RSS each in flight).
	DefaultMaxInflightBytes = 64 << 20
	DefaultMaxAttempts      = 3
	DefaultShutdownGrace    = 10 * time.Second
	DefaultLinger           = 10 * time.Millisecond
)

func (c Config) withDefaults() Config {
	if c.ID == "" {
		c.ID = "w-" + randomHex(4)
	}
	if c.Concurrency <= 0 {
		c.Concurrency = DefaultConcurrency
	}
	if c.MaxInflightBytes == 0 {
		c.MaxInflightBytes = DefaultMaxInflightBytes
	}
	if c.LaneTurnBudget == 0 {
		c.LaneTurnBudget = DefaultLaneTurnBudget
	}
	if c.MaxPayload <= 0 {
		c.MaxPayload = events.DefaultMaxPayload
	}
	if c.MaxAttempts <= 0 {
		c.MaxAttempts = DefaultMaxAttempts
	}
	if c.ShutdownGrace == 0 {
		c.ShutdownGrace = DefaultShutdownGrace
	}
	if c.RetryDelay == 0 {
		c.RetryDelay = 500 * time.Millisecond
	}
	if c.Linger == 0 {
		c.Linger = DefaultLinger
	}
	if c.deadRetry == 0 {
		c.deadRetry = deadRetryDelay
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	return c
}

// now reads the worker's clock (Config.Now).
func (w *Worker) now() time.Time { return w.cfg.Now() }

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// Worker owns lanes: it takes dispatch deliveries, acquires the lane's lease,
// drains the lane in order through the Handler, and hands lanes over when it
// shuts down.
type Worker struct {
	cfg     Config
	nc      *nats.Conn
	js      jetstream.JetStream
	streams *Streams
	lanes   *kvstore.Lanes
	handler Handler
	log     zerolog.Logger

	sched        *slots.Scheduler
	gate         *setupGate
	heldMu       sync.Mutex
	held         map[string]uint64 // lanes owners here hold → their trigger's sequence (lease.go)
	consuming    atomic.Bool       // Run consumes dispatch deliveries
	shuttingDown atomic.Bool
	shutdown     chan struct{}   // closed when the worker starts to shut down
	lingering    atomic.Int64    // owners lingering now (tests wait on it)
	turnCtx      context.Context // cancelled when the shutdown grace runs out
	cancelTurns  context.CancelCauseFunc
	wg           sync.WaitGroup

	stats Stats
	// transcripts keeps the lanes' transcripts between their owners.
	transcripts *transcripts
}

// Stats counts what a worker did.
type Stats struct {
	Turns, FollowerAcks, Naks, DeadLetters, Acquired, Released, Swept atomic.Int64
	// Yields counts lanes that gave their slot to a waiting lane, Waited
	// the deliveries that waited in line for a slot, HandedBack those
	// handed back after waiting (to come back, or go to a worker with
	// room).
	Yields, Waited, HandedBack atomic.Int64
	// Merged counts messages answered by another run (collect, steer),
	// Dropped those ended without a turn by the queue (cap, interrupt),
	// Aborted the attempts ended with an aborted event, Duplicates the
	// messages not run because an earlier message of their lane used
	// their id.
	Merged, Dropped, Aborted, Duplicates atomic.Int64
	// QuietSkips counts drains that ended without reading the lane again,
	// the last turn's watch having seen it stay empty.
	QuietSkips atomic.Int64
	// OverBudget counts owners that let their lane go for a while because
	// its next message did not fit the byte budget.
	OverBudget atomic.Int64
	// DeadLetterFailures counts dead letters that could not be stored (the
	// dead-letter stream full or unavailable): each time, the message
	// stayed on its lane to be tried again.
	DeadLetterFailures atomic.Int64
	// Lingered counts owners that kept an empty lane after a turn and saw
	// a message arrive (Config.Linger), LingerHits those that then found
	// it and went on without letting the lane go.
	Lingered, LingerHits atomic.Int64

	deadMu sync.Mutex
	deadBy map[string]int64 // dead letters stored, by reason
}

// DeadLettersByReason returns how many dead letters the worker stored, by
// reason (the last token of agent.dlq.<reason>).
func (s *Stats) DeadLettersByReason() map[string]int64 {
	s.deadMu.Lock()
	defer s.deadMu.Unlock()
	out := make(map[string]int64, len(s.deadBy))
	for k, v := range s.deadBy {
		out[k] = v
	}
	return out
}

func (s *Stats) addDeadLetter(reason string) {
	s.deadMu.Lock()
	defer s.deadMu.Unlock()
	if s.deadBy == nil {
		s.deadBy = map[string]int64{}
	}
	s.deadBy[reason]++
}

// NewWorker returns a worker. It does not start consuming until Run.
func NewWorker(js jetstream.JetStream, streams *Streams, lanes *kvstore.Lanes, h Handler, cfg Config) (*Worker, error) {
	if js == nil || streams == nil || lanes == nil || h == nil {
		return nil, errors.New("lanes: NewWorker needs a JetStream, streams, lanes and a handler")
	}
	cfg = cfg.withDefaults()
	if err := (retention.Policy{SessionTTL: cfg.SessionTTL}).Validate(); err != nil {
		return nil, err
	}
	if cfg.SweepEvery == 0 {
		cfg.SweepEvery = streams.cfg.AckWait
	}
	w := &Worker{cfg: cfg, nc: js.Conn(), js: js, streams: streams, lanes: lanes, handler: h, transcripts: newTranscripts(transcriptCacheBytes),
		log: cfg.Logger.With().Str("worker", cfg.ID).Logger(), sched: slots.New(cfg.Concurrency, cfg.MaxInflightBytes), gate: newSetupGate(cfg.SetupConcurrency, cfg.setupKeep), held: map[string]uint64{}, shutdown: make(chan struct{})}
	w.turnCtx, w.cancelTurns = context.WithCancelCause(context.Background())
	return w, nil
}

// ID returns the worker id.
func (w *Worker) ID() string { return w.cfg.ID }

// Stats returns the worker's counters.
func (w *Worker) Stats() *Stats { return &w.stats }

// TranscriptReads returns how owners on this worker got their lanes'
// transcripts so far: hits took the cached copy as it was, tails the copy
// and the records added since, whole reads the entire transcript from
// the store (a miss: its cost grows with the session).
func (w *Worker) TranscriptReads() (hits, tails, whole int64) {
	return w.transcripts.hits.Load(), w.transcripts.tails.Load(), w.transcripts.reads.Load()
}

// Active returns how many lanes the worker runs now (its slots in use).
func (w *Worker) Active() int { return w.sched.Used() }

// InflightBytes returns the payload bytes charged to the lanes running here
// against the byte budget (Config.MaxInflightBytes).
func (w *Worker) InflightBytes() int64 { return w.sched.UsedBytes() }

// Waiting returns how many lanes wait here for a slot.
func (w *Worker) Waiting() int { return w.sched.Waiting() }

// Accepting reports whether the worker takes lanes: Run is consuming and
// the worker is not shutting down.
func (w *Worker) Accepting() bool { return w.consuming.Load() && !w.shuttingDown.Load() }

// Run consumes dispatch deliveries until ctx is done, then shuts down
// gracefully: it ends pulling, lets running turns finish within the
// shutdown grace (cancelling them after it), releases every lease and Naks
// the lanes' triggers so other workers take them over at once.
func (w *Worker) Run(ctx context.Context) error {
	batch := min(max(w.cfg.Concurrency, 16), 256)
	cc, err := w.streams.Dispatch.Consume(w.onDelivery, jetstream.PullMaxMessages(batch),
		jetstream.ConsumeErrHandler(func(_ jetstream.ConsumeContext, err error) {
			if !errors.Is(err, jetstream.ErrNoHeartbeat) {
				w.log.Debug().Err(err).Msg("dispatch consume")
			}
		}))
	if err != nil {
		return fmt.Errorf("lanes: consume dispatch: %w", err)
	}
	w.consuming.Store(true)
	defer w.consuming.Store(false)
	w.log.Info().Int("concurrency", w.cfg.Concurrency).Msg("worker started")
	sweepCtx, cancelSweep := context.WithCancel(context.Background())
	sweepDone := make(chan struct{})
	go func() {
		defer close(sweepDone)
		if w.cfg.SweepEvery > 0 {
			w.sweep(sweepCtx)
		}
	}()
	<-ctx.Done()
	w.shuttingDown.Store(true)
	close(w.shutdown)
	cancelSweep()
	<-sweepDone
	cc.Drain()
	select {
	case <-cc.Closed():
	case <-time.After(2 * time.Second):
		cc.Stop()
	}
	done := make(chan struct{})
	go func() { w.wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(w.cfg.ShutdownGrace):
		w.log.Warn().Dur("grace_ms", w.cfg.ShutdownGrace).Msg("shutdown grace over: cancelling running turns")
		w.cancelTurns(ErrShutdown)
		<-done
	}
	w.cancelTurns(ErrShutdown)
	w.log.Info().Int64("turns", w.stats.Turns.Load()).Msg("worker stopped")
	return nil
}

// onDelivery runs serially for the consume context, so it only takes a slot
// and hands the delivery off. With every slot busy it does not sit on the
// delivery until AckWait (its lane would wait that long): see busyDelivery.
func (w *Worker) onDelivery(msg jetstream.Msg) {
	if w.shuttingDown.Load() {
		w.settleDelivery(msg, settleHandBack)
		return
	}
	follower := w.heldHere(msg)
	var (
		charged int64 // payload bytes charged to the slot
		got     bool
	)
	if !follower {
		token, _ := strings.CutPrefix(msg.Subject(), events.InboundPrefix) // checked by the lane's owner
		charged, got = w.sched.Take(token, len(msg.Data()), w.now())
	}
	w.wg.Add(1)
	go func() {
		defer w.wg.Done()
		if follower {
			w.settleDelivery(msg, settleFollower) // its lane's owner here drains it
			return
		}
		if !got {
			if charged, got = w.busyDelivery(msg); !got {
				return
			}
		}
		w.sched.Put(w.handleDelivery(msg, charged))
	}()
}

// busyNakDelay is how soon a delivery a busy worker could not take comes
// back (to any worker).
const busyNakDelay = 250 * time.Millisecond

// busyDelivery deals with a delivery that arrived while every slot was
// busy, or the byte budget could not take its payload: a message of a lane
// someone owns is acked (the owner drains it); any other waits in line for
// a slot (fair scheduling: see waitForSlot) or, without fairness, is handed
// back, so a worker with room takes the lane. It reports whether the
// delivery got a slot, and the payload bytes charged to the slot.
func (w *Worker) busyDelivery(msg jetstream.Msg) (int64, bool) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	md, err := msg.Metadata()
	if err != nil {
		w.settleDelivery(msg, settleBusy)
		return 0, false
	}
	token, _, err := events.LaneOf(msg.Subject())
	if err != nil {
		w.settleDelivery(msg, settleBusy) // dead-lettered by a worker with room
		return 0, false
	}
	if !w.fair() || !w.sched.Known(token, w.now()) {
		// A lane waiting here was not held a moment ago: no need to ask.
		// (Without fairness nothing waits: a lane an owner here let go
		// over the byte budget is known, and handed back.)
		h, held, err := w.lanes.Holder(ctx, token)
		if err == nil && held && !holdsAsTrigger(h, md) {
			w.settleDelivery(msg, settleFollower)
			return 0, false
		}
		if err != nil || held || !w.fair() {
			w.settleDelivery(msg, settleBusy)
			return 0, false
		}
	}
	return w.waitForSlot(msg, token)
}

// holdsAsTrigger reports whether a delivery is the one the lane's holder
// keeps un-acked as its trigger: coming back means the holder stopped
// keeping it alive (it died, is paused, or lost its connection), so the
// lane needs a new owner once the lease lapses. A lease without a trigger
// (taken by the sweep, or written by an older worker) cannot tell: any
// redelivery counts.
func holdsAsTrigger(h kvstore.LeaseInfo, md *jetstream.MsgMetadata) bool {
	if h.Trigger == 0 {
		return md.NumDelivered > 1
	}
	return h.Trigger == md.Sequence.Stream
}

// deliveryEnd is what becomes of a dispatch delivery that does not become
// a lane's trigger; settleDelivery carries it out.
type deliveryEnd uint8

const (
	// settleFollower: the lane has an owner (or a delivery waiting here)
	// that drains the message: ack it.
	settleFollower deliveryEnd = iota
	// settleBusy: no slot here: hand it back after busyNakDelay, to any
	// worker.
	settleBusy
	// settleHandBack: hand it back at once (the worker shuts down, or it has
	// waited here long enough; it keeps its place for its redelivery).
	settleHandBack
	// settleRetry: the lane could not be taken now (no metadata, its
	// lease still held as this very trigger, the lease store failed):
	// try again in a second.
	settleRetry
	// settleDead: it was dead-lettered: ack it and delete its message.
	settleDead
	// settleNotDead: its dead letter could not be stored: the message
	// stays, and its delivery comes back after deadRetryDelay.
	settleNotDead
)

// settleDelivery is the one place that acks or naks a delivery the worker
// does not keep as a lane's trigger (owner.settleTrigger settles triggers).
func (w *Worker) settleDelivery(msg jetstream.Msg, end deliveryEnd) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	switch end {
	case settleFollower:
		w.stats.FollowerAcks.Add(1)
		w.ack(ctx, msg)
	case settleBusy:
		w.nak(msg, busyNakDelay)
	case settleHandBack:
		w.nak(msg, 0)
	case settleRetry:
		w.nak(msg, time.Second)
	case settleDead:
		w.ack(ctx, msg)
		if md, err := msg.Metadata(); err == nil {
			w.deleteInbound(ctx, md.Sequence.Stream)
		}
	case settleNotDead:
		w.nak(msg, w.cfg.deadRetry)
	}
}

func (w *Worker) nak(msg jetstream.Msg, delay time.Duration) {
	if msg == nil {
		return // a lane taken by the sweeper has no trigger delivery
	}
	w.stats.Naks.Add(1)
	var err error
	if delay > 0 {
		err = msg.NakWithDelay(delay)
	} else {
		err = msg.Nak()
	}
	if err != nil {
		w.log.Debug().Err(err).Msg("nak")
	}
}

func (w *Worker) ack(ctx context.Context, msg jetstream.Msg) {
	if msg == nil {
		return
	}
	if err := msg.DoubleAck(ctx); err != nil {
		w.log.Debug().Err(err).Msg("ack")
	}
}

// handleDelivery takes the lane of a delivery that got a slot and drains it
// (or settles the delivery when the lane is owned). The slot is charged
// charged bytes of the byte budget; it returns what the slot is charged
// when the lane is let go (more when its owner ran larger messages).
func (w *Worker) handleDelivery(msg jetstream.Msg, charged int64) int64 {
	if w.shuttingDown.Load() {
		w.settleDelivery(msg, settleHandBack) // it got a slot as the worker began to shut down
		return charged
	}
	leave, ok := w.gate.enter(w.shutdown)
	if !ok {
		w.settleDelivery(msg, settleHandBack) // the worker began to shut down while it waited to set up
		return charged
	}
	defer leave()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	md, err := msg.Metadata()
	if err != nil {
		w.log.Error().Err(err).Msg("delivery without metadata")
		w.settleDelivery(msg, settleRetry)
		return charged
	}
	token, key, err := events.LaneOf(msg.Subject())
	if err != nil {
		// No lane can be derived: keep the message in the dead-letter
		// stream, or on its subject until the dead letter can be stored.
		end := settleDead
		if w.deadLetter(ctx, events.DeadBadLane, msg.Subject(), md.Sequence.Stream, msg.Headers(), msg.Data(), err) != nil {
			end = settleNotDead
		}
		w.settleDelivery(msg, end)
		return charged
	}
	log := w.log.With().Str("lane", token).Logger()
	lease, err := w.lanes.Acquire(ctx, token, kvstore.LeaseInfo{Worker: w.cfg.ID, Acquired: w.now().UnixMilli(), Trigger: md.Sequence.Stream})
	var heldErr *kvstore.HeldError
	switch {
	case errors.As(err, &heldErr) && holdsAsTrigger(heldErr.Holder, md):
		// The trigger of an owner that stopped keeping it alive: retry
		// until its lease lapses.
		w.settleDelivery(msg, settleRetry)
		return charged
	case errors.Is(err, kvstore.ErrHeld):
		// The owner drains this message; if it dies, its own trigger
		// wakes the lane.
		w.settleDelivery(msg, settleFollower)
		return charged
	case err != nil:
		log.Warn().Err(err).Msg("acquire lease")
		w.settleDelivery(msg, settleRetry)
		return charged
	}
	w.stats.Acquired.Add(1)
	o := &owner{w: w, token: token, key: key, subject: msg.Subject(), log: log, setUp: leave,
		lease: ownerLease{Lease: lease, trigger: msg, triggerSeq: md.Sequence.Stream},
		slot:  slotUse{since: w.now(), charged: charged}}
	o.markHeld(true)
	defer o.markHeld(false)
	o.run()
	return o.slot.charged
}

// errNotDeadLettered: a message that must be dead-lettered could not be,
// as the dead-letter stream is full or unavailable. The message stays where
// it is (its lane waits behind it) and is tried again after
// deadRetryDelay; it is never deleted without its dead letter.
var errNotDeadLettered = errors.New("lanes: dead letter not stored")

// deadRetryDelay is how soon a message whose dead letter could not be
// stored is tried again.
const deadRetryDelay = 15 * time.Second

// deadLetter stores a message that cannot be processed, with the reason.
// The sender's headers go along, except those NATS acts on (Nats-*: the
// Nats-Expected-* checks, Nats-Msg-Id, Nats-TTL, Nats-Rollup, ...): they
// were meant for the inbound stream, and the dead-letter stream would
// apply them to the dead letter and refuse it. The dead letter's own
// Nats-Msg-Id names the inbound message, so one stored by an attempt whose
// caller then failed (a poison batch's next one, a lost ack) is not stored
// twice when the message is tried again. A dead letter that is not stored
// is errNotDeadLettered: the caller keeps the message.
func (w *Worker) deadLetter(ctx context.Context, reason, subject string, seq uint64, hdr nats.Header, data []byte, cause error) error {
	m := nats.NewMsg(events.DeadPrefix + reason)
	m.Data = data
	for k, v := range hdr {
		if len(k) < 5 || !strings.EqualFold(k[:5], "nats-") {
			m.Header[k] = v
		}
	}
	m.Header.Set(events.HeaderError, cause.Error())
	m.Header.Set(events.HeaderSubject, subject)
	m.Header.Set(events.HeaderSeq, strconv.FormatUint(seq, 10))
	m.Header.Set(events.HeaderMsgID, "dead-"+strconv.FormatUint(seq, 10))
	if _, err := w.js.PublishMsg(ctx, m); err != nil {
		w.stats.DeadLetterFailures.Add(1)
		w.log.Error().Err(err).Str("reason", reason).Str("subject", subject).Uint64("seq", seq).Dur("retry_in", w.cfg.deadRetry).
			Msg("dead letter not stored: the message stays on its lane, which waits behind it, and is tried again")
		return fmt.Errorf("%w: %s message %d: %w", errNotDeadLettered, reason, seq, err)
	}
	w.stats.DeadLetters.Add(1)
	w.stats.addDeadLetter(reason)
	w.log.Warn().Str("reason", reason).Str("subject", subject).Uint64("seq", seq).Err(cause).Msg("dead-lettered")
	return nil
}

func (w *Worker) deleteInbound(ctx context.Context, seq uint64) {
	if err := w.streams.Inbound.DeleteMsg(ctx, seq); err != nil && !errors.Is(err, jetstream.ErrMsgNotFound) {
		w.log.Debug().Err(err).Uint64("seq", seq).Msg("delete processed message")
	}
}
