package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/lanefleet/lanefleet"
	"github.com/lanefleet/lanefleet/internal/embedded"
	"github.com/lanefleet/lanefleet/kvstore"
)

// Flags of -scenario cluster (issue 36 item 4): a 3-node cluster of
// nats-server processes (R3) against a single node (R1), each with 1, 2
// and 3 worker processes.
var (
	clDuration    = flag.Duration("cluster-duration", 15*time.Second, "cluster: measured time of each run")
	clWarmup      = flag.Duration("cluster-warmup", 3*time.Second, "cluster: load before each run's measured time (lanes, streams and caches set up)")
	clWorkers     = flag.String("cluster-workers", "1,2,3", "cluster: worker process counts, comma-separated")
	clConcurrency = flag.Int("cluster-concurrency", 8, "cluster: each worker's --concurrency")
	clSessions    = flag.Int("cluster-sessions", 0, "cluster: sessions sending at once, one message at a time each (0: workers × -cluster-concurrency, every worker's slots full)")
	clModels      = flag.String("cluster-models", "0,1s", "cluster: the model's latency per turn, comma-separated (0: the instant model)")
	clIdle        = flag.Duration("cluster-idle", 2*time.Second, "cluster: time the fleet's idle CPU is measured before each run's load (taken off its CPU per turn as the net figure)")
	clServerBin   = flag.String("cluster-server", "", "cluster: the nats-server binary (default: go build github.com/nats-io/nats-server/v2 into a temp dir)")
	clWorkerBin   = flag.String("cluster-worker", "", "cluster: the cmd/worker binary (default: go build ./cmd/worker into a temp dir)")
)

// clusterBench runs, for each model latency and worker count, the same
// closed-loop load on a single nats-server process (R1) and then on a
// 3-node cluster of them (R3), each on a fresh store, and prints turns/s,
// latency above the model, the CPU per turn of every process, and what a
// turn asks of the servers (messages and bytes stored, subjects, messages
// received from clients and over routes).
func clusterBench(o options) error {
	workers, err := parseCounts(*clWorkers)
	if err != nil {
		return fmt.Errorf("cluster: -cluster-workers: %w", err)
	}
	models, err := parseDelays(*clModels)
	if err != nil {
		return fmt.Errorf("cluster: -cluster-models: %w", err)
	}
	if *clConcurrency < 1 || *clSessions < 0 || *clDuration <= 0 || *clWarmup < 0 {
		return errors.New("cluster: -cluster-concurrency and -cluster-duration must be positive, -cluster-sessions and -cluster-warmup not negative")
	}
	dir, err := os.MkdirTemp("", "lanebench-cluster")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	srvBin, wBin := *clServerBin, *clWorkerBin
	if srvBin == "" {
		srvBin = filepath.Join(dir, "nats-server")
		if err := goBuild(srvBin, "github.com/nats-io/nats-server/v2"); err != nil {
			return err
		}
	}
	if wBin == "" {
		wBin = filepath.Join(dir, "worker")
		if err := goBuild(wBin, "./cmd/worker"); err != nil {
			return err
		}
	}
	fmt.Printf("lanebench cluster: nats-server processes (1 node R1, 3 nodes R3) and worker processes (cmd/worker, scripted model, --concurrency %d), closed loop (each session sends its next message when its last run ended), warm-up %v, measured %v a run, sync_interval %s, GOMAXPROCS %d, load average %s\n",
		*clConcurrency, *clWarmup, *clDuration, map[bool]string{true: "always", false: "default (2m)"}[o.sync], runtime.GOMAXPROCS(0), loadAvg())
	var rows []clusterRow
	for _, d := range models {
		for _, n := range workers {
			for _, nodes := range []int{1, 3} {
				sessions := *clSessions
				if sessions == 0 {
					sessions = n * *clConcurrency
				}
				r, err := clusterRun(o, dir, srvBin, wBin, clusterSpec{nodes: nodes, workers: n, sessions: sessions, model: d})
				if err != nil {
					return err
				}
				rows = append(rows, r)
				r.print()
			}
		}
	}
	fmt.Printf("\nload average after the runs: %s\n", loadAvg())
	printClusterRatios(rows)
	for _, r := range rows {
		if r.failed > 0 {
			return fmt.Errorf("cluster: %d turns failed in %s", r.failed, r.spec)
		}
	}
	return nil
}

