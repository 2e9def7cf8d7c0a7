package mcpbridge_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/nats-io/nats.go"
	"github.com/rs/zerolog"

	"github.com/lanefleet/lanefleet/internal/backoff"
	"github.com/lanefleet/lanefleet/internal/natstest"
	"github.com/lanefleet/lanefleet/mcpbridge"
	"github.com/lanefleet/lanefleet/message"
	"github.com/lanefleet/lanefleet/tools"
	"github.com/lanefleet/lanefleet/tools/remote"
)

// waitLimit bounds every wait on an event: generous, as CI is slow.
const waitLimit = time.Minute

// callTimeout is the callers' timeout: far past waitLimit, so a call the
// caller cancels cannot end by the timeout sent with it instead.
const callTimeout = 10 * time.Minute

type bundle struct {
	url string
	log zerolog.Logger
}

func setup(t testing.TB) *bundle {
	t.Helper()
	srv := natstest.Start(t)
	return &bundle{url: srv.URL, log: zerolog.New(zerolog.NewTestWriter(t)).Level(zerolog.InfoLevel)}
}

// bridge runs a bridge of servers on its own connection until the test
// ends or the returned stop is called; stop returns once Run has.
func (b *bundle) bridge(t testing.TB, servers ...mcpbridge.Server) (stop func()) {
	t.Helper()
	// The version a worker built from a work tree passes.
	br, err := mcpbridge.New(mcpbridge.Config{Servers: servers, Conn: natstest.Connect(t, b.url), Logger: b.log, Version: "(devel)",
		Backoff: backoff.Policy{Base: 20 * time.Millisecond, Max: 200 * time.Millisecond}})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = br.Run(ctx) }()
	var once sync.Once
	stop = func() { once.Do(func() { cancel(); <-done }) }
	t.Cleanup(stop)
	return stop
}

// caller is a worker's connection.
func (b *bundle) caller(t testing.TB) *nats.Conn { return natstest.Connect(t, b.url) }

// tool waits until name is discovered from nc and returns it; done, when
// set, must also hold of the list.
func tool(t testing.TB, nc *nats.Conn, name string) tools.Tool {
	t.Helper()
	deadline := time.Now().Add(waitLimit)
	for {
		list, err := remote.Discover(t.Context(), nc, remote.DiscoverConfig{Window: 50 * time.Millisecond, Allow: []string{"*__*"}, CallTimeout: callTimeout})
		if err != nil {
			t.Fatal(err)
		}
		if tl, ok := list.Lookup(name); ok {
			return tl
		}
		if time.Now().After(deadline) {
			t.Fatalf("tool %s not discovered within %s; found %v", name, waitLimit, names(list))
		}
	}
}

func names(l tools.List) []string {
	var out []string
	for _, s := range l.Specs() {
		out = append(out, s.Name)
	}
	return out
}

func text(res tools.Result) string {
	var sb strings.Builder
	for _, b := range res.Content {
		if b.Type == message.BlockText {
			sb.WriteString(b.Text)
		}
	}
	return sb.String()
}

func call(t *testing.T, tl tools.Tool, c tools.Call) tools.Result {
	t.Helper()
	res, err := tl.Call(t.Context(), c)
	if err != nil {
		t.Fatalf("%s: %v", tl.Spec().Name, err)
	}
	return res
}

// stdioServer is the test binary as a stdio MCP server named name.
func stdioServer(t testing.TB, name string) (mcpbridge.Server, string) {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cancelFile := filepath.Join(t.TempDir(), "cancelled")
	return mcpbridge.Server{Name: name, Transport: mcpbridge.TransportStdio, Command: exe,
		Env: map[string]string{envServer: "stdio", envCancelFile: cancelFile}}, cancelFile
}

// httpServer serves testServer over streamable HTTP (or SSE) until the
// test ends.
func httpServer(t testing.TB, h serverHooks, sse bool) (*mcp.Server, string) {
	t.Helper()
	done := make(chan struct{})
	h.done = done
	srv := testServer(h)
	var handler http.Handler = mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return srv }, nil)
	if sse {
		handler = mcp.NewSSEHandler(func(*http.Request) *mcp.Server { return srv }, nil)
	}
	hs := httptest.NewServer(handler)
	t.Cleanup(hs.Close)
	t.Cleanup(func() { close(done) }) // before hs.Close: no handler left waiting
	return srv, hs.URL
}

