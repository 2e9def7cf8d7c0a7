package main

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"

	"github.com/lanefleet/lanefleet"
	"github.com/lanefleet/lanefleet/events"
	"github.com/lanefleet/lanefleet/kvstore"
	"github.com/lanefleet/lanefleet/lanes"
)

// eventOptions size the event scenarios.
type eventOptions struct {
	sessions, turns, deltas int           // throughput: turns per session, deltas per turn
	latencyDeltas           int           // latency: deltas of the one paced turn
	pace                    time.Duration // latency: time between two deltas
}

const benchDelta = "tok " // a typical streamed token

// benchEpoch anchors the emit times deltas carry: microseconds since it, in
// base 36, keep a delta token-sized ("t2bx1k ").
var benchEpoch = time.Now()

func stamp() string {
	return "t" + strconv.FormatInt(time.Since(benchEpoch).Microseconds(), 36) + " "
}

// viewerWarmUp is how long a latency run waits for its viewer to attach
// before the first delta, so no delta's latency includes the viewer's setup.
const viewerWarmUp = 200 * time.Millisecond

// eventsBench measures the event path of one worker and prints each figure
// next to its baselines, measured in the same run on the same server and
// stream with the same encoded events:
//
//   - throughput: sessions × turns turns whose handler emits deltas as fast
//     as it can (an instant model), coalesced into frames by Turn.Emit;
//     deltas/s from the first publish to the last final event, against one
//     core publish and one JetStream async publish per delta;
//   - latency: one turn emitting a delta every pace, each carrying its emit
//     time; a viewer following the run with the Go client records when each
//     delta arrives. Baselines at the same pace, one event per delta: core
//     publish → core subscriber, and JetStream publish → the Go client.
func eventsBench(o options) error {
	eo := o.events
	s, stop, err := startServer(o)
	if err != nil {
		return err
	}
	defer stop()
	url := s.ClientURL()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	nc, js, err := connect(url)
	if err != nil {
		return err
	}
	defer nc.Close()
	if _, err := lanes.EnsureStreams(ctx, js, lanes.StreamConfig{}); err != nil {
		return err
	}
	handler := lanes.HandlerFunc(func(ctx context.Context, t *lanes.Turn) (*lanes.Outcome, error) {
		var text strings.Builder
		if strings.HasPrefix(t.Inbound.Text, "paced") {
			time.Sleep(viewerWarmUp) // let the viewer attach first
			tick := time.NewTicker(eo.pace)
			defer tick.Stop()
			for range eo.latencyDeltas {
				<-tick.C
				d := stamp()
				text.WriteString(d)
				t.Emit(events.StreamAssistant, events.EventData{Delta: d, Text: text.String()})
			}
		} else {
			for range eo.deltas {
				text.WriteString(benchDelta)
				t.Emit(events.StreamAssistant, events.EventData{Delta: benchDelta, Text: text.String()})
			}
		}
		return &lanes.Outcome{Result: &events.Result{Payloads: []events.Payload{{Text: "done"}}}}, nil
	})
	wnc, wjs, err := connect(url)
	if err != nil {
		return err
	}
	defer wnc.Close()
	streams, err := lanes.EnsureStreams(ctx, wjs, lanes.StreamConfig{})
	if err != nil {
		return err
	}
	kv, err := kvstore.Open(ctx, wjs, kvstore.Config{})
	if err != nil {
		return err
	}
	w, err := lanes.NewWorker(wjs, streams, kv, handler, lanes.Config{ID: "ev", Concurrency: o.concurrency, Logger: zerolog.Nop()})
	if err != nil {
		return err
	}
	done := make(chan struct{})
	go func() { defer close(done); _ = w.Run(ctx) }()
	defer func() { cancel(); <-done }()

	total := eo.sessions * eo.turns * eo.deltas
	fmt.Printf("\nevents: %d sessions × %d turns × %d deltas = %d deltas, one worker\n", eo.sessions, eo.turns, eo.deltas, total)
	framed, frames, err := framedRate(ctx, nc, js, eo)
	if err != nil {
		return fmt.Errorf("framed deltas: %w", err)
	}
	core, err := rawEventRate(nc, js, total, eo.deltas, false)
	if err != nil {
		return fmt.Errorf("core baseline: %w", err)
	}
	jsRate, err := rawEventRate(nc, js, total, eo.deltas, true)
	if err != nil {
		return fmt.Errorf("jetstream baseline: %w", err)
	}
	fmt.Printf("  %-52s %10.0f deltas/s  (%d events: %.0f deltas per event)   (target ≥ 50,000)\n", "deltas through a worker, coalesced into frames", framed, frames, float64(total)/float64(max(frames, 1)))
	fmt.Printf("  %-52s %10.0f deltas/s\n", "baseline: core publish, one event per delta", core)
	fmt.Printf("  %-52s %10.0f deltas/s\n", "baseline: JetStream async publish, one event per delta", jsRate)

	fmt.Printf("\ndelta latency, worker → viewer (Go client), %d deltas every %v on loopback\n", eo.latencyDeltas, eo.pace)
	c, err := lanefleet.New(nc)
	if err != nil {
		return err
	}
	worker, err := pacedTurn(ctx, c, eo)
	if err != nil {
		return fmt.Errorf("paced turn: %w", err)
	}
	coreLat, err := pacedCore(ctx, nc, eo)
	if err != nil {
		return fmt.Errorf("core latency: %w", err)
	}
	jsLat, err := pacedJetStream(ctx, c, js, eo)
	if err != nil {
		return fmt.Errorf("jetstream latency: %w", err)
	}
	fmt.Printf("  %-52s p50 %6.2f ms  p99 %6.2f ms  max %6.2f ms   (target p99 ≤ 10 ms)\n", "worker frames → client viewer", ms(worker, 50), ms(worker, 99), ms(worker, 100))
	fmt.Printf("  %-52s p50 %6.2f ms  p99 %6.2f ms  max %6.2f ms\n", "baseline: core publish → core subscriber", ms(coreLat, 50), ms(coreLat, 99), ms(coreLat, 100))
	fmt.Printf("  %-52s p50 %6.2f ms  p99 %6.2f ms  max %6.2f ms\n", "baseline: JetStream publish → client viewer", ms(jsLat, 50), ms(jsLat, 99), ms(jsLat, 100))
	return nil
}