// goBuild builds pkg into out.
func goBuild(out, pkg string) error {
	build := exec.Command("go", "build", "-o", out, pkg)
	build.Stdout, build.Stderr = os.Stderr, os.Stderr
	if err := build.Run(); err != nil {
		return fmt.Errorf("cluster: go build %s: %w", pkg, err)
	}
	return nil
}

// parseCounts parses a comma-separated list of positive counts.
func parseCounts(s string) ([]int, error) {
	var out []int
	for f := range strings.SplitSeq(s, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n < 1 || n > 64 {
			return nil, fmt.Errorf("%q: want counts from 1 to 64", f)
		}
		out = append(out, n)
	}
	return out, nil
}

// clusterSpec is one run's shape.
type clusterSpec struct {
	nodes, workers, sessions int
	model                    time.Duration
}

func (s clusterSpec) String() string {
	m := "instant model"
	if s.model > 0 {
		m = s.model.String() + " model"
	}
	return fmt.Sprintf("%s, R%d (%d node%s), %d worker%s, %d sessions", m, s.nodes, s.nodes, plural(s.nodes), s.workers, plural(s.workers), s.sessions)
}

func plural(n int) string {
	if n == 1 {
		return ""
	}
	return "s"
}

// clusterRow is what one run measured over its window.
type clusterRow struct {
	spec    clusterSpec
	turns   int
	failed  int
	elapsed time.Duration
	lat     []time.Duration // publish → final event minus the model's latency, runs sent and ended in the window
	// loopsRate is the sessions' own rates summed: each session's turns
	// between its first and last end in the window over that time (a
	// count of whole turns in a window of a few model latencies would be
	// off by up to a turn per session).
	loopsRate float64
	// idleServers and idleWorkers are the servers' and workers' CPU per
	// second with the fleet up and no load, measured before it.
	idleServers, idleWorkers float64
	// CPU spent in the window: all servers, all workers, this process
	// (the client).
	cpuServers, cpuWorkers, cpuClient time.Duration
	before, after                     clusterSnap
}

func (r clusterRow) rate() float64 {
	if r.loopsRate > 0 {
		return r.loopsRate
	}
	return float64(r.turns) / r.elapsed.Seconds()
}

// cpuAll is the CPU of every process in the window.
func (r clusterRow) cpuAll() time.Duration { return r.cpuServers + r.cpuWorkers + r.cpuClient }

// cpuNet is cpuAll less what the servers and workers spend idle.
func (r clusterRow) cpuNet() time.Duration {
	idle := time.Duration((r.idleServers + r.idleWorkers) * float64(r.elapsed))
	return max(0, r.cpuAll()-idle)
}

// perTurn is d divided among the window's turns, in milliseconds.
func (r clusterRow) perTurn(d time.Duration) float64 {
	if r.turns == 0 {
		return 0
	}
	return float64(d.Microseconds()) / 1000 / float64(r.turns)
}

// per divides a count grown over the window among its turns.
func (r clusterRow) per(before, after int64) float64 {
	if r.turns == 0 {
		return 0
	}
	return float64(after-before) / float64(r.turns)
}

