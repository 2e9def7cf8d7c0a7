package main

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"runtime/pprof"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"

	"github.com/lanefleet/lanefleet"
	"github.com/lanefleet/lanefleet/events"
	"github.com/lanefleet/lanefleet/internal/embedded"
	"github.com/lanefleet/lanefleet/internal/fleet"
	"github.com/lanefleet/lanefleet/kvstore"
)

// sessionsHeapProfile names a file for a heap profile taken on the full
// store, before the reads.
var sessionsHeapProfile = flag.String("sessions-heap-profile", "", "sessions: write a heap profile of the full store to this file")

// sessionsDefault is the session count of -scenario sessions when -sessions
// is not given (the lanes scenario's default is smaller).
const sessionsDefault = 100_000

// Sizes of the sessions scenario.
const (
	sessionsWave   = 10_000 // sessions per checkpoint
	sessionsProbes = 30     // sequential turns per latency probe
	historyProbes  = 20     // History calls per session measured
	listProbes     = 5      // sessions listings measured
	expireProbe    = 2_000  // sessions the retention pass measured removes
)

// sessionsBench drives many distinct sessions × 2 turns through one worker
// and its embedded server, all in this process (server, worker and the
// bench's client share one heap and one RSS; the server's share is not
// separated), with the instant scripted/echo model. It prints, every
// sessionsWave sessions, the process's Go heap and RSS, the store's bytes and
// the server-side state that could grow with sessions (subjects, keys,
// consumers, subscriptions); then the turn time of the newest sessions
// against the first ones', History and key-listing times, what one
// retention pass costs, and how long a fresh worker takes to start on the
// full store and answer a turn.
func sessionsBench(o options) error {
	n := sessionsDefault
	flag.Visit(func(f *flag.Flag) {
		if f.Name == "sessions" {
			n = o.sessions
		}
	})
	n = max(n, 2*sessionsProbes)
	dir, err := os.MkdirTemp("", "lanebench-sessions")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	fmt.Printf("lanebench sessions: %d sessions × 2 turns through one worker with its embedded server (one process), scripted/echo, sync_interval %s, GOMAXPROCS %d\n\n",
		n, map[bool]string{true: "always", false: "default (2m)"}[o.sync], runtime.GOMAXPROCS(0))
	start := time.Now()
	b, err := startSessionsMember(dir, o)
	if err != nil {
		return err
	}
	emptyReady := time.Since(start) // the same start on an empty store: the baseline of the restart's
	defer func() { b.stop() }()
	base := b.sample(0)

	// The first sessions' first turns, one at a time on an empty store.
	first, err := b.probe("s", 1, sessionsProbes)
	if err != nil {
		return fmt.Errorf("first probe: %w", err)
	}
	fmt.Printf("  %7s %8s %8s %9s %9s %10s %9s %9s %8s %8s %6s %5s\n", "sessions", "elapsed", "turns/s", "heap MB", "RSS MB", "store MB", "lanes MB", "keys", "ev subj", "in subj", "runs", "subs")
	b.print(base)
	for lo := 1; lo <= n; lo += sessionsWave {
		hi := min(lo+sessionsWave-1, n)
		t0 := time.Now()
		// Turn 1 of every session of the wave (the probed ones had theirs),
		// then turn 2 of each.
		if err := b.wave(max(lo, sessionsProbes+1), hi, 1); err != nil {
			return err
		}
		if err := b.wave(lo, hi, 2); err != nil {
			return err
		}
		s := b.sample(hi)
		s.rate = float64(b.turnsIn(lo, hi)) / time.Since(t0).Seconds()
		b.print(s)
		if lo == 1 {
			b.firstWave = s
		}
	}
	end := b.sample(n)
	// New sessions' first turns on the full store against the first
	// sessions' on an empty one; then the third turn of the oldest and of
	// the newest sessions, both on the full store.
	fresh, err := b.probe("s", n+1, n+sessionsProbes)
	if err != nil {
		return fmt.Errorf("fresh probe: %w", err)
	}
	oldest, err := b.probe("s", 1, sessionsProbes)
	if err != nil {
		return fmt.Errorf("oldest probe: %w", err)
	}
	last, err := b.probe("s", n-sessionsProbes+1, n)
	if err != nil {
		return fmt.Errorf("last probe: %w", err)
	}
	// The slope from the first checkpoint on leaves out what does not grow
	// with sessions (the server's block caches, the worker's set-up).
	from := b.firstWave
	if n <= sessionsWave {
		from = base
	}
	per := float64(n-from.sessions) / sessionsWave
	fmt.Printf("\nper %d sessions (2 turns each), sessions %d → %d\n", sessionsWave, from.sessions, n)
	fmt.Printf("  Go heap in use   %8.1f MB   RSS %8.1f MB   (one process: server + worker + bench client)\n",
		mb(int64(end.heap)-int64(from.heap))/per, mb(end.rss-from.rss)/per)
	fmt.Printf("\nstore bytes per session (2 turns)\n")
	fmt.Printf("  lanes bucket (transcripts, settings, lease markers)  %6.0f B\n", float64(end.lanesBytes)/float64(n))
	fmt.Printf("  AGENT_EV (events of the last %v, fence markers)       %6.0f B   %d subjects (%.1f per session)\n",
		24*time.Hour, float64(end.evBytes)/float64(n), end.evSubjects, float64(end.evSubjects)/float64(n))
	fmt.Printf("  AGENT_IN (unprocessed messages only)                 %6.0f B   %d subjects\n", float64(end.inBytes)/float64(n), end.inSubjects)
	fmt.Printf("  runs registry (memory)                               %6.0f B   %d entries\n", float64(end.runsBytes)/float64(n), end.runsMsgs)
	fmt.Printf("  whole store (file) %.0f B, memory %.0f B; consumers %d, server subscriptions %d\n",
		float64(end.store)/float64(n), float64(end.mem)/float64(n), end.consumers, end.subs)
	fmt.Printf("\nturn time (publish → final, sequential, p50 of %d)\n", sessionsProbes)
	fmt.Printf("  sessions 1..%d, first turn, empty store             %7.2f ms\n", sessionsProbes, ms(first, 50))
	fmt.Printf("  sessions %d..%d, first turn, full store        %7.2f ms   %.2f×   (target ≤ 1.2×)\n", n+1, n+sessionsProbes, ms(fresh, 50), ms(fresh, 50)/ms(first, 50))
	fmt.Printf("  sessions 1..%d, third turn, full store              %7.2f ms\n", sessionsProbes, ms(oldest, 50))
	fmt.Printf("  sessions %d..%d, third turn, full store        %7.2f ms   %.2f×   (target ≤ 1.2×)\n", n-sessionsProbes+1, n, ms(last, 50), ms(last, 50)/ms(oldest, 50))

	if *sessionsHeapProfile != "" {
		if err := writeHeapProfile(*sessionsHeapProfile); err != nil {
			return err
		}
	}
	if err := b.reads(n); err != nil {
		return err
	}
	if err := b.expire(); err != nil {
		return err
	}
	if err := b.restart(dir, o, n, emptyReady); err != nil {
		return err
	}
	fmt.Printf("\ntotal %v\n", time.Since(start).Round(time.Second))
	return nil
}

