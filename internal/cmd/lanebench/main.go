// Command lanebench measures the fleet against an embedded JetStream server
// and prints every figure next to baselines measured in the same run with the
// same durability settings, as ratios, because machines here are noisy:
//
//   - raw JetStream async publish rate and plain durable consume+ack rate;
//   - the project's lanes with a no-op handler (lease-and-drain alone);
//   - full turns with the instant scripted/echo model on 1 and 4 workers;
//   - publish→first-event and publish→final-event latency at an offered load;
//   - the event path: deltas/s through one worker with frames, and delta
//     latency worker→viewer, against raw core and JetStream publishes
//     (events.go);
//   - with -scenario turns, real turns against a local OpenAI-compatible
//     model over HTTP, driven by the Go client, next to the same load sent
//     straight to the model (turns.go);
//   - with -scenario gateway, the same loads through the Go client and
//     through the HTTP gateway, the clients and the model in a child
//     process, compared by latency and the fleet process's CPU per turn
//     (gateway.go).
//
// Each scenario gets a fresh server and data directory.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"sort"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"

	"github.com/lanefleet/lanefleet"
	"github.com/lanefleet/lanefleet/events"
	"github.com/lanefleet/lanefleet/internal/embedded"
	"github.com/lanefleet/lanefleet/internal/fleet"
	"github.com/lanefleet/lanefleet/kvstore"
	"github.com/lanefleet/lanefleet/lanes"
)

type options struct {
	scenario        string
	sessions, turns int
	sync            bool
	latencyN        int
	latencyRate     int
	concurrency     int
	events          eventOptions
	fair            fairOptions
	// listing: sessions in the index, sessions of the baseline (no
	// index), requests timed per figure and the baseline's.
	listingSessions, listingBaseline, listingProbes, listingBaselineProbes int
	listingTurns, listingTurnRounds                                        int
}

