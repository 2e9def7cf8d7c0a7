package lanes

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"runtime/debug"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"

	"github.com/lanefleet/lanefleet/events"
	"github.com/lanefleet/lanefleet/kvstore"
	"github.com/lanefleet/lanefleet/lanes/queue"
	"github.com/lanefleet/lanefleet/message"
	"github.com/lanefleet/lanefleet/sessionfile"
)

// ErrShutdown is the cause of contexts cancelled because the worker stops.
var ErrShutdown = errors.New("lanes: worker shutting down")

// Config configures a Worker.
type Config struct {
	ID            string        // worker id in logs, leases and events; default random
	Concurrency   int           // lanes owned (turns running) at once; default 64
	MaxPayload    int           // inbound payload limit in bytes; default events.DefaultMaxPayload
	MaxAttempts   int           // starts of one message before it is dead-lettered; default 3
	ShutdownGrace time.Duration // how long a stop lets running turns finish; default 10s
	RetryDelay    time.Duration // first delay before retrying a failed turn; default 500ms
	SweepEvery    time.Duration // how often stranded lanes are looked for; default the dispatch AckWait, <0 disables
	Logger        zerolog.Logger
}

// Config defaults.
const (
	DefaultConcurrency   = 64
	DefaultMaxAttempts   = 3
	DefaultShutdownGrace = 10 * time.Second
)

func (c Config) withDefaults() Config {
	if c.ID == "" {
		c.ID = "w-" + randomHex(4)
	}
	if c.Concurrency <= 0 {
		c.Concurrency = DefaultConcurrency
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
	return c
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// Worker owns lanes: it takes dispatch deliveries, acquires the lane's lease,
// drains the lane in order through the Handler, and hands lanes over when it
// stops.
type Worker struct {
	cfg     Config
	nc      *nats.Conn
	js      jetstream.JetStream
	streams *Streams
	lanes   *kvstore.Lanes
	handler Handler
	log     zerolog.Logger

	slots    chan struct{}
	stopping atomic.Bool
	turnCtx  context.Context // cancelled when the shutdown grace runs out
	turnStop context.CancelCauseFunc
	wg       sync.WaitGroup

	stats Stats
}

// Stats counts what a worker did.
type Stats struct {
	Turns, FollowerAcks, Naks, DeadLetters, Acquired, Released, Swept atomic.Int64
}

// NewWorker returns a worker. It does not start consuming until Run.
func NewWorker(js jetstream.JetStream, streams *Streams, lanes *kvstore.Lanes, h Handler, cfg Config) (*Worker, error) {
	if js == nil || streams == nil || lanes == nil || h == nil {
		return nil, errors.New("lanes: NewWorker needs a JetStream, streams, lanes and a handler")
	}
	cfg = cfg.withDefaults()
	if cfg.SweepEvery == 0 {
		cfg.SweepEvery = streams.cfg.AckWait
	}
	w := &Worker{cfg: cfg, nc: js.Conn(), js: js, streams: streams, lanes: lanes, handler: h,
		log: cfg.Logger.With().Str("worker", cfg.ID).Logger(), slots: make(chan struct{}, cfg.Concurrency)}
	w.turnCtx, w.turnStop = context.WithCancelCause(context.Background())
	return w, nil
}

// ID returns the worker id.
func (w *Worker) ID() string { return w.cfg.ID }

// Stats returns the worker's counters.
func (w *Worker) Stats() *Stats { return &w.stats }

// Run consumes dispatch deliveries until ctx is done, then stops gracefully:
// it stops pulling, lets running turns finish within the shutdown grace
// (cancelling them after it), releases every lease and Naks the lanes'
// triggers so other workers take them over at once.
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
	w.log.Info().Int("concurrency", w.cfg.Concurrency).Msg("worker started")
	sweepCtx, stopSweep := context.WithCancel(context.Background())
	sweepDone := make(chan struct{})
	go func() {
		defer close(sweepDone)
		if w.cfg.SweepEvery > 0 {
			w.sweep(sweepCtx)
		}
	}()
	<-ctx.Done()
	w.stopping.Store(true)
	stopSweep()
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
		w.log.Warn().Dur("grace", w.cfg.ShutdownGrace).Msg("shutdown grace over: cancelling running turns")
		w.turnStop(ErrShutdown)
		<-done
	}
	w.turnStop(ErrShutdown)
	w.log.Info().Int64("turns", w.stats.Turns.Load()).Msg("worker stopped")
	return nil
}

