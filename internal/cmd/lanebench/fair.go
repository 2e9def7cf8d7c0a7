package main

import (
	"context"
	"fmt"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/rs/zerolog"

	"github.com/lanefleet/lanefleet/events"
	"github.com/lanefleet/lanefleet/internal/fleet"
	"github.com/lanefleet/lanefleet/provider/scripted"
)

// fairOptions size the fair and inflight scenarios.
type fairOptions struct {
	sessions  int           // sessions sending at once
	slots     int           // the worker's concurrency
	model     time.Duration // the scripted model's latency per turn
	duration  time.Duration // measured time per run
	queued    int           // fair: messages each session keeps queued
	inflight  int           // inflight: turns held in flight at once
	inflightD time.Duration // inflight: the model's latency
	inflightP int           // inflight: bytes of each message's text (0: a short one)
	noisy     int           // fair: sessions of the noisy tenant in the tenant runs (0: none)
	quiet     int           // fair: sessions of the quiet tenant, one message at a time each
	// tenantsOnly: run only the tenant runs.
	tenantsOnly bool
}

// slowModel is a scripted model that answers "pong" after d, in one delta.
func slowModel(d time.Duration) map[string]scripted.Script {
	return map[string]scripted.Script{"slow": {Replies: []scripted.Reply{{Text: "pong", Chunks: 1, DelayMs: int(d / time.Millisecond)}}}}
}

// fairRun is what one run of the fair scenario measured.
type fairRun struct {
	name    string
	turns   []int             // finals per session in the window
	waits   []time.Duration   // publish → start event, runs started in the window
	waitsOf [][]time.Duration // waits by session
	elapsed time.Duration
	yields  int64
	note    string
}

// fairBench runs o.fair.sessions sessions that each keep o.fair.queued
// messages queued (a new one whenever one ends) against one worker with
// o.fair.slots slots and a model that takes o.fair.model per turn, twice
// in the same process: with fairness off (a lane keeps its slot while it
// has messages: "before") and on (the default turn budget: "after"). It
// prints turns per session and queue wait (publish → the run's start
// event) against their means.
func fairBench(o options) error {
	f := o.fair
	if f.tenantsOnly {
		return tenantBench(o)
	}
	fmt.Printf("lanebench fair: %d sessions each keeping %d messages queued, one worker with %d slots, a %v model, %v per run, sync_interval %s, GOMAXPROCS %d\n\n",
		f.sessions, f.queued, f.slots, f.model, f.duration, map[bool]string{true: "always", false: "default (2m)"}[o.sync], runtime.GOMAXPROCS(0))
	fmt.Printf("  %-26s %8s  %-30s %9s %9s  %-30s %8s %7s\n", "run", "turns/s", "turns/session min/med/max (mean)", "min/mean", "max/mean", "queue wait p50/p99 (mean)", "p99/mean", "yields")
	for _, budget := range []int{-1, 0} {
		name := "before: no yield"
		if budget == 0 {
			name = "after: yield after 1 turn"
		}
		keys := make([]string, f.sessions)
		queued := make([]int, f.sessions)
		for i := range keys {
			keys[i], queued[i] = "fair-"+strconv.Itoa(i), f.queued
		}
		r, err := fairOnce(o, name, budget, keys, queued, false)
		if err != nil {
			return fmt.Errorf("%s: %w", name, err)
		}
		printFair(r)
	}
	fmt.Printf("\n  targets (after): every session within 2× of the mean turn count (min/mean ≥ 0.50, max/mean ≤ 2.00), queue wait p99/mean ≤ 2.00\n")
	if f.noisy > 0 && f.quiet > 0 {
		return tenantBench(o)
	}
	return nil
}