// sessionsRun is the running member and the bench's connections.
type sessionsRun struct {
	m         *fleet.Member
	done      chan struct{}
	cancel    context.CancelFunc
	nc        *nats.Conn
	js        jetstream.JetStream
	c         *lanefleet.Client
	start     time.Time
	window    int            // turns in flight at once
	firstWave sessionsSample // the first checkpoint
}

func startSessionsMember(dir string, o options) (*sessionsRun, error) {
	ctx, cancel := context.WithCancel(context.Background())
	m, err := fleet.Start(ctx, fleet.Config{DataDir: dir, Listen: "127.0.0.1:0", SyncAlways: o.sync, WorkerID: "sessions",
		Scripted: true, Concurrency: o.concurrency, NoBuiltinTools: true, Logger: zerolog.Nop()})
	if err != nil {
		cancel()
		return nil, err
	}
	b := &sessionsRun{m: m, done: make(chan struct{}), cancel: cancel, start: time.Now(), window: o.concurrency}
	go func() { defer close(b.done); _ = m.Run(ctx) }()
	if b.nc, b.js, err = connect(m.ClientURL()); err != nil {
		b.stop()
		return nil, err
	}
	if b.c, err = lanefleet.New(b.nc); err != nil {
		b.stop()
		return nil, err
	}
	return b, nil
}

