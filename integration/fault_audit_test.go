package integration

// The fault suite's audit reads the event stream in one ordered pass: an
// ordered consumer over AGENT_EV hands every stored event over in stream
// order, in flow-controlled batches, and each run's events are folded into
// a runAudit of fixed size as they pass. Reading run by run (a direct get
// per event, from sequence 1 for every run) took 22 minutes for the 85,817
// runs of a 15-minute soak, and the wait for finals did it once more.

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/lanefleet/lanefleet/events"
	"github.com/lanefleet/lanefleet/internal/natstest"
	"github.com/lanefleet/lanefleet/lanes"
)

// add folds a run's next stored event (in stream order) into a: a final
// counts (the first one's error kind is kept), a seq not above the one
// before counts as going back, and an event of an older attempt than one
// already stored counts as stale unless it is a final, or an aborted event
// (which names the attempt it closes: it belongs to the newer owner that
// published it).
func (a *runAudit) add(ev *events.Event) {
	if ev.Terminal() {
		a.finals++
		if e := ev.Data.Result; a.finals == 1 && e != nil && e.Meta.Error != nil {
			a.errKind = e.Meta.Error.Kind
		}
	}
	if ev.Seq <= a.lastSeq {
		a.backwards++
	}
	a.lastSeq = ev.Seq
	att := ev.Attempt
	if ev.Data.Phase == events.PhaseAborted {
		att = max(att, a.newest)
	}
	if att < a.newest && !ev.Terminal() {
		a.stale++
	}
	a.newest = max(a.newest, att)
}

// eventPassIdle is how long a pass waits for the next event before it
// asks the server whether it has read everything.
const eventPassIdle = time.Second

// readEvents reads AGENT_EV in stream order from sequence from with an
// ordered consumer, handing each stored message to fn, and returns the
// sequence after the last one handed on. done is asked after every message
// and whenever nothing came for eventPassIdle, with whether everything the
// stream held at that point has been read (caughtUp); the pass ends when
// it says so. A consumer that fails is made again from where it stopped,
// up to five times in a row; an error of fn ends the pass.
func readEvents(ctx context.Context, js jetstream.JetStream, from uint64, fn func(jetstream.Msg) error, done func(caughtUp bool) bool) (uint64, error) {
	next := max(from, 1)
	var last error
	for fails := 0; fails < 5; fails++ {
		if fails > 0 {
			select {
			case <-ctx.Done():
				return next, fmt.Errorf("read %s from %d: %w (after %w)", events.EventStream, next, ctx.Err(), last)
			case <-time.After(time.Second):
			}
		}
		cfg := jetstream.OrderedConsumerConfig{DeliverPolicy: jetstream.DeliverAllPolicy}
		if next > 1 {
			cfg.DeliverPolicy, cfg.OptStartSeq = jetstream.DeliverByStartSequencePolicy, next
		}
		cctx, cancel := context.WithTimeout(ctx, 20*time.Second)
		cons, err := js.OrderedConsumer(cctx, events.EventStream, cfg)
		cancel()
		if err != nil {
			last = err
			continue
		}
		it, err := cons.Messages(jetstream.PullMaxMessages(1000))
		if err != nil {
			last = err
			continue
		}
		n, ended, err := drainEvents(ctx, cons, it, next, fn, done)
		it.Stop()
		dropConsumer(js, cons)
		if n > next {
			fails = -1 // progress: count failures in a row only
		}
		next = n
		if ended || err == nil {
			return next, err
		}
		last = err
	}
	return next, fmt.Errorf("read %s from %d: %w", events.EventStream, next, last)
}

// dropConsumer deletes an ordered consumer's server side once read from,
// as far as it can: an ephemeral consumer left over would otherwise stay
// until its inactivity threshold.
func dropConsumer(js jetstream.JetStream, cons jetstream.Consumer) {
	ci := cons.CachedInfo()
	if ci == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_ = js.DeleteConsumer(ctx, events.EventStream, ci.Name)
}