// onDelivery runs serially for the consume context, so it only takes a slot
// and hands the delivery off.
func (w *Worker) onDelivery(msg jetstream.Msg) {
	if w.stopping.Load() {
		w.nak(msg, 0)
		return
	}
	w.slots <- struct{}{}
	w.wg.Add(1)
	go func() {
		defer func() { <-w.slots; w.wg.Done() }()
		w.handleDelivery(msg)
	}()
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

func (w *Worker) handleDelivery(msg jetstream.Msg) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	md, err := msg.Metadata()
	if err != nil {
		w.log.Error().Err(err).Msg("delivery without metadata")
		w.nak(msg, time.Second)
		return
	}
	token, key, err := events.LaneOf(msg.Subject())
	if err != nil {
		// No lane can be derived: keep the message in the dead-letter stream.
		w.deadLetter(ctx, "bad-lane", msg.Subject(), md.Sequence.Stream, msg.Headers(), msg.Data(), err)
		w.ack(ctx, msg)
		w.deleteInbound(ctx, md.Sequence.Stream)
		return
	}
	log := w.log.With().Str("lane", token).Logger()
	lease, err := w.lanes.Acquire(ctx, token, kvstore.LeaseInfo{Worker: w.cfg.ID, Acquired: time.Now().UnixMilli()})
	switch {
	case errors.Is(err, kvstore.ErrHeld) && md.NumDelivered == 1:
		// A live owner exists and drains this message.
		w.stats.FollowerAcks.Add(1)
		w.ack(ctx, msg)
		return
	case errors.Is(err, kvstore.ErrHeld):
		// Possibly the trigger of a dead owner: retry until its lease lapses.
		w.nak(msg, time.Second)
		return
	case err != nil:
		log.Warn().Err(err).Msg("acquire lease")
		w.nak(msg, time.Second)
		return
	}
	w.stats.Acquired.Add(1)
	o := &owner{w: w, token: token, key: key, subject: msg.Subject(), trigger: msg, triggerSeq: md.Sequence.Stream,
		lease: lease, log: log}
	o.run()
}

// deadLetter stores a message that cannot be processed, with the reason.
func (w *Worker) deadLetter(ctx context.Context, reason, subject string, seq uint64, hdr nats.Header, data []byte, cause error) {
	w.stats.DeadLetters.Add(1)
	m := nats.NewMsg(events.DeadPrefix + reason)
	m.Data = data
	for k, v := range hdr {
		if k != events.HeaderMsgID {
			m.Header[k] = v
		}
	}
	m.Header.Set(events.HeaderError, cause.Error())
	m.Header.Set(events.HeaderSubject, subject)
	m.Header.Set(events.HeaderSeq, strconv.FormatUint(seq, 10))
	if _, err := w.js.PublishMsg(ctx, m); err != nil {
		w.log.Error().Err(err).Str("subject", subject).Uint64("seq", seq).Msg("dead letter not stored; message stays in the inbound stream")
		return
	}
	w.log.Warn().Str("reason", reason).Str("subject", subject).Uint64("seq", seq).Err(cause).Msg("dead-lettered")
}

func (w *Worker) deleteInbound(ctx context.Context, seq uint64) {
	if err := w.streams.Inbound.DeleteMsg(ctx, seq); err != nil && !errors.Is(err, jetstream.ErrMsgNotFound) {
		w.log.Debug().Err(err).Uint64("seq", seq).Msg("delete processed message")
	}
}

// owner drains one lane while it holds the lease.
type owner struct {
	w          *Worker
	token, key string
	subject    string
	trigger    jetstream.Msg
	triggerSeq uint64
	lease      *kvstore.Lease
	log        zerolog.Logger

	cursor      kvstore.Cursor
	history     []message.Entry
	loaded      bool
	checkedLast bool
	failures    map[uint64]int // attempts started by this owner, per inbound seq
	purgedTo    uint64
	lastEnd     time.Time // when this owner's last turn ended (mode reject)
}