// checkResults calls the tools of the test server named server and checks
// each kind of result.
func checkResults(t *testing.T, nc *nats.Conn, server string) {
	t.Helper()
	ctx := remote.WithRunInfo(t.Context(), remote.RunInfo{SessionKey: "agent:main:s1", RunID: "run-1"})
	res, err := tool(t, nc, server+"__echo").Call(ctx, tools.Call{ID: "c1", Args: map[string]any{"q": "hi"}, Key: "key-1"})
	if err != nil {
		t.Fatal(err)
	}
	if got, want := text(res), "echo hi key=key-1 session=agent:main:s1 run=run-1"; got != want || res.IsError {
		t.Errorf("echo = %q (isError %v), want %q", got, res.IsError, want)
	}
	res = call(t, tool(t, nc, server+"__image"), tools.Call{ID: "c2"})
	if len(res.Content) != 2 || res.Content[1].Type != message.BlockImage || res.Content[1].MimeType != "image/png" || res.Content[1].Data == "" {
		t.Errorf("image result = %+v, want a text and a PNG", res.Content)
	}
	res = call(t, tool(t, nc, server+"__structured"), tools.Call{ID: "c3"})
	if text(res) != `{"n":1}` {
		t.Errorf("structured = %q", text(res))
	}
	res = call(t, tool(t, nc, server+"__resource"), tools.Call{ID: "c4"})
	if text(res) != "[resource file:///notes.txt]\nthe notes" {
		t.Errorf("resource = %q", text(res))
	}
	// An MCP isError result is an error result the model reads.
	res = call(t, tool(t, nc, server+"__fail"), tools.Call{ID: "c5"})
	if !res.IsError || text(res) != "q must be a city" {
		t.Errorf("fail = %q (isError %v)", text(res), res.IsError)
	}
	// A tool the server does not have is an MCP error: a tool error the
	// model can act on, not a crash.
	list, err := remote.Discover(t.Context(), nc, remote.DiscoverConfig{Window: 50 * time.Millisecond, Allow: []string{"*__*"}, CallTimeout: callTimeout})
	if err != nil {
		t.Fatal(err)
	}
	if slices.ContainsFunc(names(list), func(n string) bool { return strings.Contains(n, "bad") }) {
		t.Errorf("tools %v include the invalid name bad.name", names(list))
	}
}

// TestStdioServer: a stdio MCP server's tools are listed and called with
// each kind of result; the call's key and run reach the server.
func TestStdioServer(t *testing.T) {
	t.Parallel()
	b := setup(t)
	srv, _ := stdioServer(t, "st")
	b.bridge(t, srv)
	checkResults(t, b.caller(t), "st")
}

// TestHTTPServer: the same over streamable HTTP, and over SSE.
func TestHTTPServer(t *testing.T) {
	t.Parallel()
	for _, sse := range []bool{false, true} {
		t.Run(map[bool]string{false: "streamable", true: "sse"}[sse], func(t *testing.T) {
			t.Parallel()
			b := setup(t)
			_, url := httpServer(t, serverHooks{}, sse)
			tr := mcpbridge.TransportHTTP
			if sse {
				tr = mcpbridge.TransportSSE
			}
			b.bridge(t, mcpbridge.Server{Name: "h", Transport: tr, URL: url})
			checkResults(t, b.caller(t), "h")
		})
	}
}

// TestListChanged: a tool the server adds is served after its
// notifications/tools/list_changed.
func TestListChanged(t *testing.T) {
	t.Parallel()
	b := setup(t)
	_, url := httpServer(t, serverHooks{}, false)
	b.bridge(t, mcpbridge.Server{Name: "h", Transport: mcpbridge.TransportHTTP, URL: url})
	nc := b.caller(t)
	call(t, tool(t, nc, "h__add_late"), tools.Call{ID: "c1"})
	if got := text(call(t, tool(t, nc, "h__late"), tools.Call{ID: "c2"})); got != "late" {
		t.Errorf("late = %q", got)
	}
}

// TestStdioCrashRestarts: a stdio server that dies mid-call fails that
// call with a tool error and is started again; later calls reach the new
// process.
func TestStdioCrashRestarts(t *testing.T) {
	t.Parallel()
	b := setup(t)
	srv, _ := stdioServer(t, "st")
	b.bridge(t, srv)
	nc := b.caller(t)
	pid := text(call(t, tool(t, nc, "st__pid"), tools.Call{ID: "c1"}))
	_, err := tool(t, nc, "st__crash").Call(t.Context(), tools.Call{ID: "c2", Key: "key-2"})
	var e *remote.Error
	if !errors.As(err, &e) || !strings.Contains(e.Message, "tool st__crash failed") {
		t.Fatalf("crash call error = %v, want a tool error", err)
	}
	// The restarted server serves again: wait for a pid of another process.
	deadline := time.Now().Add(waitLimit)
	for {
		res, err := tool(t, nc, "st__pid").Call(t.Context(), tools.Call{ID: "c3"})
		if err == nil && text(res) != pid {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no restarted server within %s (last: %v, %v)", waitLimit, text(res), err)
		}
	}
}

