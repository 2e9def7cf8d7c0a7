package lanes

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"

	"github.com/lanefleet/lanefleet/events"
	"github.com/lanefleet/lanefleet/internal/natstest"
	"github.com/lanefleet/lanefleet/kvstore"
	"github.com/lanefleet/lanefleet/message"
)

// echoHandler records what it saw and echoes the text back.
type echoHandler struct {
	mu   sync.Mutex
	seen map[string][]string // session key -> texts in handling order
	hook func(t *Turn) error
}

func (h *echoHandler) HandleTurn(ctx context.Context, t *Turn) (*Outcome, error) {
	if h.hook != nil {
		if err := h.hook(t); err != nil {
			return nil, err
		}
	}
	h.mu.Lock()
	if h.seen == nil {
		h.seen = map[string][]string{}
	}
	h.seen[t.SessionKey] = append(h.seen[t.SessionKey], t.Inbound.Text)
	h.mu.Unlock()
	t.Emit(events.StreamAssistant, events.EventData{Delta: "ok ", Text: "ok "})
	t.Emit(events.StreamAssistant, events.EventData{Delta: t.Inbound.Text, Text: "ok " + t.Inbound.Text})
	user := message.User(t.Inbound.Text, 1)
	asst := message.Message{Role: message.RoleAssistant, Content: message.BlocksOf(message.Text("ok " + t.Inbound.Text)), StopReason: message.StopStop}
	return &Outcome{
		Entries: []message.Entry{{Type: message.EntryMessage, ID: "u" + t.RunID, Message: &user}, {Type: message.EntryMessage, ID: "a" + t.RunID, Message: &asst}},
		Result:  &events.Result{Payloads: []events.Payload{{Text: "ok " + t.Inbound.Text}}},
	}, nil
}

type fleet struct {
	url     string
	js      jetstream.JetStream
	streams *Streams
	lanes   *kvstore.Lanes
	logHook zerolog.Hook // sees what workers started next log, if set
}

func newFleet(t *testing.T, ackWait, leaseTTL time.Duration) *fleet {
	t.Helper()
	return newFleetWith(t, StreamConfig{AckWait: ackWait}, leaseTTL)
}