// tenantBench runs the quiet tenant's f.quiet sessions (one message at a
// time each, a new one as each ends) alone, the noisy tenant's f.noisy
// sessions (each keeping f.queued messages queued) alone, then both
// together, with the tenants' fair share of the slots and without it (no
// tenants: first come, first served), all on fresh workers in the same
// run. It prints each tenant's queue wait (publish → the run's start
// event, see fairOnce) p50/p99 in each run and its ratio to the same
// tenant's alone.
func tenantBench(o options) error {
	f := o.fair
	fmt.Printf("\nlanebench fair, tenants: quiet tenant's %d sessions (one message at a time each) beside a noisy tenant's %d sessions (each keeping %d queued), same worker (%d slots) and model (%v)\n",
		f.quiet, f.noisy, f.queued, f.slots, f.model)
	fmt.Printf("queue wait: publish (just before the client's publish call) → the client receives the run's start event\n\n")
	fmt.Printf("  %-36s %-6s %6s %9s %9s %10s %10s\n", "run", "tenant", "runs", "p50", "p99", "p50/alone", "p99/alone")
	alone := map[string][2]float64{}
	for _, c := range []struct {
		name         string
		quiet, noisy int
		noTenants    bool
	}{{"quiet tenant alone", f.quiet, 0, false}, {"noisy tenant alone", 0, f.noisy, false},
		{"both, fair share", f.quiet, f.noisy, false}, {"both, first come", f.quiet, f.noisy, true}} {
		var keys []string
		var queued []int
		for i := range c.quiet {
			keys, queued = append(keys, "quiet:"+strconv.Itoa(i)), append(queued, 1)
		}
		for i := range c.noisy {
			keys, queued = append(keys, "noisy:"+strconv.Itoa(i)), append(queued, f.queued)
		}
		r, err := fairOnce(o, c.name, 0, keys, queued, c.noTenants)
		if err != nil {
			return fmt.Errorf("%s: %w", c.name, err)
		}
		for _, t := range []struct {
			name     string
			from, to int
		}{{"quiet", 0, c.quiet}, {"noisy", c.quiet, c.quiet + c.noisy}} {
			if t.from == t.to {
				continue
			}
			var w []time.Duration
			for _, ws := range r.waitsOf[t.from:t.to] {
				w = append(w, ws...)
			}
			p50, p99 := ms(w, 50), ms(w, 99)
			if c.quiet == 0 || c.noisy == 0 {
				alone[t.name] = [2]float64{p50, p99}
			}
			base := alone[t.name]
			fmt.Printf("  %-36s %-6s %6d %7.1fms %7.1fms %9.2f× %9.2f×\n", c.name, t.name, len(w), p50, p99,
				p50/max(base[0], 1e-6), p99/max(base[1], 1e-6))
		}
		fmt.Printf("  %-36s %s\n", "", r.note)
	}
	fmt.Printf("\n  target (issue 31): the quiet tenant's queue wait p50 beside the noisy tenant (fair share) within 2× of its p50 alone\n")
	return nil
}

func printFair(r fairRun) {
	t := slices.Clone(r.turns)
	slices.Sort(t)
	total := 0
	for _, n := range t {
		total += n
	}
	mean := float64(total) / float64(len(t))
	w := slices.Clone(r.waits)
	slices.Sort(w)
	var sum time.Duration
	for _, d := range w {
		sum += d
	}
	var wmean time.Duration
	if len(w) > 0 {
		wmean = sum / time.Duration(len(w))
	}
	pct := func(p int) time.Duration {
		if len(w) == 0 {
			return 0
		}
		return w[min(len(w)-1, len(w)*p/100)]
	}
	turns := fmt.Sprintf("%d / %d / %d (%.1f)", t[0], t[len(t)/2], t[len(t)-1], mean)
	waits := fmt.Sprintf("%.2fs / %.2fs (%.2fs)", pct(50).Seconds(), pct(99).Seconds(), wmean.Seconds())
	fmt.Printf("  %-26s %8.1f  %-30s %9.2f %9.2f  %-30s %8.2f %7d\n", r.name, float64(total)/r.elapsed.Seconds(), turns,
		float64(t[0])/mean, float64(t[len(t)-1])/mean, waits, pct(99).Seconds()/max(wmean.Seconds(), 1e-9), r.yields)
	fmt.Printf("  %-26s %s\n", "", r.note)
}

