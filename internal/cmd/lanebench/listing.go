package main

import (
	"context"
	"encoding/base64"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"

	"github.com/lanefleet/lanefleet"
	"github.com/lanefleet/lanefleet/admin"
	"github.com/lanefleet/lanefleet/events"
	"github.com/lanefleet/lanefleet/gateway"
	"github.com/lanefleet/lanefleet/kvstore"
	"github.com/lanefleet/lanefleet/lanes"
	"github.com/lanefleet/lanefleet/sessionindex"
)

// listingBench measures the sessions listing at scale: it writes the
// session index's entries of -listing-sessions sessions straight into
// its stream, as workers write them at a commit (the build's time, the
// store's bytes on disk and the process's heap with the server in it),
// makes the newest sessions look like a live fleet's (listingBusy), and
// times pages of the listing
// through the admin code in process, the admin service over NATS and the
// gateway's GET /api/sessions, next to the listing that reads every
// session's subjects (no index) at -listing-baseline sessions, the two
// interleaved in the same run.
func listingBench(o options) error {
	s, stop, err := startServer(o)
	if err != nil {
		return err
	}
	defer stop()
	nc, js, err := connect(s.ClientURL())
	if err != nil {
		return err
	}
	defer nc.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Minute)
	defer cancel()
	streams, err := lanes.EnsureStreams(ctx, js, lanes.StreamConfig{})
	if err != nil {
		return err
	}
	lns, err := kvstore.Open(ctx, js, kvstore.Config{})
	if err != nil {
		return err
	}
	runs, err := kvstore.OpenRuns(ctx, js, kvstore.RunsConfig{})
	if err != nil {
		return err
	}
	x, _, err := sessionindex.Ensure(ctx, js, sessionindex.Config{MaxBytes: -1})
	if err != nil {
		return err
	}
	defer x.Close()
	nop := zerolog.Nop()
	oldCfg := admin.Config{JS: js, Inbound: streams.Inbound, Events: streams.Events, Dead: streams.Dead, Runs: runs, Lanes: lns, Logger: nop}
	newCfg := oldCfg
	newCfg.Index = x
	svc, err := admin.Serve(nc, newCfg)
	if err != nil {
		return err
	}
	defer func() { _ = svc.Stop() }()
	cl, err := lanefleet.New(nc)
	if err != nil {
		return err
	}
	ln, err := gateway.Listen(gateway.Options{Addr: "127.0.0.1:0"}, gateway.Config{Client: cl, Logger: &nop})
	if err != nil {
		return err
	}
	gctx, gcancel := context.WithCancel(ctx)
	gdone := make(chan struct{})
	go func() { defer close(gdone); _ = ln.Serve(gctx) }()
	defer func() { gcancel(); <-gdone }()

	if o.listingTurnRounds > 0 {
		if err := touchOverhead(o); err != nil {
			return fmt.Errorf("turn overhead: %w", err)
		}
	}
	if o.listingSessions == 0 {
		return nil
	}
	fmt.Printf("lanebench listing: %d sessions (baseline at %d), GOMAXPROCS %d, sync %v\n", o.listingSessions, o.listingBaseline, runtime.GOMAXPROCS(0), o.sync)
	key := func(i int) string { return "t" + strconv.Itoa(i%10) + ":session-" + strconv.Itoa(i) }
	heap0 := liveHeap()
	// The baseline's sessions: one stored run each (what the listing
	// without an index reads: AGENT_EV's subjects), and their entries.
	t0 := time.Now()
	for i := range o.listingBaseline {
		tok, _ := events.KeyToken(key(i))
		if _, err := js.PublishAsync(events.EventPrefix+tok+"."+strconv.Itoa(i+1), []byte("x"), jetstream.WithStallWait(time.Minute)); err != nil {
			return err
		}
	}
	<-js.PublishAsyncComplete()
	fmt.Printf("  %d sessions' run events written in %.1f s\n", o.listingBaseline, time.Since(t0).Seconds())
	build := func(from, to int) (time.Duration, error) {
		t0 := time.Now()
		for i := from; i < to; i++ {
			subj, _ := sessionindex.Subject(key(i))
			if _, err := js.PublishAsync(subj, listingEntry(i), jetstream.WithStallWait(time.Minute)); err != nil {
				return 0, err
			}
		}
		select {
		case <-js.PublishAsyncComplete():
		case <-ctx.Done():
			return 0, ctx.Err()
		}
		return time.Since(t0), nil
	}
	d, err := build(0, o.listingBaseline)
	if err != nil {
		return err
	}
	fmt.Printf("  index entries of %d sessions written in %.1f s\n", o.listingBaseline, d.Seconds())

	first := admin.SessionsRequest{Limit: 100, State: true}
	inProcess := func(cfg admin.Config, q admin.SessionsRequest) func() error {
		return func() error { _, err := admin.ListSessions(ctx, cfg, q); return err }
	}
	fmt.Printf("\n  at %d sessions, interleaved (first page of 100, with state)\n", o.listingBaseline)
	oldD, newD := []time.Duration{}, []time.Duration{}
	for range o.listingBaselineProbes {
		if err := probe(&oldD, inProcess(oldCfg, first)); err != nil {
			return err
		}
		for range 5 {
			if err := probe(&newD, inProcess(newCfg, first)); err != nil {
				return err
			}
		}
	}
	printTimes("reading every subject (no index)", oldD)
	printTimes("from the index", newD)

	// Grow the index to the full size.
	d, err = build(o.listingBaseline, o.listingSessions)
	if err != nil {
		return err
	}
	info, err := js.Stream(ctx, sessionindex.Stream)
	if err != nil {
		return err
	}
	st, _ := info.Info(ctx)
	runtime.GC()
	fmt.Printf("\n  index of %d sessions: %d more entries written in %.1f s (%.0f entries/s)\n", st.State.Msgs, o.listingSessions-o.listingBaseline, d.Seconds(),
		float64(o.listingSessions-o.listingBaseline)/d.Seconds())
	fmt.Printf("  stream %s: %.1f MB stored (%.0f B/session), %.1f MB on disk; live heap with the server in process %.1f MB (%.0f B/session, run events of the baseline's sessions included)\n",
		sessionindex.Stream, mb(int64(st.State.Bytes)), float64(st.State.Bytes)/float64(st.State.Msgs), mb(dirSize(s.JetStreamConfig().StoreDir)),
		mb(int64(liveHeap()-heap0)), float64(liveHeap()-heap0)/float64(st.State.Msgs))

	if err := listingBusy(ctx, js, runs, lns, o.listingSessions, key); err != nil {
		return err
	}

	// A later page: the cursor after ten pages.
	q := first
	for range 10 {
		rep, err := admin.ListSessions(ctx, newCfg, q)
		if err != nil {
			return err
		}
		q.After = rep.Next
	}
	later := q
	laterSeq, _ := strconv.ParseUint(q.After[1:], 10, 64)
	tenant := admin.SessionsRequest{Limit: 100, State: true, Scope: &admin.Scope{Prefixes: []string{"t3:"}}}
	query := admin.SessionsRequest{Limit: 100, State: true, Query: "session-99999"}
	httpGet := func(path string) func() error {
		return func() error {
			res, err := http.Get(ln.URL() + path)
			if err != nil {
				return err
			}
			defer res.Body.Close()
			_, err = io.Copy(io.Discard, res.Body)
			if res.StatusCode != http.StatusOK {
				return fmt.Errorf("GET %s: %s", path, res.Status)
			}
			return err
		}
	}
	overNATS := func(q admin.SessionsRequest) func() error {
		return func() error { _, err := cl.SessionsPage(ctx, q); return err }
	}
	fmt.Printf("\n  at %d sessions, %d requests each (p50/p99)\n", st.State.Msgs, o.listingProbes)
	for _, c := range []struct {
		name string
		f    func() error
	}{
		{"the index's read alone (sessionindex.Newest, 100)", func() error {
			_, err := x.Newest(ctx, sessionindex.Query{Limit: 100})
			return err
		}},
		{"the index's read alone, 11th page", func() error {
			_, err := x.Newest(ctx, sessionindex.Query{Limit: 100, Before: laterSeq})
			return err
		}},
		{"the index's read alone, one tenant (t3:)", func() error {
			f, _ := sessionindex.Filter("t3:")
			_, err := x.Newest(ctx, sessionindex.Query{Limit: 100, Filter: f})
			return err
		}},
		{"first page, admin code in process", inProcess(newCfg, first)},
		{"first page, admin service over NATS", overNATS(first)},
		{"first page, gateway GET /api/sessions", httpGet("/api/sessions?limit=100")},
		{"11th page (cursor), admin code in process", inProcess(newCfg, later)},
		{"11th page (cursor), admin service", overNATS(later)},
		{"11th page (cursor), gateway", httpGet("/api/sessions?limit=100&cursor=" + base64.RawURLEncoding.EncodeToString([]byte(later.After)))},
		{"first page of one tenant (t3:), admin service", overNATS(tenant)},
		{"query (substring, scans ≤20,000), admin service", overNATS(query)},
		{"first page without state, admin service", overNATS(admin.SessionsRequest{Limit: 100})},
	} {
		var ds []time.Duration
		for range o.listingProbes {
			if err := probe(&ds, c.f); err != nil {
				return fmt.Errorf("%s: %w", c.name, err)
			}
		}
		printTimes(c.name, ds)
	}
	return nil
}