// run drains the lane, then releases it (lease-and-drain). Each lease gets
// its own heartbeat, stopped before the lease is released so a renewal never
// races the release.
func (o *owner) run() {
	for {
		ctx, cancel := context.WithCancelCause(o.w.turnCtx)
		hbDone := make(chan struct{})
		go o.heartbeat(ctx, cancel, o.lease, hbDone)
		lostInDrain := o.drain(ctx)
		lost := lostInDrain || errors.Is(context.Cause(ctx), kvstore.ErrLeaseLost)
		cancelled := ctx.Err() != nil
		cancel(nil)
		<-hbDone
		switch {
		case lost:
			// Someone else may own the lane now, or nobody: let the trigger
			// be redelivered to whoever needs it.
			o.w.nak(o.trigger, 0)
			pctx, pcancel := context.WithTimeout(context.Background(), 5*time.Second)
			o.purgeProcessed(pctx, true)
			pcancel()
			return
		case cancelled:
			o.abandon()
			return
		}
		if !o.release() {
			return
		}
	}
}

// heartbeat renews the lease and keeps the trigger delivery alive.
func (o *owner) heartbeat(ctx context.Context, cancel context.CancelCauseFunc, lease *kvstore.Lease, done chan<- struct{}) {
	defer close(done)
	t := time.NewTicker(o.w.lanes.RenewEvery())
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		rctx, rcancel := context.WithTimeout(ctx, o.w.lanes.RenewEvery())
		err := lease.Renew(rctx)
		rcancel()
		if errors.Is(err, kvstore.ErrLeaseLost) {
			o.log.Warn().Err(err).Msg("lease lost: stopping the lane's work")
			cancel(err)
			return
		}
		if err != nil && ctx.Err() == nil {
			o.log.Warn().Err(err).Msg("renew lease")
		}
		if o.trigger != nil {
			if err := o.trigger.InProgress(); err != nil {
				o.log.Debug().Err(err).Msg("trigger in progress")
			}
		}
	}
}

// drain processes the lane's messages in order until none is left, the
// worker stops, or the lease is lost. It reports true when a fenced write
// found the lease lost.
func (o *owner) drain(ctx context.Context) bool {
	c, err := o.w.lanes.Cursor(ctx, o.token)
	if err != nil {
		o.log.Warn().Err(err).Msg("read cursor")
		return false
	}
	o.cursor = c
	if c.Seq > 0 && !o.checkedLast {
		// The last committed turn may have died between its record and its
		// final event: publish the final from the record.
		o.checkedLast = true
		o.ensureFinal(ctx, c.Seq)
	}
	for !o.w.stopping.Load() && ctx.Err() == nil {
		raw, err := o.w.streams.Inbound.GetMsg(ctx, o.cursor.Seq+1, jetstream.WithGetMsgSubject(o.subject))
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			return false
		}
		if err != nil {
			if ctx.Err() == nil {
				o.log.Warn().Err(err).Msg("read lane")
			}
			return false
		}
		if err := o.process(ctx, raw); err != nil {
			if errors.Is(err, kvstore.ErrLeaseLost) {
				return true
			}
			if ctx.Err() != nil {
				return false
			}
			n := o.failures[raw.Sequence]
			o.log.Warn().Err(err).Uint64("seq", raw.Sequence).Int("failures", n).Msg("turn failed; retrying")
			delay := min(o.w.cfg.RetryDelay*time.Duration(max(n, 1)), 30*time.Second)
			select {
			case <-time.After(delay):
			case <-ctx.Done():
				return false
			}
		}
	}
	return false
}

