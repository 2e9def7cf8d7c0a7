package main

import (
	"bufio"
	"cmp"
	"encoding/binary"
	"flag"
	"fmt"
	"io"
	"os"
	"runtime"
	"runtime/debug"
	"slices"
	"strings"
)

var inflightHeapDump = flag.String("inflight-heapdump", "", "inflight: write a runtime heap dump (debug.WriteHeapDump) to this file while every turn is in flight, every allocation sampled (the run's RSS and runtime metadata are then not comparable with a run without it), and print where the heap spans' slack is: the free slots by size class, and by the allocation site of the live objects beside them")

// writeInflightHeapDump writes the heap dump -inflight-heapdump asks for
// and prints what it shows of the spans' slack, per turn of turns.
func writeInflightHeapDump(turns int) error {
	if *inflightHeapDump == "" {
		return nil
	}
	f, err := os.Create(*inflightHeapDump)
	if err != nil {
		return fmt.Errorf("heap dump: %w", err)
	}
	runtime.GC()
	debug.WriteHeapDump(f.Fd())
	if err := f.Close(); err != nil {
		return fmt.Errorf("heap dump: %w", err)
	}
	return printSlack(*inflightHeapDump, float64(max(turns, 1)))
}

// Go's size classes (internal/runtime/gc/sizeclasses.go): each class's
// object size and its span's pages.
var (
	classSize  = []uint64{0, 8, 16, 24, 32, 48, 64, 80, 96, 112, 128, 144, 160, 176, 192, 208, 224, 240, 256, 288, 320, 352, 384, 416, 448, 480, 512, 576, 640, 704, 768, 896, 1024, 1152, 1280, 1408, 1536, 1792, 2048, 2304, 2688, 3072, 3200, 3456, 4096, 4864, 5376, 6144, 6528, 6784, 6912, 8192, 9472, 9728, 10240, 10880, 12288, 13568, 14336, 16384, 18432, 19072, 20480, 21760, 24576, 27264, 28672, 32768}
	classPages = []uint64{0, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 2, 1, 2, 1, 2, 1, 3, 2, 3, 1, 3, 2, 3, 4, 5, 6, 1, 7, 6, 5, 4, 3, 5, 7, 2, 9, 7, 5, 8, 3, 10, 7, 4}
)

// dumpReader reads a heap dump's records (the go1.7 format of
// runtime/heapdump.go).
type dumpReader struct{ *bufio.Reader }

func (r dumpReader) int() uint64 {
	v, err := binary.ReadUvarint(r)
	if err != nil {
		panic(err)
	}
	return v
}

func (r dumpReader) ints(n int) {
	for range n {
		r.int()
	}
}

func (r dumpReader) str() string {
	b := make([]byte, r.int())
	if _, err := io.ReadFull(r, b); err != nil {
		panic(err)
	}
	return string(b)
}

func (r dumpReader) skip() {
	if _, err := r.Discard(int(r.int())); err != nil {
		panic(err)
	}
}

func (r dumpReader) fields() {
	for r.int() != 0 {
		r.int()
	}
}

// dumpObject is a heap object: its address and its size class's size.
type dumpObject struct{ addr, size uint64 }

// readDump returns a heap dump's objects, and each sampled object's
// allocation site by address.
func readDump(path string) (objs []dumpObject, site map[uint64]string, err error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, nil, fmt.Errorf("heap dump: %w", err)
	}
	defer f.Close()
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("heap dump %s: %v", path, p)
		}
	}()
	r := dumpReader{bufio.NewReaderSize(f, 1<<20)}
	if _, err := r.Discard(len("go1.7 heap dump\n")); err != nil {
		return nil, nil, fmt.Errorf("heap dump: %w", err)
	}
	bucket, sample := map[uint64]string{}, map[uint64]uint64{}
	for {
		switch tag := r.int(); tag {
		case 0: // end
			site = map[uint64]string{}
			for a, b := range sample {
				site[a] = bucket[b]
			}
			return objs, site, nil
		case 1: // object
			a := r.int()
			n := r.int()
			if _, err := r.Discard(int(n)); err != nil {
				return nil, nil, fmt.Errorf("heap dump: %w", err)
			}
			r.fields()
			objs = append(objs, dumpObject{a, n})
		case 2: // other root
			r.str()
			r.int()
		case 3: // type
			r.ints(2)
			r.str()
			r.int()
		case 4: // goroutine
			r.ints(8)
			r.str()
			r.ints(4)
		case 5: // stack frame
			r.ints(3)
			r.skip()
			r.ints(3)
			r.str()
			r.fields()
		case 6: // parameters
			r.ints(4)
			r.str()
			r.str()
			r.int()
		case 7, 11: // finalizers
			r.ints(5)
		case 8: // itab
			r.ints(2)
		case 9: // OS thread
			r.ints(3)
		case 10: // MemStats
			r.ints(281)
		case 12, 13: // data, bss
			r.int()
			r.skip()
			r.fields()
		case 14: // defer
			r.ints(7)
		case 15: // panic
			r.ints(6)
		case 16: // memory profile bucket: its stack
			b := r.int()
			r.int()
			var frames []string
			for range r.int() {
				frames = append(frames, r.str())
				r.str()
				r.int()
			}
			r.ints(2)
			bucket[b] = dumpSite(frames)
		case 17: // an object's bucket
			a := r.int()
			sample[a] = r.int()
		default:
			return nil, nil, fmt.Errorf("heap dump %s: unknown record %d", path, tag)
		}
	}
}

