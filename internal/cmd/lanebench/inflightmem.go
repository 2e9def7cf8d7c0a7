package main

import (
	"bufio"
	"context"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"runtime/metrics"
	"runtime/pprof"
	"time"

	"github.com/lanefleet/lanefleet/internal/fleet"
)

var inflightProfile = flag.String("inflight-profile", "", "inflight: write a heap profile (PREFIX.heap) and the goroutines grouped by stack (PREFIX.goroutines) while every turn is in flight")

// memParts is the process's memory by component, as the Go runtime
// counts it.
type memParts struct {
	heapInuse  uint64 // in-use heap spans (objects and their slack)
	heapObj    uint64 // live heap objects' bytes
	stacks     uint64 // goroutine stacks (/memory/classes/heap/stacks:bytes)
	startStack uint64 // a new goroutine's stack (/gc/stack/starting-size:bytes)
	other      uint64 // runtime metadata, buffers and the rest the runtime maps
	goroutines int
}

// sampleParts reads memParts after a GC.
func sampleParts() memParts {
	runtime.GC()
	s := []metrics.Sample{
		{Name: "/memory/classes/heap/objects:bytes"},
		{Name: "/memory/classes/heap/unused:bytes"},
		{Name: "/memory/classes/heap/stacks:bytes"},
		{Name: "/gc/stack/starting-size:bytes"},
		{Name: "/memory/classes/metadata/other:bytes"},
		{Name: "/memory/classes/metadata/mspan/inuse:bytes"},
		{Name: "/memory/classes/metadata/mcache/inuse:bytes"},
		{Name: "/memory/classes/os-stacks:bytes"},
		{Name: "/memory/classes/other:bytes"},
		{Name: "/memory/classes/profiling/buckets:bytes"},
	}
	metrics.Read(s)
	v := func(i int) uint64 {
		if s[i].Value.Kind() != metrics.KindUint64 {
			return 0
		}
		return s[i].Value.Uint64()
	}
	return memParts{heapObj: v(0), heapInuse: v(0) + v(1), stacks: v(2), startStack: v(3),
		other: v(4) + v(5) + v(6) + v(7) + v(8) + v(9), goroutines: runtime.NumGoroutine()}
}

// printParts prints what each component grew by per turn in flight,
// between idle and busy, in KB.
func printParts(idle, busy memParts, rssIdle, rssBusy int64, turns int) {
	per := func(a, b uint64) float64 { return (float64(b) - float64(a)) / 1024 / float64(turns) }
	fmt.Printf("\n  per turn in flight, by component (KB; goroutine starting stack %d KB):\n", busy.startStack>>10)
	fmt.Printf("    %-34s %8.1f\n", "goroutine stacks", per(idle.stacks, busy.stacks))
	fmt.Printf("    %-34s %8.1f\n", "heap objects (live)", per(idle.heapObj, busy.heapObj))
	fmt.Printf("    %-34s %8.1f\n", "heap spans' slack (in use - live)", per(idle.heapInuse-idle.heapObj, busy.heapInuse-busy.heapObj))
	fmt.Printf("    %-34s %8.1f\n", "runtime metadata and other", per(idle.other, busy.other))
	known := per(idle.stacks+idle.heapInuse+idle.other, busy.stacks+busy.heapInuse+busy.other)
	fmt.Printf("    %-34s %8.1f\n", "RSS not accounted above", float64(rssBusy-rssIdle)/1024/float64(turns)-known)
	fmt.Printf("    %-34s %8.1f   (stack KB per goroutine added: %.1f)\n", "goroutines per turn",
		float64(busy.goroutines-idle.goroutines)/float64(turns),
		(float64(busy.stacks)-float64(idle.stacks))/1024/max(1, float64(busy.goroutines-idle.goroutines)))
}

// writeInflightProfile writes the heap profile and the goroutines
// grouped by stack to prefix.heap and prefix.goroutines, and the heap
// dump -inflight-heapdump asks for (turns: the turns in flight).
func writeInflightProfile(prefix string, turns int) error {
	if err := writeInflightHeapDump(turns); err != nil {
		return err
	}
	if prefix == "" {
		return nil
	}
	if err := writeHeapProfile(prefix + ".heap"); err != nil {
		return err
	}
	f, err := os.Create(prefix + ".goroutines")
	if err != nil {
		return fmt.Errorf("goroutine profile: %w", err)
	}
	if err := pprof.Lookup("goroutine").WriteTo(f, 1); err != nil {
		f.Close()
		return fmt.Errorf("goroutine profile: %w", err)
	}
	return f.Close()
}

var (
	inflightHTTP   = flag.Bool("inflight-http", false, "inflight: the model is the OpenAI-compatible mock over HTTP in a child process (its memory not counted), not the scripted model in the worker: a turn in flight then also holds its HTTP connection")
	inflightStream = flag.Bool("inflight-stream", false, "inflight: with -inflight-http, the mock model sends its first event at once and the rest after -inflight-model (a model streaming slowly), instead of waiting that long before its first byte")
	mockDelay      = flag.Duration("mock-delay", 0, "the mock model's child process (-gateway-mock): its first-byte delay (internal)")
	mockStall      = flag.Duration("mock-stall", 0, "the mock model's child process (-gateway-mock): the time between its first event and the rest (internal)")
)

// inflightModelKind names the inflight scenario's model.
func inflightModelKind() string {
	if *inflightHTTP && *inflightStream {
		return "OpenAI-compatible HTTP (child process; its first event at once, the rest after that)"
	}
	if *inflightHTTP {
		return "OpenAI-compatible HTTP (child process)"
	}
	return "scripted (in process)"
}

// inflightHTTPModel points cfg at the mock model in a child process that
// answers after d, when -inflight-http asks for it; stop ends the child.
func inflightHTTPModel(ctx context.Context, cfg *fleet.Config, d time.Duration) (stop func(), err error) {
	if !*inflightHTTP {
		return func() {}, nil
	}
	exe, err := os.Executable()
	if err != nil {
		return nil, fmt.Errorf("inflight: %w", err)
	}
	wait := "-mock-delay"
	if *inflightStream {
		wait = "-mock-stall"
	}
	cmd := exec.CommandContext(ctx, exe, "-gateway-mock", wait, d.String())
	cmd.Stderr = os.Stderr
	toMock, err := cmd.StdinPipe()
	if err != nil {
		return nil, fmt.Errorf("inflight: %w", err)
	}
	fromMock, err := cmd.StdoutPipe()
	if err != nil {
		return nil, fmt.Errorf("inflight: %w", err)
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("inflight: start the mock model: %w", err)
	}
	stop = func() { _ = toMock.Close(); _ = cmd.Wait() }
	var url string
	if err := gwReceive(bufio.NewScanner(fromMock), &url); err != nil {
		stop()
		return nil, fmt.Errorf("inflight: the mock model's URL: %w", err)
	}
	cfg.Scripted, cfg.Scripts, cfg.DefaultModel, cfg.OpenAICompatible = false, nil, "", url
	return stop, nil
}
