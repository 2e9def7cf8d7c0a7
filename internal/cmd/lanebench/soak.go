package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"runtime/pprof"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"

	"github.com/lanefleet/lanefleet/events"
	"github.com/lanefleet/lanefleet/internal/fleet"
	"github.com/lanefleet/lanefleet/kvstore"
)

// Flags of -scenario soak (issue "what a new user trips over" item 14): a
// long-running worker must hold steady.
var (
	soakRounds   = flag.Int("soak-rounds", 5, "soak: measured rounds")
	soakRound    = flag.Duration("soak-round", 30*time.Second, "soak: length of one round")
	soakSessions = flag.Int("soak-sessions", 64, "soak: sessions at once, each sending its next message as soon as its last is answered")
	soakPer      = flag.Int("soak-session-turns", 0, "soak: turns a session runs before its loop moves on to a new session (0: the same sessions for the whole soak, their transcripts growing)")
	soakWarmup   = flag.Duration("soak-warmup", 0, "soak: run this long before the first measured round (printed as round 0), so that what fills up to a bound (the per-session caches, the servers' 2-minute de-duplication windows) is full")
	soakFill     = flag.Bool("soak-warmup-fill", true, "soak: after -soak-warmup, warm up until the worker's transcript and context caches hold 90% of their budgets too (at most 10 minutes more): a round measured while they fill shows them filling, not the worker growing")
	soakIdle     = flag.Duration("soak-idle", 0, "soak: after the last round, stay idle this long and print the figures again (does the worker give memory back?)")
	soakTTL      = flag.Duration("soak-session-ttl", 0, "soak: the worker's --session-ttl (0: keep sessions forever, the default; the lanes bucket then keeps a subject per turn)")
	soakEvAge    = flag.Duration("soak-event-max-age", 0, "soak: the worker's --event-max-age (0: its default, 24h; AGENT_EV keeps two subjects per run that long)")
	soakLimit    = flag.Int("soak-memory-limit-mb", 0, "soak: the process's soft memory limit in MiB (the worker's --memory-limit; 0: none)")
	soakAt       = flag.String("soak-at", "", "soak: end each round when the turns since the start reach the next of these counts (e.g. 10000,20000,40000: RSS after 10, 20 and 40 thousand turns in one run) instead of after -soak-round; -soak-rounds is then their number")
	soakHeap     = flag.String("soak-heap-profile", "", "soak: after each round write a heap profile to <this>.<round>.pb.gz and the goroutines to <this>.<round>.goroutines.txt (go tool pprof -base <this>.1.pb.gz <this>.5.pb.gz shows what grew)")
)

// soakSample is the process after one round, taken between turns.
type soakSample struct {
	turns      int64
	total      int64 // turns since the start (warm-up included)
	el         time.Duration
	cpu        time.Duration // the process's CPU time over the round
	rss        int64         // VmRSS
	heap       int64         // live Go heap after a collection
	held       int64         // heap memory the runtime holds (in use or free, not returned to the OS)
	goroutines int
	evSubjects uint64 // subjects stored in AGENT_EV
	lanesKeys  uint64 // subjects (keys) stored in the lanes bucket
	runsKeys   uint64 // subjects stored in the runs bucket
	subs       uint32 // the server's subscriptions
	lanesMB    float64
	evMB       float64
	// whole counts the turns so far that read their transcript whole
	// (the worker's transcript cache missed).
	whole int64
	// cache is what the worker's transcript and context caches charge
	// their entries.
	cache int
	// forgotten counts the sessions the worker's retention pass forgot
	// so far; lag is how far behind the session TTL its last pass stopped.
	forgotten int64
	lag       time.Duration
	// started counts the sessions the loops began so far (with
	// -soak-session-turns: what the retention pass must keep up with).
	started int64
	// steps, stepLanes and stepBusy are the retention pass's steps so
	// far, the lanes they looked at and the time they took.
	steps, stepLanes int64
	stepBusy         time.Duration
}

