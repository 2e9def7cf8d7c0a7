package gateway

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/lanefleet/lanefleet"
	"github.com/lanefleet/lanefleet/gateway/auth"
	"github.com/lanefleet/lanefleet/gateway/openai"
	"github.com/lanefleet/lanefleet/gateway/route"
	"github.com/lanefleet/lanefleet/internal/fleet"
	"github.com/lanefleet/lanefleet/internal/natstest"
	"github.com/lanefleet/lanefleet/sandbox"
)

func TestMain(m *testing.M) {
	sandbox.Main() // the in-process members' exec would re-run this binary
	if spec := os.Getenv(streamsClientEnv); spec != "" {
		streamsClient(spec)
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// bundle is a running fleet (an embedded nats-server and one in-process
// worker with the scripted models), a client, and a gateway in front.
type bundle struct {
	url    string
	client *lanefleet.Client
	srv    *Server
	ts     *httptest.Server
	tokens map[string]string // token by name
	ctx    context.Context
}

// testTokens are the tokens setup writes: two tenants, a viewer and an
// admin.
var testTokens = []TokenEntry{
	{Name: "acme", Role: auth.Sender, Prefixes: []string{"acme:"}},
	{Name: "globex", Role: auth.Sender, Prefixes: []string{"globex:"}, Models: []string{"scripted/echo"}},
	{Name: "acme-viewer", Role: auth.Viewer, Prefixes: []string{"acme:"}},
	{Name: "root", Role: auth.Admin, Prefixes: []string{""}},
}

type setupOpts struct {
	noTokens bool
	tokens   []TokenEntry // instead of testTokens
	cfg      func(*Config)
	routes   []route.Route
	openai   bool // mount gateway/openai's routes
	member   func(*fleet.Config)
	noFleet  bool
}

func setup(t testing.TB, o setupOpts) *bundle {
	t.Helper()
	ns := natstest.Start(t)
	b := &bundle{url: ns.URL, tokens: map[string]string{}}
	if !o.noFleet {
		startWorker(t, ns.URL, o.member)
	}
	c, err := lanefleet.Connect(ns.URL)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	b.client = c
	log := zerolog.New(zerolog.NewTestWriter(t)).Level(zerolog.WarnLevel)
	cfg := Config{Client: c, Routes: o.routes, Logger: &log}
	if o.openai {
		cfg.Routes = append(cfg.Routes, openai.New(c, openai.Options{Models: []string{"scripted/echo"}, Logger: log}).Routes()...)
	}
	if !o.noTokens {
		entries := o.tokens
		if entries == nil {
			entries = testTokens
		}
		var tf tokenFile
		for _, e := range entries {
			tok, hash := NewToken()
			b.tokens[e.Name] = tok
			e.Hash = hash
			tf.Tokens = append(tf.Tokens, e)
		}
		raw, _ := json.Marshal(tf)
		if cfg.Tokens, err = ParseTokens(strings.NewReader(string(raw))); err != nil {
			t.Fatal(err)
		}
	}
	if o.cfg != nil {
		o.cfg(&cfg)
	}
	if b.srv, err = New(cfg); err != nil {
		t.Fatal(err)
	}
	b.ts = httptest.NewUnstartedServer(b.srv)
	b.ts.Config = b.srv.HTTPServer()
	b.ts.Start()
	t.Cleanup(b.ts.Close)
	t.Cleanup(b.srv.Close) // the streams end before the server waits for them
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	t.Cleanup(cancel)
	b.ctx = ctx
	return b
}

// startWorker runs an in-process fleet member on url until the test ends.
// Its lane leases last 30 s: no test here waits for one to lapse, and
// under -race at a load of 20 a 5 s lease ran out mid-turn and the run
// restarted (TestStreamLimits saw no active run, TestSlowReader's run
// never ended in time).
func startWorker(t testing.TB, url string, tune func(*fleet.Config)) {
	t.Helper()
	cfg := fleet.Config{NATSURL: url, Scripted: true, AckWait: 5 * time.Second, LeaseTTL: 30 * time.Second, IdleRelease: -1,
		Logger: zerolog.New(zerolog.NewTestWriter(t)).Level(zerolog.WarnLevel), DefaultModel: "scripted/echo"}
	if tune != nil {
		tune(&cfg)
	}
	m, err := fleet.Start(t.Context(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := m.Run(ctx); err != nil {
			t.Errorf("member: %v", err)
		}
	}()
	t.Cleanup(func() { cancel(); <-done })
}

// do sends a request as token name ("" none) and returns the response.
func (b *bundle) do(t *testing.T, name, method, path, body string, hdr ...string) *http.Response {
	t.Helper()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequestWithContext(b.ctx, method, b.ts.URL+path, rd)
	if err != nil {
		t.Fatal(err)
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	if name != "" {
		req.Header.Set("Authorization", "Bearer "+b.tokens[name])
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	resp, err := b.ts.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	return resp
}

// readJSON decodes and closes resp's body.
func readJSON(t *testing.T, resp *http.Response, v any) {
	t.Helper()
	defer resp.Body.Close()
	if err := json.NewDecoder(resp.Body).Decode(v); err != nil {
		t.Fatalf("%s: decode: %v", resp.Request.URL.Path, err)
	}
}

// wantProblem checks resp is a problem with status and code.
func wantProblem(t *testing.T, resp *http.Response, status int, code string) Problem {
	t.Helper()
	defer resp.Body.Close()
	var p Problem
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != status {
		t.Fatalf("%s %s: status %d, want %d: %s", resp.Request.Method, resp.Request.URL.Path, resp.StatusCode, status, body)
	}
	if ct := resp.Header.Get("Content-Type"); ct != "application/problem+json" {
		t.Fatalf("%s: content type %q: %s", resp.Request.URL.Path, ct, body)
	}
	if err := json.Unmarshal(body, &p); err != nil {
		t.Fatal(err)
	}
	if p.Code != code || p.Status != status || p.Type != problemTypeBase+code || p.Title == "" {
		t.Fatalf("%s: problem %+v, want status %d code %s", resp.Request.URL.Path, p, status, code)
	}
	return p
}

// sseEvent is one server-sent event.
type sseEvent struct {
	id, event, data string
}

// readSSE reads events from r until it ends or stop says so.
func readSSE(r io.Reader, stop func(sseEvent) bool) ([]sseEvent, error) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 4<<20)
	var out []sseEvent
	var cur sseEvent
	for sc.Scan() {
		line := sc.Text()
		switch {
		case line == "":
			if cur.data != "" || cur.event != "" {
				out = append(out, cur)
				if stop != nil && stop(cur) {
					return out, nil
				}
			}
			cur = sseEvent{}
		case strings.HasPrefix(line, ":"):
		case strings.HasPrefix(line, "id: "):
			cur.id = line[4:]
		case strings.HasPrefix(line, "event: "):
			cur.event = line[7:]
		case strings.HasPrefix(line, "data: "):
			cur.data += line[6:]
		}
	}
	return out, sc.Err()
}

// seqs returns the events' ids as numbers.
func seqs(t *testing.T, evs []sseEvent) []uint64 {
	t.Helper()
	var out []uint64
	for _, e := range evs {
		n, err := strconv.ParseUint(e.id, 10, 64)
		if err != nil {
			t.Fatalf("event %+v: id: %v", e, err)
		}
		out = append(out, n)
	}
	return out
}

// replyOf returns the final event's reply text.
func replyOf(t *testing.T, evs []sseEvent) string {
	t.Helper()
	for _, e := range evs {
		if e.event == "final" {
			var ev struct {
				Data struct {
					Result struct {
						Payloads []struct{ Text string }
					}
				}
			}
			if err := json.Unmarshal([]byte(e.data), &ev); err != nil {
				t.Fatal(err)
			}
			var sb strings.Builder
			for _, p := range ev.Data.Result.Payloads {
				sb.WriteString(p.Text)
			}
			return sb.String()
		}
	}
	t.Fatalf("no final event in %d events", len(evs))
	return ""
}

func withModel(ref string) lanefleet.SendOption { return lanefleet.WithModel(ref) }
