package metrics

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"runtime"
	"runtime/debug"
	rm "runtime/metrics"
	"strconv"
	"strings"
	"time"
)

// The Go runtime's families (go_*) and the process's (process_*, Linux),
// under the names, help texts and types Prometheus's Go client gives
// them, so dashboards and alerts written for that client read them.

// runtimeSamples are the runtime/metrics the go_* families read.
var runtimeSamples = []string{
	"/gc/gogc:percent", "/gc/gomemlimit:bytes", "/sched/gomaxprocs:threads",
	"/gc/heap/allocs:bytes", "/gc/heap/allocs:objects", "/gc/heap/frees:objects", "/gc/heap/tiny/allocs:objects",
	"/gc/heap/goal:bytes", "/gc/heap/objects:objects",
	"/memory/classes/heap/objects:bytes", "/memory/classes/heap/unused:bytes", "/memory/classes/heap/released:bytes",
	"/memory/classes/heap/free:bytes", "/memory/classes/heap/stacks:bytes", "/memory/classes/os-stacks:bytes",
	"/memory/classes/metadata/mspan/inuse:bytes", "/memory/classes/metadata/mspan/free:bytes",
	"/memory/classes/metadata/mcache/inuse:bytes", "/memory/classes/metadata/mcache/free:bytes",
	"/memory/classes/profiling/buckets:bytes", "/memory/classes/metadata/other:bytes", "/memory/classes/other:bytes",
	"/memory/classes/total:bytes",
}

// goFamily is one go_* family: its value from the runtime's samples.
type goFamily struct {
	name, help string
	typ        Type
	value      func(s func(name string) float64) float64
}

func sum(names ...string) func(func(string) float64) float64 {
	return func(s func(string) float64) float64 {
		var v float64
		for _, n := range names {
			v += s(n)
		}
		return v
	}
}

