package integration

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"

	"github.com/lanefleet/lanefleet/events"
	"github.com/lanefleet/lanefleet/internal/fleet"
	"github.com/lanefleet/lanefleet/internal/natstest"
)

// BenchmarkTurnWithTool measures full turns that make one tool call (a
// model reply calling read, its result, the answer: three journal steps)
// with the step journal and without it, on the same kind of server, with
// the worker's default fsync on every write and with the server's
// default. The figures to read are the ratio of turns/s between the two
// sub-benchmarks of one durability setting (issue 13: at most 15% lower
// with the journal) and the difference of their writes/turn (at most one
// more per step: three here). lanes-writes/turn stays the same with the
// journal: its steps go to a stream of their own (AGENT_STEPS), whose
// fsyncs run beside the lanes stream's rather than after them.
func BenchmarkTurnWithTool(b *testing.B) {
	for _, sync := range []bool{true, false} {
		for _, journal := range []bool{false, true} {
			name := fmt.Sprintf("sync-always=%v/journal=%v", sync, journal)
			b.Run(name, func(b *testing.B) { benchTurns(b, sync, !journal) })
		}
	}
}

func benchTurns(b *testing.B, syncAlways, noJournal bool) {
	srv := natstest.Start(b, natstest.Options{SyncAlways: syncAlways})
	m, err := fleet.Start(b.Context(), fleet.Config{NATSURL: srv.URL, WorkerID: "bench", Scripted: true, NoStepJournal: noJournal,
		WorkspaceRoot: b.TempDir(), Concurrency: 64, Logger: zerolog.Nop()})
	if err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = m.Run(ctx) }()
	defer func() { cancel(); <-done }()

	nc := natstest.Connect(b, srv.URL)
	js, err := jetstream.New(nc, jetstream.WithPublishAsyncMaxPending(4096))
	if err != nil {
		b.Fatal(err)
	}
	ended := make(chan struct{}, 1<<16)
	sub, err := nc.Subscribe(events.EventPrefix+">", func(msg *nats.Msg) {
		if msg.Header.Get(events.HeaderStream) == events.StreamFinal {
			ended <- struct{}{}
		}
	})
	if err != nil {
		b.Fatal(err)
	}
	_ = sub.SetPendingLimits(-1, -1)
	defer func() { _ = sub.Unsubscribe() }()

	const sessions = 64
	script := `#script {"replies":[{"toolCalls":[{"name":"read","arguments":{"path":"notes.txt"}}]},{"text":"ok"}]}`
	data, ct, err := events.EncodeInbound(&events.Inbound{Text: script, Model: "scripted/script"}, false)
	if err != nil {
		b.Fatal(err)
	}
	send := func(i int) {
		msg := nats.NewMsg(fmt.Sprintf("%sbench-%d", events.InboundPrefix, i%sessions))
		msg.Data = data
		msg.Header.Set(events.HeaderContentType, ct)
		if _, err := js.PublishMsgAsync(msg, jetstream.WithStallWait(time.Minute)); err != nil {
			b.Fatal(err)
		}
	}
	wait := func(n int) {
		deadline := time.After(5 * time.Minute)
		for range n {
			select {
			case <-ended:
			case <-deadline:
				b.Fatal("turns did not finish within 5 minutes")
			}
		}
	}
	// Warm up: every session's lane exists before the timer starts.
	for i := range sessions {
		send(i)
	}
	wait(sessions)
	before, beforeLanes := storedWrites(b, js), streamWrites(b, js, "KV_lanes")
	b.ResetTimer()
	start := time.Now()
	for i := range b.N {
		send(i)
	}
	wait(b.N)
	b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "turns/s")
	b.StopTimer()
	// Every message a stream stores is one synchronous write (one fsync
	// with sync always): a figure the machine's noise does not move.
	b.ReportMetric(float64(storedWrites(b, js)-before)/float64(b.N), "writes/turn")
	// The lanes stream's own share: its writes fsync one after another,
	// so they bound the turn rate with sync always; the step journal has a
	// stream of its own and adds none here.
	b.ReportMetric(float64(streamWrites(b, js, "KV_lanes")-beforeLanes)/float64(b.N), "lanes-writes/turn")
}

// streamWrites is the last sequence of one stream: the messages it stored
// so far, deleted ones included.
func streamWrites(b *testing.B, js jetstream.JetStream, name string) uint64 {
	b.Helper()
	s, err := js.Stream(context.Background(), name)
	if err != nil {
		b.Fatal(err)
	}
	info, err := s.Info(context.Background())
	if err != nil {
		b.Fatal(err)
	}
	return info.State.LastSeq
}

// storedWrites sums the last sequence of every stream on the server: the
// messages stored so far, deleted ones included.
func storedWrites(b *testing.B, js jetstream.JetStream) uint64 {
	b.Helper()
	var n uint64
	streams := js.ListStreams(context.Background())
	for info := range streams.Info() {
		n += info.State.LastSeq
	}
	if err := streams.Err(); err != nil {
		b.Fatal(err)
	}
	return n
}