// soakBench runs one worker with its embedded server (the worker's
// defaults but the server's fsync, which -sync sets) against the instant
// local model over HTTP, with -soak-sessions sessions sending back to back
// through the Go client, for -soak-rounds rounds, and prints RSS, the Go
// heap and turns/s after each: all in one process (server, worker, client
// and model share the heap and the RSS). A worker that holds steady shows
// the last round / the first near 1 for all three.
func soakBench(o options) error {
	if *soakRounds < 1 || *soakRound <= 0 || *soakSessions < 1 || *soakPer < 0 {
		return errors.New("soak: -soak-rounds, -soak-round and -soak-sessions must be positive, -soak-session-turns not negative")
	}
	at, err := soakCheckpoints(*soakAt)
	if err != nil {
		return err
	}
	if len(at) > 0 {
		*soakRounds = len(at)
	}
	if *soakLimit > 0 {
		debug.SetMemoryLimit(int64(*soakLimit) << 20)
	}
	mock, err := startMockModel()
	if err != nil {
		return err
	}
	defer mock.close()
	dir, err := os.MkdirTemp("", "lanebench-soak")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	// The worker's defaults (cmd/worker), built-in tools included; only
	// the model is the local one.
	bm, err := startMember(ctx, fleet.Config{DataDir: dir, WorkspaceRoot: filepath.Join(dir, "workspaces"), Listen: "127.0.0.1:0",
		SyncAlways: o.sync, WorkerID: "soak", OpenAICompatible: mock.url, Logger: zerolog.Nop(),
		SessionTTL: *soakTTL, EventMaxAge: *soakEvAge})
	if err != nil {
		return err
	}
	defer bm.stop()
	m, js, c := bm.m, bm.js, bm.c
	fmt.Printf("lanebench soak: one worker with its embedded server (one process: server, worker, Go client, mock model), sync_interval %s, %d sessions back to back against an instant model over HTTP, %d rounds of %v, GOMAXPROCS %d\n",
		map[bool]string{true: "always", false: "default (2m)"}[o.sync], *soakSessions, *soakRounds, *soakRound, runtime.GOMAXPROCS(0))
	if *soakLimit > 0 {
		fmt.Printf("soft memory limit %d MiB\n", *soakLimit)
	}
	if len(at) > 0 {
		fmt.Printf("rounds end at %s turns since the start\n", *soakAt)
	}
	if *soakTTL > 0 || *soakEvAge > 0 {
		fmt.Printf("retention: --session-ttl %v, --event-max-age %v (0: the worker's default)\n", *soakTTL, *soakEvAge)
	}
	if *soakPer > 0 {
		fmt.Printf("each session runs %d turns, then its loop moves on to a new one\n", *soakPer)
	} else {
		fmt.Printf("the same sessions throughout: their transcripts grow with every turn\n")
	}
	fmt.Printf("sampled between turns (every turn answered, the next ones held back): CPU ms the process's CPU time per turn; RSS the process's VmRSS; heap the live Go heap after a collection;\n"+
		"held what the Go runtime keeps of the heap (live, garbage and free, not returned to the OS); KB/turn the RSS the round added per turn;\n"+
		"ev subj/lanes keys: subjects stored in AGENT_EV and in the lanes bucket (the server keeps ~190 B of index per subject); whole%%: turns that read their whole transcript;\n"+
		"cache MB: what the worker's transcript and context caches charge their entries (of %.0f MB); new: sessions begun in the round; forgot: sessions the retention pass forgot in the round, lag s: how far behind the session TTL its last pass stopped;\n"+
		"lanes/st, st ms: lanes a step of the pass looked at at once, and the time a step took, on average over the round\n\n", mb(int64(soakCacheMax(m))))
	fmt.Printf("  %5s %7s %7s %7s %6s %7s %7s %7s %7s %6s %8s %8s %8s %7s %5s %4s %6s %8s %6s %6s %5s %8s %6s\n", "round", "turns", "total", "turns/s", "CPU ms", "RSS MB", "heap MB", "held MB", "KB/turn",
		"gorout", "ev subj", "ev MB", "lanes k", "lanes MB", "runs", "subs", "whole%", "cache MB", "new", "forgot", "lag s", "lanes/st", "st ms")

	var total, started atomic.Int64
	turn := func(session string) error {
		return clientTurn(ctx, c, session, "ping")
	}
	if err := turn("soak-warmup"); err != nil {
		return fmt.Errorf("first turn: %w", err)
	}
	base := soakTake(ctx, js, m, 0)
	// The loops run through every round; a round is a window of their
	// turns. Each turn holds pause for reading, a sample takes it for
	// writing: it sees the process between turns (what is left is what
	// the process keeps), and the round's clock is stopped meanwhile.
	var (
		pause  sync.RWMutex
		stop   atomic.Bool
		wg     sync.WaitGroup
		errMu  sync.Mutex
		failed error
	)
	for s := range *soakSessions {
		wg.Go(func() {
			for i := 0; !stop.Load(); i++ {
				session := "soak-" + strconv.Itoa(s)
				if *soakPer > 0 {
					session += "-" + strconv.Itoa(i / *soakPer)
					if i%*soakPer == 0 {
						started.Add(1)
					}
				}
				pause.RLock()
				err := turn(session)
				pause.RUnlock()
				if err != nil {
					errMu.Lock()
					failed = errors.Join(failed, err)
					errMu.Unlock()
					stop.Store(true)
					return
				}
				total.Add(1)
			}
		})
	}
	var rounds []soakSample
	prev := base
	pre := base // the sample before the first measured round
	first := 1
	if *soakWarmup > 0 {
		first = 0
	}
	for r := first; r <= *soakRounds && !stop.Load(); r++ {
		d := *soakRound
		if r == 0 {
			d = *soakWarmup
		}
		t0, n0, cpu0 := time.Now(), total.Load(), cpuTime()
		wait := func() {
			if r > 0 && len(at) > 0 {
				for total.Load() < at[r-1] && !stop.Load() {
					time.Sleep(20 * time.Millisecond)
				}
				return
			}
			time.Sleep(d)
			for r == 0 && *soakFill && !soakCachesFull(m) && time.Since(t0) < d+10*time.Minute && !stop.Load() {
				time.Sleep(time.Second)
			}
		}
		if err := soakCPUProfile(r, wait); err != nil {
			stop.Store(true)
			return err
		}
		pause.Lock()
		n, el, cpu := total.Load()-n0, time.Since(t0), cpuTime()-cpu0
		s := soakTake(ctx, js, m, n)
		s.el, s.cpu, s.total, s.started = el, cpu, total.Load(), started.Load()
		soakPrint(strconv.Itoa(r), s, prev)
		if r > 0 {
			if len(rounds) == 0 {
				pre = prev
			}
			rounds = append(rounds, s)
		}
		prev = s
		err := soakProfiles(r)
		pause.Unlock()
		if err != nil {
			stop.Store(true)
			return err
		}
	}
	stop.Store(true)
	wg.Wait()
	if failed != nil {
		return failed
	}
	last := rounds[len(rounds)-1]
	fmt.Printf("\nround %d / round 1: RSS %.2f×, heap %.2f×, turns/s %.2f×, CPU per turn %.2f×   (a worker that holds steady: each within 10%%)\n",
		len(rounds), float64(last.rss)/float64(rounds[0].rss), float64(last.heap)/float64(rounds[0].heap), soakRate(last)/soakRate(rounds[0]), soakCPU(last)/soakCPU(rounds[0]))
	if *soakTTL > 0 {
		soakRetention(pre, rounds)
	}
	if *soakIdle > 0 {
		time.Sleep(*soakIdle)
		s := soakTake(ctx, js, m, 0)
		fmt.Printf("idle %v later: RSS %.1f MB (%.2f× round %d), heap %.1f MB, held %.1f MB\n", *soakIdle, mb(s.rss), float64(s.rss)/float64(last.rss), len(rounds), mb(s.heap), mb(s.held))
	}
	return nil
}