var goFamilies = []goFamily{
	{"go_gc_gogc_percent", "Heap size target percentage configured by the user, otherwise 100. This value is set by the GOGC environment variable, and the runtime/debug.SetGCPercent function. Sourced from /gc/gogc:percent.", TypeGauge, sum("/gc/gogc:percent")},
	{"go_gc_gomemlimit_bytes", "Go runtime memory limit configured by the user, otherwise math.MaxInt64. This value is set by the GOMEMLIMIT environment variable, and the runtime/debug.SetMemoryLimit function. Sourced from /gc/gomemlimit:bytes.", TypeGauge, sum("/gc/gomemlimit:bytes")},
	{"go_goroutines", "Number of goroutines that currently exist.", TypeGauge, func(func(string) float64) float64 { return float64(runtime.NumGoroutine()) }},
	{"go_memstats_alloc_bytes", "Number of bytes allocated in heap and currently in use. Equals to /memory/classes/heap/objects:bytes.", TypeGauge, sum("/memory/classes/heap/objects:bytes")},
	{"go_memstats_alloc_bytes_total", "Total number of bytes allocated in heap until now, even if released already. Equals to /gc/heap/allocs:bytes.", TypeCounter, sum("/gc/heap/allocs:bytes")},
	{"go_memstats_buck_hash_sys_bytes", "Number of bytes used by the profiling bucket hash table. Equals to /memory/classes/profiling/buckets:bytes.", TypeGauge, sum("/memory/classes/profiling/buckets:bytes")},
	{"go_memstats_frees_total", "Total number of heap objects frees. Equals to /gc/heap/frees:objects + /gc/heap/tiny/allocs:objects.", TypeCounter, sum("/gc/heap/frees:objects", "/gc/heap/tiny/allocs:objects")},
	{"go_memstats_gc_sys_bytes", "Number of bytes used for garbage collection system metadata. Equals to /memory/classes/metadata/other:bytes.", TypeGauge, sum("/memory/classes/metadata/other:bytes")},
	{"go_memstats_heap_alloc_bytes", "Number of heap bytes allocated and currently in use, same as go_memstats_alloc_bytes. Equals to /memory/classes/heap/objects:bytes.", TypeGauge, sum("/memory/classes/heap/objects:bytes")},
	{"go_memstats_heap_idle_bytes", "Number of heap bytes waiting to be used. Equals to /memory/classes/heap/released:bytes + /memory/classes/heap/free:bytes.", TypeGauge, sum("/memory/classes/heap/released:bytes", "/memory/classes/heap/free:bytes")},
	{"go_memstats_heap_inuse_bytes", "Number of heap bytes that are in use. Equals to /memory/classes/heap/objects:bytes + /memory/classes/heap/unused:bytes", TypeGauge, sum("/memory/classes/heap/objects:bytes", "/memory/classes/heap/unused:bytes")},
	{"go_memstats_heap_objects", "Number of currently allocated objects. Equals to /gc/heap/objects:objects.", TypeGauge, sum("/gc/heap/objects:objects")},
	{"go_memstats_heap_released_bytes", "Number of heap bytes released to OS. Equals to /memory/classes/heap/released:bytes.", TypeGauge, sum("/memory/classes/heap/released:bytes")},
	{"go_memstats_heap_sys_bytes", "Number of heap bytes obtained from system. Equals to /memory/classes/heap/objects:bytes + /memory/classes/heap/unused:bytes + /memory/classes/heap/released:bytes + /memory/classes/heap/free:bytes.", TypeGauge, sum("/memory/classes/heap/objects:bytes", "/memory/classes/heap/unused:bytes", "/memory/classes/heap/released:bytes", "/memory/classes/heap/free:bytes")},
	{"go_memstats_mallocs_total", "Total number of heap objects allocated, both live and gc-ed. Semantically a counter version for go_memstats_heap_objects gauge. Equals to /gc/heap/allocs:objects + /gc/heap/tiny/allocs:objects.", TypeCounter, sum("/gc/heap/allocs:objects", "/gc/heap/tiny/allocs:objects")},
	{"go_memstats_mcache_inuse_bytes", "Number of bytes in use by mcache structures. Equals to /memory/classes/metadata/mcache/inuse:bytes.", TypeGauge, sum("/memory/classes/metadata/mcache/inuse:bytes")},
	{"go_memstats_mcache_sys_bytes", "Number of bytes used for mcache structures obtained from system. Equals to /memory/classes/metadata/mcache/inuse:bytes + /memory/classes/metadata/mcache/free:bytes.", TypeGauge, sum("/memory/classes/metadata/mcache/inuse:bytes", "/memory/classes/metadata/mcache/free:bytes")},
	{"go_memstats_mspan_inuse_bytes", "Number of bytes in use by mspan structures. Equals to /memory/classes/metadata/mspan/inuse:bytes.", TypeGauge, sum("/memory/classes/metadata/mspan/inuse:bytes")},
	{"go_memstats_mspan_sys_bytes", "Number of bytes used for mspan structures obtained from system. Equals to /memory/classes/metadata/mspan/inuse:bytes + /memory/classes/metadata/mspan/free:bytes.", TypeGauge, sum("/memory/classes/metadata/mspan/inuse:bytes", "/memory/classes/metadata/mspan/free:bytes")},
	{"go_memstats_next_gc_bytes", "Number of heap bytes when next garbage collection will take place. Equals to /gc/heap/goal:bytes.", TypeGauge, sum("/gc/heap/goal:bytes")},
	{"go_memstats_other_sys_bytes", "Number of bytes used for other system allocations. Equals to /memory/classes/other:bytes.", TypeGauge, sum("/memory/classes/other:bytes")},
	{"go_memstats_stack_inuse_bytes", "Number of bytes obtained from system for stack allocator in non-CGO environments. Equals to /memory/classes/heap/stacks:bytes.", TypeGauge, sum("/memory/classes/heap/stacks:bytes")},
	{"go_memstats_stack_sys_bytes", "Number of bytes obtained from system for stack allocator. Equals to /memory/classes/heap/stacks:bytes + /memory/classes/os-stacks:bytes.", TypeGauge, sum("/memory/classes/heap/stacks:bytes", "/memory/classes/os-stacks:bytes")},
	{"go_memstats_sys_bytes", "Number of bytes obtained from system. Equals to /memory/classes/total:byte.", TypeGauge, sum("/memory/classes/total:bytes")},
	{"go_sched_gomaxprocs_threads", "The current runtime.GOMAXPROCS setting, or the number of operating system threads that can execute user-level Go code simultaneously. Sourced from /sched/gomaxprocs:threads.", TypeGauge, sum("/sched/gomaxprocs:threads")},
	{"go_threads", "Number of OS threads created.", TypeGauge, func(func(string) float64) float64 {
		n, _ := runtime.ThreadCreateProfile(nil)
		return float64(n)
	}},
}

