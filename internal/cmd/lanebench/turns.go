package main

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"runtime/pprof"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"

	"github.com/lanefleet/lanefleet"
	"github.com/lanefleet/lanefleet/events"
	"github.com/lanefleet/lanefleet/internal/fleet"
	"github.com/lanefleet/lanefleet/kvstore"
	"github.com/lanefleet/lanefleet/lanes"
)

// Flags of -scenario turns (issue 17): real turns through one worker with
// its embedded server, against a local OpenAI-compatible model over real
// HTTP, driven by the Go client.
var (
	turnsSeq       = flag.Int("turns-seq", 200, "turns: turns of the one-session and distinct scenarios (instant model)")
	turnsSeqSlow   = flag.Int("turns-seq-slow", 4, "turns: turns of the one-session and distinct scenarios with a delayed model")
	turnsPerLane   = flag.Int("turns-per-session", 6, "turns: turns per session of the concN scenarios (instant model)")
	turnsPerSlow   = flag.Int("turns-per-session-slow", 2, "turns: turns per session of the concN scenarios with a delayed model")
	turnsDelays    = flag.String("turns-delays", "0,1s", "turns: the model's first-byte delays, comma-separated")
	turnsSyncs     = flag.String("turns-sync", "always,default", "turns: server fsync settings to run, comma-separated (always, default)")
	turnsOnly      = flag.String("turns-only", "one,distinct,conc64,conc256", "turns: scenarios to run, comma-separated (one, distinct, interleaved: a fresh session's turn and one long session's in turn, conc64, conc256, conc1000: 1,000 sessions, needs a worker concurrency of at least 1,000)")
	turnsDetail    = flag.Bool("turns-detail", false, "turns: print each scenario's time before and after the model call, and its writes and messages per turn")
	turnsTrace     = flag.Bool("turns-trace", false, "turns: print every message of one distinct-session turn, in order, and stop")
	turnsSetup     = flag.Int("turns-setup", 0, "turns: the worker's set-up gate width (lanes.Config.SetupConcurrency; 0 = its default, -1 = no gate), to compare widths")
	turnsStagger   = flag.Bool("turns-stagger", false, "turns: start the concN scenarios' sessions spread over one model delay (sessions sending independently, a steady state) instead of all in the same instant (a burst); the rate is then each session's turns over its own time, summed")
	turnsCPUProf   = flag.String("cpuprofile", "", "turns: write a CPU profile of the measured turns (not the set-up) to this file; soak: of round N to <this>.N; sessions: of the restart's server-alone and worker starts to <this>.restart-server and <this>.restart-worker")
	turnsMemProf   = flag.String("memprofile", "", "turns: write the allocations of the whole run (every scenario, set-up included) to this file, as go tool pprof -sample_index=alloc_objects reads them")
	turnsAPI       = flag.String("turns-api", "openai-completions", "turns: the wire API the worker speaks to the mock model (openai-completions, openai-responses, anthropic-messages, google-generative-ai; the direct baseline is always Chat Completions)")
	turnsReplyText = "pong"
)

// anthropicReply and geminiReply are the mock's "pong" in the Anthropic
// Messages and Gemini streams (-turns-api).
var (
	anthropicReply = []byte("event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"usage\":{\"input_tokens\":12,\"output_tokens\":1}}}\n\n" +
		"event: content_block_start\ndata: {\"type\":\"content_block_start\",\"index\":0,\"content_block\":{\"type\":\"text\",\"text\":\"\"}}\n\n" +
		"event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\"" + turnsReplyText + "\"}}\n\n" +
		"event: content_block_stop\ndata: {\"type\":\"content_block_stop\",\"index\":0}\n\n" +
		"event: message_delta\ndata: {\"type\":\"message_delta\",\"delta\":{\"stop_reason\":\"end_turn\"},\"usage\":{\"output_tokens\":1}}\n\n" +
		"event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n")
	geminiReply = []byte(`data: {"candidates":[{"content":{"parts":[{"text":"` + turnsReplyText + `"}],"role":"model"},"index":0,"finishReason":"STOP"}],"usageMetadata":{"promptTokenCount":12,"candidatesTokenCount":1,"totalTokenCount":13}}` + "\n\n")
)

// turnsModelsFile writes a models file serving the mock as model
// mock/mock-pong over api, and returns its path and the model.
func turnsModelsFile(dir, url, api string) (path, model string, err error) {
	base := strings.TrimSuffix(url, "/v1")
	if api == "google-generative-ai" || api == "openai-responses" {
		base = url
	}
	data := fmt.Sprintf(`{"providers":{"mock":{"baseUrl":%q,"api":%q,"models":[{"id":%q,"name":"mock","contextWindow":1000000,"maxTokens":1024,"input":["text"]}]}}}`, base, api, turnsModel)
	path = filepath.Join(dir, "models.json")
	return path, "mock/" + turnsModel, os.WriteFile(path, []byte(data), 0o600)
}

