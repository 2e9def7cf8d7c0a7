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
// asks the servers where it stands.
const eventPassIdle = time.Second

// eventPass is one ordered read of AGENT_EV: an ordered consumer hands
// every stored message over in stream order, in flow-controlled batches.
// The end is the stream's last sequence as its leader reports it when the
// pass begins: an R1 consumer of an R3 stream is placed on any replica,
// and one still catching up reports nothing pending while it lacks
// messages, so its word alone is no end.
type eventPass struct {
	js   jetstream.JetStream
	logf func(format string, args ...any)
	// next is the first sequence not read yet; end the last to read.
	next, end uint64
	read      int // messages handed on
	consumers int // consumers made
}

// newEventPass begins a pass at sequence from (1: the stream's start).
func newEventPass(ctx context.Context, js jetstream.JetStream, from uint64, logf func(string, ...any)) (*eventPass, error) {
	p := &eventPass{js: js, logf: logf, next: max(from, 1)}
	info, err := p.streamInfo(ctx, false)
	if err != nil {
		return nil, err
	}
	p.end = info.State.LastSeq
	return p, nil
}

// streamInfo asks the stream's leader for its info.
func (p *eventPass) streamInfo(ctx context.Context, deleted bool) (*jetstream.StreamInfo, error) {
	ctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	s, err := p.js.Stream(ctx, events.EventStream)
	if err != nil {
		return nil, err
	}
	return s.Info(ctx, jetstream.WithDeletedDetails(deleted))
}

// run hands the messages from p.next on to fn until done says to stop.
// done is asked after every message and whenever nothing came for
// eventPassIdle, with whether the pass has read through its end. A
// consumer that fails is made again from where it stopped, up to five
// times in a row; an error of fn ends the pass.
func (p *eventPass) run(ctx context.Context, fn func(jetstream.Msg) error, done func(atEnd bool) bool) error {
	var last error
	for fails := 0; fails < 5; fails++ {
		if fails > 0 {
			p.logf("event pass: consumer failed at %d: %v", p.next, last)
			select {
			case <-ctx.Done():
				return fmt.Errorf("read %s from %d: %w (after %w)", events.EventStream, p.next, ctx.Err(), last)
			case <-time.After(time.Second):
			}
		}
		cons, err := p.open(ctx)
		if err != nil {
			last = err
			continue
		}
		it, err := cons.Messages(jetstream.PullMaxMessages(1000))
		if err != nil {
			dropConsumer(p.js, cons)
			last = err
			continue
		}
		from := p.next
		ended, err := p.drain(ctx, cons, it, fn, done)
		it.Stop()
		dropConsumer(p.js, cons)
		if p.next > from {
			fails = -1 // progress: count failures in a row only
		}
		if ended || err == nil {
			return err
		}
		last = err
	}
	return fmt.Errorf("read %s from %d: %w", events.EventStream, p.next, last)
}