// framedRate runs the throughput turns and returns deltas/s and the number
// of delta events published.
func framedRate(ctx context.Context, nc *nats.Conn, js jetstream.JetStream, eo eventOptions) (float64, int64, error) {
	var finals, deltaEvents atomic.Int64
	n := int64(eo.sessions * eo.turns)
	allDone := make(chan struct{})
	sub, err := nc.Subscribe(events.EventPrefix+">", func(m *nats.Msg) {
		if !strings.HasPrefix(m.Subject, events.EventPrefix+"tp") {
			return
		}
		switch m.Header.Get(events.HeaderStream) {
		case events.StreamFinal:
			if finals.Add(1) == n {
				close(allDone)
			}
		case events.StreamAssistant:
			deltaEvents.Add(1)
		}
	})
	if err != nil {
		return 0, 0, err
	}
	defer sub.Unsubscribe()
	_ = sub.SetPendingLimits(-1, -1)
	if err := nc.Flush(); err != nil {
		return 0, 0, err
	}
	start := time.Now()
	for turn := range eo.turns {
		for s := range eo.sessions {
			m := nats.NewMsg(events.InboundPrefix + "tp" + strconv.Itoa(s))
			m.Data = payload(turn)
			m.Header.Set(events.HeaderContentType, events.ContentMsgpack)
			if _, err := js.PublishMsgAsync(m); err != nil {
				return 0, 0, err
			}
		}
	}
	select {
	case <-allDone:
	case <-time.After(5 * time.Minute):
		return 0, 0, fmt.Errorf("%d of %d turns finished", finals.Load(), n)
	case <-ctx.Done():
		return 0, 0, ctx.Err()
	}
	el := time.Since(start)
	return float64(n*int64(eo.deltas)) / el.Seconds(), deltaEvents.Load(), nil
}

// deltaEvent is one assistant event as a run publishes it, without
// coalescing: the text so far grows with every delta.
func deltaEvent(subject string, seq uint64, delta, text string) *nats.Msg {
	ev := &events.Event{RunID: "1", SessionKey: "bench", Seq: seq, Attempt: 1, Stream: events.StreamAssistant,
		TS: time.Now().UnixMilli(), Data: events.EventData{Delta: delta, Text: text}}
	data, ct, _ := events.EncodeEvent(ev, false)
	m := nats.NewMsg(subject)
	m.Data = data
	m.Header.Set(events.HeaderContentType, ct)
	m.Header.Set(events.HeaderStream, ev.Stream)
	return m
}

// rawEventRate publishes total assistant events, one per delta, runs of
// perRun deltas each on its own subject, by core publish or JetStream async
// publish, and returns deltas/s once all are flushed or stored.
func rawEventRate(nc *nats.Conn, js jetstream.JetStream, total, perRun int, viaJetStream bool) (float64, error) {
	var text strings.Builder
	subject := ""
	start := time.Now()
	for i := range total {
		if i%perRun == 0 {
			text.Reset()
			subject = events.EventPrefix + "raw." + strconv.Itoa(i/perRun)
			if viaJetStream {
				subject = events.EventPrefix + "rawjs." + strconv.Itoa(i/perRun)
			}
		}
		text.WriteString(benchDelta)
		m := deltaEvent(subject, uint64(i%perRun+1), benchDelta, text.String())
		var err error
		if viaJetStream {
			_, err = js.PublishMsgAsync(m, jetstream.WithStallWait(time.Minute))
		} else {
			err = nc.PublishMsg(m)
		}
		if err != nil {
			return 0, err
		}
	}
	if viaJetStream {
		select {
		case <-js.PublishAsyncComplete():
		case <-time.After(5 * time.Minute):
			return 0, fmt.Errorf("publish acks not complete")
		}
	} else if err := nc.Flush(); err != nil {
		return 0, err
	}
	return float64(total) / time.Since(start).Seconds(), nil
}

