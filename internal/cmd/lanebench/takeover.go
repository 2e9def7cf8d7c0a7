package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/lanefleet/lanefleet"
	"github.com/lanefleet/lanefleet/events"
	"github.com/lanefleet/lanefleet/kvstore"
	"github.com/lanefleet/lanefleet/provider"
	"github.com/lanefleet/lanefleet/tools"
	"github.com/lanefleet/lanefleet/tools/remote"
)

// Flags of -scenario takeover (issue 36 item 8): how fast a SIGKILLed
// worker's lanes resume elsewhere.
var (
	tkKills         = flag.Int("takeover-kills", 100, "takeover: SIGKILLs, one a round")
	tkWorkers       = flag.Int("takeover-workers", 3, "takeover: worker processes running at once (a killed one is replaced)")
	tkSessions      = flag.Int("takeover-sessions", 12, "takeover: sessions a round, one turn each, in flight when a worker is killed")
	tkAckWait       = flag.Duration("takeover-ack-wait", time.Minute, "takeover: the workers' --ack-wait and --lease-ttl (long: only fast takeover resumes a lane sooner)")
	tkBaselineKills = flag.Int("takeover-baseline-kills", 3, "takeover: SIGKILLs with fast takeover off (--liveness-every -1ms), the baseline: each waits out the baseline AckWait")
	tkBaselineWait  = flag.Duration("takeover-baseline-ack-wait", 10*time.Second, "takeover: the baseline workers' --ack-wait and --lease-ttl")
	tkWorkerBin     = flag.String("takeover-worker", "", "takeover: the cmd/worker binary (default: go build ./cmd/worker into a temp dir)")
)

// takeoverBench runs worker processes (cmd/worker, scripted model) on an
// embedded server and kills one mid-turn each round: every turn calls a
// remote tool (the side effect, counted by its idempotency key here),
// then streams a reply slowly; once every turn of the round has called the
// tool, the worker holding the most of the round's lanes is SIGKILLed. It
// reports the time from the kill to the start of each resumed turn (the
// first event of its next attempt), the tool calls made again, the runs
// that never ended and those that ended twice; then the same with fast
// takeover off, the baseline.
func takeoverBench(o options) error {
	if *tkKills < 1 || *tkWorkers < 2 || *tkSessions < 1 {
		return errors.New("takeover: -takeover-kills and -takeover-sessions must be positive, -takeover-workers at least 2")
	}
	dir, err := os.MkdirTemp("", "lanebench-takeover")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	bin := *tkWorkerBin
	if bin == "" {
		bin = filepath.Join(dir, "worker")
		build := exec.Command("go", "build", "-o", bin, "./cmd/worker")
		build.Stdout, build.Stderr = os.Stderr, os.Stderr
		if err := build.Run(); err != nil {
			return fmt.Errorf("takeover: build cmd/worker: %w", err)
		}
	}
	fmt.Printf("lanebench takeover: %d worker processes (cmd/worker, scripted model, a remote tool each turn), %d sessions a round, sync_interval %s, GOMAXPROCS %d\n",
		*tkWorkers, *tkSessions, map[bool]string{true: "always", false: "default (2m)"}[o.sync], runtime.GOMAXPROCS(0))
	fast, err := takeoverRun(o, dir, bin, *tkKills, *tkAckWait, true)
	if err != nil {
		return err
	}
	fast.print(fmt.Sprintf("fast takeover (--liveness-every %v, --liveness-ttl %v; --ack-wait and --lease-ttl %v)", kvstore.DefaultLivenessEvery, kvstore.DefaultLivenessTTL, *tkAckWait))
	if *tkBaselineKills > 0 {
		base, err := takeoverRun(o, dir, bin, *tkBaselineKills, *tkBaselineWait, false)
		if err != nil {
			return err
		}
		base.print(fmt.Sprintf("baseline, fast takeover off (--liveness-every -1ms; --ack-wait and --lease-ttl %v)", *tkBaselineWait))
	}
	if fast.repeated > 0 || fast.lost > 0 || fast.twice > 0 {
		return fmt.Errorf("takeover: %d tool calls made again, %d runs lost, %d ended twice", fast.repeated, fast.lost, fast.twice)
	}
	return nil
}

// takeoverResult is what one series of kills measured.
type takeoverResult struct {
	kills   int
	resumed []time.Duration // kill → first event of the resumed attempt, per lane the victim held
	runs    int
	// repeated counts tool calls made again (an idempotency key run more
	// than once), lost the runs with no final event, twice those with two.
	repeated, lost, twice int
}