func (r clusterRow) print() {
	fmt.Printf("\n%s\n", r.spec)
	fmt.Printf("  %.1f turns/s (%d turns ended in %.1f s); above the model p50 %.2f ms, p99 %.2f ms; %d failed\n",
		r.rate(), r.turns, r.elapsed.Seconds(), ms(r.lat, 50), ms(r.lat, 99), r.failed)
	fmt.Printf("  CPU per turn: servers %.2f ms, workers %.2f ms, client %.2f ms, all %.2f ms; net of the idle fleet's %.0f ms/s (servers %.0f, workers %.0f): %.2f ms\n",
		r.perTurn(r.cpuServers), r.perTurn(r.cpuWorkers), r.perTurn(r.cpuClient), r.perTurn(r.cpuAll()),
		1000*(r.idleServers+r.idleWorkers), 1000*r.idleServers, 1000*r.idleWorkers, r.perTurn(r.cpuNet()))
	b, a := r.before, r.after
	fmt.Printf("  per turn, all nodes: %.1f messages in from clients, %.1f out to clients, %.1f in over routes; %.0f B in from clients, %.0f B over routes\n",
		r.per(b.inClient, a.inClient), r.per(b.outClient, a.outClient), r.per(b.in-b.inClient, a.in-a.inClient),
		r.per(b.inClientBytes, a.inClientBytes), r.per(b.inBytes-b.inClientBytes, a.inBytes-a.inClientBytes))
	fmt.Printf("  servers' RSS at the end: %s\n", a.memString())
	consumers := 0
	for _, st := range a.streams {
		consumers += st.consumers
	}
	fmt.Printf("  %d streams, %d consumers; those a turn writes to:\n", len(a.streams), consumers)
	for _, name := range a.streamNames() {
		sa, sb := a.streams[name], b.streams[name]
		if sa.lastSeq == sb.lastSeq && sa.subjects == 0 {
			continue
		}
		fmt.Printf("    %-18s per turn %5.2f messages stored, %6.0f B kept, %5.2f subjects; now %d subjects, %d consumers, %d replicas\n",
			name, r.per(int64(sb.lastSeq), int64(sa.lastSeq)), r.per(int64(sb.bytes), int64(sa.bytes)), r.per(int64(sb.subjects), int64(sa.subjects)),
			sa.subjects, sa.consumers, sa.replicas)
	}
}

// printClusterRatios prints each R3 row against the R1 row of the same
// model and workers, and each topology's throughput against its own
// single-worker row.
func printClusterRatios(rows []clusterRow) {
	fmt.Printf("\n%-8s %-5s %7s %8s %8s %9s %9s %12s %12s %11s\n", "model", "store", "workers", "sessions", "turns/s", "p50 ms", "p99 ms", "CPU/turn ms", "net of idle", "vs 1 worker")
	one := map[[2]int64]float64{}
	for _, r := range rows {
		k := [2]int64{int64(r.spec.model), int64(r.spec.nodes)}
		if r.spec.workers == 1 {
			one[k] = r.rate()
		}
		vs := ""
		if base := one[k]; base > 0 && r.spec.workers > 1 {
			vs = fmt.Sprintf("%.2f×", r.rate()/base)
		}
		m := "instant"
		if r.spec.model > 0 {
			m = r.spec.model.String()
		}
		fmt.Printf("%-8s R%-4d %7d %8d %8.1f %9.2f %9.2f %12.2f %12.2f %11s\n", m, r.spec.nodes, r.spec.workers, r.spec.sessions, r.rate(), ms(r.lat, 50), ms(r.lat, 99),
			r.perTurn(r.cpuAll()), r.perTurn(r.cpuNet()), vs)
	}
	fmt.Printf("\nR3 against R1 of the same model and workers (same run)\n")
	for _, r := range rows {
		if r.spec.nodes != 3 {
			continue
		}
		for _, b := range rows {
			if b.spec.nodes == 1 && b.spec.model == r.spec.model && b.spec.workers == r.spec.workers {
				fmt.Printf("  %s: turns/s %.2f×, p50 %+.2f ms, CPU per turn %.2f× (net of idle %.2f×)\n", r.spec, r.rate()/b.rate(), ms(r.lat, 50)-ms(b.lat, 50),
					r.perTurn(r.cpuAll())/b.perTurn(b.cpuAll()), r.perTurn(r.cpuNet())/b.perTurn(b.cpuNet()))
			}
		}
	}
	for _, r := range rows {
		base := one[[2]int64{int64(r.spec.model), int64(r.spec.nodes)}]
		if r.spec.model > 0 && r.spec.workers == 2 && base > 0 {
			verdict := "met"
			if r.rate()/base < 1.9 {
				verdict = "NOT met"
			}
			fmt.Printf("  %s model, R%d: 2 workers %.2f× one (target ≥ 1.9×: %s)\n", r.spec.model, r.spec.nodes, r.rate()/base, verdict)
		}
	}
}