func main() {
	fleet.TuneGC(os.Getenv) // as the worker runs
	var o options
	syncMode := flag.String("sync", "always", "server fsync: always (the worker's default) or default")
	flag.IntVar(&o.sessions, "sessions", 10000, "sessions")
	flag.IntVar(&o.turns, "turns", 10, "turns per session")
	flag.IntVar(&o.latencyN, "latency-n", 1500, "messages in the latency run")
	flag.IntVar(&o.latencyRate, "latency-rate", 100, "offered load of the latency run, turns/s")
	flag.IntVar(&o.concurrency, "concurrency", 256, "lanes per worker")
	flag.StringVar(&o.scenario, "scenario", "all", "what to run: all, lanes (throughput and turn latency), events (delta throughput and latency), sessions (100,000 sessions × 2 turns: memory, store and times per session; not part of all), turns (real turns against a local OpenAI-compatible model over HTTP through the Go client, next to calling the model directly; not part of all), fair (many continuously-sending sessions over few slots, with and without fair scheduling; not part of all) inflight (memory per turn in flight; not part of all) soak (a long-running worker: RSS, heap and turns/s after each of -soak-rounds rounds; not part of all) or gateway (the same loads through the Go client and through the HTTP gateway, each client in a child process, the fleet process's latency and CPU per turn compared; not part of all) or schedules (an idle worker's CPU and RSS holding no schedule and holding -schedules of them; not part of all) or takeover (-takeover-kills SIGKILLs of worker processes mid-turn: death → resumed turn start p50/p99, repeated side effects, lost messages, next to the AckWait baseline; not part of all) or cluster (a 3-node cluster of nats-server processes, R3, against one node, R1, each with 1, 2 and 3 worker processes and an instant and a 1 s model: turns/s, latency, CPU per turn and what a turn asks of the servers; not part of all) or listing (the sessions listing's pages at -listing-sessions sessions through the session index, next to the listing without one at -listing-baseline; not part of all)")
	flag.IntVar(&o.fair.sessions, "fair-sessions", 256, "fair: sessions sending continuously")
	flag.IntVar(&o.fair.slots, "fair-slots", 64, "fair: the worker's concurrency")
	flag.IntVar(&o.fair.queued, "fair-queued", 2, "fair: messages each session keeps queued")
	flag.DurationVar(&o.fair.model, "fair-model", time.Second, "fair: the model's latency per turn")
	flag.IntVar(&o.fair.noisy, "fair-noisy", 1000, "fair: then the tenant runs: the noisy tenant's sessions, each keeping -fair-queued messages queued (0: no tenant runs)")
	flag.IntVar(&o.fair.quiet, "fair-quiet", 10, "fair: the quiet tenant's sessions in the tenant runs, one message at a time each")
	flag.BoolVar(&o.fair.tenantsOnly, "fair-tenants-only", false, "fair: run only the tenant runs (each tenant alone, then both)")
	flag.DurationVar(&o.fair.duration, "fair-duration", 30*time.Second, "fair: measured time of each run (before and after)")
	flag.IntVar(&o.fair.inflight, "inflight", 1000, "inflight: turns in flight at once (and the worker's concurrency)")
	flag.DurationVar(&o.fair.inflightD, "inflight-model", 5*time.Second, "inflight: the model's latency per turn")
	flag.IntVar(&o.fair.inflightP, "inflight-payload", 0, "inflight: bytes of text in each message (a hostile sender's large payloads; 0: a short message)")
	flag.IntVar(&o.events.sessions, "event-sessions", 8, "events: sessions streaming at once")
	flag.IntVar(&o.events.turns, "event-turns", 5, "events: turns per session")
	flag.IntVar(&o.events.deltas, "event-deltas", 5000, "events: deltas per turn")
	flag.IntVar(&o.events.latencyDeltas, "event-latency-n", 2000, "events: deltas in the latency run")
	flag.DurationVar(&o.events.pace, "event-pace", 2*time.Millisecond, "events: time between two deltas in the latency run")
	flag.IntVar(&o.listingSessions, "listing-sessions", 1_000_000, "listing: sessions in the session index")
	flag.IntVar(&o.listingBaseline, "listing-baseline", 100_000, "listing: sessions of the listing without an index (the baseline), measured first")
	flag.IntVar(&o.listingProbes, "listing-requests", 50, "listing: requests timed per figure")
	flag.IntVar(&o.listingBaselineProbes, "listing-baseline-requests", 10, "listing: requests of the baseline (each followed by five from the index)")
	flag.IntVar(&o.listingTurns, "listing-turns", 200, "listing: turns per round of the turn overhead with and without the index")
	flag.IntVar(&o.listingTurnRounds, "listing-turn-rounds", 3, "listing: rounds of each (0: none)")
	flag.Parse()
	if *gwMockProc {
		if err := gatewayMock(); err != nil {
			fmt.Fprintln(os.Stderr, "lanebench mock model:", err)
			os.Exit(1)
		}
		return
	}
	if *gwDriver {
		if err := gatewayDriver(); err != nil {
			fmt.Fprintln(os.Stderr, "lanebench driver:", err)
			os.Exit(1)
		}
		return
	}
	o.sync = *syncMode == "always"
	if err := run(o); err != nil {
		fmt.Fprintln(os.Stderr, "lanebench:", err)
		os.Exit(1)
	}
}

type result struct {
	name string
	rate float64 // per second
	note string
}