// open makes an ordered consumer from p.next, on the stream's leader or a
// replica that is current, if a few tries give one.
func (p *eventPass) open(ctx context.Context) (jetstream.Consumer, error) {
	cfg := jetstream.OrderedConsumerConfig{DeliverPolicy: jetstream.DeliverByStartSequencePolicy, OptStartSeq: p.next,
		MaxResetAttempts: 5}
	for try := 0; ; try++ {
		cctx, cancel := context.WithTimeout(ctx, 20*time.Second)
		cons, err := p.js.OrderedConsumer(cctx, events.EventStream, cfg)
		cancel()
		if err != nil {
			return nil, err
		}
		p.consumers++
		if try >= 4 {
			return cons, nil
		}
		info, err := p.streamInfo(ctx, false)
		if err != nil {
			return cons, nil // placement is a preference only
		}
		ci := cons.CachedInfo()
		if ci == nil || ci.Cluster == nil || info.Cluster == nil || ci.Cluster.Leader == info.Cluster.Leader {
			return cons, nil
		}
		for _, r := range info.Cluster.Replicas {
			if r.Name == ci.Cluster.Leader && r.Current && r.Lag == 0 {
				return cons, nil
			}
		}
		p.logf("event pass: consumer placed on %s, a replica behind the leader %s: placing it again", ci.Cluster.Leader, info.Cluster.Leader)
		dropConsumer(p.js, cons)
	}
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

// eventPassStall is how many idle waits in a row a consumer may spend
// neither delivering nor caught up (messages pending but none coming, or a
// replica short of the end) before the pass makes another.
const eventPassStall = 5

// drain is run's loop over one consumer. ended says the pass is over
// (done, or fn or ctx failed); otherwise err is the consumer's failure,
// or its stall, for run to make another.
func (p *eventPass) drain(ctx context.Context, cons jetstream.Consumer, it jetstream.MessagesContext,
	fn func(jetstream.Msg) error, done func(bool) bool) (bool, error) {
	stalled := 0
	for {
		if ctx.Err() != nil {
			return true, fmt.Errorf("read %s at %d: %w", events.EventStream, p.next, ctx.Err())
		}
		m, err := it.Next(jetstream.NextMaxWait(eventPassIdle))
		if errors.Is(err, nats.ErrTimeout) {
			atEnd, waiting, err := p.idle(ctx, cons)
			if err != nil {
				return false, err
			}
			if done(atEnd) {
				return true, nil
			}
			if waiting {
				stalled = 0
				continue
			}
			if stalled++; stalled >= eventPassStall {
				return false, fmt.Errorf("nothing delivered from %d for %v, short of the end (%d) or with messages pending", p.next, eventPassStall*eventPassIdle, p.end)
			}
			continue
		}
		if err != nil {
			return false, err
		}
		stalled = 0
		meta, err := m.Metadata()
		if err != nil {
			return false, err
		}
		if err := fn(m); err != nil {
			return true, err
		}
		p.next = meta.Sequence.Stream + 1
		p.read++
		if done(p.next > p.end) {
			return true, nil
		}
	}
}

// idle says, when nothing came for a while, whether the pass has read
// through its end (what is left up to it deleted), and whether the
// consumer is rightly waiting: it has delivered all it has, and its
// replica is not short of the end.
func (p *eventPass) idle(ctx context.Context, cons jetstream.Consumer) (atEnd, waiting bool, err error) {
	cctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	ci, err := cons.Info(cctx)
	cancel()
	if err != nil {
		return false, false, err
	}
	drained := ci.NumPending == 0 && ci.Delivered.Stream < p.next // nothing left, nothing on its way
	if p.next > p.end || !drained {
		return p.next > p.end, drained, nil
	}
	info, err := p.streamInfo(ctx, true)
	if err != nil {
		return false, false, err
	}
	gone := make(map[uint64]bool, len(info.State.Deleted))
	for _, seq := range info.State.Deleted {
		gone[seq] = true
	}
	for seq := max(p.next, info.State.FirstSeq); seq <= p.end; seq++ {
		if !gone[seq] {
			return false, false, nil // the replica lags
		}
	}
	return true, true, nil
}

// auditEvents reads AGENT_EV once, in stream order, through the end it has
// when read, and returns what each of runs' stored events say, by event
// subject. Only the runs' own subjects are decoded; memory is one runAudit
// per run, whatever its events.
func auditEvents(ctx context.Context, js jetstream.JetStream, runs []runRef, logf func(string, ...any)) (map[string]*runAudit, error) {
	byRun := make(map[string]*runAudit, len(runs))
	for _, r := range runs {
		subj, err := events.EventSubject(r.session, r.run)
		if err != nil {
			return nil, fmt.Errorf("run %s/%s: %w", r.session, r.run, err)
		}
		byRun[subj] = &runAudit{}
	}
	p, err := newEventPass(ctx, js, 1, logf)
	if err != nil {
		return nil, err
	}
	began := time.Now()
	err = p.run(ctx, func(m jetstream.Msg) error {
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
	}, func(atEnd bool) bool { return atEnd })
	if err != nil {
		return nil, err
	}
	logf("event pass: %d events through sequence %d read in %v (%d consumers)", p.read, p.end, time.Since(began).Round(time.Millisecond), p.consumers)
	return byRun, nil
}

// auditServer starts an embedded server with the fleet's streams.
func auditServer(t *testing.T) (string, jetstream.JetStream) {
	t.Helper()
	srv := natstest.Start(t)
	js := newJS(t, natstest.Connect(t, srv.URL))
	if _, err := lanes.EnsureStreams(t.Context(), js, lanes.StreamConfig{}); err != nil {
		t.Fatal(err)
	}
	return srv.URL, js
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
	url, js := auditServer(t)
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
	// The stream's last message deleted: a pass ends at the leader's last
	// sequence, or at a deleted run of messages up to it.
	if err := publish(runRef{"audit:gone", "20", ""}, start(1, 1)); err != nil {
		t.Fatal(err)
	}
	evs, err := js.Stream(t.Context(), events.EventStream)
	if err != nil {
		t.Fatal(err)
	}
	info, err := evs.Info(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if err := evs.DeleteMsg(t.Context(), info.State.LastSeq); err != nil {
		t.Fatal(err)
	}

	var refs, all []runRef
	for _, c := range runs {
		all = append(all, c.run)
	}
	refs = all[:len(audited)]
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	byRun, err := auditEvents(ctx, js, all, t.Logf)
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
	fin := watchRunFinals(t, url)
	waiting := append(slices.Clone(refs[:1]), refs[2:]...) // all but the lost run
	fin.waitAll(t, js, waiting, 3*time.Minute)
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
	fin.waitAll(t, js, append(waiting, late), 3*time.Minute)
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

// TestEventPassStall reads a stream whose end the pass believes lies past
// what its consumer can deliver, as a consumer on a replica still
// catching up would: the pass gives that consumer up after eventPassStall
// idle waits, makes another, and ends once the missing message is stored.
func TestEventPassStall(t *testing.T) {
	_, js := auditServer(t)
	for i := range 3 {
		if _, err := js.Publish(t.Context(), fmt.Sprintf("%saudit.%d", events.EventPrefix, i), nil); err != nil {
			t.Fatal(err)
		}
	}
	failed := make(chan string, 10)
	p, err := newEventPass(t.Context(), js, 1, func(format string, args ...any) {
		if line := fmt.Sprintf(format, args...); strings.Contains(line, "consumer failed") {
			failed <- line
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	p.end++ // the leader's word: one more than this consumer will find
	ended := make(chan error, 1)
	go func() {
		ended <- p.run(t.Context(), func(jetstream.Msg) error { return nil }, func(atEnd bool) bool { return atEnd })
	}()
	t.Log(<-failed)
	if _, err := js.Publish(t.Context(), events.EventPrefix+"audit.3", nil); err != nil {
		t.Fatal(err)
	}
	if err := <-ended; err != nil {
		t.Fatal(err)
	}
	if p.read != 4 || p.next != 5 || p.consumers < 2 {
		t.Errorf("read %d, next %d, consumers %d; want 4, 5 and at least 2", p.read, p.next, p.consumers)
	}
}