func (b *sessionsRun) stop() {
	if b.nc != nil {
		b.nc.Close()
	}
	b.cancel()
	<-b.done
}

func sessionKey(prefix string, i int) string { return prefix + strconv.Itoa(i) }

// wave publishes turn `turn` of sessions lo..hi and waits until the worker
// has committed them all.
func (b *sessionsRun) wave(lo, hi, turn int) error {
	if lo > hi {
		return nil
	}
	turns := b.m.Worker.Stats().Turns.Load
	target := turns() + int64(hi-lo+1)
	published := turns()
	next := time.Now().Add(10 * time.Second)
	for i := lo; i <= hi; i++ {
		// At most a worker's worth of turns in flight: a burst of
		// thousands of lanes beyond its slots measures dispatch
		// redeliveries, not what a session costs.
		for published-turns() >= int64(b.window) {
			if time.Now().After(next) {
				fmt.Fprintf(os.Stderr, "  … turn %d of sessions %d-%d: %d published, %d to go\n", turn, lo, hi, i-lo, target-turns())
				next = time.Now().Add(10 * time.Second)
			}
			time.Sleep(time.Millisecond)
		}
		published++
		key := sessionKey("s", i)
		id := key + "-" + strconv.Itoa(turn)
		data, ct, err := events.EncodeInbound(&events.Inbound{ID: id, Text: "turn " + strconv.Itoa(turn) + " of " + key}, false)
		if err != nil {
			return err
		}
		m := nats.NewMsg(events.InboundPrefix + key)
		m.Data = data
		m.Header.Set(events.HeaderContentType, ct)
		if _, err := b.js.PublishMsgAsync(m, jetstream.WithMsgID(id), jetstream.WithStallWait(time.Minute)); err != nil {
			return err
		}
	}
	select {
	case <-b.js.PublishAsyncComplete():
	case <-time.After(5 * time.Minute):
		return errors.New("sessions: publish acks not complete")
	}
	deadline := time.Now().Add(10 * time.Minute)
	for turns() < target {
		if time.Now().After(next) {
			fmt.Fprintf(os.Stderr, "  … turn %d of sessions %d-%d: %d to go\n", turn, lo, hi, target-turns())
			next = time.Now().Add(10 * time.Second)
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("sessions: %d of %d turns committed after 10 minutes", b.m.Worker.Stats().Turns.Load(), target)
		}
		time.Sleep(10 * time.Millisecond)
	}
	return nil
}

// turnsIn is how many turns a wave of sessions lo..hi ran.
func (b *sessionsRun) turnsIn(lo, hi int) int {
	t := 2 * (hi - lo + 1)
	if lo <= sessionsProbes {
		t -= min(sessionsProbes, hi) - lo + 1
	}
	return t
}

// probe runs one turn on each of sessions lo..hi, one at a time, and returns
// each one's publish → final time.
func (b *sessionsRun) probe(prefix string, lo, hi int) ([]time.Duration, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var out []time.Duration
	for i := lo; i <= hi; i++ {
		t0 := time.Now()
		run, err := b.c.Send(ctx, sessionKey(prefix, i), "probe")
		if err != nil {
			return nil, err
		}
		if _, err := run.Wait(ctx); err != nil {
			return nil, err
		}
		out = append(out, time.Since(t0))
	}
	return out, nil
}

// sessionsSample is one checkpoint.
type sessionsSample struct {
	sessions                         int
	elapsed                          time.Duration
	rate                             float64
	heap                             uint64
	rss, store, mem                  int64
	lanesBytes, lanesKeys            uint64
	evBytes, inBytes, runsBytes      uint64
	evSubjects, inSubjects, runsMsgs uint64
	consumers, subs                  int
}

