package lanes

import (
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"

	"github.com/lanefleet/lanefleet/events"
	"github.com/lanefleet/lanefleet/internal/natstest"
	"github.com/lanefleet/lanefleet/lanes/internal/fenced"
)

// benchRunDeltas is the length of one benchmark run's reply, in deltas: the
// assistant events carry the text so far, so a run is kept reply-sized.
const benchRunDeltas = 1000

// BenchmarkEmitDeltas measures how many model deltas one worker publishes
// per second into the event stream, coalesced into frames (Turn.Emit), next
// to two baselines measured the same way on the same server: one core
// publish per delta, and one JetStream async publish per delta, each an
// encoded assistant event. Every benchmark run of benchRunDeltas deltas
// ends with its events stored (the wait before a final event).
func BenchmarkEmitDeltas(b *testing.B) {
	srv := natstest.Start(b)
	nc := natstest.Connect(b, srv.URL)
	js, err := jetstream.New(nc, jetstream.WithPublishAsyncMaxPending(4096))
	if err != nil {
		b.Fatal(err)
	}
	streams, err := EnsureStreams(b.Context(), js, StreamConfig{})
	if err != nil {
		b.Fatal(err)
	}
	const delta = "tok " // a typical streamed token
	event := func(seq uint64, text string) *nats.Msg {
		ev := &events.Event{RunID: "1", SessionKey: "bench", Seq: seq, Attempt: 1, Stream: events.StreamAssistant,
			TS: time.Now().UnixMilli(), Data: events.EventData{Delta: delta, Text: text}}
		data, ct, _ := events.EncodeEvent(ev, false)
		m := nats.NewMsg("agent.ev.bench." + strconv.FormatUint(seq/benchRunDeltas, 10))
		m.Data = data
		m.Header.Set(events.HeaderContentType, ct)
		m.Header.Set(events.HeaderStream, ev.Stream)
		return m
	}
	report := func(b *testing.B, start time.Time) {
		b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "deltas/s")
	}
	b.Run("baseline-core-publish", func(b *testing.B) {
		var text strings.Builder
		start := time.Now()
		for i := range b.N {
			if i%benchRunDeltas == 0 {
				text.Reset()
			}
			text.WriteString(delta)
			if err := nc.PublishMsg(event(uint64(i), text.String())); err != nil {
				b.Fatal(err)
			}
		}
		if err := nc.Flush(); err != nil {
			b.Fatal(err)
		}
		report(b, start)
	})
	b.Run("baseline-jetstream-async", func(b *testing.B) {
		var text strings.Builder
		start := time.Now()
		for i := range b.N {
			if i%benchRunDeltas == 0 {
				text.Reset()
			}
			text.WriteString(delta)
			if _, err := js.PublishMsgAsync(event(uint64(i), text.String()), jetstream.WithStallWait(time.Minute)); err != nil {
				b.Fatal(err)
			}
		}
		<-js.PublishAsyncComplete()
		report(b, start)
	})
	b.Run("frames", func(b *testing.B) {
		// Every run's emitter claims its run first, as a turn does (next to
		// reading what earlier attempts left): once per turn, not part of
		// the per-delta path, so outside the timer.
		ems := make([]*fenced.Emitter, b.N/benchRunDeltas+1)
		for i := range ems {
			run := strconv.Itoa(i)
			ems[i] = fenced.New(fenced.Config{JS: js, Events: streams.Events, Key: "bench", Run: run, Subject: "agent.ev.bench." + run, Log: zerolog.Nop(), Attempt: 1})
			if _, err := ems[i].Claim(b.Context(), 1); err != nil {
				b.Fatal(err)
			}
		}
		var text strings.Builder
		var em *fenced.Emitter
		frames := uint64(0)
		settle := func() {
			if em == nil {
				return
			}
			if err := em.AwaitAcks(b.Context()); err != nil {
				b.Fatal(err)
			}
			frames += em.Seq()
		}
		b.ResetTimer()
		start := time.Now()
		for i := range b.N {
			if i%benchRunDeltas == 0 {
				settle()
				em = ems[i/benchRunDeltas]
				text.Reset()
			}
			text.WriteString(delta)
			em.Emit(events.StreamAssistant, events.EventData{Delta: delta, Text: text.String()})
		}
		settle()
		report(b, start)
		b.ReportMetric(float64(b.N)/float64(max(frames, 1)), "deltas/event")
	})
}