// process runs one inbound message as a turn. The turn is committed by one
// fenced write, its record, which also moves the lane's cursor.
func (o *owner) process(ctx context.Context, raw *jetstream.RawStreamMsg) error {
	seq := raw.Sequence
	run := strconv.FormatUint(seq, 10)
	log := o.log.With().Str("run_id", run).Logger()
	em := o.newEmitter(run, log, events.IsJSON(raw.Header.Get(events.HeaderContentType), raw.Data))
	if o.cursor.SessionID == "" {
		o.cursor.SessionID = sessionfile.NewSessionID()
	}
	// Earlier attempts (a crash, a lost lease, a failed try) left events:
	// continue their sequence and count them.
	prior, _, err := em.resume(ctx, o.w.streams.Events)
	if err != nil {
		return err
	}
	if o.failures == nil {
		o.failures = map[uint64]int{}
	}
	attempt := max(prior, o.failures[seq]) + 1
	em.attempt = attempt
	if attempt > o.w.cfg.MaxAttempts {
		cause := fmt.Errorf("turn started %d times without finishing", attempt-1)
		o.w.deadLetter(ctx, "poison", o.subject, seq, raw.Header, raw.Data, cause)
		return o.failTurn(ctx, em, seq, "poison_message", cause.Error()+"; the message was dead-lettered", attempt)
	}
	// Read what the turn needs before it counts as an attempt: a store that
	// is briefly unavailable delays the lane but never dead-letters a message.
	if !o.loaded {
		recs, err := o.w.lanes.Records(ctx, o.token)
		if err != nil {
			return err
		}
		o.history, o.loaded = kvstore.Entries(recs), true
	}
	// The first event of every attempt is stored before the turn starts, so
	// a message that kills its worker is counted and dead-lettered at last.
	startData := events.EventData{Phase: events.PhaseStart, StartedAt: time.Now().UnixMilli(), Worker: o.w.cfg.ID, InboundSeq: seq}
	if prior > 0 {
		startData.Phase = events.PhaseRestart
	}
	if err := em.sync(ctx, events.StreamLifecycle, startData, attempt); err != nil {
		return err
	}
	o.failures[seq] = attempt

	in, err := events.DecodeInbound(raw.Header.Get(events.HeaderContentType), raw.Data, o.w.cfg.MaxPayload)
	if err == nil && in.Session != "" && in.Session != o.key {
		err = &events.DecodeError{Field: "session", Reason: fmt.Sprintf("%q does not match the lane's session", in.Session)}
	}
	if err != nil {
		o.w.deadLetter(ctx, "invalid", o.subject, seq, raw.Header, raw.Data, err)
		return o.failTurn(ctx, em, seq, "invalid_input", err.Error(), attempt)
	}
	mode, _ := queue.ParseMode(in.Mode)
	if mode == queue.ModeReject && raw.Time.Before(o.lastEnd) {
		// It arrived while the session was busy (the turn before it ended
		// after it arrived): refuse it, as the sender asked.
		return o.failTurn(ctx, em, seq, "rejected", "the session was busy when this message arrived (mode reject); it was not run", attempt)
	}
	var merged []collected
	if mode == queue.ModeCollect {
		if merged, err = o.collect(ctx, raw, in); err != nil {
			return err
		}
		if len(merged) > 1 {
			in = mergeInbound(merged)
		}
	}
	turn := &Turn{SessionKey: o.key, Token: o.token, SessionID: o.cursor.SessionID, RunID: run, Seq: seq,
		Attempt: attempt, Worker: o.w.cfg.ID, Inbound: in, History: o.history, Received: raw.Time, em: em}
	var steered []collected
	last := seq
	if len(merged) > 1 {
		last = merged[len(merged)-1].raw.Sequence
	}
	turn.steer = func(ctx context.Context) []*events.Inbound {
		batch, err := o.pendingSteers(ctx, last)
		if err != nil || len(batch) == 0 {
			return nil
		}
		steered = append(steered, batch...)
		last = batch[len(batch)-1].raw.Sequence
		out := make([]*events.Inbound, len(batch))
		for i, c := range batch {
			out[i] = c.in
		}
		return out
	}
	turnCtx, stopWatch := o.watchInterrupts(ctx)
	out, err := o.callHandler(turnCtx, turn, log)
	interrupted := errors.Is(context.Cause(turnCtx), errInterrupted)
	stopWatch()
	if interrupted && err != nil && ctx.Err() == nil {
		return o.interrupted(ctx, em, seq, attempt)
	}
	if err != nil {
		return err
	}
	// The turn ended now, before its final event is published: a message
	// sent after a client saw that event never counts as "while busy".
	o.lastEnd = time.Now()
	if err := o.commit(ctx, em, last, out); err != nil {
		return err
	}
	for _, m := range append(merged[min(1, len(merged)):], steered...) {
		o.announceMerged(ctx, m, run)
	}
	o.w.stats.Turns.Add(1)
	return nil
}

// errInterrupted cancels a turn when an interrupt-mode message arrives.
var errInterrupted = errors.New("lanes: interrupted by a newer message")