func (r takeoverResult) print(what string) {
	fmt.Printf("\n%s\n  %d SIGKILLs, %d runs, %d turns resumed after their worker died\n", what, r.kills, r.runs, len(r.resumed))
	fmt.Printf("  death → resumed turn start: p50 %.0f ms, p90 %.0f ms, p99 %.0f ms, max %.0f ms\n",
		ms(r.resumed, 50), ms(r.resumed, 90), ms(r.resumed, 99), ms(r.resumed, 100))
	fmt.Printf("  repeated side effects (tool calls made again): %d; lost messages (runs never ended): %d; runs ended twice: %d\n", r.repeated, r.lost, r.twice)
}

// effectTool is the turns' side effect: it counts its calls by key.
type effectTool struct {
	mu     sync.Mutex
	calls  map[string]int
	notify chan struct{}
}

func (e *effectTool) Spec() provider.Tool {
	return provider.Tool{Name: "effect", Description: "Do something once", Parameters: map[string]any{"type": "object"}}
}

func (e *effectTool) Call(_ context.Context, call tools.Call) (tools.Result, error) {
	e.mu.Lock()
	e.calls[call.Key]++
	e.mu.Unlock()
	select {
	case e.notify <- struct{}{}:
	default:
	}
	return tools.TextResult("done"), nil
}

// called reports whether every run has called the tool.
func (e *effectTool) called(runs []*lanefleet.Run) bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	for _, r := range runs {
		if e.calls[r.ID+".1.c1"] == 0 {
			return false
		}
	}
	return true
}

// runWatch follows the runs' events: when each run's first event of a
// later attempt arrived, and how many final events each had.
type runWatch struct {
	mu      sync.Mutex
	resumed map[string]time.Time // event subject → arrival of its first event with attempt > 1
	finals  map[string]int
	notify  chan struct{}
}

func (w *runWatch) on(m *nats.Msg) {
	ev, err := events.DecodeEvent(m.Header.Get(events.HeaderContentType), m.Data)
	if err != nil {
		return
	}
	now := time.Now()
	w.mu.Lock()
	if _, ok := w.resumed[m.Subject]; !ok && ev.Attempt > 1 {
		w.resumed[m.Subject] = now
	}
	if ev.Terminal() {
		w.finals[m.Subject]++
	}
	w.mu.Unlock()
	if ev.Terminal() {
		select {
		case w.notify <- struct{}{}:
		default:
		}
	}
}