// soakRetention prints whether the retention pass kept up over the
// measured rounds (pre is the sample before the first): the sessions it
// forgot a second against those begun, its lag after each round, and the
// lanes bucket's subjects from the first round to the last. One that keeps
// up forgets about as many as begin, and neither its lag nor the subjects
// grow round over round.
func soakRetention(pre soakSample, rounds []soakSample) {
	last := rounds[len(rounds)-1]
	var el time.Duration
	lags := make([]string, len(rounds))
	for i, r := range rounds {
		el += r.el
		lags[i] = strconv.FormatFloat(r.lag.Seconds(), 'f', 1, 64)
	}
	fmt.Printf("retention: forgot %.1f sessions/s while %.1f/s began; lag after each round %s s; lanes bucket subjects round %d / round 1 %.2f×\n",
		float64(last.forgotten-pre.forgotten)/el.Seconds(), float64(last.started-pre.started)/el.Seconds(), strings.Join(lags, ", "),
		len(rounds), float64(last.lanesKeys)/float64(max(rounds[0].lanesKeys, 1)))
}

// soakCheckpoints parses -soak-at: ascending positive turn counts.
func soakCheckpoints(s string) ([]int64, error) {
	if strings.TrimSpace(s) == "" {
		return nil, nil
	}
	var at []int64
	for f := range strings.SplitSeq(s, ",") {
		n, err := strconv.ParseInt(strings.TrimSpace(f), 10, 64)
		if err != nil || n <= 0 || (len(at) > 0 && n <= at[len(at)-1]) {
			return nil, fmt.Errorf("soak: -soak-at %q: want ascending positive turn counts, e.g. 10000,20000,40000", s)
		}
		at = append(at, n)
	}
	return at, nil
}

// soakCPU is the process's CPU time per turn, ms: on a shared machine a
// steadier measure of what a turn costs than turns/s.
func soakCPU(s soakSample) float64 {
	if s.turns == 0 {
		return 0
	}
	return float64(s.cpu.Microseconds()) / 1000 / float64(s.turns)
}