const (
	goGCDuration     = "go_gc_duration_seconds"
	goGCDurationHelp = "A summary of the wall-time pause (stop-the-world) duration in garbage collection cycles."
	goInfo           = "go_info"
	goInfoHelp       = "Information about the Go environment."
	goLastGC         = "go_memstats_last_gc_time_seconds"
	goLastGCHelp     = "Number of seconds since 1970 of last garbage collection."
)

// RegisterRuntime registers the Go runtime's families and, where /proc
// is readable, the process's.
func (r *Registry) RegisterRuntime() {
	names := []string{goGCDuration, goInfo, goLastGC}
	for _, f := range goFamilies {
		names = append(names, f.name)
	}
	r.mustRegister(collectFunc(collectGo), names...)
	if _, err := os.Stat("/proc/self/stat"); err == nil {
		names = names[:0]
		for _, f := range processFamilies {
			names = append(names, f.name)
		}
		r.mustRegister(collectFunc(collectProcess), names...)
	}
}

func collectGo(add func(Family)) error {
	samples := make([]rm.Sample, len(runtimeSamples))
	for i, n := range runtimeSamples {
		samples[i].Name = n
	}
	rm.Read(samples)
	byName := make(map[string]float64, len(samples))
	for _, s := range samples {
		switch s.Value.Kind() {
		case rm.KindUint64:
			byName[s.Name] = float64(s.Value.Uint64())
		case rm.KindFloat64:
			byName[s.Name] = s.Value.Float64()
		}
	}
	get := func(n string) float64 { return byName[n] }
	for _, f := range goFamilies {
		add(Family{Name: f.name, Help: f.help, Type: f.typ, Series: []Series{{Value: f.value(get)}}})
	}
	var st debug.GCStats
	st.PauseQuantiles = make([]time.Duration, 5)
	debug.ReadGCStats(&st)
	d := &Distribution{Bounds: []float64{0, 0.25, 0.5, 0.75, 1}, Values: make([]float64, 5), Sum: st.PauseTotal.Seconds(), Count: uint64(st.NumGC)}
	for i, q := range st.PauseQuantiles {
		d.Values[i] = q.Seconds()
	}
	add(Family{Name: goGCDuration, Help: goGCDurationHelp, Type: TypeSummary, Series: []Series{{Hist: d}}})
	add(Family{Name: goLastGC, Help: goLastGCHelp, Type: TypeGauge, Series: []Series{{Value: float64(st.LastGC.UnixNano()) / 1e9}}})
	add(Family{Name: goInfo, Help: goInfoHelp, Type: TypeGauge, LabelNames: []string{"version"}, Series: []Series{{Labels: []string{runtime.Version()}, Value: 1}}})
	return nil
}

// processFamilies are the process_* families, read from /proc/self.
var processFamilies = []struct {
	name, help string
	typ        Type
}{
	{"process_cpu_seconds_total", "Total user and system CPU time spent in seconds.", TypeCounter},
	{"process_max_fds", "Maximum number of open file descriptors.", TypeGauge},
	{"process_network_receive_bytes_total", "Number of bytes received by the process over the network.", TypeCounter},
	{"process_network_transmit_bytes_total", "Number of bytes sent by the process over the network.", TypeCounter},
	{"process_open_fds", "Number of open file descriptors.", TypeGauge},
	{"process_resident_memory_bytes", "Resident memory size in bytes.", TypeGauge},
	{"process_start_time_seconds", "Start time of the process since unix epoch in seconds.", TypeGauge},
	{"process_virtual_memory_bytes", "Virtual memory size in bytes.", TypeGauge},
	{"process_virtual_memory_max_bytes", "Maximum amount of virtual memory available in bytes.", TypeGauge},
}

// userHZ is the unit of /proc's CPU times (USER_HZ, 100 on Linux).
const userHZ = 100

// maxProcFile bounds what a /proc file read takes.
const maxProcFile = 1 << 20

