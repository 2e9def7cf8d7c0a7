package lanes

import (
	"context"
	"errors"
	"fmt"
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

// Index is told of sessions' activity and of their end.
type Index interface {
	// Touch says that a session's run started or committed now. It
	// runs on the turn's path: it must not wait on the network.
	Touch(a Activity)
	// Queued says that a message of session key, run, was delivered for
	// the first time: the session is to be listed (if it is not yet)
	// while the message waits for its turn. It runs on the delivery
	// path: it must not wait on the network.
	Queued(key, run string)
	// Forgotten says that session key was forgotten (its transcript,
	// settings and lane records are gone).
	Forgotten(ctx context.Context, key string)
}

// Activity is what Index.Touch hears of a session: its run that started
// or committed, and its state as of then.
type Activity struct {
	Key string
	Run string
	// Committed says the run's turn committed; Through and State are
	// then the lane's cursor and state after it (before it when not).
	Committed bool
	Through   uint64
	State     *events.SessionState
}

// ErrShutdown is the cause of contexts cancelled because the worker shuts down.
var ErrShutdown = errors.New("lanes: worker shutting down")

// now reads the worker's clock (Config.Now).
func (w *Worker) now() time.Time { return w.cfg.Now() }

// Worker owns lanes: it takes dispatch deliveries, acquires the lane's lease,
// drains the lane in order through the Handler, and hands lanes over when it
// shuts down.
type Worker struct {
	// notices are the paused lanes' messages noticed (pause.go).
	notices pauseNotices
	cfg     Config
	nc      *nats.Conn
	js      jetstream.JetStream
	streams *Streams
	lanes   *kvstore.Lanes
	handler Handler
	log     zerolog.Logger

	sched  *slots.Scheduler
	gate   *setupGate
	heldMu sync.Mutex
	held   map[string]uint64 // lanes owners here hold → their trigger's sequence (lease.go)
	// storedWake are the lanes whose owner here watches them (the drain's
	// quietWatch) → its stored channel: a delivery of the lane's message
	// wakes it, the message being stored (lease.go, watchStored).
	storedWake map[string]chan struct{}
	// watches are the owners' lane watches (watch.go).
	watches      laneWatches
	consuming    atomic.Bool // Run consumes dispatch deliveries
	shuttingDown atomic.Bool
	shutdown     chan struct{}   // closed when the worker starts to shut down
	lingering    atomic.Int64    // owners lingering now (tests wait on it)
	turnCtx      context.Context // cancelled when the shutdown grace runs out
	cancelTurns  context.CancelCauseFunc
	wg           sync.WaitGroup

	// life is the worker's current life (nil without Config.Liveness),
	// alive what it knows of the others'.
	life  atomic.Pointer[life]
	alive *liveness

	stats Stats
	// ret is the retention pass's state (expire.go); testHookIdle, when
	// set, is called when a pass found a lane idle, before it takes it.
	ret          retainer
	testHookIdle func(token string)
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
	// Delivered counts the completions published to a parent's lane
	// (a second publish of one, after a crash, included).
	Delivered atomic.Int64
	// QuietSkips counts drains that ended without reading the lane again,
	// the last turn's watch having seen it stay empty.
	QuietSkips atomic.Int64
	// OverBudget counts owners that let their lane go for a while because
	// its next message did not fit the byte budget.
	OverBudget atomic.Int64
	// Paused counts owners that let their lane go because its session was
	// paused (Config.Paused), Woken the lanes Wake took up again.
	Paused, Woken atomic.Int64
	// DeadLetterFailures counts dead letters that could not be stored (the
	// dead-letter stream full or unavailable): each time, the message
	// stayed on its lane to be tried again.
	DeadLetterFailures atomic.Int64
	// Lingered counts owners that kept an empty lane after a turn and saw
	// a message arrive (Config.Linger), LingerHits those that then found
	// it and went on without letting the lane go.
	Lingered, LingerHits atomic.Int64
	// TakenOver counts lanes taken over from workers found dead
	// (Config.Liveness).
	TakenOver atomic.Int64
	// CursorsKnown counts drains that began without reading the lane's
	// cursor: this worker took the lane back over its own release, which
	// named the cursor it left (kvstore.Lease.Left).
	CursorsKnown atomic.Int64
	// WatchDropped counts messages a lane's watch did not see, or saw and
	// did not judge, because too many waited (see laneWatches): each ran
	// in order after the turn instead of cutting it or waking its lingering
	// owner at once.
	WatchDropped atomic.Int64

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
	if err := (retention.Policy{SessionTTL: cfg.SessionTTL, Rate: cfg.RetentionRate}).Validate(); err != nil {
		return nil, err
	}
	if cfg.SweepEvery == 0 {
		cfg.SweepEvery = streams.cfg.AckWait
	}
	w := &Worker{cfg: cfg, nc: js.Conn(), js: js, streams: streams, lanes: lanes, handler: h, transcripts: newTranscripts(transcriptCacheBytes),
		log: cfg.Logger.With().Str("worker", cfg.ID).Logger(), sched: slots.New(cfg.Concurrency, cfg.MaxInflightBytes, cfg.shares()), gate: newSetupGate(cfg.SetupConcurrency, cfg.setupKeep), held: map[string]uint64{}, shutdown: make(chan struct{})}
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

// TranscriptCache returns the bytes the transcript cache charges its
// transcripts, and its budget.
func (w *Worker) TranscriptCache() (charged, max int) {
	w.transcripts.mu.Lock()
	defer w.transcripts.mu.Unlock()
	return w.transcripts.lanes.Size()
}

// Active returns how many lanes the worker runs now (its slots in use).
func (w *Worker) Active() int { return w.sched.Used() }

// InflightBytes returns the payload bytes charged to the lanes running here
// against the byte budget (Config.MaxInflightBytes).
func (w *Worker) InflightBytes() int64 { return w.sched.UsedBytes() }

// Waiting returns how many lanes wait here for a slot.
func (w *Worker) Waiting() int { return w.sched.Waiting() }

// Held returns how many lanes owners on this worker hold now.
func (w *Worker) Held() int {
	w.heldMu.Lock()
	defer w.heldMu.Unlock()
	return len(w.held)
}

// Slots returns how many lanes the worker runs at once at most
// (Config.Concurrency).
func (w *Worker) Slots() int { return w.cfg.Concurrency }

// Accepting reports whether the worker takes lanes: Run is consuming and
// the worker is not shutting down.
func (w *Worker) Accepting() bool { return w.consuming.Load() && !w.shuttingDown.Load() }

// Run consumes dispatch deliveries until ctx is done, then shuts down
// gracefully: it ends pulling, lets running turns finish within the
// shutdown grace (cancelling them after it), releases every lease and Naks
// the lanes' triggers so other workers take them over at once.
func (w *Worker) Run(ctx context.Context) error {
	if len(w.cfg.SealKey) == 0 {
		kctx, cancel := context.WithTimeout(ctx, readTimeout)
		key, err := w.lanes.SealKey(kctx)
		cancel()
		if err != nil {
			return fmt.Errorf("lanes: %w", err)
		}
		w.cfg.SealKey = key
	}
	stopWatching, endLife := func() {}, func() {}
	if w.cfg.Liveness != nil {
		var err error
		if stopWatching, endLife, err = w.startLiveness(); err != nil {
			return err
		}
	}
	batch := min(max(w.cfg.Concurrency, 16), 256)
	cc, err := w.streams.Dispatch.Consume(w.onDelivery, jetstream.PullMaxMessages(batch),
		jetstream.ConsumeErrHandler(func(_ jetstream.ConsumeContext, err error) {
			if !errors.Is(err, jetstream.ErrNoHeartbeat) {
				w.log.Debug().Err(err).Msg("dispatch consume")
			}
		}))
	if err != nil {
		endLife()
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
	stopWatching()
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
	endLife()
	w.watches.close() // every owner ended, and its watch with it
	w.log.Info().Int64("turns", w.stats.Turns.Load()).Msg("worker stopped")
	return nil
}

// everyTick calls f every period until ctx is done or f returns false.
func everyTick(ctx context.Context, period time.Duration, f func() bool) {
	t := time.NewTicker(period)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if !f() {
			return
		}
	}
}