// drainEvents is readEvents' loop over one consumer. ended says the pass
// is over (done, or fn or ctx failed); otherwise err is the consumer's
// failure, for readEvents to make it again.
func drainEvents(ctx context.Context, cons jetstream.Consumer, it jetstream.MessagesContext, next uint64,
	fn func(jetstream.Msg) error, done func(bool) bool) (uint64, bool, error) {
	for {
		if ctx.Err() != nil {
			return next, true, fmt.Errorf("read %s at %d: %w", events.EventStream, next, ctx.Err())
		}
		m, err := it.Next(jetstream.NextMaxWait(eventPassIdle))
		if errors.Is(err, nats.ErrTimeout) {
			caught, err := caughtUp(ctx, cons, next)
			if err != nil {
				return next, false, err
			}
			if done(caught) {
				return next, true, nil
			}
			continue
		}
		if err != nil {
			return next, false, err
		}
		meta, err := m.Metadata()
		if err != nil {
			return next, false, err
		}
		if err := fn(m); err != nil {
			return next, true, err
		}
		next = meta.Sequence.Stream + 1
		if done(meta.NumPending == 0) {
			return next, true, nil
		}
	}
}

// caughtUp reports whether cons has nothing left to deliver and the server
// has delivered nothing past next-1 (nothing still on its way).
func caughtUp(ctx context.Context, cons jetstream.Consumer, next uint64) (bool, error) {
	ctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	ci, err := cons.Info(ctx)
	if err != nil {
		return false, err
	}
	return ci.NumPending == 0 && ci.Delivered.Stream < next, nil
}

// auditEvents reads AGENT_EV once, in stream order, through the end it has
// when read, and returns what each of runs' stored events say, by event
// subject. Only the runs' own subjects are decoded; memory is one runAudit
// per run, whatever its events.
func auditEvents(ctx context.Context, js jetstream.JetStream, runs []runRef) (map[string]*runAudit, error) {
	byRun := make(map[string]*runAudit, len(runs))
	for _, r := range runs {
		subj, err := events.EventSubject(r.session, r.run)
		if err != nil {
			return nil, fmt.Errorf("run %s/%s: %w", r.session, r.run, err)
		}
		byRun[subj] = &runAudit{}
	}
	_, err := readEvents(ctx, js, 1, func(m jetstream.Msg) error {
		a := byRun[m.Subject()]
		if a == nil {
			return nil
		}
		ev, err := events.DecodeEvent(m.Headers().Get(events.HeaderContentType), m.Data())
		if err != nil {
			return fmt.Errorf("event on %s: %w", m.Subject(), err)
		}
		a.add(ev)
		return nil
	}, func(caughtUp bool) bool { return caughtUp })
	if err != nil {
		return nil, err
	}
	return byRun, nil
}

// auditEvent is one event of a crafted run for TestAuditFindsDefects.
type auditEvent struct {
	seq     uint64
	attempt int
	stream  string
	phase   string
	errKind string // on a final: the error it carries
}