// turnsModel is the model id the mock serves.
const turnsModel = "mock-pong"

// mockModel is a local OpenAI-compatible server: GET /v1/models lists one
// model; POST /v1/chat/completions waits its first-byte delay, then
// streams "pong" as Chat Completions SSE.
type mockModel struct {
	srv   *http.Server
	url   string
	delay atomic.Int64 // first-byte delay, ns
	// stall, ns: the answer's first event is sent at once and the rest
	// after stall (a model streaming slowly; -inflight-stream)
	stall atomic.Int64
	calls atomic.Int64
	// arrived maps a turn's tag (the text after "ping " in its request)
	// to when its request arrived, for -turns-detail's split of a turn's
	// time into before and after the model call.
	arrived sync.Map
}

// tagOf returns the turn tag in a request body: the digits after the
// last "ping ", or "".
func tagOf(body []byte) string {
	i := bytes.LastIndex(body, []byte("ping "))
	if i < 0 {
		return ""
	}
	j := i + len("ping ")
	k := j
	for k < len(body) && k-j < 20 && body[k] >= '0' && body[k] <= '9' {
		k++
	}
	return string(body[j:k])
}

// sseReply is the whole streamed answer: a role+content chunk, a finish
// chunk with usage, and [DONE].
var sseReply = []byte(`data: {"id":"c1","object":"chat.completion.chunk","created":1,"model":"` + turnsModel + `","choices":[{"index":0,"delta":{"role":"assistant","content":"` + turnsReplyText + `"},"finish_reason":null}]}

data: {"id":"c1","object":"chat.completion.chunk","created":1,"model":"` + turnsModel + `","choices":[{"index":0,"delta":{},"finish_reason":"stop"}],"usage":{"prompt_tokens":12,"completion_tokens":1,"total_tokens":13}}

data: [DONE]

`)

func startMockModel() (*mockModel, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	m := &mockModel{url: "http://" + l.Addr().String() + "/v1"}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /v1/models", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `{"object":"list","data":[{"id":"`+turnsModel+`","object":"model","created":1,"owned_by":"lanebench"}]}`)
	})
	serve := func(reply []byte) http.HandlerFunc {
		return func(w http.ResponseWriter, r *http.Request) { m.serve(w, r, reply) }
	}
	mux.HandleFunc("POST /v1/chat/completions", serve(sseReply))
	mux.HandleFunc("POST /v1/messages", serve(anthropicReply))
	mux.HandleFunc("POST /v1/responses", serve(responsesReply))
	mux.HandleFunc("POST /v1/models/{model}", serve(geminiReply))
	m.srv = &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = m.srv.Serve(l) }()
	return m, nil
}

// mockBodies are the buffers the mock reads requests into.
var mockBodies = sync.Pool{New: func() any { return new(bytes.Buffer) }}

// serve answers one model request with reply after the first-byte delay.
func (m *mockModel) serve(w http.ResponseWriter, r *http.Request, reply []byte) {
	m.calls.Add(1)
	at := time.Now()
	// Read the request as a server would before answering, into a
	// buffer an earlier request read into: the mock stands for a model
	// on another machine, and io.ReadAll's growing copies of a long
	// session's body (several hundred kilobytes a turn) would count its
	// reading many times over in the worker's process.
	buf := mockBodies.Get().(*bytes.Buffer)
	defer mockBodies.Put(buf)
	buf.Reset()
	if _, err := buf.ReadFrom(io.LimitReader(r.Body, 64<<20)); err != nil {
		return
	}
	// Only -turns-detail's turns carry a tag: without one, looking for
	// it would scan the whole body (a long session's, hundreds of
	// kilobytes) in the worker's process every turn, a cost of the mock
	// that grows with the session and would count as the fleet's.
	if *turnsDetail {
		if tag := tagOf(buf.Bytes()); tag != "" {
			m.arrived.Store(tag, at)
		}
	}
	if !waitFor(r, time.Duration(m.delay.Load())) {
		return
	}
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-cache")
	if d := time.Duration(m.stall.Load()); d > 0 {
		first, rest, _ := bytes.Cut(reply, []byte("\n\n"))
		_, _ = w.Write(append(first, "\n\n"...))
		http.NewResponseController(w).Flush() //nolint:errcheck // a failed flush shows as the turn's error
		if !waitFor(r, d) {
			return
		}
		reply = rest
	}
	_, _ = w.Write(reply)
}

// waitFor waits d (none when d <= 0) and reports whether r's client is
// still there.
func waitFor(r *http.Request, d time.Duration) bool {
	if d <= 0 {
		return true
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-r.Context().Done():
		return false
	}
}