// TestStoppedRunCancelsCall: the caller's context ending (the run was
// stopped) cancels the MCP request where it runs; the progress the server
// reported before came as a partial result.
func TestStoppedRunCancelsCall(t *testing.T) {
	t.Parallel()
	b := setup(t)
	cancelled := make(chan string, 1)
	_, url := httpServer(t, serverHooks{cancelled: func(r string) { cancelled <- r }}, false)
	stdio, cancelFile := stdioServer(t, "st")
	b.bridge(t, mcpbridge.Server{Name: "h", Transport: mcpbridge.TransportHTTP, URL: url}, stdio)
	nc := b.caller(t)
	for _, name := range []string{"h__slow", "st__slow"} {
		tl := tool(t, nc, name)
		ctx, stop := context.WithCancelCause(t.Context())
		progress := make(chan string, 8)
		errc := make(chan error, 1)
		go func() {
			_, err := tl.Call(ctx, tools.Call{ID: "c1", Update: func(p tools.Result) { progress <- text(p) }})
			errc <- err
		}()
		select {
		case p := <-progress:
			if p != "progress 1/10: working" {
				t.Errorf("%s: partial result %q", name, p)
			}
		case <-time.After(waitLimit):
			t.Fatalf("%s: no progress", name)
		}
		stop(errors.New("run stopped"))
		if err := <-errc; err == nil || !strings.Contains(err.Error(), "run stopped") {
			t.Errorf("%s: call error = %v", name, err)
		}
	}
	select {
	case <-cancelled:
	case <-time.After(waitLimit):
		t.Fatal("the HTTP server's call was not cancelled")
	}
	deadline := time.Now().Add(waitLimit)
	for {
		if _, err := os.Stat(cancelFile); err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the stdio server's call was not cancelled")
		}
		time.Sleep(10 * time.Millisecond) // a file has no event to wait on
	}
}

// TestTwoBridges: two bridges serve one MCP server; the calls of three
// workers spread across both, with no sticky session. Stopping the bridge
// that runs a call gives the model a tool error naming the call's
// idempotency key, and later calls go to the other bridge.
func TestTwoBridges(t *testing.T) {
	t.Parallel()
	b := setup(t)
	_, url := httpServer(t, serverHooks{}, false)
	stops := map[string]func(){}
	for _, id := range []string{"a", "b"} {
		stops[id] = b.bridge(t, mcpbridge.Server{Name: "h", Transport: mcpbridge.TransportHTTP, URL: url, Headers: map[string]string{"X-Bridge": id}})
	}
	workers := []*nats.Conn{b.caller(t), b.caller(t), b.caller(t)}
	// Both bridges are serving once each has been seen.
	seen := map[string]int{}
	deadline := time.Now().Add(waitLimit)
	for len(seen) < 2 {
		for _, nc := range workers {
			for range 10 {
				seen[text(call(t, tool(t, nc, "h__who"), tools.Call{ID: "c"}))]++
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("calls went to %v within %s, want both bridges", seen, waitLimit)
		}
	}
	if len(seen) != 2 || seen["a"] == 0 || seen["b"] == 0 {
		t.Fatalf("calls went to %v, want a and b", seen)
	}

	// A long call; its progress names the bridge running it.
	slow := tool(t, workers[0], "h__slow")
	progress := make(chan string, 8)
	errc := make(chan error, 1)
	go func() {
		_, err := slow.Call(t.Context(), tools.Call{ID: "c9", Key: "run-1:c9", Update: func(p tools.Result) { progress <- text(p) }})
		errc <- err
	}()
	var running string
	select {
	case p := <-progress:
		running = p[len(p)-1:]
		if !strings.HasPrefix(p, "progress 1/10: working via ") || stops[running] == nil {
			t.Fatalf("progress %q does not name a bridge", p)
		}
	case <-time.After(waitLimit):
		t.Fatal("no progress")
	}
	stops[running]()
	var e *remote.Error
	if err := <-errc; !errors.As(err, &e) || !errors.Is(err, remote.ErrToolFailed) {
		t.Fatalf("call error = %v, want a tool error", err)
	}
	if want := "tool h__slow was stopped before it finished: the process serving it is shutting down; it may have taken effect in part (idempotency key run-1:c9)"; e.Message != want {
		t.Errorf("error = %q\nwant %q", e.Message, want)
	}
	other := map[string]string{"a": "b", "b": "a"}[running]
	for _, nc := range workers {
		for range 5 {
			if got := text(call(t, tool(t, nc, "h__who"), tools.Call{ID: "c"})); got != other {
				t.Fatalf("a call after bridge %s stopped went to %q, want %s", running, got, other)
			}
		}
	}
}