func run(o options) error {
	switch o.scenario {
	case "all":
		if err := lanesBench(o); err != nil {
			return err
		}
		return eventsBench(o)
	case "lanes":
		return lanesBench(o)
	case "sessions":
		return sessionsBench(o)
	case "fair":
		return fairBench(o)
	case "inflight":
		return inflightBench(o)
	case "turns":
		return turnsBench(o)
	case "soak":
		return soakBench(o)
	case "gateway":
		return gatewayBench(o)
	case "schedules":
		return schedBench(o)
	case "takeover":
		return takeoverBench(o)
	case "listing":
		return listingBench(o)
	case "cluster":
		return clusterBench(o)
	case "events":
		fmt.Printf("lanebench: sync_interval %s, R1 file store, GOMAXPROCS %d\n",
			map[bool]string{true: "always", false: "default (2m)"}[o.sync], runtime.GOMAXPROCS(0))
		return eventsBench(o)
	}
	return fmt.Errorf("unknown -scenario %q (all, lanes, events, sessions, turns, fair, inflight, soak, gateway, schedules, takeover, listing, cluster)", o.scenario)
}

func lanesBench(o options) error {
	n := o.sessions * o.turns
	fmt.Printf("lanebench: %d sessions × %d turns = %d messages, sync_interval %s, R1 file store, GOMAXPROCS %d\n\n",
		o.sessions, o.turns, n, map[bool]string{true: "always", false: "default (2m)"}[o.sync], runtime.GOMAXPROCS(0))
	var res []result
	add := func(r result, err error) error {
		if err != nil {
			return fmt.Errorf("%s: %w", r.name, err)
		}
		fmt.Printf("  %-44s %10.0f /s  %s\n", r.name, r.rate, r.note)
		res = append(res, r)
		return nil
	}
	if err := add(rawPublish(o, n)); err != nil {
		return err
	}
	if err := add(rawConsume(o, n)); err != nil {
		return err
	}
	if err := add(lanesRate(o, 1, true)); err != nil {
		return err
	}
	if err := add(lanesRate(o, 4, true)); err != nil {
		return err
	}
	if err := add(lanesRate(o, 1, false)); err != nil {
		return err
	}
	if err := add(lanesRate(o, 4, false)); err != nil {
		return err
	}
	lat, err := latency(o)
	if err != nil {
		return fmt.Errorf("latency: %w", err)
	}

	pub, cons, noop1, noop4, full1, full4 := res[0].rate, res[1].rate, res[2].rate, res[3].rate, res[4].rate, res[5].rate
	fmt.Printf("\nratios (same run, same durability)\n")
	fmt.Printf("  no-op lanes, 1 worker / durable consume+ack     %6.1f%%\n", 100*noop1/cons)
	fmt.Printf("  full turns, 1 worker / no-op lanes, 1 worker    %6.1f%%   (target ≥ 40%%)\n", 100*full1/noop1)
	fmt.Printf("  full turns, 4 workers / no-op lanes, 4 workers  %6.1f%%   (target ≥ 40%%)\n", 100*full4/noop4)
	fmt.Printf("  full turns, 1 worker / raw async publish        %6.1f%%\n", 100*full1/pub)
	fmt.Printf("\nlatency at %d turns/s offered (%d turns, 1 worker)\n", o.latencyRate, o.latencyN)
	fmt.Printf("  publish→first event  p50 %6.2f ms  p99 %6.2f ms   (target p50 ≤ 3 ms, p99 ≤ 15 ms)\n", ms(lat.first, 50), ms(lat.first, 99))
	fmt.Printf("  publish→final event  p50 %6.2f ms  p99 %6.2f ms\n", ms(lat.final, 50), ms(lat.final, 99))
	fmt.Printf("  raw sync publish RTT p50 %6.2f ms  p99 %6.2f ms   (baseline: one durable JetStream publish)\n", ms(lat.pub, 50), ms(lat.pub, 99))
	return nil
}

// server starts a fresh embedded server in a temp dir.
func startServer(o options) (*server.Server, func(), error) {
	dir, err := os.MkdirTemp("", "lanebench")
	if err != nil {
		return nil, nil, err
	}
	sync := o.sync
	s, err := embedded.Start(embedded.Config{Name: "bench", DataDir: filepath.Join(dir, "js"), SyncAlways: &sync})
	if err != nil {
		os.RemoveAll(dir)
		return nil, nil, err
	}
	return s, func() { s.Shutdown(); s.WaitForShutdown(); os.RemoveAll(dir) }, nil
}