// clusterRun starts the servers and workers of spec on a fresh store,
// drives the load and measures its window.
func clusterRun(o options, dir, srvBin, wBin string, spec clusterSpec) (clusterRow, error) {
	row := clusterRow{spec: spec}
	rdir, err := os.MkdirTemp(dir, "run")
	if err != nil {
		return row, err
	}
	defer os.RemoveAll(rdir)
	nodes, err := startNodes(rdir, srvBin, spec.nodes, o.sync)
	if err != nil {
		return row, err
	}
	defer func() {
		for _, nd := range nodes {
			nd.kill()
		}
	}()
	var urls []string
	for _, nd := range nodes {
		urls = append(urls, nd.url)
	}
	url := strings.Join(urls, ",")
	nc, err := nats.Connect(url, nats.MaxReconnects(-1), nats.RetryOnFailedConnect(true), nats.ReconnectWait(50*time.Millisecond))
	if err != nil {
		return row, err
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return row, err
	}
	if err := waitJetStream(js); err != nil {
		return row, fmt.Errorf("%w\n%s", err, logTails(rdir))
	}
	var workers []*benchProc
	defer func() {
		for _, w := range workers {
			w.kill()
		}
	}()
	// One at a time: the first creates the streams and buckets, and each
	// is alive (its consumers set up) before the next starts.
	for i := range spec.workers {
		args := []string{"--id", fmt.Sprintf("cl%d", i+1), "--replicas", strconv.Itoa(spec.nodes),
			"--scripted", "--model", "scripted/script", "--no-builtin-tools", "--concurrency", strconv.Itoa(*clConcurrency),
			"--shutdown-grace", "1s", "--log-level", "warn", "--agent-cache-dir", filepath.Join(rdir, "agents", strconv.Itoa(i))}
		w, err := startProc(wBin, args, []string{"NATS_URL=" + url}, filepath.Join(rdir, fmt.Sprintf("worker%d.log", i+1)))
		if err != nil {
			return row, err
		}
		workers = append(workers, w)
		if err := waitWorkers(js, i+1); err != nil {
			return row, fmt.Errorf("%w\n%s", err, logTails(rdir))
		}
	}
	c, err := lanefleet.New(nc)
	if err != nil {
		return row, err
	}
	text := fmt.Sprintf(`#script {"replies":[{"text":"pong","chunks":1,"delayMs":%d}]}`, spec.model.Milliseconds())
	snap := func() (clusterSnap, error) {
		return takeSnap(js, nodes, workers)
	}
	if *clIdle > 0 {
		i0, err := snap()
		if err != nil {
			return row, err
		}
		time.Sleep(*clIdle)
		i1, err := snap()
		if err != nil {
			return row, err
		}
		sec := clIdle.Seconds()
		row.idleServers = (i1.cpuServers - i0.cpuServers).Seconds() / sec
		row.idleWorkers = (i1.cpuWorkers - i0.cpuWorkers).Seconds() / sec
	}
	prefix := fmt.Sprintf("cl-r%d-w%d-%d-", spec.nodes, spec.workers, spec.model.Milliseconds())
	return driveCluster(c, prefix, text, spec, snap, row)
}