// takeoverRun starts workers, runs kills rounds and stops everything.
func takeoverRun(o options, dir, bin string, kills int, ackWait time.Duration, fast bool) (takeoverResult, error) {
	var res takeoverResult
	srv, stop, err := startServer(o)
	if err != nil {
		return res, err
	}
	defer stop()
	url := srv.ClientURL()
	nc, js, err := connect(url)
	if err != nil {
		return res, err
	}
	defer nc.Close()
	effect := &effectTool{calls: map[string]int{}, notify: make(chan struct{}, 1)}
	svc, err := remote.Serve(nc, remote.ServiceConfig{}, effect)
	if err != nil {
		return res, err
	}
	defer func() { _ = svc.Stop() }()
	watch := &runWatch{resumed: map[string]time.Time{}, finals: map[string]int{}, notify: make(chan struct{}, 1)}
	sub, err := nc.Subscribe(events.EventPrefix+">", watch.on)
	if err != nil {
		return res, err
	}
	_ = sub.SetPendingLimits(-1, -1)
	c, err := lanefleet.New(nc)
	if err != nil {
		return res, err
	}
	liveness := "500ms"
	if !fast {
		liveness = "-1ms"
	}
	args := []string{"--ack-wait", ackWait.String(), "--lease-ttl", ackWait.String(), "--liveness-every", liveness,
		"--scripted", "--model", "scripted/script", "--remote-tools", "effect", "--no-builtin-tools",
		"--concurrency", "64", "--shutdown-grace", "1s", "--log-level", "error", "--agent-cache-dir", filepath.Join(dir, "agents")}
	procs := map[string]*exec.Cmd{}
	n := 0
	start := func() error {
		n++
		id := fmt.Sprintf("tk%d", n)
		cmd := exec.Command(bin, append([]string{"--id", id}, args...)...)
		cmd.Env = append(os.Environ(), "NATS_URL="+url)
		cmd.Stderr = os.Stderr
		if err := cmd.Start(); err != nil {
			return err
		}
		procs[id] = cmd
		return nil
	}
	defer func() {
		for _, cmd := range procs {
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
		}
	}()
	for range *tkWorkers {
		if err := start(); err != nil {
			return res, err
		}
	}
	// A turn: the tool call, then a reply streamed in 4 chunks of 250 ms,
	// during which its worker dies.
	script := scriptText()
	ctx := context.Background()
	for round := range kills {
		rctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
		runs := make([]*lanefleet.Run, 0, *tkSessions)
		for i := range *tkSessions {
			r, err := c.Send(rctx, fmt.Sprintf("tk-%v-%d-%d", fast, round, i), script)
			if err != nil {
				cancel()
				return res, fmt.Errorf("takeover: send: %w", err)
			}
			runs = append(runs, r)
		}
		res.runs += len(runs)
		for !effect.called(runs) {
			select {
			case <-effect.notify:
			case <-time.After(100 * time.Millisecond):
			case <-rctx.Done():
				cancel()
				return res, errors.New("takeover: the round's turns never all called the tool")
			}
		}
		victim, held, err := mostHolder(rctx, js, runs)
		if err != nil {
			cancel()
			return res, err
		}
		cmd := procs[victim]
		if cmd == nil {
			cancel()
			return res, fmt.Errorf("takeover: lanes held by %q, no worker of this run", victim)
		}
		killed := time.Now()
		_ = cmd.Process.Signal(syscall.SIGKILL)
		_ = cmd.Wait()
		delete(procs, victim)
		res.kills++
		if err := start(); err != nil {
			cancel()
			return res, err
		}
		// Wait for the round's finals: a minute past the AckWait at most.
		deadline := time.After(ackWait + time.Minute)
	wait:
		for {
			done := true
			watch.mu.Lock()
			for _, r := range runs {
				if watch.finals[runSubject(r)] == 0 {
					done = false
					break
				}
			}
			watch.mu.Unlock()
			if done {
				break
			}
			select {
			case <-watch.notify:
			case <-time.After(time.Second):
			case <-deadline:
				break wait
			}
		}
		watch.mu.Lock()
		for _, r := range held {
			if at, ok := watch.resumed[runSubject(r)]; ok {
				res.resumed = append(res.resumed, at.Sub(killed))
			}
		}
		for _, r := range runs {
			switch f := watch.finals[runSubject(r)]; {
			case f == 0:
				res.lost++
			case f > 1:
				res.twice++
			}
		}
		watch.mu.Unlock()
		cancel()
		if (round+1)%10 == 0 {
			fmt.Printf("  %d kills: last round's %d lanes of %s resumed, p50 so far %.0f ms\n", round+1, len(held), victim, ms(res.resumed, 50))
		}
	}
	effect.mu.Lock()
	for _, n := range effect.calls {
		res.repeated += n - 1
	}
	effect.mu.Unlock()
	return res, nil
}

// scriptText is a turn's message: a scripted tool call, then a slow reply.
func scriptText() string {
	return `#script {"replies":[{"toolCalls":[{"id":"c1","name":"effect"}]},{"text":"done after the effect","chunks":4,"delayMs":250}]}`
}

func runSubject(r *lanefleet.Run) string {
	subj, _ := events.EventSubject(r.Session, r.ID)
	return subj
}

// mostHolder returns the worker holding the most of the runs' lanes and
// the runs whose lanes it holds.
func mostHolder(ctx context.Context, js jetstream.JetStream, runs []*lanefleet.Run) (string, []*lanefleet.Run, error) {
	l, err := kvstore.Bind(ctx, js, "")
	if err != nil {
		return "", nil, err
	}
	by := map[string][]*lanefleet.Run{}
	for _, r := range runs {
		tok, err := events.KeyToken(r.Session)
		if err != nil {
			return "", nil, err
		}
		h, ok, err := l.Holder(ctx, tok)
		if err == nil && ok {
			by[h.Worker] = append(by[h.Worker], r)
		}
	}
	ids := make([]string, 0, len(by))
	for id := range by {
		ids = append(ids, id)
	}
	if len(ids) == 0 {
		return "", nil, errors.New("takeover: no lane of the round is held")
	}
	slices.SortFunc(ids, func(a, b string) int {
		if d := len(by[b]) - len(by[a]); d != 0 {
			return d
		}
		return strings.Compare(a, b)
	})
	return ids[0], by[ids[0]], nil
}