// watchInterrupts returns the turn's context, cancelled with errInterrupted
// as soon as an interrupt or rollback message is published to the lane. A
// core subscription sees every message the stream stores; if it misses one
// (a reconnect), that message still runs as a follow-up.
func (o *owner) watchInterrupts(ctx context.Context) (context.Context, func()) {
	turnCtx, cancel := context.WithCancelCause(ctx)
	sub, err := o.w.nc.Subscribe(o.subject, func(m *nats.Msg) {
		in, err := events.DecodeInbound(m.Header.Get(events.HeaderContentType), m.Data, o.w.cfg.MaxPayload)
		if err != nil {
			return
		}
		if mode, _ := queue.ParseMode(in.Mode); mode == queue.ModeInterrupt || mode == queue.ModeRollback {
			cancel(errInterrupted)
		}
	})
	if err != nil {
		o.log.Debug().Err(err).Msg("watch for interrupts")
		return turnCtx, func() { cancel(nil) }
	}
	// One round trip so the server has the subscription before the turn
	// starts: an interrupt published from then on is seen.
	_ = o.w.nc.FlushTimeout(time.Second)
	return turnCtx, func() { _ = sub.Unsubscribe(); cancel(nil) }
}

// interrupted ends a turn cut short by an interrupt: its run and every
// message queued before the interrupt end with an "interrupted" final event
// and nothing in the transcript; the interrupt message runs next.
func (o *owner) interrupted(ctx context.Context, em *emitter, seq uint64, attempt int) error {
	const why = "interrupted: a newer message asked to interrupt the session"
	through := seq
	var dropped []*jetstream.RawStreamMsg
	for {
		next, err := o.w.streams.Inbound.GetMsg(ctx, through+1, jetstream.WithGetMsgSubject(o.subject))
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			break
		}
		if err != nil {
			return err
		}
		in, derr := events.DecodeInbound(next.Header.Get(events.HeaderContentType), next.Data, o.w.cfg.MaxPayload)
		if derr == nil {
			if mode, _ := queue.ParseMode(in.Mode); mode == queue.ModeInterrupt || mode == queue.ModeRollback {
				break
			}
		}
		dropped = append(dropped, next)
		through = next.Sequence
	}
	em.emit(events.StreamLifecycle, events.EventData{Phase: events.PhaseError, Error: why, EndedAt: time.Now().UnixMilli(), Attempt: attempt})
	res := &events.Result{Payloads: []events.Payload{{Text: "Interrupted.", IsError: true}},
		Meta: events.Meta{Aborted: true, Error: &events.RunError{Kind: "interrupted", Message: why}}}
	if err := o.commit(ctx, em, through, &Outcome{Result: res}); err != nil {
		return err
	}
	for _, d := range dropped {
		const msg = "dropped: an interrupt arrived after this message, before it ran"
		o.endOther(ctx, d, events.EventData{Phase: events.PhaseError, Error: msg, EndedAt: time.Now().UnixMilli()},
			&events.Result{Payloads: []events.Payload{{Text: "Dropped by an interrupt.", IsError: true}},
				Meta: events.Meta{Aborted: true, Error: &events.RunError{Kind: "interrupted", Message: msg}}})
	}
	return nil
}

// pendingSteers returns the steer-mode messages waiting right after seq. A
// message of another mode ends the batch: order is kept, so a steer message
// queued behind a follow-up waits for its own turn.
func (o *owner) pendingSteers(ctx context.Context, seq uint64) ([]collected, error) {
	var batch []collected
	for {
		next, err := o.w.streams.Inbound.GetMsg(ctx, seq+1, jetstream.WithGetMsgSubject(o.subject))
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			return batch, nil
		}
		if err != nil {
			return batch, err
		}
		in, err := events.DecodeInbound(next.Header.Get(events.HeaderContentType), next.Data, o.w.cfg.MaxPayload)
		if err != nil || (in.Session != "" && in.Session != o.key) {
			return batch, nil
		}
		if m, _ := queue.ParseMode(in.Mode); m != queue.ModeSteer {
			return batch, nil
		}
		batch = append(batch, collected{raw: next, in: in})
		seq = next.Sequence
	}
}

// collected is one message of a collect batch.
type collected struct {
	raw *jetstream.RawStreamMsg
	in  *events.Inbound
}