func probe(ds *[]time.Duration, f func() error) error {
	t0 := time.Now()
	if err := f(); err != nil {
		return err
	}
	*ds = append(*ds, time.Since(t0))
	return nil
}

func printTimes(name string, ds []time.Duration) {
	fmt.Printf("    %-52s p50 %8.2f ms  p99 %8.2f ms  (n=%d)\n", name, ms(ds, 50), ms(ds, 99), len(ds))
}

// liveHeap is the heap in use after a collection.
func liveHeap() uint64 {
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapAlloc
}

// dirSize is the bytes of the files under dir.
func dirSize(dir string) int64 {
	var n int64
	_ = filepath.Walk(dir, func(_ string, fi os.FileInfo, err error) error {
		if err == nil && !fi.IsDir() {
			n += fi.Size()
		}
		return nil
	})
	return n
}

// touchSessions is how many sessions the turn overhead's turns cycle
// through.
const touchSessions = 50

// touchOverhead times turns of a lanes worker with an instant handler,
// one session after another (publish → final event, as a core subscriber
// sees it), with the session index written (Config.Index) and without,
// in alternating rounds on one server, sync as the run's -sync.
func touchOverhead(o options) error {
	s, stop, err := startServer(o)
	if err != nil {
		return err
	}
	defer stop()
	nc, js, err := connect(s.ClientURL())
	if err != nil {
		return err
	}
	defer nc.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
	defer cancel()
	streams, err := lanes.EnsureStreams(ctx, js, lanes.StreamConfig{})
	if err != nil {
		return err
	}
	kv, err := kvstore.Open(ctx, js, kvstore.Config{})
	if err != nil {
		return err
	}
	x, _, err := sessionindex.Ensure(ctx, js, sessionindex.Config{})
	if err != nil {
		return err
	}
	defer x.Close()
	finals := make(chan string, 16)
	sub, err := nc.Subscribe(events.EventPrefix+">", func(m *nats.Msg) {
		if m.Header.Get(events.HeaderStream) == events.StreamFinal {
			finals <- m.Subject
		}
	})
	if err != nil {
		return err
	}
	defer sub.Unsubscribe()
	var with, without []time.Duration
	n := 0
	for round := range 2 * o.listingTurnRounds {
		indexed := round%2 == 1
		cfg := lanes.Config{ID: "touch", Logger: zerolog.Nop()}
		if indexed {
			cfg.Index = benchIndex{x}
		}
		w, err := lanes.NewWorker(js, streams, kv, lanes.HandlerFunc(func(context.Context, *lanes.Turn) (*lanes.Outcome, error) {
			return &lanes.Outcome{Result: &events.Result{Payloads: []events.Payload{{Text: "ok"}}}}, nil
		}), cfg)
		if err != nil {
			return err
		}
		wctx, wcancel := context.WithCancel(ctx)
		wdone := make(chan struct{})
		go func() { defer close(wdone); _ = w.Run(wctx) }()
		for range o.listingTurns {
			n++
			tok := "touch" + strconv.Itoa(n%touchSessions) // most turns are not their session's first
			msg := nats.NewMsg(events.InboundPrefix + tok)
			msg.Data = payload(n)
			msg.Header.Set(events.HeaderContentType, events.ContentMsgpack)
			t0 := time.Now()
			if _, err := js.PublishMsg(ctx, msg); err != nil {
				wcancel()
				return err
			}
			select {
			case <-finals:
			case <-time.After(time.Minute):
				wcancel()
				return fmt.Errorf("no final event for %s", tok)
			}
			if indexed {
				with = append(with, time.Since(t0))
			} else {
				without = append(without, time.Since(t0))
			}
		}
		wcancel()
		<-wdone
	}
	fmt.Printf("\n  turn overhead, one turn after another over %d sessions, instant handler, lanes worker, %d rounds of %d turns alternating\n", touchSessions, o.listingTurnRounds, o.listingTurns)
	printTimes("without the index", without)
	printTimes("with the index (written at commit; Queued at delivery)", with)
	fmt.Printf("    ratio p50 %.3f, p99 %.3f; failed index writes %d\n", ms(with, 50)/ms(without, 50), ms(with, 99)/ms(without, 99), x.Failures())
	return nil
}

// benchIndex is the fleet's lanes.Index adapter, as internal/fleet wires it.
type benchIndex struct{ x *sessionindex.Index }

func (b benchIndex) Touch(a lanes.Activity) {
	b.x.Touch(a.Key, sessionindex.Summarize(a.Run, a.Committed, a.Through, a.State))
}

func (b benchIndex) Queued(key, run string) { b.x.Queued(key, run) }

func (b benchIndex) Forgotten(ctx context.Context, key string) { b.x.Forgotten(ctx, key) }