func (m *mockModel) close() { _ = m.srv.Close() }

// directClient calls the mock model as the baseline: the same HTTP
// client settings for every call, a Chat Completions request like a
// first turn's, the whole SSE body read.
type directClient struct {
	hc   *http.Client
	url  string
	body []byte
}

func newDirectClient(url string) *directClient {
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.MaxIdleConnsPerHost = 1024
	body := []byte(`{"model":"` + turnsModel + `","stream":true,"stream_options":{"include_usage":true},"messages":[{"role":"system","content":"You are a helpful assistant."},{"role":"user","content":"ping"}]}`)
	return &directClient{hc: &http.Client{Transport: tr}, url: url + "/chat/completions", body: body}
}

func (d *directClient) call(ctx context.Context) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, d.url, bytes.NewReader(d.body))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "text/event-stream")
	resp, err := d.hc.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	found := false
	for sc.Scan() {
		if strings.Contains(sc.Text(), `"content":"`+turnsReplyText+`"`) {
			found = true
		}
	}
	if err := sc.Err(); err != nil {
		return err
	}
	if resp.StatusCode != http.StatusOK || !found {
		return fmt.Errorf("direct call: status %d, reply found %v", resp.StatusCode, found)
	}
	return nil
}

// storeCounts are the messages the worker's connection sent (publishes,
// requests, acks) and the messages the server's streams stored (every
// stream's last sequence, summed: a stored message, a KV put or a marker
// each count one), so far.
type storeCounts struct {
	sent, stored uint64
	byStream     map[string]uint64
}

func counts(ctx context.Context, nc *nats.Conn, js jetstream.JetStream) storeCounts {
	c := storeCounts{byStream: map[string]uint64{}, sent: nc.Stats().OutMsgs}
	l := js.ListStreams(ctx)
	for info := range l.Info() {
		c.stored += info.State.LastSeq
		c.byStream[info.Config.Name] = info.State.LastSeq
	}
	return c
}

// coldRead times what a worker without the session's transcript does to
// read it (kvstore's batched read) against the one-request-per-record walk
// the lane service pages with, on the same transcript.
func coldRead(ctx context.Context, js jetstream.JetStream, session string) error {
	tok, err := events.KeyToken(session)
	if err != nil {
		return err
	}
	l, err := kvstore.Bind(ctx, js, "")
	if err != nil {
		return err
	}
	const probes = 5
	var batched, single []time.Duration
	records := 0
	for range probes {
		t0 := time.Now()
		recs, err := l.Records(ctx, tok)
		if err != nil {
			return err
		}
		batched = append(batched, time.Since(t0))
		records = len(recs)
		t0 = time.Now()
		n := 0
		for from := uint64(1); ; n++ {
			_, seq, ok, err := l.NextRecord(ctx, tok, from)
			if err != nil {
				return err
			}
			if !ok {
				break
			}
			from = seq + 1
		}
		single = append(single, time.Since(t0))
		if n != records {
			return fmt.Errorf("cold read: %d records batched, %d one by one", records, n)
		}
	}
	fmt.Printf("             cold read of its %d records (a worker without it): batched p50 %.2f ms, one request per record %.2f ms (%.1f× faster)\n",
		records, ms(batched, 50), ms(single, 50), ms(single, 50)/ms(batched, 50))
	return nil
}

// subjectKinds counts the messages published on the server by kind of
// subject (lane tokens, sequences and inboxes left out): what a turn asks
// of the server, for -turns-detail.
type subjectKinds struct {
	mu sync.Mutex
	n  map[string]int
}

func watchSubjects(nc *nats.Conn) (*subjectKinds, error) {
	k := &subjectKinds{n: map[string]int{}}
	sub, err := nc.Subscribe(">", func(m *nats.Msg) {
		kind := subjectKind(m.Subject)
		if kind == "" {
			return
		}
		k.mu.Lock()
		k.n[kind]++
		k.mu.Unlock()
	})
	if err != nil {
		return nil, err
	}
	return k, sub.SetPendingLimits(-1, -1)
}

func (k *subjectKinds) snapshot() map[string]int {
	k.mu.Lock()
	defer k.mu.Unlock()
	out := make(map[string]int, len(k.n))
	for s, n := range k.n {
		out[s] = n
	}
	return out
}