// deltaLatencies parses the emit times carried in a delta (stamp) and
// appends how long ago each was.
func deltaLatencies(out []time.Duration, delta string, now time.Time) []time.Duration {
	for _, f := range strings.Fields(delta) {
		if us, err := strconv.ParseInt(strings.TrimPrefix(f, "t"), 36, 64); err == nil {
			out = append(out, now.Sub(benchEpoch.Add(time.Duration(us)*time.Microsecond)))
		}
	}
	return out
}

// follow reads a run with the Go client until its final event and records
// each delta's latency.
func follow(ctx context.Context, r *lanefleet.Run) ([]time.Duration, error) {
	var lat []time.Duration
	for ev, err := range r.Events(ctx) {
		if err != nil {
			return nil, err
		}
		if ev.Stream == events.StreamAssistant {
			lat = deltaLatencies(lat, ev.Data.Delta, time.Now())
		}
	}
	return lat, nil
}

// pacedTurn runs the paced turn on the worker and follows it.
func pacedTurn(ctx context.Context, c *lanefleet.Client, eo eventOptions) ([]time.Duration, error) {
	r, err := c.Send(ctx, "latency", "paced")
	if err != nil {
		return nil, err
	}
	return follow(ctx, r)
}

// pacedCore publishes one event per delta at the pace by core NATS, to a core
// subscriber on another connection.
func pacedCore(ctx context.Context, nc *nats.Conn, eo eventOptions) ([]time.Duration, error) {
	sc, err := nats.Connect(nc.ConnectedUrl())
	if err != nil {
		return nil, err
	}
	defer sc.Close()
	var mu sync.Mutex
	var lat []time.Duration
	got := make(chan struct{}, eo.latencyDeltas)
	sub, err := sc.Subscribe("bench.core", func(m *nats.Msg) {
		now := time.Now()
		ev, err := events.DecodeEvent(m.Header.Get(events.HeaderContentType), m.Data)
		if err != nil {
			return
		}
		mu.Lock()
		lat = deltaLatencies(lat, ev.Data.Delta, now)
		mu.Unlock()
		got <- struct{}{}
	})
	if err != nil {
		return nil, err
	}
	defer sub.Unsubscribe()
	if err := sc.Flush(); err != nil {
		return nil, err
	}
	if err := pace(eo, func(seq uint64, d, text string) error {
		m := deltaEvent("bench.core", seq, d, text)
		if err := nc.PublishMsg(m); err != nil {
			return err
		}
		return nc.Flush()
	}); err != nil {
		return nil, err
	}
	for range eo.latencyDeltas {
		select {
		case <-got:
		case <-time.After(10 * time.Second):
			return nil, fmt.Errorf("core events lost")
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	mu.Lock()
	defer mu.Unlock()
	return lat, nil
}

// pacedJetStream publishes one event per delta at the pace into the event
// stream, as a run's subject, then a final event, and follows that run with
// the Go client.
func pacedJetStream(ctx context.Context, c *lanefleet.Client, js jetstream.JetStream, eo eventOptions) ([]time.Duration, error) {
	const session, run = "rawlatency", "1"
	subject, _ := events.EventSubject(session, run)
	res := make(chan []time.Duration, 1)
	errc := make(chan error, 1)
	go func() {
		lat, err := follow(ctx, c.Run(session, run))
		res <- lat
		errc <- err
	}()
	time.Sleep(viewerWarmUp)
	n := uint64(0)
	if err := pace(eo, func(seq uint64, d, text string) error {
		n = seq
		_, err := js.PublishMsgAsync(deltaEvent(subject, seq, d, text))
		return err
	}); err != nil {
		return nil, err
	}
	final := &events.Event{RunID: run, SessionKey: session, Seq: n + 1, Stream: events.StreamFinal, Data: events.EventData{Result: &events.Result{}}}
	data, ct, _ := events.EncodeEvent(final, false)
	m := nats.NewMsg(subject)
	m.Data = data
	m.Header.Set(events.HeaderContentType, ct)
	if _, err := js.PublishMsg(ctx, m); err != nil {
		return nil, err
	}
	lat := <-res
	return lat, <-errc
}

// pace calls publish with one delta carrying its emit time every eo.pace.
func pace(eo eventOptions, publish func(seq uint64, delta, text string) error) error {
	var text strings.Builder
	tick := time.NewTicker(eo.pace)
	defer tick.Stop()
	for i := range eo.latencyDeltas {
		<-tick.C
		d := stamp()
		text.WriteString(d)
		if err := publish(uint64(i+1), d, text.String()); err != nil {
			return err
		}
	}
	return nil
}