// driveCluster runs spec.sessions closed loops for the warm-up and the
// window and fills row from the window: turns that ended in it, the
// latency of those sent and ended in it, and what the snapshots at its
// ends differ by.
func driveCluster(c *lanefleet.Client, prefix, text string, spec clusterSpec, snap func() (clusterSnap, error), row clusterRow) (clusterRow, error) {
	var (
		mu             sync.Mutex
		wg             sync.WaitGroup
		winStart, stop time.Time // zero until the window starts, ends
	)
	t0 := time.Now()
	ctx := context.Background()
	for s := range spec.sessions {
		wg.Go(func() {
			session := prefix + strconv.Itoa(s)
			// Sessions start spread over one model latency, sending
			// independently rather than in waves.
			time.Sleep(spec.model * time.Duration(s) / time.Duration(spec.sessions))
			var first, last time.Time
			k := 0
			defer func() {
				if k >= 2 && last.After(first) {
					mu.Lock()
					row.loopsRate += float64(k-1) / last.Sub(first).Seconds()
					mu.Unlock()
				}
			}()
			for {
				mu.Lock()
				stopped := !stop.IsZero()
				mu.Unlock()
				if stopped {
					return
				}
				sent := time.Now()
				err := clientTurn(ctx, c, session, text)
				end := time.Now()
				mu.Lock()
				from, to := winStart, stop
				if counted := !from.IsZero() && end.After(from) && (to.IsZero() || end.Before(to)); counted && err != nil {
					row.failed++
				} else if counted {
					row.turns++
					if k == 0 {
						first = end
					}
					last = end
					k++
					if sent.After(from) {
						row.lat = append(row.lat, end.Sub(sent)-spec.model)
					}
				}
				mu.Unlock()
				if err != nil {
					// A stream still electing in the warm-up, or a failure
					// counted: try again, without spinning on a fast error.
					time.Sleep(100 * time.Millisecond)
				}
			}
		})
	}
	time.Sleep(time.Until(t0.Add(*clWarmup)))
	before, errBefore := snap()
	mu.Lock()
	winStart = time.Now()
	mu.Unlock()
	time.Sleep(*clDuration)
	mu.Lock()
	stop = time.Now()
	mu.Unlock()
	after, errAfter := snap()
	wg.Wait()
	row.elapsed = stop.Sub(winStart)
	row.before, row.after = before, after
	row.cpuServers = after.cpuServers - before.cpuServers
	row.cpuWorkers = after.cpuWorkers - before.cpuWorkers
	row.cpuClient = after.cpuClient - before.cpuClient
	return row, errors.Join(errBefore, errAfter)
}