func (b *sessionsRun) sample(sessions int) sessionsSample {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	s := sessionsSample{sessions: sessions, elapsed: time.Since(b.start)}
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	s.heap = ms.HeapInuse
	s.rss = rss()
	if ai, err := b.js.AccountInfo(ctx); err == nil {
		s.store, s.mem = int64(ai.Store), int64(ai.Memory)
	}
	state := func(name string) jetstream.StreamState {
		st, err := b.js.Stream(ctx, name)
		if err != nil {
			return jetstream.StreamState{}
		}
		info, err := st.Info(ctx)
		if err != nil {
			return jetstream.StreamState{}
		}
		s.consumers += info.State.Consumers
		return info.State
	}
	lanesSt := state("KV_" + kvstore.DefaultBucket)
	s.lanesBytes, s.lanesKeys = lanesSt.Bytes, lanesSt.NumSubjects
	ev := state(events.EventStream)
	s.evBytes, s.evSubjects = ev.Bytes, ev.NumSubjects
	in := state(events.InboundStream)
	s.inBytes, s.inSubjects = in.Bytes, in.NumSubjects
	runs := state("KV_" + kvstore.DefaultRunsBucket)
	s.runsBytes, s.runsMsgs = runs.Bytes, runs.Msgs
	state(events.DeadStream)
	state("KV_auth")
	s.subs = int(b.m.Server.NumSubscriptions())
	return s
}

func (b *sessionsRun) print(s sessionsSample) {
	rate := "-"
	if s.rate > 0 {
		rate = strconv.FormatFloat(s.rate, 'f', 0, 64)
	}
	fmt.Printf("  %7d %7.0fs %8s %9.1f %9.1f %10.1f %9.1f %9d %8d %8d %6d %5d\n", s.sessions, s.elapsed.Seconds(), rate,
		mb(int64(s.heap)), mb(s.rss), mb(s.store), mb(int64(s.lanesBytes)), s.lanesKeys, s.evSubjects, s.inSubjects, s.runsMsgs, s.subs)
}

// reads times History of the first and the last session, the admin
// service's sessions listing and a listing of the lanes bucket's keys.
func (b *sessionsRun) reads(n int) error {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	fmt.Printf("\nreads on the full store\n")
	for _, i := range []int{1, n} {
		var d []time.Duration
		var entries int
		for range historyProbes {
			t0 := time.Now()
			h, err := b.c.History(ctx, sessionKey("s", i))
			if err != nil {
				return fmt.Errorf("history of session %d: %w", i, err)
			}
			d = append(d, time.Since(t0))
			entries = len(h)
		}
		fmt.Printf("  History, session %-7d (%d entries)            p50 %7.2f ms  max %7.2f ms\n", i, entries, ms(d, 50), ms(d, 100))
	}
	var d []time.Duration
	var listed, total int
	for range listProbes {
		t0 := time.Now()
		rep, err := b.c.Sessions(ctx, 0)
		if err != nil {
			return fmt.Errorf("sessions listing: %w", err)
		}
		d = append(d, time.Since(t0))
		listed, total = len(rep.Sessions), rep.Total
	}
	fmt.Printf("  admin sessions listing (Client.Sessions, default limit)  p50 %7.0f ms  max %7.0f ms   %d listed of %d\n", ms(d, 50), ms(d, 100), listed, total)
	kv, err := b.js.KeyValue(ctx, kvstore.DefaultBucket)
	if err != nil {
		return err
	}
	t0 := time.Now()
	lister, err := kv.ListKeys(ctx)
	if err != nil {
		return err
	}
	tokens := map[string]struct{}{}
	keys := 0
	for k := range lister.Keys() {
		keys++
		tok, _, _ := strings.Cut(k, ".")
		tokens[tok] = struct{}{}
	}
	fmt.Printf("  listing the lanes bucket's keys (KV ListKeys)     %7.0f ms   %d keys, %d sessions\n", float64(time.Since(t0).Microseconds())/1000, keys, len(tokens))
	return nil
}