// subjectKind names a subject's kind; "" for replies and the server's own.
func subjectKind(subj string) string {
	t := strings.Split(subj, ".")
	switch {
	case strings.HasPrefix(subj, "_INBOX"), strings.HasPrefix(subj, "$SYS"), strings.HasPrefix(subj, "$JSC"):
		return ""
	case t[0] == "$JS" && len(t) >= 3 && t[1] == "API":
		// $JS.API.<op…>.<stream>[.<more>]: keep the op and the stream.
		n := min(len(t), 5)
		if t[2] == "STREAM" && len(t) > 5 && t[3] == "MSG" {
			n = 6
		}
		if t[2] == "CONSUMER" && len(t) > 4 {
			n = 5
		}
		return strings.Join(t[:n], ".")
	case t[0] == "$JS" && len(t) >= 3:
		return strings.Join(t[:3], ".") // $JS.ACK.<stream>, $JS.FC
	case t[0] == "$KV" && len(t) >= 4:
		kind := t[3]
		if len(t) >= 5 {
			kind = t[len(t)-2] // tx: the key's kind
			if kind == t[2] {
				kind = t[len(t)-1]
			}
		}
		if t[2] == "" {
			kind = ""
		}
		return "$KV." + t[1] + "." + kind
	case t[0] == "$KV" && len(t) == 3:
		return "$KV." + t[1]
	}
	if len(t) >= 2 {
		return t[0] + "." + t[1]
	}
	return subj
}

// turnsFigures is one measured load: its latencies, rate, CPU and RSS.
type turnsFigures struct {
	lat   []time.Duration
	n     int
	el    time.Duration
	cpu   time.Duration // process CPU (user+system) spent
	rssMB float64       // after the load
	// loopsRate, when set (staggered loops), is the rate: the loops' own
	// rates summed.
	loopsRate float64
}

// net takes the idle process's CPU (rate: CPU time per second) off f's.
func (f *turnsFigures) net(rate float64) {
	f.cpu = max(0, f.cpu-time.Duration(rate*float64(f.el)))
}

func (f turnsFigures) rate() float64 {
	if f.loopsRate > 0 {
		return f.loopsRate
	}
	return float64(f.n) / f.el.Seconds()
}

func (f turnsFigures) cpuPer() float64 {
	if f.n == 0 {
		return 0
	}
	return float64(f.cpu.Microseconds()) / 1000 / float64(f.n)
}