// collect gathers the collect-mode messages waiting right after first (up
// to the reference's cap of 20) into one batch. A message of another mode,
// or one that does not decode, ends the batch and gets its own turn.
func (o *owner) collect(ctx context.Context, first *jetstream.RawStreamMsg, in *events.Inbound) ([]collected, error) {
	batch := []collected{{raw: first, in: in}}
	for len(batch) < queue.CapDefault {
		next, err := o.w.streams.Inbound.GetMsg(ctx, batch[len(batch)-1].raw.Sequence+1, jetstream.WithGetMsgSubject(o.subject))
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			break
		}
		if err != nil {
			return nil, err
		}
		nin, err := events.DecodeInbound(next.Header.Get(events.HeaderContentType), next.Data, o.w.cfg.MaxPayload)
		if err != nil || (nin.Session != "" && nin.Session != o.key) {
			break
		}
		if m, _ := queue.ParseMode(nin.Mode); m != queue.ModeCollect {
			break
		}
		batch = append(batch, collected{raw: next, in: nin})
	}
	return batch, nil
}

// mergeInbound makes one inbound message of a collect batch, with the
// reference's merged prompt and every image.
func mergeInbound(batch []collected) *events.Inbound {
	merged := *batch[0].in
	merged.Images = nil
	texts := make([]string, len(batch))
	for i, c := range batch {
		texts[i] = c.in.Text
		merged.Images = append(merged.Images, c.in.Images...)
	}
	merged.Text = queue.CollectPrompt(texts, "")
	return &merged
}

// announceMerged tells the sender of a merged message which run answers it.
func (o *owner) announceMerged(ctx context.Context, m collected, into string) {
	o.endOther(ctx, m.raw, events.EventData{Phase: events.PhaseMerged, Text: into}, &events.Result{Meta: events.Meta{MergedInto: into}})
}

// endOther ends the run of a message the current turn consumed without
// running it (merged, steered or dropped): a lifecycle event saying why, then
// its final event, continuing whatever that run published before.
func (o *owner) endOther(ctx context.Context, raw *jetstream.RawStreamMsg, why events.EventData, res *events.Result) {
	run := strconv.FormatUint(raw.Sequence, 10)
	em := o.newEmitter(run, o.log, events.IsJSON(raw.Header.Get(events.HeaderContentType), raw.Data))
	if _, _, err := em.resume(ctx, o.w.streams.Events); err != nil {
		o.log.Warn().Err(err).Str("run_id", run).Msg("events of a consumed run")
	}
	em.emit(events.StreamLifecycle, why)
	if err := em.final(ctx, res); err != nil {
		o.log.Warn().Err(err).Str("run_id", run).Msg("final event of a consumed run")
	}
}

// commit writes the turn's record (fenced), publishes its final event and
// moves the cursor to seq, the last inbound message the turn consumed.
func (o *owner) commit(ctx context.Context, em *emitter, seq uint64, out *Outcome) error {
	rec := kvstore.Record{InboundSeq: seq, RunID: em.run, SessionID: o.cursor.SessionID, Entries: out.Entries}
	if out.Result != nil {
		var err error
		if rec.Final, _, err = events.EncodeEvent(&events.Event{Stream: events.StreamFinal, Data: events.EventData{Result: out.Result}}, false); err != nil {
			return err
		}
	}
	if err := o.lease.PutRecord(ctx, rec); err != nil {
		return err
	}
	if out.Result != nil {
		if err := em.final(ctx, out.Result); err != nil {
			// The turn is committed; the final event is published again by
			// the lane's next owner (ensureFinal) if it never got stored.
			o.log.Warn().Err(err).Msg("final event")
		}
	}
	o.cursor.Seq = seq
	clear(o.failures)
	if o.loaded {
		o.history = append(o.history, out.Entries...)
	}
	return nil
}

func (o *owner) newEmitter(run string, log zerolog.Logger, asJSON bool) *emitter {
	return &emitter{js: o.w.js, key: o.key, run: run, log: log, asJSON: asJSON,
		subject: events.EventPrefix + o.token + "." + run}
}

func (o *owner) callHandler(ctx context.Context, t *Turn, log zerolog.Logger) (out *Outcome, err error) {
	defer func() {
		if p := recover(); p != nil {
			log.Error().Interface("panic", p).Bytes("stack", debug.Stack()).Msg("handler panicked")
			err = fmt.Errorf("lanes: handler panicked: %v", p)
		}
	}()
	out, err = o.w.handler.HandleTurn(log.WithContext(ctx), t)
	if err == nil && out == nil {
		err = errors.New("lanes: handler returned no outcome")
	}
	return out, err
}