func soakRate(s soakSample) float64 {
	if s.el <= 0 {
		return 0
	}
	return float64(s.turns) / s.el.Seconds()
}

// soakTake collects garbage and samples the process and the server's
// per-subject state.
func soakTake(ctx context.Context, js jetstream.JetStream, m *fleet.Member, turns int64) soakSample {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	s := soakSample{turns: turns, rss: rss(), heap: int64(ms.HeapAlloc), held: int64(ms.HeapSys - ms.HeapReleased),
		goroutines: runtime.NumGoroutine(), subs: m.Server.NumSubscriptions()}
	state := func(name string) jetstream.StreamState {
		st, err := js.Stream(ctx, name)
		if err != nil {
			return jetstream.StreamState{}
		}
		info, err := st.Info(ctx)
		if err != nil {
			return jetstream.StreamState{}
		}
		return info.State
	}
	ev, lanesSt := state(events.EventStream), state("KV_"+kvstore.DefaultBucket)
	s.evSubjects, s.evMB = ev.NumSubjects, mb(int64(ev.Bytes))
	s.lanesKeys, s.lanesMB = lanesSt.NumSubjects, mb(int64(lanesSt.Bytes))
	s.runsKeys = state("KV_" + kvstore.DefaultRunsBucket).NumSubjects
	_, _, s.whole = m.Worker.TranscriptReads()
	tc, _ := m.Worker.TranscriptCache()
	cc, _ := m.Runner.ContextCache()
	s.cache = tc + cc
	s.forgotten, s.lag = m.Worker.Retention()
	s.steps, s.stepLanes, s.stepBusy = m.Worker.RetentionSteps()
	return s
}

// soakCacheMax is the budgets of the worker's transcript and context caches.
func soakCacheMax(m *fleet.Member) int {
	_, tmax := m.Worker.TranscriptCache()
	_, cmax := m.Runner.ContextCache()
	return tmax + cmax
}

// soakCachesFull reports whether the worker's transcript and context
// caches hold 90% of their budgets.
func soakCachesFull(m *fleet.Member) bool {
	tc, tmax := m.Worker.TranscriptCache()
	cc, cmax := m.Runner.ContextCache()
	return tc >= tmax*9/10 && cc >= cmax*9/10
}

// soakPrint prints one round.
func soakPrint(name string, s, prev soakSample) {
	per, whole, lanes, stepMS := "-", "-", "-", "-"
	if n := s.steps - prev.steps; n > 0 {
		lanes = strconv.FormatFloat(float64(s.stepLanes-prev.stepLanes)/float64(n), 'f', 1, 64)
		stepMS = strconv.FormatFloat(float64((s.stepBusy-prev.stepBusy).Microseconds())/1000/float64(n), 'f', 0, 64)
	}
	if s.turns > 0 {
		per = strconv.FormatFloat(float64(s.rss-prev.rss)/1024/float64(s.turns), 'f', 2, 64)
		whole = strconv.FormatFloat(100*float64(s.whole-prev.whole)/float64(s.turns), 'f', 1, 64)
	}
	fmt.Printf("  %5s %7d %7d %7.0f %6.2f %7.1f %7.1f %7.1f %7s %6d %8d %8.1f %8d %7.1f %5d %4d %6s %8.1f %6d %6d %5.1f %8s %6s\n", name, s.turns, s.total, soakRate(s), soakCPU(s), mb(s.rss), mb(s.heap), mb(s.held), per,
		s.goroutines, s.evSubjects, s.evMB, s.lanesKeys, s.lanesMB, s.runsKeys, s.subs, whole, mb(int64(s.cache)), s.started-prev.started, s.forgotten-prev.forgotten, s.lag.Seconds(), lanes, stepMS)
}

// soakProfiles writes round r's heap profile and goroutines when
// -soak-heap-profile asks for them.
func soakProfiles(r int) error {
	if *soakHeap == "" {
		return nil
	}
	if err := writeHeapProfile(*soakHeap + "." + strconv.Itoa(r) + ".pb.gz"); err != nil {
		return err
	}
	f, err := os.Create(*soakHeap + "." + strconv.Itoa(r) + ".goroutines.txt")
	if err != nil {
		return err
	}
	if err := pprof.Lookup("goroutine").WriteTo(f, 1); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// soakCPUProfile runs round r, writing a CPU profile of it to
// <-cpuprofile>.<r> when that is set.
func soakCPUProfile(r int, round func()) error {
	if *turnsCPUProf == "" {
		round()
		return nil
	}
	return cpuProfile(*turnsCPUProf+"."+strconv.Itoa(r), round)
}