// waitJetStream waits until JetStream answers (on a cluster: a meta
// leader was elected), for a minute at most.
func waitJetStream(js jetstream.JetStream) error {
	deadline := time.Now().Add(time.Minute)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		_, err := js.AccountInfo(ctx)
		cancel()
		if err == nil {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("cluster: JetStream not ready: %w", err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// waitWorkers waits until n workers keep a life in the liveness bucket
// (each has set up its streams and consumers), for a minute at most.
func waitWorkers(js jetstream.JetStream, n int) error {
	deadline := time.Now().Add(time.Minute)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		got := 0
		kv, err := js.KeyValue(ctx, kvstore.DefaultLivenessBucket)
		if err == nil {
			var keys []string
			keys, err = kv.Keys(ctx)
			got = len(keys)
		}
		cancel()
		if got >= n {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("cluster: %d of %d workers alive after a minute (%v)", got, n, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// benchProc is a child process of the benchmark.
type benchProc struct {
	cmd  *exec.Cmd
	done chan struct{}
}

// startProc starts bin with args and env added, its output to the file
// logPath.
func startProc(bin string, args, env []string, logPath string) (*benchProc, error) {
	log, err := os.Create(logPath)
	if err != nil {
		return nil, err
	}
	defer log.Close() // the child holds its own descriptor
	cmd := exec.Command(bin, args...)
	cmd.Env = append(os.Environ(), env...)
	cmd.Stdout, cmd.Stderr = log, log
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("cluster: start %s: %w", filepath.Base(bin), err)
	}
	p := &benchProc{cmd: cmd, done: make(chan struct{})}
	go func() { _ = cmd.Wait(); close(p.done) }()
	return p, nil
}

// cpu is the process's user+system CPU time so far.
func (p *benchProc) cpu() (time.Duration, error) {
	return procCPU(p.cmd.Process.Pid)
}

func (p *benchProc) kill() {
	_ = p.cmd.Process.Signal(syscall.SIGKILL)
	<-p.done
}

// logTails returns the last lines of every log under dir, for an error.
func logTails(dir string) string {
	paths, _ := filepath.Glob(filepath.Join(dir, "*.log"))
	var b strings.Builder
	for _, p := range paths {
		data, err := os.ReadFile(p)
		if err != nil {
			continue
		}
		lines := strings.Split(strings.TrimSpace(string(data)), "\n")
		fmt.Fprintf(&b, "--- %s (last lines)\n%s\n", filepath.Base(p), strings.Join(lines[max(0, len(lines)-15):], "\n"))
	}
	return b.String()
}

// benchNode is one nats-server process.
type benchNode struct {
	*benchProc
	name, url, monitor string
}

// startNodes starts n nats-server processes under dir (n = 1: a single
// node without clustering), each with its monitoring port.
func startNodes(dir, bin string, n int, syncAlways bool) ([]*benchNode, error) {
	ports, err := embedded.FreePorts(3 * n)
	if err != nil {
		return nil, err
	}
	var routes []string
	for i := range n {
		routes = append(routes, fmt.Sprintf("%q", fmt.Sprintf("nats-route://127.0.0.1:%d", ports[n+i])))
	}
	sync := ""
	if syncAlways {
		sync = "  sync_interval: always\n"
	}
	var nodes []*benchNode
	for i := range n {
		name := fmt.Sprintf("n%d", i+1)
		conf := fmt.Sprintf("server_name: %q\nlisten: \"127.0.0.1:%d\"\nhttp: \"127.0.0.1:%d\"\n"+
			"jetstream {\n  store_dir: %q\n  max_memory_store: 64MB\n  max_file_store: 8GB\n%s}\n",
			name, ports[i], ports[2*n+i], filepath.Join(dir, name), sync)
		if n > 1 {
			conf += fmt.Sprintf("cluster {\n  name: \"lanebench\"\n  listen: \"127.0.0.1:%d\"\n  routes: [%s]\n}\n",
				ports[n+i], strings.Join(routes, ", "))
		}
		path := filepath.Join(dir, name+".conf")
		if err := os.WriteFile(path, []byte(conf), 0o600); err != nil {
			return nodes, err
		}
		p, err := startProc(bin, []string{"-c", path}, nil, filepath.Join(dir, name+".log"))
		if err != nil {
			for _, nd := range nodes {
				nd.kill()
			}
			return nil, err
		}
		nodes = append(nodes, &benchNode{benchProc: p, name: name, url: fmt.Sprintf("nats://127.0.0.1:%d", ports[i]),
			monitor: fmt.Sprintf("http://127.0.0.1:%d", ports[2*n+i])})
	}
	return nodes, nil
}

// clusterSnap is the state of a run at one instant.
type clusterSnap struct {
	cpuServers, cpuWorkers, cpuClient time.Duration
	in, inClient, outClient           int64 // messages, summed over the nodes (/varz)
	inBytes, inClientBytes            int64
	mem                               []int64 // each node's RSS
	streams                           map[string]streamSnap
}

// streamSnap is one stream's state, from its leader.
type streamSnap struct {
	lastSeq, bytes, subjects uint64
	consumers, replicas      int
}

func (s clusterSnap) memString() string {
	var parts []string
	for _, m := range s.mem {
		parts = append(parts, fmt.Sprintf("%.0f MB", mb(m)))
	}
	return strings.Join(parts, ", ")
}

func (s clusterSnap) streamNames() []string {
	var names []string
	for n := range s.streams {
		names = append(names, n)
	}
	slices.Sort(names)
	return names
}

// takeSnap reads every process's CPU, every node's /varz and every
// stream's state.
func takeSnap(js jetstream.JetStream, nodes []*benchNode, workers []*benchProc) (clusterSnap, error) {
	s := clusterSnap{streams: map[string]streamSnap{}, cpuClient: cpuTime()}
	for _, nd := range nodes {
		c, err := nd.cpu()
		if err != nil {
			return s, err
		}
		s.cpuServers += c
		v, err := varz(nd.monitor)
		if err != nil {
			return s, err
		}
		s.in += v.InMsgs
		s.inClient += v.InClientMsgs
		s.outClient += v.OutClientMsgs
		s.inBytes += v.InBytes
		s.inClientBytes += v.InClientBytes
		s.mem = append(s.mem, v.Mem)
	}
	for _, w := range workers {
		c, err := w.cpu()
		if err != nil {
			return s, err
		}
		s.cpuWorkers += c
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	l := js.ListStreams(ctx)
	for info := range l.Info() {
		s.streams[info.Config.Name] = streamSnap{lastSeq: info.State.LastSeq, bytes: info.State.Bytes, subjects: info.State.NumSubjects,
			consumers: info.State.Consumers, replicas: info.Config.Replicas}
	}
	if err := l.Err(); err != nil {
		return s, fmt.Errorf("cluster: list streams: %w", err)
	}
	return s, nil
}

// varzFigures is the part of a server's /varz the benchmark reads.
type varzFigures struct {
	Mem           int64 `json:"mem"`
	InMsgs        int64 `json:"in_msgs"`
	InBytes       int64 `json:"in_bytes"`
	InClientMsgs  int64 `json:"in_client_msgs"`
	InClientBytes int64 `json:"in_client_bytes"`
	OutClientMsgs int64 `json:"out_client_msgs"`
}

func varz(base string) (varzFigures, error) {
	var v varzFigures
	resp, err := http.Get(base + "/varz")
	if err != nil {
		return v, fmt.Errorf("cluster: varz: %w", err)
	}
	defer resp.Body.Close()
	if err := json.NewDecoder(io.LimitReader(resp.Body, 1<<20)).Decode(&v); err != nil {
		return v, fmt.Errorf("cluster: varz: %w", err)
	}
	return v, nil
}

// procCPU is process pid's user+system CPU time so far, from
// /proc/<pid>/stat.
func procCPU(pid int) (time.Duration, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	return parseProcStat(b)
}

// clockTick is the unit of /proc/<pid>/stat's times: USER_HZ, 100 on
// every Linux architecture Go supports.
const clockTick = 10 * time.Millisecond

// parseProcStat returns utime+stime of a /proc/<pid>/stat line. The
// command name (field 2) is in parentheses and may hold spaces and
// parentheses itself, so the fields are counted after its last ')'.
func parseProcStat(b []byte) (time.Duration, error) {
	if len(b) > 4096 {
		return 0, errors.New("proc stat: longer than 4096 bytes")
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return 0, errors.New("proc stat: no command name")
	}
	// After ") " come field 3 (state) onwards: utime is field 14, stime 15.
	f := strings.Fields(s[i+1:])
	if len(f) < 13 {
		return 0, fmt.Errorf("proc stat: %d fields after the command name, want at least 13", len(f))
	}
	var total time.Duration
	for _, v := range f[11:13] {
		n, err := strconv.ParseUint(v, 10, 63)
		if err != nil {
			return 0, fmt.Errorf("proc stat: %w", err)
		}
		total += time.Duration(n) * clockTick
	}
	return total, nil
}