// newFleetWith is newFleet with the streams sized by sc; its workers use
// the same.
func newFleetWith(t *testing.T, sc StreamConfig, leaseTTL time.Duration) *fleet {
	t.Helper()
	srv := natstest.Start(t)
	nc := natstest.Connect(t, srv.URL)
	js, _ := jetstream.New(nc)
	streams, err := EnsureStreams(t.Context(), js, sc)
	if err != nil {
		t.Fatal(err)
	}
	lanes, err := kvstore.Open(t.Context(), js, kvstore.Config{LeaseTTL: leaseTTL, MarkerTTL: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	return &fleet{url: srv.URL, js: js, streams: streams, lanes: lanes}
}

// newWorker makes a worker on connection nc, logging to the test at
// level (and to f.logHook), with its own streams and lanes handles.
func (f *fleet) newWorker(t *testing.T, nc *nats.Conn, h Handler, cfg Config, level zerolog.Level) *Worker {
	t.Helper()
	js, _ := jetstream.New(nc)
	streams, err := EnsureStreams(t.Context(), js, f.streams.cfg)
	if err != nil {
		t.Fatal(err)
	}
	lanes, err := kvstore.Open(t.Context(), js, kvstore.Config{LeaseTTL: f.lanes.LeaseTTL(), MarkerTTL: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	cfg.Logger = zerolog.New(zerolog.NewTestWriter(t)).Level(level)
	if f.logHook != nil {
		cfg.Logger = cfg.Logger.Hook(f.logHook)
	}
	w, err := NewWorker(js, streams, lanes, h, cfg)
	if err != nil {
		t.Fatal(err)
	}
	return w
}

// startWorker runs a worker on its own connection until the returned stop is called.
func (f *fleet) startWorker(t *testing.T, h Handler, cfg Config) (stop func()) {
	t.Helper()
	w := f.newWorker(t, natstest.Connect(t, f.url), h, cfg, zerolog.WarnLevel)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	var once sync.Once
	stop = func() {
		once.Do(func() {
			cancel()
			if err := <-done; err != nil {
				t.Errorf("worker: %v", err)
			}
		})
	}
	t.Cleanup(stop)
	return stop
}

func (f *fleet) publish(t *testing.T, key, text string) uint64 {
	t.Helper()
	subj, err := events.InboundSubject(key)
	if err != nil {
		t.Fatal(err)
	}
	data, ct, _ := events.EncodeInbound(&events.Inbound{Text: text}, false)
	m := nats.NewMsg(subj)
	m.Data = data
	m.Header.Set(events.HeaderContentType, ct)
	ack, err := f.js.PublishMsg(t.Context(), m)
	if err != nil {
		t.Fatal(err)
	}
	return ack.Sequence
}

// transcriptTexts returns the texts of the lane's stored transcript, in order.
func (f *fleet) transcriptTexts(t *testing.T, key string) []string {
	t.Helper()
	recs, err := f.lanes.Records(t.Context(), key)
	if err != nil {
		t.Fatal(err)
	}
	var texts []string
	for _, e := range kvstore.Entries(recs) {
		texts = append(texts, e.Message.Content.Text())
	}
	return texts
}

// waitFinal waits for the final event of a run.
func (f *fleet) waitFinal(t *testing.T, key string, seq uint64) *events.Event {
	t.Helper()
	subj, _ := events.EventSubject(key, fmt.Sprint(seq))
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	cons, err := f.streams.Events.OrderedConsumer(ctx, jetstream.OrderedConsumerConfig{FilterSubjects: []string{subj}})
	if err != nil {
		t.Fatal(err)
	}
	it, err := cons.Messages()
	if err != nil {
		t.Fatal(err)
	}
	defer it.Stop()
	for {
		m, err := it.Next(jetstream.NextContext(ctx))
		if err != nil {
			t.Fatalf("waiting for final event of %s/%d: %v", key, seq, err)
		}
		ev, err := events.DecodeEvent(m.Headers().Get(events.HeaderContentType), m.Data())
		if err != nil {
			t.Fatal(err)
		}
		if ev.Terminal() {
			return ev
		}
	}
}

func TestLaneOrderAcrossWorkers(t *testing.T) {
	t.Parallel()
	f := newFleet(t, 5*time.Second, 5*time.Second)
	h := &echoHandler{}
	for range 3 {
		f.startWorker(t, h, Config{Concurrency: 8})
	}
	keys := []string{"alice", "agent:main:dm:1", "a.b", "*", "日本"}
	var last []uint64
	for i := range 20 {
		for _, k := range keys {
			seq := f.publish(t, k, fmt.Sprintf("%s-%02d", k, i))
			if i == 19 {
				last = append(last, seq)
			}
		}
	}
	for i, k := range keys {
		ev := f.waitFinal(t, k, last[i])
		if got := ev.Data.Result.Payloads[0].Text; got != fmt.Sprintf("ok %s-19", k) {
			t.Fatalf("final of %s = %q", k, got)
		}
	}
	for _, k := range keys {
		tok, _ := events.KeyToken(k)
		recs, err := f.lanes.Records(t.Context(), tok)
		if err != nil {
			t.Fatal(err)
		}
		if len(recs) != 20 {
			t.Fatalf("%s has %d records, want 20", k, len(recs))
		}
		for i, r := range recs {
			want := fmt.Sprintf("%s-%02d", k, i)
			if got := r.Entries[0].Message.Content.Text(); got != want {
				t.Fatalf("%s record %d = %q, want %q", k, i, got, want)
			}
		}
	}
}

// TestPoisonMessageDeadLettered: a message whose turn fails every time (here
// the handler panics) is tried MaxAttempts times, then ends with a
// poison_message error event and a dead letter; the lane goes on.
func TestPoisonMessageDeadLettered(t *testing.T) {
	t.Parallel()
	f := newFleet(t, 5*time.Second, 5*time.Second)
	h := &echoHandler{hook: func(t *Turn) error {
		if t.Inbound.Text == "poison" {
			panic("this message always kills its turn")
		}
		return nil
	}}
	f.startWorker(t, h, Config{RetryDelay: time.Millisecond, MaxAttempts: 3})
	bad := f.publish(t, "victim", "poison")
	good := f.publish(t, "victim", "after")
	ev := f.waitFinal(t, "victim", bad)
	if e := ev.Data.Result.Meta.Error; e == nil || e.Kind != "poison_message" {
		t.Fatalf("poison final = %+v", ev.Data.Result)
	}
	if ev.Attempt != 4 {
		t.Fatalf("final event attempt = %d, want 4 (three failed tries, then the dead letter)", ev.Attempt)
	}
	if ev := f.waitFinal(t, "victim", good); ev.Data.Result.Payloads[0].Text != "ok after" {
		t.Fatalf("next message = %+v", ev.Data.Result)
	}
	info, err := f.streams.Dead.Info(t.Context())
	if err != nil || info.State.Msgs != 1 {
		t.Fatalf("dead letters = %v, %v", info.State.Msgs, err)
	}
}

// TestSweeperDrainsStrandedLane: a lane whose every dispatch delivery was
// acked without anyone draining it (as when a follower acked a message
// because of a lease whose owner then vanished) is found and drained by the
// sweep.
func TestSweeperDrainsStrandedLane(t *testing.T) {
	t.Parallel()
	f := newFleet(t, time.Second, 2*time.Second)
	seq := f.publish(t, "stranded", "anyone?")
	// Swallow the delivery the way a wrongly trusting follower would.
	msgs, err := f.streams.Dispatch.Fetch(1, jetstream.FetchMaxWait(5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	for m := range msgs.Messages() {
		if err := m.DoubleAck(t.Context()); err != nil {
			t.Fatal(err)
		}
	}
	h := &echoHandler{}
	f.startWorker(t, h, Config{SweepEvery: 200 * time.Millisecond})
	ev := f.waitFinal(t, "stranded", seq)
	if ev.Data.Result.Payloads[0].Text != "ok anyone?" {
		t.Fatalf("final = %+v", ev.Data.Result)
	}
}

func (f *fleet) publishMode(t *testing.T, key, text, mode string) uint64 {
	t.Helper()
	subj, _ := events.InboundSubject(key)
	data, ct, _ := events.EncodeInbound(&events.Inbound{Text: text, Mode: mode}, false)
	m := nats.NewMsg(subj)
	m.Data = data
	m.Header.Set(events.HeaderContentType, ct)
	ack, err := f.js.PublishMsg(t.Context(), m)
	if err != nil {
		t.Fatal(err)
	}
	return ack.Sequence
}

// blockingHandler holds the turn whose text is "hold" until release is closed.
func blockingHandler(started chan<- struct{}, release <-chan struct{}) *echoHandler {
	return &echoHandler{hook: func(t *Turn) error {
		if t.Inbound.Text == "hold" {
			close(started)
			<-release
		}
		return nil
	}}
}

// TestCollectMergesQueuedMessages: collect-mode messages that queued up
// while a turn ran become one turn with the reference's merged prompt; the
// other messages' runs end with a final event naming that turn's run.
func TestCollectMergesQueuedMessages(t *testing.T) {
	t.Parallel()
	f := newFleet(t, 5*time.Second, 5*time.Second)
	started, release := make(chan struct{}), make(chan struct{})
	h := blockingHandler(started, release)
	f.startWorker(t, h, Config{})
	f.publish(t, "c", "hold")
	<-started
	var seqs []uint64
	for _, text := range []string{"one", "two", "three", "four", "five"} {
		seqs = append(seqs, f.publishMode(t, "c", text, "collect"))
	}
	after := f.publish(t, "c", "after")
	close(release)
	ev := f.waitFinal(t, "c", seqs[0])
	got := ev.Data.Result.Payloads[0].Text
	for i, text := range []string{"one", "two", "three", "four", "five"} {
		if !strings.Contains(got, fmt.Sprintf("Queued #%d\n%s", i+1, text)) {
			t.Fatalf("merged reply %q lacks queued #%d %q", got, i+1, text)
		}
	}
	for _, s := range seqs[1:] {
		if ev := f.waitFinal(t, "c", s); ev.Data.Result.Meta.MergedInto != fmt.Sprint(seqs[0]) {
			t.Fatalf("run %d final = %+v, want mergedInto %d", s, ev.Data.Result.Meta, seqs[0])
		}
	}
	if ev := f.waitFinal(t, "c", after); ev.Data.Result.Payloads[0].Text != "ok after" {
		t.Fatalf("followup after the batch = %+v", ev.Data.Result)
	}
	h.mu.Lock()
	turns := len(h.seen["c"])
	h.mu.Unlock()
	if turns != 3 {
		t.Fatalf("%d turns ran, want 3 (hold, the merged batch, after)", turns)
	}
	recs, _ := f.lanes.Records(t.Context(), "c")
	if len(recs) != 3 || recs[1].InboundSeq != seqs[4] {
		t.Fatalf("records = %d, batch record seq %d; want 3 and %d", len(recs), recs[1].InboundSeq, seqs[4])
	}
}

// TestRejectWhileBusy: a reject-mode message that arrives while the session
// runs a turn is refused with a clear final event; once idle, it runs.
func TestRejectWhileBusy(t *testing.T) {
	t.Parallel()
	f := newFleet(t, 5*time.Second, 5*time.Second)
	started, release := make(chan struct{}), make(chan struct{})
	f.startWorker(t, blockingHandler(started, release), Config{})
	f.publish(t, "r", "hold")
	<-started
	busy := f.publishMode(t, "r", "now please", "reject")
	close(release)
	ev := f.waitFinal(t, "r", busy)
	if e := ev.Data.Result.Meta.Error; e == nil || e.Kind != "rejected" {
		t.Fatalf("busy reject = %+v", ev.Data.Result)
	}
	idle := f.publishMode(t, "r", "now", "reject")
	if ev := f.waitFinal(t, "r", idle); ev.Data.Result.Meta.Error != nil || ev.Data.Result.Payloads[0].Text != "ok now" {
		t.Fatalf("idle reject-mode message = %+v", ev.Data.Result)
	}
}

// TestHeartbeatWhileBusy: a heartbeat that arrives while the session runs a
// turn is dropped with a final event saying so (it never queues behind the
// turn, nor cuts it in interrupt mode), a collect batch queued with it
// runs without it, and a heartbeat on an idle session runs.
func TestHeartbeatWhileBusy(t *testing.T) {
	t.Parallel()
	f := newFleet(t, 5*time.Second, 5*time.Second)
	started, release := make(chan struct{}), make(chan struct{})
	h := blockingHandler(started, release)
	f.startWorker(t, h, Config{})
	hold := f.publish(t, "hb", "hold")
	<-started
	busy := f.publishIn(t, "hb", &events.Inbound{Text: "tick", Heartbeat: true, Mode: "interrupt"})
	queued := f.publishMode(t, "hb", "queued", "collect")
	busyCollect := f.publishIn(t, "hb", &events.Inbound{Text: "tock", Heartbeat: true, Mode: "collect"})
	close(release)
	if ev := f.waitFinal(t, "hb", hold); ev.Data.Result.Meta.Error != nil {
		t.Fatalf("the held turn was cut: %+v", ev.Data.Result)
	}
	for _, seq := range []uint64{busy, busyCollect} {
		ev := f.waitFinal(t, "hb", seq)
		if e := ev.Data.Result.Meta.Error; e == nil || e.Kind != events.KindDropped || !strings.Contains(e.Message, "heartbeat") {
			t.Fatalf("busy heartbeat %d = %+v", seq, ev.Data.Result)
		}
	}
	if ev := f.waitFinal(t, "hb", queued); ev.Data.Result.Payloads[0].Text != "ok queued" {
		t.Fatalf("the message queued with the heartbeats = %+v", ev.Data.Result)
	}
	idle := f.publishIn(t, "hb", &events.Inbound{Text: "tick", Heartbeat: true})
	if ev := f.waitFinal(t, "hb", idle); ev.Data.Result.Meta.Error != nil || ev.Data.Result.Payloads[0].Text != "ok tick" {
		t.Fatalf("idle heartbeat = %+v", ev.Data.Result)
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if got := strings.Join(h.seen["hb"], ","); got != "hold,queued,tick" {
		t.Fatalf("turns ran %q, want hold,queued,tick", got)
	}
}

// TestInterruptStopsTheRunningTurn: an interrupt-mode message cancels the
// running turn at once, drops the messages queued before it (each with a
// final event saying so) and runs next.
func TestInterruptStopsTheRunningTurn(t *testing.T) {
	t.Parallel()
	f := newFleet(t, 5*time.Second, 5*time.Second)
	started := make(chan struct{})
	echo := &echoHandler{}
	f.startWorker(t, HandlerFunc(func(ctx context.Context, turn *Turn) (*Outcome, error) {
		if turn.Inbound.Text == "long" {
			close(started)
			<-ctx.Done() // a model call that would take minutes
			return nil, context.Cause(ctx)
		}
		return echo.HandleTurn(ctx, turn)
	}), Config{})
	long := f.publish(t, "i", "long")
	<-started
	q1 := f.publish(t, "i", "queued one")
	q2 := f.publish(t, "i", "queued two")
	at := time.Now()
	stop := f.publishMode(t, "i", "stop that", "interrupt")
	ev := f.waitFinal(t, "i", long)
	t.Logf("interrupted %v after the interrupt was published", time.Since(at).Round(time.Millisecond))
	if e := ev.Data.Result.Meta.Error; e == nil || e.Kind != "interrupted" || !ev.Data.Result.Meta.Aborted {
		t.Fatalf("interrupted run final = %+v", ev.Data.Result.Meta)
	}
	for _, q := range []uint64{q1, q2} {
		if e := f.waitFinal(t, "i", q).Data.Result.Meta.Error; e == nil || e.Kind != "interrupted" {
			t.Fatalf("queued run %d final error = %+v, want interrupted", q, e)
		}
	}
	if ev := f.waitFinal(t, "i", stop); ev.Data.Result.Payloads[0].Text != "ok stop that" {
		t.Fatalf("interrupt message = %+v", ev.Data.Result)
	}
	echo.mu.Lock()
	defer echo.mu.Unlock()
	if got := echo.seen["i"]; len(got) != 1 || got[0] != "stop that" {
		t.Fatalf("turns run after the interrupt: %q, want only the interrupt message", got)
	}
}

// TestCutSeenBeforeStored: the watch's core subscription can see a cutting
// message before the stream stores it. The cut turn waits for it on the
// lane, so a rollback still discards the cut turn's progress; a cut the
// stream never stores (refused) ends the turn as an interrupt after a
// bounded wait, progress kept, and the lane goes on.
func TestCutSeenBeforeStored(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name   string
		stored bool // the rollback is stored after the turn saw the cut
		want   []string
	}{
		{"stored late", true, []string{"next", "ok next"}},
		{"never stored", false, []string{"long", "half done", "after", "ok after"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			f := newFleet(t, 10*time.Second, 10*time.Second)
			started, cutSeen := make(chan struct{}), make(chan struct{})
			f.startWorker(t, cutHalfway(started, cutSeen), Config{})
			key := "seen-" + strings.ReplaceAll(tc.name, " ", "-")
			long := f.publish(t, key, "long")
			waitClosed(t, "the long turn", started)
			// A rollback the subscription sees and the stream refuses: it
			// expects a subject sequence the lane never reaches.
			subj, _ := events.InboundSubject(key)
			data, ct, _ := events.EncodeInbound(&events.Inbound{Text: "next", Mode: "rollback"}, false)
			m := nats.NewMsg(subj)
			m.Data = data
			m.Header.Set(events.HeaderContentType, ct)
			m.Header.Set(jetstream.ExpectedLastSubjSeqHeader, "999999")
			if _, err := f.js.PublishMsg(t.Context(), m); err == nil {
				t.Fatal("the stream stored a message expecting sequence 999999")
			}
			<-cutSeen
			last := uint64(0)
			if tc.stored {
				last = f.publishMode(t, key, "next", "rollback")
			}
			if e := f.waitFinal(t, key, long).Data.Result.Meta.Error; e == nil || e.Kind != events.KindInterrupted {
				t.Fatalf("cut run's error %+v", e)
			}
			if !tc.stored {
				last = f.publish(t, key, "after")
			}
			f.waitFinal(t, key, last)
			texts := f.transcriptTexts(t, key)
			if !slices.Equal(texts, tc.want) {
				t.Fatalf("transcript %q, want %q", texts, tc.want)
			}
		})
	}
}

// TestCutTurnKeepsItsProgress: a turn cut by an interrupt or a stop keeps
// what it did (the handler's partial outcome: its prompt and completed
// steps) in the transcript; a rollback discards it.
func TestCutTurnKeepsItsProgress(t *testing.T) {
	t.Parallel()
	for _, mode := range []string{"interrupt", "stop", "rollback"} {
		t.Run(mode, func(t *testing.T) {
			t.Parallel()
			f := newFleet(t, 5*time.Second, 5*time.Second)
			started := make(chan struct{})
			echo := &echoHandler{}
			f.startWorker(t, HandlerFunc(func(ctx context.Context, turn *Turn) (*Outcome, error) {
				if turn.Inbound.Text != "long" {
					return echo.HandleTurn(ctx, turn)
				}
				close(started)
				<-ctx.Done()
				user := message.Message{Role: message.RoleUser, Content: message.PlainText("long")}
				half := message.Message{Role: message.RoleAssistant, Content: message.PlainText("half done"), StopReason: message.StopToolUse}
				return &Outcome{Entries: []message.Entry{{Type: message.EntryMessage, ID: "u-long", Message: &user},
					{Type: message.EntryMessage, ID: "a-long", Message: &half}}}, context.Cause(ctx)
			}), Config{})
			key := "k" + mode
			long := f.publish(t, key, "long")
			waitClosed(t, "the long turn", started)
			var cut uint64
			if mode == "stop" {
				cut = f.publishIn(t, key, &events.Inbound{Stop: true})
			} else {
				cut = f.publishMode(t, key, "next", mode)
			}
			if e := f.waitFinal(t, key, long).Data.Result.Meta.Error; e == nil || e.Kind != events.KindInterrupted {
				t.Fatalf("cut run's error %+v", e)
			}
			f.waitFinal(t, key, cut)
			texts := f.transcriptTexts(t, key)
			want := map[string][]string{
				"interrupt": {"long", "half done", "next", "ok next"},
				"stop":      {"long", "half done"},
				"rollback":  {"next", "ok next"},
			}[mode]
			if !slices.Equal(texts, want) {
				t.Fatalf("transcript %q, want %q", texts, want)
			}
		})
	}
}

// cutHalfway is a handler whose turn "long" closes started, runs until it
// is cut, closes cutSeen and returns what it did (its prompt and a
// half-done reply) with the cut's cause; other turns echo.
func cutHalfway(started, cutSeen chan struct{}) Handler {
	echo := &echoHandler{}
	return HandlerFunc(func(ctx context.Context, turn *Turn) (*Outcome, error) {
		if turn.Inbound.Text != "long" {
			return echo.HandleTurn(ctx, turn)
		}
		close(started)
		<-ctx.Done()
		close(cutSeen)
		user := message.Message{Role: message.RoleUser, Content: message.PlainText("long")}
		half := message.Message{Role: message.RoleAssistant, Content: message.PlainText("half done"), StopReason: message.StopToolUse}
		return &Outcome{Entries: []message.Entry{{Type: message.EntryMessage, ID: "u-long", Message: &user},
			{Type: message.EntryMessage, ID: "a-long", Message: &half}}}, context.Cause(ctx)
	})
}

// TestDrainStartsAfterTheCursor: a drain reads the lane's first message
// while it reads the cursor, and starts with it only when it lies past the
// cursor; a processed message still on the lane (its turn committed
// elsewhere, the message not deleted) is never run again, and the message
// after it is.
func TestDrainStartsAfterTheCursor(t *testing.T) {
	t.Parallel()
	f := newFleet(t, 5*time.Second, 5*time.Second)
	const key = "left"
	tok, _ := events.KeyToken(key)
	one := f.publish(t, key, "one")
	lease := f.takeLane(t, tok)
	if _, err := lease.PutRecord(t.Context(), kvstore.Record{InboundSeq: one, RunID: "elsewhere", SessionID: "s"}); err != nil {
		t.Fatal(err)
	}
	if err := lease.Release(t.Context()); err != nil {
		t.Fatal(err)
	}
	h := &echoHandler{}
	f.startWorker(t, h, Config{})
	two := f.publish(t, key, "two")
	f.waitFinal(t, key, two)
	h.mu.Lock()
	defer h.mu.Unlock()
	if got := h.seen[key]; len(got) != 1 || got[0] != "two" {
		t.Fatalf("the lane ran %q, want only [two] (one was processed)", got)
	}
}