func collectProcess(add func(Family)) error {
	vals := map[string]float64{}
	var errs []error
	if err := procStat(vals); err != nil {
		errs = append(errs, err)
	}
	if ents, err := os.ReadDir("/proc/self/fd"); err == nil {
		vals["process_open_fds"] = float64(len(ents))
	} else {
		errs = append(errs, fmt.Errorf("metrics: open fds: %w", err))
	}
	if err := procLimits(vals); err != nil {
		errs = append(errs, err)
	}
	if err := procNetstat(vals); err != nil {
		errs = append(errs, err)
	}
	for _, f := range processFamilies {
		if v, ok := vals[f.name]; ok {
			add(Family{Name: f.name, Help: f.help, Type: f.typ, Series: []Series{{Value: v}}})
		}
	}
	return errors.Join(errs...)
}

func readProc(path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var buf bytes.Buffer
	_, err = buf.ReadFrom(io.LimitReader(f, maxProcFile))
	return buf.Bytes(), err
}

// procStat reads CPU time, memory and start time from /proc/self/stat.
func procStat(vals map[string]float64) error {
	b, err := readProc("/proc/self/stat")
	if err != nil {
		return fmt.Errorf("metrics: process stat: %w", err)
	}
	// The fields after the command's closing parenthesis, from the state
	// (field 3): utime 14, stime 15, starttime 22, vsize 23, rss 24.
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return errors.New("metrics: process stat: no command field")
	}
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 22 {
		return errors.New("metrics: process stat: short")
	}
	num := func(k int) float64 { n, _ := strconv.ParseUint(f[k-3], 10, 64); return float64(n) }
	vals["process_cpu_seconds_total"] = (num(14) + num(15)) / userHZ
	vals["process_virtual_memory_bytes"] = num(23)
	vals["process_resident_memory_bytes"] = num(24) * float64(os.Getpagesize())
	if boot, err := bootTime(); err == nil {
		vals["process_start_time_seconds"] = boot + num(22)/userHZ
	} else {
		return err
	}
	return nil
}

func bootTime() (float64, error) {
	b, err := readProc("/proc/stat")
	if err != nil {
		return 0, fmt.Errorf("metrics: boot time: %w", err)
	}
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "btime "); ok {
			n, err := strconv.ParseUint(strings.TrimSpace(v), 10, 64)
			return float64(n), err
		}
	}
	return 0, errors.New("metrics: boot time: no btime in /proc/stat")
}

// procLimits reads the soft limits of open files and address space.
func procLimits(vals map[string]float64) error {
	b, err := readProc("/proc/self/limits")
	if err != nil {
		return fmt.Errorf("metrics: process limits: %w", err)
	}
	limit := func(s string) float64 {
		if s == "unlimited" {
			return math.MaxUint64
		}
		n, _ := strconv.ParseUint(s, 10, 64)
		return float64(n)
	}
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		line := sc.Text()
		for prefix, name := range map[string]string{"Max open files": "process_max_fds", "Max address space": "process_virtual_memory_max_bytes"} {
			if rest, ok := strings.CutPrefix(line, prefix); ok {
				if f := strings.Fields(rest); len(f) > 0 {
					vals[name] = limit(f[0])
				}
			}
		}
	}
	return nil
}

// procNetstat reads the bytes in and out of the process's network
// namespace (IpExt InOctets, OutOctets).
func procNetstat(vals map[string]float64) error {
	b, err := readProc("/proc/self/net/netstat")
	if err != nil {
		return fmt.Errorf("metrics: netstat: %w", err)
	}
	var header []string
	sc := bufio.NewScanner(bytes.NewReader(b))
	sc.Buffer(nil, maxProcFile)
	for sc.Scan() {
		rest, ok := strings.CutPrefix(sc.Text(), "IpExt:")
		if !ok {
			continue
		}
		if header == nil {
			header = strings.Fields(rest)
			continue
		}
		for i, v := range strings.Fields(rest) {
			if i >= len(header) {
				break
			}
			n, _ := strconv.ParseFloat(v, 64)
			switch header[i] {
			case "InOctets":
				vals["process_network_receive_bytes_total"] = n
			case "OutOctets":
				vals["process_network_transmit_bytes_total"] = n
			}
		}
		break
	}
	if _, ok := vals["process_network_receive_bytes_total"]; !ok {
		vals["process_network_receive_bytes_total"], vals["process_network_transmit_bytes_total"] = 0, 0
	}
	return nil
}
