package lanefleet

import (
	"context"
	"runtime"
	"strconv"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/lanefleet/lanefleet/events"
	"github.com/lanefleet/lanefleet/internal/natstest"
	"github.com/lanefleet/lanefleet/lanes"
)

// BenchmarkSend: Client.Send (a request that checks permissions before it
// waits, with retries) against a bare JetStream publish of the same
// message (baseline), on a stream without workers.
func BenchmarkSend(b *testing.B) {
	srv := natstest.Start(b)
	nc := natstest.Connect(b, srv.URL)
	js, _ := jetstream.New(nc)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	// b.N messages to one lane nobody drains: no per-lane cap.
	if _, err := lanes.EnsureStreams(ctx, js, lanes.StreamConfig{LaneMaxMsgs: -1, LaneMaxBytes: -1}); err != nil {
		b.Fatal(err)
	}
	c, _ := New(nc)
	b.Run("baseline=jetstream.PublishMsg", func(b *testing.B) {
		data, ct, _ := events.EncodeInbound(&events.Inbound{Text: "hello"}, false)
		for b.Loop() {
			m := nats.NewMsg(events.InboundPrefix + "bench")
			m.Data = data
			m.Header.Set(events.HeaderContentType, ct)
			if _, err := js.PublishMsg(ctx, m, jetstream.WithMsgID(newID())); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("Client.Send", func(b *testing.B) {
		for b.Loop() {
			if _, err := c.Send(ctx, "bench", "hello"); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// BenchmarkFollowEndedRun: replaying a finished run of 40 events with
// Run.Events (a catch-up from the lane service: one stream read per event,
// no consumer) against the ordered consumer the client used before, deleted
// after each replay here (baseline; the client left it on the server for 5
// minutes, and the 1,001st replay failed with "maximum consumers limit
// reached").
func BenchmarkFollowEndedRun(b *testing.B) {
	nc, js, ctx := serviceOnly(b)
	subj, _ := events.EventSubject("replayed", "3")
	for seq := uint64(1); seq <= 40; seq++ {
		ev := &events.Event{RunID: "3", SessionKey: "replayed", Seq: seq, Stream: events.StreamAssistant, Data: events.EventData{Delta: "token "}}
		if seq == 40 {
			ev.Stream, ev.Data = events.StreamFinal, events.EventData{Result: &events.Result{}}
		}
		data, ct, _ := events.EncodeEvent(ev, false)
		m := nats.NewMsg(subj)
		m.Data = data
		m.Header.Set(events.HeaderContentType, ct)
		if _, err := js.PublishMsg(ctx, m); err != nil {
			b.Fatal(err)
		}
	}
	stream, err := js.Stream(ctx, events.EventStream)
	if err != nil {
		b.Fatal(err)
	}
	b.Run("baseline=OrderedConsumer", func(b *testing.B) {
		for b.Loop() {
			cons, err := stream.OrderedConsumer(ctx, jetstream.OrderedConsumerConfig{FilterSubjects: []string{subj}})
			if err != nil {
				b.Fatal(err)
			}
			msgs, err := cons.Messages(jetstream.PullMaxMessages(500))
			if err != nil {
				b.Fatal(err)
			}
			for n := 0; n < 40; n++ {
				if _, err := msgs.Next(jetstream.NextContext(ctx)); err != nil {
					b.Fatal(err)
				}
			}
			msgs.Stop()
			if err := stream.DeleteConsumer(ctx, cons.CachedInfo().Name); err != nil {
				b.Fatal(err)
			}
		}
	})
	c, _ := New(nc)
	b.Run("Run.Events", func(b *testing.B) {
		for b.Loop() {
			n := 0
			for _, err := range c.Run("replayed", "3").Events(ctx) {
				if err != nil {
					b.Fatal(err)
				}
				n++
			}
			if n != 40 {
				b.Fatalf("%d events", n)
			}
		}
	})
}

// BenchmarkSendDistinct: a client sending to many distinct sessions it does
// not follow (each send a new session; and 3,000 sessions in turn). Client.Send subscribes to each
// session's events first (a SUB, and server sublist work, per send; the
// subscriptions Send keeps for a follower are bounded, maxKept);
// WithoutFollow publishes alone. Baseline: a bare JetStream publish of the
// same message to the same subjects, in the same run. subs and
// goroutines: the lane subscriptions the client holds at the end, and the
// goroutines they hold.
func BenchmarkSendDistinct(b *testing.B) {
	srv := natstest.Start(b)
	nc := natstest.Connect(b, srv.URL)
	js, _ := jetstream.New(nc)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	if _, err := lanes.EnsureStreams(ctx, js, lanes.StreamConfig{}); err != nil {
		b.Fatal(err)
	}
	data, ct, _ := events.EncodeInbound(&events.Inbound{Text: "hello"}, false)
	n := 0
	session := func() string { n++; return "d" + strconv.Itoa(n) }
	b.Run("baseline=jetstream.PublishMsg", func(b *testing.B) {
		for b.Loop() {
			m := nats.NewMsg(events.InboundPrefix + session())
			m.Data = data
			m.Header.Set(events.HeaderContentType, ct)
			if _, err := js.PublishMsg(ctx, m, jetstream.WithMsgID(newID())); err != nil {
				b.Fatal(err)
			}
		}
	})
	for _, bc := range []struct {
		name string
		opts []SendOption
	}{
		{"Client.Send", nil},
		{"Client.Send+WithoutFollow", []SendOption{WithoutFollow()}},
	} {
		b.Run(bc.name, func(b *testing.B) {
			cnc := natstest.Connect(b, srv.URL)
			defer cnc.Close()
			c, _ := New(cnc)
			before := runtime.NumGoroutine()
			for b.Loop() {
				if _, err := c.Send(ctx, session(), "hello", bc.opts...); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(laneSubscriptions(c)), "subs")
			b.ReportMetric(float64(runtime.NumGoroutine()-before), "goroutines")
		})
	}
	// A working set of sessions sent to in turn, within the bound of
	// kept subscriptions: after the first round each send reuses its
	// lane's.
	b.Run("Client.Send(3000-sessions-in-turn)", func(b *testing.B) {
		cnc := natstest.Connect(b, srv.URL)
		defer cnc.Close()
		c, _ := New(cnc)
		const sessions = 3000
		i := 0
		send := func() {
			i++
			if _, err := c.Send(ctx, "t"+strconv.Itoa(i%sessions), "hello"); err != nil {
				b.Fatal(err)
			}
		}
		for range sessions {
			send()
		}
		for b.Loop() {
			send()
		}
		b.ReportMetric(float64(laneSubscriptions(c)), "subs")
	})
}