// TestAuditFindsDefects audits a crafted event stream on a real embedded
// server, each defect in a run of its own and the runs' events interleaved
// (so the one ordered pass must group them by run), with events of runs
// not audited (a doubled final among them) and a fence record around
// them: the batched audit finds each defect in its run and nothing else,
// agrees run by run with reading each run by its subject (the per-run
// reads the audit did before), and waitAll follows finals stored while it
// waits.
func TestAuditFindsDefects(t *testing.T) {
	srv := natstest.Start(t)
	nc := natstest.Connect(t, srv.URL)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := lanes.EnsureStreams(t.Context(), js, lanes.StreamConfig{}); err != nil {
		t.Fatal(err)
	}
	start := func(seq uint64, att int) auditEvent {
		return auditEvent{seq: seq, attempt: att, stream: events.StreamLifecycle, phase: events.PhaseStart}
	}
	delta := func(seq uint64, att int) auditEvent {
		return auditEvent{seq: seq, attempt: att, stream: events.StreamAssistant}
	}
	final := func(seq uint64, att int) auditEvent {
		return auditEvent{seq: seq, attempt: att, stream: events.StreamFinal}
	}
	failed := func(seq uint64, kind string) auditEvent {
		return auditEvent{seq: seq, attempt: 1, stream: events.StreamFinal, errKind: kind}
	}
	type crafted struct {
		run  runRef
		evs  []auditEvent
		want runAudit // finals, stale, backwards, errKind
	}
	runs := []crafted{
		{runRef{"audit:ok", "11", ""}, []auditEvent{start(1, 1), delta(2, 1), delta(3, 1), final(4, 1)},
			runAudit{finals: 1}},
		{runRef{"audit:lost", "12", ""}, []auditEvent{start(1, 1), delta(2, 1), delta(3, 1)},
			runAudit{}},
		{runRef{"audit:doubled", "13", ""}, []auditEvent{start(1, 1), delta(2, 1), final(3, 1), final(4, 1)},
			runAudit{finals: 2}},
		// A zombie of attempt 1 streams after attempt 2 began; attempt 2's
		// owner closes attempt 1 with an aborted event naming it (not
		// stale), and a late final of attempt 1 is a duplicate, not stale.
		{runRef{"audit:stale", "14", ""}, []auditEvent{start(1, 1), delta(2, 1), start(3, 2), delta(4, 1),
			{seq: 5, attempt: 1, stream: events.StreamLifecycle, phase: events.PhaseAborted}, delta(6, 2), final(7, 2)},
			runAudit{finals: 1, stale: 1}},
		{runRef{"audit:back", "15", ""}, []auditEvent{start(1, 1), delta(3, 1), delta(2, 1), delta(4, 1), final(5, 1)},
			runAudit{finals: 1, backwards: 1}},
		{runRef{"audit:poison", "16", ""}, []auditEvent{start(1, 1), failed(2, "poison_message")},
			runAudit{finals: 1, errKind: "poison_message"}},
		{runRef{"audit:error", "17", ""}, []auditEvent{start(1, 1), delta(2, 1), failed(3, events.KindInvalidInput)},
			runAudit{finals: 1, errKind: events.KindInvalidInput}},
		// Not audited: its defects must not leak into the others.
		{runRef{"audit:other", "18", ""}, []auditEvent{start(1, 3), delta(1, 1), final(2, 1), final(3, 1)},
			runAudit{finals: 2, stale: 1, backwards: 1}},
	}
	audited := runs[:len(runs)-1]
	publish := func(r runRef, e auditEvent) error {
		subj, err := events.EventSubject(r.session, r.run)
		if err != nil {
			return err
		}
		ev := &events.Event{V: 1, RunID: r.run, SessionKey: r.session, Seq: e.seq, Attempt: e.attempt, Stream: e.stream,
			Data: events.EventData{Phase: e.phase}}
		if e.stream == events.StreamFinal {
			ev.Data.Result = &events.Result{}
			if e.errKind != "" {
				ev.Data.Result.Meta.Error = &events.RunError{Kind: e.errKind, Message: "crafted"}
			}
		}
		data, ct, err := events.EncodeEvent(ev, e.seq%2 == 0) // both encodings
		if err != nil {
			return err
		}
		m := nats.NewMsg(subj)
		m.Data = data
		m.Header.Set(events.HeaderContentType, ct)
		m.Header.Set(events.HeaderStream, e.stream)
		_, err = js.PublishMsg(t.Context(), m)
		return err
	}
	// Interleave: the i-th event of every run, then the i+1-th.
	for i := 0; ; i++ {
		more := false
		for _, c := range runs {
			if i < len(c.evs) {
				if err := publish(c.run, c.evs[i]); err != nil {
					t.Fatal(err)
				}
				more = true
			}
		}
		if i == 1 {
			tok, _ := events.KeyToken("audit:ok")
			if _, err := js.Publish(t.Context(), events.EventPrefix+tok+"."+lanes.FenceToken, []byte("fence")); err != nil {
				t.Fatal(err)
			}
		}
		if !more {
			break
		}
	}
	if _, err := js.Publish(t.Context(), events.DeadPrefix+"poison", []byte("a dead letter")); err != nil {
		t.Fatal(err)
	}

	var refs, all []runRef
	for _, c := range runs {
		all = append(all, c.run)
	}
	refs = all[:len(audited)]
	byRun, err := auditEvents(t.Context(), js, all)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range runs {
		subj, _ := events.EventSubject(c.run.session, c.run.run)
		got, direct := byRun[subj], auditRunDirect(t, js, subj)
		got.lastSeq, got.newest, direct.lastSeq, direct.newest = 0, 0, 0, 0
		if *got != c.want || direct != c.want {
			t.Errorf("run %s: batched audit %+v, per-run read %+v, want %+v", c.run.session, *got, direct, c.want)
		}
	}

	counts := auditAll(t, js, refs)
	want := "audit of 7 runs: lost finals 1, duplicated finals 1, stale-attempt events 1, seq going back 1, " +
		"healthy messages dead-lettered 1 (poison finals 1, dead letters 1), error finals map[invalid_input:1 poison_message:1]"
	if counts.String() != want || !counts.bad() {
		t.Errorf("audit:\n got %s\nwant %s", counts, want)
	}
	for _, ex := range []string{"audit:lost/12: 0 finals", "audit:doubled/13: 2 finals", "audit:stale/14: 1 finals, 1 stale",
		"audit:back/15: 1 finals, 0 stale, 1 backwards", `audit:poison/16: 1 finals, 0 stale, 0 backwards, error "poison_message"`} {
		if !slices.ContainsFunc(counts.examples, func(s string) bool { return strings.HasPrefix(s, ex) }) {
			t.Errorf("no example %q in %q", ex, counts.examples)
		}
	}

	// waitAll returns once every run has a stored final, one stored while
	// it waits included.
	fin := watchRunFinals(t, srv.URL)
	waiting := append(slices.Clone(refs[:1]), refs[2:]...) // all but the lost run
	fin.waitAll(t, js, waiting, time.Minute)
	late := runRef{"audit:late", "19", ""}
	if err := publish(late, start(1, 1)); err != nil {
		t.Fatal(err)
	}
	published := make(chan error, 1)
	go func() {
		// The final, once waitAll's consumer has read all there is.
		err := waitFollowing(t.Context(), js)
		if err == nil {
			err = publish(late, final(2, 1))
		}
		published <- err
	}()
	fin.waitAll(t, js, append(waiting, late), time.Minute)
	if err := <-published; err != nil {
		t.Fatal(err)
	}
}