// fairOnce is one run of the fair scenario on a fresh worker and store:
// session i (key keys[i]) keeps queued[i] messages queued.
func fairOnce(o options, name string, budget int, keys []string, queued []int, noTenants bool) (fairRun, error) {
	f := o.fair
	r := fairRun{name: name, turns: make([]int, len(keys)), waitsOf: make([][]time.Duration, len(keys))}
	dir, err := os.MkdirTemp("", "lanebench-fair")
	if err != nil {
		return r, err
	}
	defer os.RemoveAll(dir)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	m, err := fleet.Start(ctx, fleet.Config{DataDir: dir, Listen: "127.0.0.1:0", SyncAlways: o.sync, WorkerID: "fair",
		Scripted: true, Scripts: slowModel(f.model), DefaultModel: "scripted/slow", Concurrency: f.slots, LaneTurnBudget: budget,
		ShutdownGrace: 100 * time.Millisecond, NoBuiltinTools: true, NoRemoteTools: true, NoTenants: noTenants, Logger: zerolog.Nop()})
	if err != nil {
		return r, err
	}
	done := make(chan struct{})
	go func() { defer close(done); _ = m.Run(ctx) }()
	defer func() { cancel(); <-done }()
	nc, js, err := connect(m.ClientURL())
	if err != nil {
		return r, err
	}
	defer nc.Close()

	index := map[string]int{} // lane token → session
	subjects := make([]string, len(keys))
	for i, key := range keys {
		tok, err := events.KeyToken(key)
		if err != nil {
			return r, err
		}
		index[tok] = i
		subjects[i] = events.InboundPrefix + tok
	}
	// A run's queue wait is publish → its start: from just before the
	// client's publish call to when this subscriber receives the run's
	// first event (its start event), whichever of that event and the
	// publish's ack comes first (a run whose start beats the ack is kept
	// in first until the ack names its run).
	var (
		mu      sync.Mutex
		sent    = map[string]time.Time{} // run subject → publish time
		first   = map[string]time.Time{} // run subject → its start, before its publish was acked
		started = map[string]bool{}
		start   time.Time
		end     time.Time
		closed  bool
	)
	waited := func(i int, t0, at time.Time) { // under mu
		if at.Before(end) {
			r.waits = append(r.waits, at.Sub(t0))
			r.waitsOf[i] = append(r.waitsOf[i], at.Sub(t0))
		}
	}
	most := 0
	for _, q := range queued {
		most += q + 1
	}
	next := make(chan int, most)
	sub, err := nc.Subscribe(events.EventPrefix+">", func(msg *nats.Msg) {
		now := time.Now()
		subj := msg.Subject
		if strings.Count(subj, ".") != 3 {
			return // a run's fence marker
		}
		tok := subj[len(events.EventPrefix):strings.LastIndexByte(subj, '.')]
		i, ok := index[tok]
		if !ok {
			return
		}
		final := msg.Header.Get(events.HeaderStream) == events.StreamFinal
		mu.Lock()
		defer mu.Unlock()
		if !started[subj] {
			if t0, ok := sent[subj]; ok {
				started[subj] = true
				waited(i, t0, now)
			} else if _, ok := first[subj]; !ok {
				first[subj] = now
			}
		}
		if final {
			if now.Before(end) {
				r.turns[i]++
			}
			if !closed {
				next <- i
			}
		}
	})
	if err != nil {
		return r, err
	}
	defer sub.Unsubscribe()
	_ = sub.SetPendingLimits(-1, -1)
	publish := func(i int) error {
		msg := nats.NewMsg(subjects[i])
		msg.Data = payload(i)
		msg.Header.Set(events.HeaderContentType, events.ContentMsgpack)
		// Taken before the publish: the run's start can come before its ack.
		t0 := time.Now()
		ack, err := js.PublishMsg(ctx, msg)
		if err != nil {
			return err
		}
		s := subj(events.EventPrefix, subjects[i][len(events.InboundPrefix):], ack.Sequence)
		mu.Lock()
		defer mu.Unlock()
		sent[s] = t0
		if at, ok := first[s]; ok {
			delete(first, s)
			started[s] = true
			waited(i, t0, at)
		}
		return nil
	}
	mu.Lock()
	start = time.Now()
	end = start.Add(f.duration)
	mu.Unlock()
	for k := range slices.Max(queued) {
		for i := range keys {
			if k >= queued[i] {
				continue
			}
			if err := publish(i); err != nil {
				return r, err
			}
		}
	}
	timer := time.NewTimer(time.Until(end))
	defer timer.Stop()
loop:
	for {
		select {
		case i := <-next:
			if err := publish(i); err != nil {
				return r, err
			}
		case <-timer.C:
			break loop
		}
	}
	mu.Lock()
	defer mu.Unlock()
	closed = true
	r.elapsed = end.Sub(start)
	st := m.Worker.Stats()
	r.yields = st.Yields.Load()
	r.note = fmt.Sprintf("waited %d, handed back %d, follower acks %d, naks %d, acquired %d, RSS %.0f MB",
		st.Waited.Load(), st.HandedBack.Load(), st.FollowerAcks.Load(), st.Naks.Load(), st.Acquired.Load(), mb(rss()))
	// A message still waiting at the end has waited at least this long.
	for s, t0 := range sent {
		if !started[s] && t0.Before(end) {
			r.waits = append(r.waits, end.Sub(t0))
			tok := s[len(events.EventPrefix):strings.LastIndexByte(s, '.')]
			r.waitsOf[index[tok]] = append(r.waitsOf[index[tok]], end.Sub(t0))
		}
	}
	return r, nil
}