// expire measures one retention pass: the first expireProbe sessions are
// removed as if they had been idle longer than the session TTL.
func (b *sessionsRun) expire() error {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	before := b.sample(0)
	t0 := time.Now()
	st, err := b.m.Worker.ExpireIdle(ctx, time.Now(), expireProbe)
	if err != nil {
		return fmt.Errorf("expire: %w", err)
	}
	el := time.Since(t0)
	after := b.sample(0)
	fmt.Printf("\nretention pass (--session-ttl), the oldest %d sessions removed\n", expireProbe)
	fmt.Printf("  %d sessions removed (%d records, %d skipped) in %v: %.0f sessions/s; lanes bucket %.1f → %.1f MB, %d → %d keys\n",
		st.Expired, st.Keys, st.Skipped, el.Round(time.Millisecond), float64(st.Expired)/el.Seconds(),
		mb(int64(before.lanesBytes)), mb(int64(after.lanesBytes)), before.lanesKeys, after.lanesKeys)
	return nil
}

// restart stops the member (worker and server) and times a fresh one on
// the same store: start (the server recovers the store), then the first
// turn on an existing session.
func (b *sessionsRun) restart(dir string, o options, n int, emptyReady time.Duration) error {
	b.stop()
	b.nc = nil
	runtime.GC()
	// The embedded server alone on the store first (what recovering it
	// costs), then the worker with its server: the difference is ours.
	var (
		serverReady, ready time.Duration
		t0                 time.Time
		nb                 *sessionsRun
		err                error
	)
	if err := sessionsProfile("server", func() { serverReady, err = sessionsServerStart(dir, o) }); err != nil {
		return err
	}
	if err != nil {
		return fmt.Errorf("restart: the server alone: %w", err)
	}
	runtime.GC()
	if err := sessionsProfile("worker", func() {
		t0 = time.Now()
		nb, err = startSessionsMember(dir, o)
		ready = time.Since(t0)
	}); err != nil {
		return err
	}
	if err != nil {
		return fmt.Errorf("restart: %w", err)
	}
	*b = *nb
	d, err := b.probe("s", n, n)
	if err != nil {
		return fmt.Errorf("turn after restart: %w", err)
	}
	s := b.sample(n)
	fmt.Printf("\nfresh worker on the full store (embedded server restarted on it)\n")
	fmt.Printf("  the embedded server alone on the store, start to ready for connections (its JetStream recovered) %v, stopped cleanly before the worker's start\n", serverReady.Round(time.Millisecond))
	fmt.Printf("  start to ready %v (%v on the empty store at the start of this run; target < 1 s); first turn on session %d answered %v after start (that turn %.2f ms); heap %.1f MB, RSS %.1f MB\n",
		ready.Round(time.Millisecond), emptyReady.Round(time.Millisecond), n, time.Since(t0).Round(time.Millisecond), ms(d, 50), mb(int64(s.heap)), mb(s.rss))
	return nil
}

// sessionsServerStart starts the embedded server alone on the worker's
// store under dir, as the worker would, and returns the time to ready for
// connections (JetStream's streams recovered), then shuts it down cleanly.
func sessionsServerStart(dir string, o options) (time.Duration, error) {
	opts, err := embedded.Options(embedded.Config{Name: "lanefleet", DataDir: filepath.Join(dir, "jetstream"), Host: "127.0.0.1", SyncAlways: &o.sync})
	if err != nil {
		return 0, err
	}
	t0 := time.Now()
	s, err := embedded.StartOptions(opts)
	if err != nil {
		return 0, err
	}
	d := time.Since(t0)
	s.Shutdown()
	s.WaitForShutdown()
	return d, nil
}

// sessionsProfile runs fn, writing a CPU profile of it to
// <-cpuprofile>.restart-<what> when that is set.
func sessionsProfile(what string, fn func()) error {
	if *turnsCPUProf == "" {
		fn()
		return nil
	}
	return cpuProfile(*turnsCPUProf+".restart-"+what, fn)
}

func mb(b int64) float64 { return float64(b) / (1 << 20) }

// rss reads the process's resident set size (Linux; 0 elsewhere).
func rss() int64 {
	data, err := os.ReadFile(filepath.Join("/proc", "self", "status"))
	if err != nil {
		return 0
	}
	sc := bufio.NewScanner(bytes.NewReader(data))
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "VmRSS:"); ok {
			kb, _ := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			return kb << 10
		}
	}
	return 0
}

func writeHeapProfile(path string) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	runtime.GC()
	if err := pprof.WriteHeapProfile(f); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}