func connect(url string) (*nats.Conn, jetstream.JetStream, error) {
	nc, err := nats.Connect(url)
	if err != nil {
		return nil, nil, err
	}
	js, err := jetstream.New(nc, jetstream.WithPublishAsyncMaxPending(4096))
	if err != nil {
		nc.Close()
		return nil, nil, err
	}
	return nc, js, nil
}

func payload(i int) []byte {
	data, _, _ := events.EncodeInbound(&events.Inbound{Text: "message " + strconv.Itoa(i)}, false)
	return data
}

func rawPublish(o options, n int) (result, error) {
	r := result{name: "baseline: raw JetStream async publish"}
	s, stop, err := startServer(o)
	if err != nil {
		return r, err
	}
	defer stop()
	nc, js, err := connect(s.ClientURL())
	if err != nil {
		return r, err
	}
	defer nc.Close()
	ctx := context.Background()
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "RAW", Subjects: []string{"raw.*"}, Storage: jetstream.FileStorage}); err != nil {
		return r, err
	}
	start := time.Now()
	if err := publishAsync(js, n, o.sessions, func(s int) string { return "raw.s" + strconv.Itoa(s) }); err != nil {
		return r, err
	}
	r.rate = float64(n) / time.Since(start).Seconds()
	return r, nil
}

func publishAsync(js jetstream.JetStream, n, sessions int, subj func(int) string) error {
	for i := range n {
		m := nats.NewMsg(subj(i % sessions))
		m.Data = payload(i)
		m.Header.Set(events.HeaderContentType, events.ContentMsgpack)
		if _, err := js.PublishMsgAsync(m, jetstream.WithMsgID("m"+strconv.Itoa(i)), jetstream.WithStallWait(time.Minute)); err != nil {
			return err
		}
	}
	select {
	case <-js.PublishAsyncComplete():
		return nil
	case <-time.After(5 * time.Minute):
		return fmt.Errorf("publish acks not complete")
	}
}

func rawConsume(o options, n int) (result, error) {
	r := result{name: "baseline: durable consume + ack"}
	s, stop, err := startServer(o)
	if err != nil {
		return r, err
	}
	defer stop()
	nc, js, err := connect(s.ClientURL())
	if err != nil {
		return r, err
	}
	defer nc.Close()
	ctx := context.Background()
	st, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "RAW", Subjects: []string{"raw.*"}, Storage: jetstream.FileStorage})
	if err != nil {
		return r, err
	}
	if err := publishAsync(js, n, o.sessions, func(s int) string { return "raw.s" + strconv.Itoa(s) }); err != nil {
		return r, err
	}
	cons, err := st.CreateOrUpdateConsumer(ctx, jetstream.ConsumerConfig{Durable: "c", AckPolicy: jetstream.AckExplicitPolicy, MaxAckPending: 20000})
	if err != nil {
		return r, err
	}
	var got atomic.Int64
	done := make(chan struct{})
	start := time.Now()
	cc, err := cons.Consume(func(m jetstream.Msg) {
		_ = m.Ack()
		if got.Add(1) == int64(n) {
			close(done)
		}
	}, jetstream.PullMaxMessages(500))
	if err != nil {
		return r, err
	}
	defer cc.Stop()
	select {
	case <-done:
	case <-time.After(10 * time.Minute):
		return r, fmt.Errorf("consumed %d of %d", got.Load(), n)
	}
	// Acks are async; wait until the server has them all.
	for {
		ci, err := cons.Info(ctx)
		if err == nil && ci.NumAckPending == 0 {
			break
		}
		time.Sleep(5 * time.Millisecond)
	}
	r.rate = float64(n) / time.Since(start).Seconds()
	return r, nil
}