// cpuTime is the process's user+system CPU time so far.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// closedLoop runs sessions loops at once, each calling one(loop, i) for
// i in 0..per-1 in order, and measures every call. With a stagger, loop s
// starts s × stagger / sessions after the first (sessions sending
// independently rather than all in the same instant), and the rate is the
// loops' own rates summed (each loop's turns over its own time), so the
// ramp does not count.
func closedLoop(sessions, per int, stagger time.Duration, one func(loop, i int) error) (turnsFigures, error) {
	var (
		mu     sync.Mutex
		f      turnsFigures
		wg     sync.WaitGroup
		errs   = make(chan error, sessions)
		loopsR float64 // Σ per / the loop's time
	)
	f.lat = make([]time.Duration, 0, sessions*per)
	cpu0, t0 := cpuTime(), time.Now()
	for s := range sessions {
		wg.Go(func() {
			if stagger > 0 {
				time.Sleep(time.Until(t0.Add(stagger * time.Duration(s) / time.Duration(sessions))))
			}
			l0 := time.Now()
			defer func() {
				mu.Lock()
				loopsR += float64(per) / time.Since(l0).Seconds()
				mu.Unlock()
			}()
			for i := range per {
				c0 := time.Now()
				if err := one(s, i); err != nil {
					errs <- err
					return
				}
				d := time.Since(c0)
				mu.Lock()
				f.lat = append(f.lat, d)
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	f.el, f.cpu = time.Since(t0), cpuTime()-cpu0
	f.n = len(f.lat)
	if stagger > 0 {
		f.loopsRate = loopsR
	}
	f.rssMB = mb(rss())
	select {
	case err := <-errs:
		return f, err
	default:
	}
	return f, nil
}

// stagger is how far apart the concN scenarios' session starts are spread
// with -turns-stagger: one model delay.
func stagger(delay time.Duration) time.Duration {
	if !*turnsStagger {
		return 0
	}
	return delay
}

// turnsScenario is one load shape.
type turnsScenario struct {
	name     string
	sessions int // loops at once
	per      int // turns per loop
	// session names loop's turn i's session: one for all (one), one per
	// turn (distinct) or one per loop (concN).
	session func(loop, i int) string
}

func turnsScenarios(delay time.Duration) []turnsScenario {
	seq, per := *turnsSeq, *turnsPerLane
	if delay > 0 {
		seq, per = *turnsSeqSlow, *turnsPerSlow
	}
	all := []turnsScenario{
		{name: "one", sessions: 1, per: seq, session: func(int, int) string { return "s" }},
		{name: "distinct", sessions: 1, per: seq, session: func(_, i int) string { return strconv.Itoa(i) }},
		// A fresh session's turn, then the long session's, in turn: the
		// two see the same machine at the same time.
		{name: "interleaved", sessions: 1, per: 2 * seq, session: func(_, i int) string {
			if i%2 == 0 {
				return "f" + strconv.Itoa(i)
			}
			return "s"
		}},
		{name: "conc64", sessions: 64, per: per, session: func(loop, _ int) string { return strconv.Itoa(loop) }},
		{name: "conc256", sessions: 256, per: per, session: func(loop, _ int) string { return strconv.Itoa(loop) }},
		{name: "conc1000", sessions: 1000, per: per, session: func(loop, _ int) string { return strconv.Itoa(loop) }},
	}
	want := map[string]bool{}
	for _, s := range strings.Split(*turnsOnly, ",") {
		want[strings.TrimSpace(s)] = true
	}
	var out []turnsScenario
	for _, s := range all {
		if want[s.name] {
			out = append(out, s)
		}
	}
	return out
}

func parseDelays(s string) ([]time.Duration, error) {
	var out []time.Duration
	for _, f := range strings.Split(s, ",") {
		f = strings.TrimSpace(f)
		if f == "0" {
			out = append(out, 0)
			continue
		}
		d, err := time.ParseDuration(f)
		if err != nil {
			return nil, fmt.Errorf("-turns-delays: %w", err)
		}
		out = append(out, d)
	}
	return out, nil
}

// turnsBench runs the turns scenarios: for each durability setting a
// fresh worker with its embedded server, serving the mock model; for each
// model delay, each scenario through the Go client next to the same load
// shape sent straight to the model with one HTTP client (the baseline).
func turnsBench(o options) error {
	delays, err := parseDelays(*turnsDelays)
	if err != nil {
		return err
	}
	concurrency := 0 // the worker's default
	flag.Visit(func(f *flag.Flag) {
		if f.Name == "concurrency" {
			concurrency = o.concurrency
		}
	})
	mock, err := startMockModel()
	if err != nil {
		return err
	}
	defer mock.close()
	fmt.Printf("lanebench turns: one worker with its embedded server (one process: server, worker, Go client, mock model), OpenAI-compatible mock over HTTP answering %q, lanes per worker %s, GOMAXPROCS %d\n",
		turnsReplyText, map[bool]string{true: "default (" + strconv.Itoa(lanes.DefaultConcurrency) + ")", false: strconv.Itoa(concurrency)}[concurrency == 0], runtime.GOMAXPROCS(0))
	fmt.Printf("CPU/turn is the process's user+system time over the turns (server, worker, client and mock together) less what the idle process spends in that time; the direct baseline's is the client's and the mock's share.\n")
	if *turnsStagger {
		fmt.Printf("-turns-stagger: each scenario's sessions start spread over one model delay; turns/s and calls/s are each session's turns over its own time, summed.\n")
	}
	fmt.Printf("out/t: messages the worker sent per turn (publishes, requests, acks); wr/t: messages stored per turn, all streams (each one write, fsynced with sync always).\n")
	if *turnsCPUProf != "" {
		f, err := os.Create(*turnsCPUProf)
		if err != nil {
			return err
		}
		defer f.Close()
		// Started now, the profile also covers each worker's start; that
		// is small next to the turns.
		if err := pprof.StartCPUProfile(f); err != nil {
			return err
		}
		defer pprof.StopCPUProfile()
	}
	if *turnsMemProf != "" {
		defer func() {
			f, err := os.Create(*turnsMemProf)
			if err != nil {
				fmt.Fprintln(os.Stderr, "memprofile:", err)
				return
			}
			defer f.Close()
			if err := pprof.Lookup("allocs").WriteTo(f, 0); err != nil {
				fmt.Fprintln(os.Stderr, "memprofile:", err)
			}
		}()
	}
	direct := newDirectClient(mock.url)
	for _, syncName := range strings.Split(*turnsSyncs, ",") {
		syncName = strings.TrimSpace(syncName)
		if syncName != "always" && syncName != "default" {
			return fmt.Errorf("-turns-sync: %q (always, default)", syncName)
		}
		if err := turnsOneSync(syncName == "always", concurrency, mock, direct, delays); err != nil {
			return fmt.Errorf("sync %s: %w", syncName, err)
		}
	}
	return nil
}

func turnsOneSync(syncAlways bool, concurrency int, mock *mockModel, direct *directClient, delays []time.Duration) error {
	dir, err := os.MkdirTemp("", "lanebench-turns")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	runtime.GC()
	rss0 := mb(rss())
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	t0 := time.Now()
	cfg := fleet.Config{DataDir: dir, Listen: "127.0.0.1:0", SyncAlways: syncAlways, WorkerID: "turns",
		OpenAICompatible: mock.url, Concurrency: concurrency, SetupConcurrency: *turnsSetup, NoBuiltinTools: true, Logger: zerolog.Nop()}
	switch *turnsAPI {
	case "openai-completions":
	case "openai-responses", "anthropic-messages", "google-generative-ai":
		cfg.OpenAICompatible = ""
		if cfg.ModelsFile, cfg.DefaultModel, err = turnsModelsFile(dir, mock.url, *turnsAPI); err != nil {
			return err
		}
	default:
		return fmt.Errorf("-turns-api: %q (openai-completions, openai-responses, anthropic-messages, google-generative-ai)", *turnsAPI)
	}
	bm, err := startMember(ctx, cfg)
	if err != nil {
		return err
	}
	defer bm.stop()
	m, nc, c := bm.m, bm.nc, bm.c
	var kinds *subjectKinds
	if *turnsDetail {
		if kinds, err = watchSubjects(nc); err != nil {
			return err
		}
	}
	var split turnSplit
	turn := func(session string) error {
		tctx, tcancel := context.WithTimeout(ctx, 2*time.Minute)
		defer tcancel()
		text, tag := "ping", ""
		if *turnsDetail {
			tag = strconv.FormatInt(split.next.Add(1), 10)
			text += " " + tag
		}
		t0 := time.Now()
		if err := clientTurn(tctx, c, session, text); err != nil {
			return err
		}
		if tag != "" {
			split.add(mock, tag, t0, time.Now())
		}
		return nil
	}
	mock.delay.Store(0)
	if err := turn("warmup"); err != nil {
		return fmt.Errorf("first turn: %w", err)
	}
	ready := time.Since(t0)
	if *turnsTrace {
		return traceTurn(nc, func() error { return turn("trace-session") })
	}
	runtime.GC()
	idle := mb(rss())
	// What the idle process spends (the server's and the worker's timers,
	// heartbeats) is taken off every figure's CPU: with a slow model it
	// would otherwise count as the turns'.
	cpuIdle0, idleT0 := cpuTime(), time.Now()
	time.Sleep(time.Second)
	idleRate := float64(cpuTime()-cpuIdle0) / float64(time.Since(idleT0))
	fmt.Printf("\nsync_interval %s: worker ready and first turn in %v; RSS %.0f MB before start, %.0f MB idle after one turn (model %s); idle CPU %.1f%%\n",
		map[bool]string{true: "always", false: "default (2m)"}[syncAlways], ready.Round(time.Millisecond), rss0, idle, m.DefaultModel(), 100*idleRate)
	var disk fsyncProbe
	if syncAlways {
		// Measured before the turns, on the store's disk, while the
		// worker idles: the fsyncs the turns below wait on.
		if disk, err = probeFsync(dir, 200, 4096); err != nil {
			return err
		}
		disk.print(dir)
	}
	fmt.Printf("  %-9s %6s %6s | %8s %8s %8s %8s %6s %5s %5s | %8s %8s %8s | %7s %6s\n", "scenario", "delay", "turns",
		"p50 ms", "p99 ms", "turns/s", "CPU ms/t", "RSS MB", "out/t", "wr/t", "direct p50", "calls/s", "CPU ms/c", "p50 +ms", "rate")
	var distinctP50, oneP50, oneTail, oneHead float64
	for _, delay := range delays {
		mock.delay.Store(int64(delay))
		for _, sc := range turnsScenarios(delay) {
			base, err := closedLoop(sc.sessions, sc.per, stagger(delay), func(int, int) error { return direct.call(ctx) })
			if err != nil {
				return fmt.Errorf("%s direct: %w", sc.name, err)
			}
			prefix := fmt.Sprintf("%s-%s-%d-", sc.name, strconv.FormatInt(delay.Milliseconds(), 10), time.Now().UnixNano()%1e6)
			var kinds0 map[string]int
			if kinds != nil {
				kinds0 = kinds.snapshot()
			}
			c0 := counts(ctx, m.Conn, m.JS)
			l0, load0 := laneCountsOf(m.Worker.Stats()), loadAvg()
			// The process's CPU time over each turn (the interleaved
			// scenario's turns run one at a time).
			var turnCPU []time.Duration
			a0 := allocsNow()
			f, err := closedLoop(sc.sessions, sc.per, stagger(delay), func(loop, i int) error {
				c0 := cpuTime()
				err := turn(prefix + sc.session(loop, i))
				if sc.name == "interleaved" {
					turnCPU = append(turnCPU, cpuTime()-c0)
				}
				return err
			})
			if err != nil {
				return fmt.Errorf("%s: %w", sc.name, err)
			}
			a1 := allocsNow()
			c1 := counts(ctx, m.Conn, m.JS)
			f.net(idleRate)
			base.net(idleRate)
			p50 := ms(f.lat, 50)
			fmt.Printf("  %-9s %6s %6d | %8.2f %8.2f %8.0f %8.2f %6.0f %5.1f %5.1f | %8.2f %8.0f %8.2f | %7.2f %5.0f%%\n", sc.name, delay, f.n,
				p50, ms(f.lat, 99), f.rate(), f.cpuPer(), f.rssMB, float64(c1.sent-c0.sent)/float64(f.n), float64(c1.stored-c0.stored)/float64(f.n),
				ms(base.lat, 50), base.rate(), base.cpuPer(), p50-ms(base.lat, 50), 100*f.rate()/base.rate())
			printAllocsPerTurn(a0, a1, f.n)
			if syncAlways && delay == 0 && sc.name == "distinct" {
				fmt.Printf("             p50 above the model less the disk's %d fsyncs at p50: %.2f ms (what the turn costs besides its fsyncs)\n",
					freshTurnFsyncs, p50-ms(base.lat, 50)-freshTurnFsyncs*ms(disk.lat, 50))
			}
			if *turnsDetail {
				before, after := split.take()
				fmt.Printf("             send → model request p50 %.2f ms, p99 %.2f ms; model reply → result p50 %.2f ms, p99 %.2f ms\n",
					ms(before, 50), ms(before, 99), ms(after, 50), ms(after, 99))
				fmt.Printf("             per turn: %s; load average %s before, %s after\n", laneCountsOf(m.Worker.Stats()).sub(l0).perTurn(f.n), load0, loadAvg())
				fmt.Printf("             writes/turn by stream:")
				for name, last := range c1.byStream {
					if d := last - c0.byStream[name]; d > 0 {
						fmt.Printf(" %s %.2f", name, float64(d)/float64(f.n))
					}
				}
				fmt.Printf("\n             messages/turn by subject (everyone's, replies left out):\n")
				k1 := kinds.snapshot()
				names := make([]string, 0, len(k1))
				for s := range k1 {
					names = append(names, s)
				}
				sort.Strings(names)
				for _, s := range names {
					if d := k1[s] - kinds0[s]; d > 0 {
						fmt.Printf("               %-50s %6.2f\n", s, float64(d)/float64(f.n))
					}
				}
			}
			if sc.name == "interleaved" && len(f.lat) >= 8 {
				interleavedFigures(f.lat, turnCPU)
			}
			if delay == 0 {
				switch sc.name {
				case "distinct":
					distinctP50 = p50
				case "one":
					// Latencies are in order: the last quarter is the
					// longest transcript.
					oneP50, oneTail, oneHead = p50, ms(f.lat[len(f.lat)*3/4:], 50), ms(f.lat[1:max(2, len(f.lat)/4)], 50)
					if err := coldRead(ctx, m.JS, prefix+sc.session(0, 0)); err != nil {
						return err
					}
				}
			}
		}
	}
	if distinctP50 > 0 && oneP50 > 0 {
		fmt.Printf("  session length: one-session p50 / distinct p50 = %.2f×; its last quarter (turns %d..%d) / distinct = %.2f×   (target ≤ 1.2×)\n",
			oneP50/distinctP50, *turnsSeq*3/4+1, *turnsSeq, oneTail/distinctP50)
		// A distinct session's turn also sets the session up; the
		// session's own first quarter (its first turn left out) is the
		// same turn without that.
		fmt.Printf("  session growth: its last quarter / its first quarter (turns 2..%d) = %.2f×\n", max(2, *turnsSeq/4), oneTail/oneHead)
	}
	if calls := mock.calls.Load(); calls == 0 {
		return errors.New("the mock model saw no calls")
	}
	return nil
}

// laneCounts are the worker's lane figures that say how its turns were
// started (-turns-detail): a turn whose lane was taken for it went through
// the set-up gate and took the lane's lease; one a lingering owner found
// did neither. Under load the second kind turns into the first, and
// deliveries handed back or waiting for a slot show a worker out of room.
type laneCounts struct {
	acquired, lingerHits, followers, naks, waited, handedBack int64
	cursorsKnown                                              int64 // drains begun from the cursor their release left (no read)
}

func laneCountsOf(st *lanes.Stats) laneCounts {
	return laneCounts{acquired: st.Acquired.Load(), lingerHits: st.LingerHits.Load(), followers: st.FollowerAcks.Load(),
		naks: st.Naks.Load(), waited: st.Waited.Load(), handedBack: st.HandedBack.Load(), cursorsKnown: st.CursorsKnown.Load()}
}

func (c laneCounts) sub(o laneCounts) laneCounts {
	return laneCounts{acquired: c.acquired - o.acquired, lingerHits: c.lingerHits - o.lingerHits, followers: c.followers - o.followers,
		naks: c.naks - o.naks, waited: c.waited - o.waited, handedBack: c.handedBack - o.handedBack, cursorsKnown: c.cursorsKnown - o.cursorsKnown}
}

func (c laneCounts) perTurn(n int) string {
	d := float64(max(n, 1))
	return fmt.Sprintf("lanes taken %.2f (cursor known %.2f), linger hits %.2f, follower acks %.2f, naks %.2f, waited for a slot %.2f, handed back %.2f",
		float64(c.acquired)/d, float64(c.cursorsKnown)/d, float64(c.lingerHits)/d, float64(c.followers)/d, float64(c.naks)/d, float64(c.waited)/d, float64(c.handedBack)/d)
}

// turnSplit splits the turns' times, for -turns-detail, into send →
// the model's request and the model's reply → the client's result.
type turnSplit struct {
	next          atomic.Int64
	mu            sync.Mutex
	before, after []time.Duration
}

func (s *turnSplit) add(m *mockModel, tag string, sent, done time.Time) {
	v, ok := m.arrived.LoadAndDelete(tag)
	if !ok {
		return
	}
	at := v.(time.Time)
	replied := at.Add(time.Duration(m.delay.Load()))
	s.mu.Lock()
	defer s.mu.Unlock()
	s.before = append(s.before, at.Sub(sent))
	s.after = append(s.after, done.Sub(replied))
}

// take returns the times so far and starts over.
func (s *turnSplit) take() (before, after []time.Duration) {
	s.mu.Lock()
	defer s.mu.Unlock()
	before, after = s.before, s.after
	s.before, s.after = nil, nil
	return before, after
}

// traceTurn prints every message the server carries during one turn, in
// order, replies included: what a turn asks of the server, for -turns-trace.
func traceTurn(nc *nats.Conn, turn func() error) error {
	var mu sync.Mutex
	var lines []string
	t0 := time.Now()
	sub, err := nc.Subscribe(">", func(m *nats.Msg) {
		if strings.HasPrefix(m.Subject, "$SYS") {
			return
		}
		body := m.Data
		if len(body) > 160 {
			body = body[:160]
		}
		mu.Lock()
		lines = append(lines, fmt.Sprintf("%8.3f ms %-70s %5d %q", float64(time.Since(t0).Microseconds())/1000, m.Subject, len(m.Data), body))
		mu.Unlock()
	})
	if err != nil {
		return err
	}
	if err := sub.SetPendingLimits(-1, -1); err != nil {
		return err
	}
	if err := nc.Flush(); err != nil {
		return err
	}
	if err := turn(); err != nil {
		return err
	}
	time.Sleep(200 * time.Millisecond)
	_ = sub.Unsubscribe()
	mu.Lock()
	defer mu.Unlock()
	for _, l := range lines {
		fmt.Println(l)
	}
	return nil
}

// clientTurn sends text to session through the Go client, waits for the
// run's result (for at most 2 minutes) and checks the mock model's reply.
func clientTurn(ctx context.Context, c *lanefleet.Client, session, text string) error {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	run, err := c.Send(ctx, session, text)
	if err != nil {
		return err
	}
	res, err := run.Wait(ctx)
	if err != nil {
		return fmt.Errorf("session %s: %w", session, err)
	}
	if len(res.Payloads) == 0 || res.Payloads[0].Text != turnsReplyText {
		return fmt.Errorf("session %s: reply %+v, want %q", session, res.Payloads, turnsReplyText)
	}
	return nil
}

// interleavedFigures prints the interleaved scenario's figures from its
// turns' latencies and CPU times, in order (a fresh session's turn, then
// the long session's): the long session's last quarter against the fresh
// turns run in the same minutes (between them), in time and in CPU.
func interleavedFigures(lat, cpu []time.Duration) {
	var fresh, long, freshCPU, longCPU []time.Duration
	for i := range lat {
		if i%2 == 0 {
			fresh = append(fresh, lat[i])
			if i < len(cpu) {
				freshCPU = append(freshCPU, cpu[i])
			}
		} else {
			long = append(long, lat[i])
			if i < len(cpu) {
				longCPU = append(longCPU, cpu[i])
			}
		}
	}
	q := len(long) * 3 / 4
	fp, lp, hp := ms(fresh[q:], 50), ms(long[q:], 50), ms(long[1:len(long)/4], 50)
	fmt.Printf("             one session's last quarter (turns %d..%d) p50 %.2f ms / fresh sessions' p50 %.2f ms in the same minutes = %.2f×   (target ≤ 1.2×); its first quarter (turns 2..%d) p50 %.2f ms\n",
		q+1, len(long), lp, fp, lp/fp, len(long)/4, hp)
	if len(freshCPU) > q && len(longCPU) > q {
		fc, lc := mean(freshCPU[q:]), mean(longCPU[q:])
		fmt.Printf("             CPU per turn (process): last quarter %.2f ms / fresh %.2f ms = %.2f×\n", lc, fc, lc/fc)
	}
}

// mean is the mean of d in milliseconds.
func mean(d []time.Duration) float64 {
	var sum time.Duration
	for _, x := range d {
		sum += x
	}
	return float64(sum) / float64(len(d)) / 1e6
}