// waitFollowing waits until a consumer of AGENT_EV has read everything
// the stream holds.
func waitFollowing(ctx context.Context, js jetstream.JetStream) error {
	s, err := js.Stream(ctx, events.EventStream)
	if err != nil {
		return err
	}
	for {
		info, err := s.Info(ctx)
		if err != nil {
			return err
		}
		for cons := s.ListConsumers(ctx); ; {
			ci, ok := <-cons.Info()
			if !ok {
				break
			}
			if ci.NumPending == 0 && ci.Delivered.Stream == info.State.LastSeq {
				return nil
			}
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(10 * time.Millisecond):
		}
	}
}

// auditRunDirect reads a run's stored events the way the audit did before
// it read the stream in one pass: a direct get of the run's next event
// after the last, from sequence 1.
func auditRunDirect(t *testing.T, js jetstream.JetStream, subj string) runAudit {
	t.Helper()
	s, err := js.Stream(t.Context(), events.EventStream)
	if err != nil {
		t.Fatal(err)
	}
	var a runAudit
	for seq := uint64(1); ; {
		raw, err := s.GetMsg(t.Context(), seq, jetstream.WithGetMsgSubject(subj))
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			return a
		}
		if err != nil {
			t.Fatal(err)
		}
		seq = raw.Sequence + 1
		ev, err := events.DecodeEvent(raw.Header.Get(events.HeaderContentType), raw.Data)
		if err != nil {
			t.Fatal(err)
		}
		a.add(ev)
	}
}