// dumpSite names an allocation by its stack: the first of the project's
// frames, else the first outside the runtime.
func dumpSite(frames []string) string {
	const own = "github.com/lanefleet/lanefleet/"
	for _, f := range frames {
		if strings.HasPrefix(f, own) {
			return strings.TrimPrefix(f, own)
		}
	}
	for _, f := range frames {
		if !strings.HasPrefix(f, "runtime.") && !strings.HasPrefix(f, "internal/") {
			return f
		}
	}
	return "runtime"
}

// printSlack prints the free slots of the spans that hold a heap dump's
// small objects, by size class and by the site of the live objects that
// pin them (each object charged an equal share of its span's free slots),
// per unit of per.
func printSlack(path string, per float64) error {
	objs, site, err := readDump(path)
	if err != nil {
		return err
	}
	class := map[uint64]int{}
	for i, s := range classSize {
		class[s] = i
	}
	type span struct {
		class int
		base  uint64
	}
	spans := map[span][]dumpObject{}
	slices.SortFunc(objs, func(a, b dumpObject) int { return cmp.Compare(a.addr, b.addr) })
	last := map[int]uint64{} // a multi-page class's span base, by address order
	for _, o := range objs {
		c, ok := class[o.size]
		if !ok || c == 0 {
			continue // a large object: a span of its own
		}
		base := o.addr &^ 8191
		if bytes := classPages[c] * 8192; classPages[c] > 1 {
			if b, ok := last[c]; ok && o.addr < b+bytes && (o.addr-b)%o.size == 0 {
				base = b
			} else {
				last[c] = base
			}
		}
		spans[span{c, base}] = append(spans[span{c, base}], o)
	}
	freeBy, liveBy := map[int]float64{}, map[int]float64{}
	pin, held := map[string]float64{}, map[string]float64{}
	var free, live float64
	for s, in := range spans {
		size := classSize[s.class]
		f := float64((classPages[s.class]*8192/size - uint64(len(in))) * size)
		free += f
		freeBy[s.class] += f
		for _, o := range in {
			name := "(allocated before sampling)"
			if n, ok := site[o.addr]; ok {
				name = n
			} else if n, ok := site[o.addr+8]; ok { // after a malloc header
				name = n
			}
			pin[name] += f / float64(len(in))
			held[name] += float64(size)
			live += float64(size)
			liveBy[s.class] += float64(size)
		}
	}
	kb := func(v float64) float64 { return v / 1024 / per }
	fmt.Printf("\n  heap dump %s: small objects %.1f KB, free slots in their spans %.1f KB (per turn in flight)\n", path, kb(live), kb(free))
	var cs []int
	for c := range freeBy {
		cs = append(cs, c)
	}
	slices.SortFunc(cs, func(a, b int) int { return cmp.Compare(freeBy[b], freeBy[a]) })
	fmt.Printf("    %-10s %8s %8s %6s\n", "size class", "free KB", "live KB", "used")
	for _, c := range cs[:min(12, len(cs))] {
		fmt.Printf("    %8d B %8.2f %8.2f %5.0f%%\n", classSize[c], kb(freeBy[c]), kb(liveBy[c]), 100*liveBy[c]/(liveBy[c]+freeBy[c]))
	}
	var names []string
	for n := range pin {
		names = append(names, n)
	}
	slices.SortFunc(names, func(a, b string) int { return cmp.Compare(pin[b], pin[a]) })
	fmt.Printf("    %-8s %8s  %s\n", "free B", "live B", "site of the live objects in those spans")
	for _, n := range names[:min(30, len(names))] {
		fmt.Printf("    %8.0f %8.0f  %s\n", pin[n]/per, held[n]/per, n)
	}
	return nil
}