// lanesRate drains a published backlog of n messages over o.sessions lanes:
// the clock starts with the workers and stops when the fleet has drained.
func lanesRate(o options, workers int, noop bool) (result, error) {
	n := o.sessions * o.turns
	r := result{name: fmt.Sprintf("lanes, no-op handler, %d worker(s)", workers)}
	if !noop {
		r.name = fmt.Sprintf("full turns, scripted/echo, %d worker(s)", workers)
	}
	s, stop, err := startServer(o)
	if err != nil {
		return r, err
	}
	defer stop()
	url := s.ClientURL()
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	defer func() { cancel(); wg.Wait() }()
	// The backlog is published first (its rate is the publish baseline);
	// the clock runs from the workers' start until the lanes are drained.
	nc, js, err := connect(url)
	if err != nil {
		return r, err
	}
	defer nc.Close()
	if _, err := lanes.EnsureStreams(ctx, js, lanes.StreamConfig{}); err != nil {
		return r, err
	}
	if err := publishAsync(js, n, o.sessions, func(s int) string { return events.InboundPrefix + "s" + strconv.Itoa(s) }); err != nil {
		return r, err
	}
	start := time.Now()
	var statsFns []func() int64
	for i := range workers {
		id := "b" + strconv.Itoa(i)
		if noop {
			wnc, wjs, err := connect(url)
			if err != nil {
				return r, err
			}
			defer wnc.Close()
			streams, err := lanes.EnsureStreams(ctx, wjs, lanes.StreamConfig{})
			if err != nil {
				return r, err
			}
			kv, err := kvstore.Open(ctx, wjs, kvstore.Config{})
			if err != nil {
				return r, err
			}
			w, err := lanes.NewWorker(wjs, streams, kv, lanes.HandlerFunc(func(context.Context, *lanes.Turn) (*lanes.Outcome, error) {
				return &lanes.Outcome{}, nil
			}), lanes.Config{ID: id, Concurrency: o.concurrency, Logger: zerolog.Nop()})
			if err != nil {
				return r, err
			}
			statsFns = append(statsFns, w.Stats().Turns.Load)
			wg.Add(1)
			go func() { defer wg.Done(); _ = w.Run(ctx) }()
			continue
		}
		m, err := fleet.Start(ctx, fleet.Config{NATSURL: url, WorkerID: id, Scripted: true, Concurrency: o.concurrency, Logger: zerolog.Nop()})
		if err != nil {
			return r, err
		}
		statsFns = append(statsFns, m.Worker.Stats().Turns.Load)
		wg.Add(1)
		go func() { defer wg.Done(); _ = m.Run(ctx) }()
	}
	in, err := js.Stream(ctx, events.InboundStream)
	if err != nil {
		return r, err
	}
	for {
		info, err := in.Info(ctx)
		if err == nil && info.State.Msgs == 0 {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	el := time.Since(start)
	var done int64
	for _, f := range statsFns {
		done += f()
	}
	r.rate = float64(n) / el.Seconds()
	if noop {
		r.note = fmt.Sprintf("(%v)", el.Round(time.Millisecond))
	} else {
		r.note = fmt.Sprintf("(%v, %d turns counted)", el.Round(time.Millisecond), done)
	}
	return r, nil
}

type latencies struct{ first, final, pub []time.Duration }

// latency offers o.latencyRate turns/s to one worker and records, per run,
// publish→first event and publish→final event as a core subscriber sees them.
func latency(o options) (latencies, error) {
	var lat latencies
	s, stop, err := startServer(o)
	if err != nil {
		return lat, err
	}
	defer stop()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	m, err := fleet.Start(ctx, fleet.Config{NATSURL: s.ClientURL(), WorkerID: "lat", Scripted: true, Concurrency: o.concurrency, Logger: zerolog.Nop()})
	if err != nil {
		return lat, err
	}
	done := make(chan struct{})
	go func() { defer close(done); _ = m.Run(ctx) }()
	defer func() { cancel(); <-done }()

	nc, js, err := connect(s.ClientURL())
	if err != nil {
		return lat, err
	}
	defer nc.Close()
	type times struct{ first, final time.Time }
	var mu sync.Mutex
	seen := map[string]*times{}
	finals := make(chan struct{}, o.latencyN)
	sub, err := nc.Subscribe(events.EventPrefix+">", func(msg *nats.Msg) {
		now := time.Now()
		mu.Lock()
		tm := seen[msg.Subject]
		if tm == nil {
			tm = &times{first: now}
			seen[msg.Subject] = tm
		}
		final := msg.Header.Get(events.HeaderStream) == events.StreamFinal
		if final {
			tm.final = now
		}
		mu.Unlock()
		if final {
			finals <- struct{}{}
		}
	})
	if err != nil {
		return lat, err
	}
	defer sub.Unsubscribe()
	_ = sub.SetPendingLimits(-1, -1)
	// Warm up the lanes' streams before measuring.
	if _, err := js.Stream(ctx, events.InboundStream); err != nil {
		return lat, err
	}
	interval := time.Second / time.Duration(o.latencyRate)
	sent := map[string]time.Time{}
	tick := time.NewTicker(interval)
	defer tick.Stop()
	for i := range o.latencyN {
		<-tick.C
		subj := events.InboundPrefix + "lat" + strconv.Itoa(i%1000)
		msg := nats.NewMsg(subj)
		msg.Data = payload(i)
		msg.Header.Set(events.HeaderContentType, events.ContentMsgpack)
		t0 := time.Now()
		ack, err := js.PublishMsg(ctx, msg)
		if err != nil {
			return lat, err
		}
		lat.pub = append(lat.pub, time.Since(t0))
		sent[events.EventPrefix+"lat"+strconv.Itoa(i%1000)+"."+strconv.FormatUint(ack.Sequence, 10)] = t0
	}
	deadline := time.After(2 * time.Minute)
	for range o.latencyN {
		select {
		case <-finals:
		case <-deadline:
			return lat, fmt.Errorf("not every run finished")
		}
	}
	mu.Lock()
	defer mu.Unlock()
	for subj, t0 := range sent {
		tm := seen[subj]
		if tm == nil {
			continue
		}
		lat.first = append(lat.first, tm.first.Sub(t0))
		lat.final = append(lat.final, tm.final.Sub(t0))
	}
	return lat, nil
}

func ms(d []time.Duration, p int) float64 {
	if len(d) == 0 {
		return 0
	}
	s := slices.Clone(d)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	i := min(len(s)-1, len(s)*p/100)
	return float64(s[i].Microseconds()) / 1000
}

// benchMember is a fleet member started in this process, and a Go client
// connected to it.
type benchMember struct {
	m  *fleet.Member
	nc *nats.Conn
	js jetstream.JetStream
	c  *lanefleet.Client
	// stop closes the client's connection, then stops the member and
	// waits for it.
	stop func()
}

// startMember starts a member with cfg, running until ctx ends or stop,
// and connects a client to it.
func startMember(ctx context.Context, cfg fleet.Config) (*benchMember, error) {
	ctx, cancel := context.WithCancel(ctx)
	m, err := fleet.Start(ctx, cfg)
	if err != nil {
		cancel()
		return nil, err
	}
	done := make(chan struct{})
	go func() { defer close(done); _ = m.Run(ctx) }()
	halt := func() { cancel(); <-done }
	b := &benchMember{m: m}
	if b.nc, b.js, err = connect(m.ClientURL()); err != nil {
		halt()
		return nil, err
	}
	b.stop = func() { b.nc.Close(); halt() }
	if b.c, err = lanefleet.New(b.nc); err != nil {
		b.stop()
		return nil, err
	}
	return b, nil
}