func subj(prefix, token string, seq uint64) string {
	return prefix + token + "." + strconv.FormatUint(seq, 10)
}

// inflightBench measures the memory a turn in flight costs: one worker
// with its embedded server (one process) and as many slots as turns, a
// model that takes o.fair.inflightD, o.fair.inflight distinct sessions
// sending one message each at once. It samples the Go heap, RSS and
// goroutines idle and while every turn is in flight, and prints the
// difference per turn.
func inflightBench(o options) error {
	f := o.fair
	n := f.inflight
	if *inflightProfile != "" {
		runtime.MemProfileRate = 512 // every turn's sites, not a 512 KB sample
	}
	if *inflightHeapDump != "" {
		runtime.MemProfileRate = 1 // every object's site, in the dump
	}
	dir, err := os.MkdirTemp("", "lanebench-inflight")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	cfg := fleet.Config{DataDir: dir, Listen: "127.0.0.1:0", SyncAlways: o.sync, WorkerID: "inflight",
		Scripted: true, Scripts: slowModel(f.inflightD), DefaultModel: "scripted/slow", Concurrency: n,
		ShutdownGrace: 100 * time.Millisecond, NoBuiltinTools: true, NoRemoteTools: true, Logger: zerolog.Nop()}
	stopModel, err := inflightHTTPModel(ctx, &cfg, f.inflightD)
	if err != nil {
		return err
	}
	defer stopModel()
	m, err := fleet.Start(ctx, cfg)
	if err != nil {
		return err
	}
	done := make(chan struct{})
	go func() { defer close(done); _ = m.Run(ctx) }()
	defer func() { cancel(); <-done }()
	nc, js, err := connect(m.ClientURL())
	if err != nil {
		return err
	}
	defer nc.Close()
	// Warm up: one turn, so what every turn shares is loaded.
	finals := make(chan struct{}, n+1)
	sub, err := nc.Subscribe(events.EventPrefix+">", func(msg *nats.Msg) {
		if msg.Header.Get(events.HeaderStream) == events.StreamFinal {
			finals <- struct{}{}
		}
	})
	if err != nil {
		return err
	}
	defer sub.Unsubscribe()
	_ = sub.SetPendingLimits(-1, -1)
	var big *events.Inbound // a hostile sender's payload: text up to its limit, the rest an image
	if f.inflightP > 0 {
		text := min(f.inflightP, events.MaxTextBytes)
		big = &events.Inbound{Text: strings.Repeat("x", text)}
		if rest := (f.inflightP - text) / 4 * 4; rest > 0 {
			big.Images = []events.Image{{MimeType: "image/png", Data: strings.Repeat("A", rest)}}
		}
	}
	send := func(key string, i int) error {
		msg := nats.NewMsg(events.InboundPrefix + key)
		msg.Data = payload(i)
		if big != nil && key != "warm" {
			msg.Data, _, _ = events.EncodeInbound(big, false)
		}
		msg.Header.Set(events.HeaderContentType, events.ContentMsgpack)
		_, err := js.PublishMsg(ctx, msg)
		return err
	}
	if err := send("warm", 0); err != nil {
		return err
	}
	select {
	case <-finals:
	case <-time.After(time.Minute):
		return fmt.Errorf("warm-up turn did not finish")
	}
	idle, idleParts := sampleMem(), sampleParts()
	t0 := time.Now()
	for i := range n {
		if err := send("inflight"+strconv.Itoa(i), i); err != nil {
			return err
		}
	}
	// Wait until every turn runs (all slots busy), or the rest wait for
	// the byte budget (large payloads) and no more start, then sample.
	var stableSince time.Time
	for active := 0; ; {
		a := m.Worker.Active()
		if a == n {
			break
		}
		if a != active || m.Worker.Waiting() == 0 {
			active, stableSince = a, time.Now()
		} else if time.Since(stableSince) > 500*time.Millisecond {
			break
		}
		if time.Since(t0) > f.inflightD {
			return fmt.Errorf("only %d of %d turns in flight before the first could finish", a, n)
		}
		time.Sleep(10 * time.Millisecond)
	}
	// A turn counts as active from its start: give the last ones time to
	// reach the model (half its time) before sampling.
	time.Sleep(time.Until(t0.Add(f.inflightD / 2)))
	inFlight, held := m.Worker.Active(), m.Worker.InflightBytes()
	busy, busyParts := sampleMem(), sampleParts()
	if err := writeInflightProfile(*inflightProfile, inFlight); err != nil {
		return err
	}
	for range n {
		select {
		case <-finals:
		case <-time.After(f.inflightD + time.Minute):
			return fmt.Errorf("not every turn finished")
		}
	}
	el := time.Since(t0)
	fmt.Printf("lanebench inflight: %d turns in flight at once on one worker (concurrency %d) with its embedded server (one process), a %v %s model, messages of %d bytes, sync_interval %s\n\n",
		n, n, f.inflightD, inflightModelKind(), len(payload(0))+f.inflightP, map[bool]string{true: "always", false: "default (2m)"}[o.sync])
	fmt.Printf("  %-22s %10s %10s %11s\n", "", "heap MB", "RSS MB", "goroutines")
	fmt.Printf("  %-22s %10.1f %10.1f %11d\n", "idle (after warm-up)", mb(int64(idle.heap)), mb(idle.rss), idle.goroutines)
	fmt.Printf("  %-22s %10.1f %10.1f %11d   (%d turns in flight, %d waiting for the byte budget, %.1f MB of payloads held)\n", "turns in flight",
		mb(int64(busy.heap)), mb(busy.rss), busy.goroutines, inFlight, n-inFlight, mb(held))
	fmt.Printf("  %-22s %10.1f %10.1f %11.1f   (KB, KB, goroutines per turn in flight)\n", "per turn in flight",
		float64(int64(busy.heap)-int64(idle.heap))/1024/float64(inFlight), float64(busy.rss-idle.rss)/1024/float64(inFlight), float64(busy.goroutines-idle.goroutines)/float64(inFlight))
	printParts(idleParts, busyParts, idle.rss, busy.rss, inFlight)
	fmt.Printf("  all %d turns answered in %v (%.0f turns/s)\n", n, el.Round(time.Millisecond), float64(n)/el.Seconds())
	return nil
}

type memSample struct {
	heap       uint64
	rss        int64
	goroutines int
}

func sampleMem() memSample {
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return memSample{heap: ms.HeapInuse, rss: rss(), goroutines: runtime.NumGoroutine()}
}