// failTurn ends a run the handler never saw with an error event and commits
// it (no entries) so the lane moves on.
func (o *owner) failTurn(ctx context.Context, em *emitter, seq uint64, kind, msg string, attempt int) error {
	em.emit(events.StreamLifecycle, events.EventData{Phase: events.PhaseError, Error: msg, EndedAt: time.Now().UnixMilli(), Attempt: attempt})
	res := &events.Result{Payloads: []events.Payload{{Text: msg, IsError: true}},
		Meta: events.Meta{Error: &events.RunError{Kind: kind, Message: msg}}}
	return o.commit(ctx, em, seq, &Outcome{Result: res})
}

// ensureFinal publishes the final event of a committed run whose final
// event is missing.
func (o *owner) ensureFinal(ctx context.Context, seq uint64) {
	em := o.newEmitter(strconv.FormatUint(seq, 10), o.log, false)
	_, finished, err := em.resume(ctx, o.w.streams.Events)
	if err != nil || finished {
		return
	}
	rec, ok, err := o.w.lanes.Record(ctx, o.token, seq)
	if err != nil || !ok || len(rec.Final) == 0 {
		return
	}
	ev, err := events.DecodeEvent(events.ContentMsgpack, rec.Final)
	if err != nil || ev.Data.Result == nil {
		return
	}
	if err := em.final(ctx, ev.Data.Result); err != nil {
		o.log.Warn().Err(err).Msg("republish final event")
	}
}

// purgeProcessed removes the lane's processed inbound messages in one call,
// keeping next-by-subject lookups on the fast path. With keepTrigger the
// trigger's message and everything after it stay: a Nak'd trigger whose
// message is gone is never redelivered, which would strand the lane's
// remaining messages.
func (o *owner) purgeProcessed(ctx context.Context, keepTrigger bool) {
	upTo := o.cursor.Seq
	if keepTrigger && o.trigger != nil && o.triggerSeq <= upTo {
		upTo = o.triggerSeq - 1
	}
	if upTo < o.purgedTo || upTo == 0 {
		return
	}
	err := o.w.streams.Inbound.Purge(ctx, jetstream.WithPurgeSubject(o.subject), jetstream.WithPurgeSequence(upTo+1))
	if err != nil {
		o.log.Debug().Err(err).Msg("purge processed messages")
		return
	}
	o.purgedTo = upTo + 1
}

// release gives the lane up after a drain; it reports whether the owner
// should drain again (a message arrived during the release and the lease was
// re-acquired).
func (o *owner) release() (again bool) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := o.lease.Release(ctx); err != nil {
		o.log.Warn().Err(err).Msg("release lease")
		return false // trigger redelivered after AckWait; the lease expires
	}
	o.w.stats.Released.Add(1)
	// Re-check on the leader after releasing: a message stored before a
	// follower saw our lease is found here or by the next owner.
	_, err := o.w.streams.Inbound.GetMsg(ctx, o.cursor.Seq+1, jetstream.WithGetMsgSubject(o.subject))
	switch {
	case errors.Is(err, jetstream.ErrMsgNotFound):
		o.finishTrigger(ctx)
		return false
	case err != nil:
		o.log.Warn().Err(err).Msg("re-check lane")
		return false
	}
	if o.w.stopping.Load() {
		o.w.nak(o.trigger, 0)
		o.purgeProcessed(ctx, true)
		return false
	}
	lease, err := o.w.lanes.Acquire(ctx, o.token, kvstore.LeaseInfo{Worker: o.w.cfg.ID, Acquired: time.Now().UnixMilli()})
	switch {
	case err == nil:
		o.lease = lease
		o.w.stats.Acquired.Add(1)
		return true
	case errors.Is(err, kvstore.ErrHeld):
		o.finishTrigger(ctx)
	default:
		o.log.Warn().Err(err).Msg("re-acquire lease")
	}
	return false
}

// abandon hands the lane over at once when the worker stops mid-drain.
func (o *owner) abandon() {
	rctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := o.lease.Release(rctx); err != nil {
		o.log.Warn().Err(err).Msg("release lease on stop")
	}
	o.purgeProcessed(rctx, true)
	o.w.stats.Released.Add(1)
	o.w.nak(o.trigger, 0)
}

// finishTrigger acks the trigger and purges the processed messages.
func (o *owner) finishTrigger(ctx context.Context) {
	if o.w.stopping.Load() && o.trigger != nil && o.triggerSeq > o.cursor.Seq {
		o.w.nak(o.trigger, 0)
		return
	}
	o.w.ack(ctx, o.trigger)
	o.purgeProcessed(ctx, false)
}
