package gateway

import (
	"bufio"
	"flag"
	"io"
	"net"
	"net/http"
	"runtime"
	"strings"
	"testing"
	"time"
)

// TestHostileBodies: bodies past the limit (declared or streamed), bodies
// that are not JSON or not JSON at all, JSON with unknown fields or data
// after it: each a clear 4xx problem, and nothing reaches the fleet.
func TestHostileBodies(t *testing.T) {
	t.Parallel()
	b := setup(t, setupOpts{cfg: func(c *Config) { c.MaxBodyBytes = 1 << 10 }})
	const path = "/api/sessions/acme:h/messages"
	big := `{"text":"` + strings.Repeat("x", 2<<10) + `"}`
	cases := []struct {
		name   string
		body   io.Reader
		ctype  string
		status int
		code   string
	}{
		{"declared too large", strings.NewReader(big), "application/json", 413, CodeBodyTooLarge},
		{"streamed too large", io.MultiReader(strings.NewReader(big)), "application/json", 413, CodeBodyTooLarge},
		{"not JSON", strings.NewReader(`{"text": hi}`), "application/json", 400, CodeBadJSON},
		{"empty", strings.NewReader(``), "application/json", 400, CodeBadJSON},
		{"unknown field", strings.NewReader(`{"text":"hi","sudo":true}`), "application/json", 400, CodeBadJSON},
		{"wrong type", strings.NewReader(`{"text":7}`), "application/json", 400, CodeBadJSON},
		{"two values", strings.NewReader(`{"text":"a"}{"text":"b"}`), "application/json", 400, CodeBadJSON},
		{"form", strings.NewReader(`text=hi`), "application/x-www-form-urlencoded", 415, CodeMediaType},
		{"no content type", strings.NewReader(`{"text":"hi"}`), "", 415, CodeMediaType},
		{"invalid message", strings.NewReader(`{"text":"hi","mode":"sideways"}`), "application/json", 400, CodeInvalidInput},
		{"bad image", strings.NewReader(`{"images":[{"mimeType":"image/png","data":"***"}]}`), "application/json", 400, CodeInvalidInput},
	}
	for _, c := range cases {
		req, _ := http.NewRequestWithContext(b.ctx, "POST", b.ts.URL+path, c.body)
		if c.name == "streamed too large" {
			req.ContentLength = -1 // chunked: the limit is found while reading
		}
		if c.ctype != "" {
			req.Header.Set("Content-Type", c.ctype)
		}
		req.Header.Set("Authorization", "Bearer "+b.tokens["acme"])
		resp, err := b.ts.Client().Do(req)
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		p := wantProblem(t, resp, c.status, c.code)
		if strings.Contains(p.Detail, "xxxx") {
			t.Fatalf("%s: the detail echoes the body", c.name)
		}
	}
	if bl, err := b.client.Backlog(b.ctx, "acme:h"); err != nil || bl.Waiting != 0 || bl.Processed != 0 {
		t.Fatalf("a refused body reached the lane: %+v %v", bl, err)
	}
}

// TestHostileHeaders: a client that sends its headers too slowly is cut
// off at ReadHeaderTimeout; headers past MaxHeaderBytes get 431.
func TestHostileHeaders(t *testing.T) {
	t.Parallel()
	b := setup(t, setupOpts{noFleet: true, cfg: func(c *Config) { c.ReadHeaderTimeout = 200 * time.Millisecond; c.MaxHeaderBytes = 4 << 10 }})
	conn, err := net.Dial("tcp", b.ts.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if _, err := io.WriteString(conn, "GET /healthz HTTP/1.1\r\nHost: x\r\nX-Slow: "); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	_ = conn.SetReadDeadline(time.Now().Add(10 * time.Second))
	_, err = io.ReadAll(conn) // the server closes the connection
	if err != nil {
		t.Fatalf("slow headers: the connection stayed open: %v", err)
	}
	if took := time.Since(start); took > 5*time.Second {
		t.Fatalf("slow headers cut after %v", took)
	}
	resp := b.do(t, "root", "GET", "/healthz", "", "X-Big", strings.Repeat("y", 8<<10))
	resp.Body.Close()
	if resp.StatusCode != http.StatusRequestHeaderFieldsTooLarge {
		t.Fatalf("big headers: %d", resp.StatusCode)
	}
}

var idleStreams = flag.Int("gateway.streams", 1000, "idle SSE streams TestIdleStreams opens (make bench: 10000)")

// TestIdleStreams opens many idle event streams on one gateway, all
// following a run that is running and silent, measures the memory each
// costs (heap and stacks, the client's connection included), then closes
// them: no goroutine and no stream remains.
func TestIdleStreams(t *testing.T) {
	n := *idleStreams
	b := setup(t, setupOpts{noTokens: true, cfg: func(c *Config) { c.MaxStreams = n + 10; c.KeepAlive = 100 * time.Millisecond }})
	run, err := b.client.Send(b.ctx, "idle", `#script {"replies":[{"text":"late","chunks":1,"delayMs":600000}]}`,
		withModel("scripted/script"))
	if err != nil {
		t.Fatal(err)
	}
	// The run is running once its start event is out.
	resp := b.do(t, "", "GET", "/api/sessions/idle/runs/"+run.ID+"/events", "")
	if _, err := readSSE(resp.Body, func(e sseEvent) bool { return e.event == "lifecycle" }); err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	waitFor(t, "the first stream to close", func() bool { return b.srv.streams.Load() == 0 })
	g0 := runtime.NumGoroutine()
	m0 := memInUse()
	addr := b.ts.Listener.Addr().String()
	req := "GET /api/sessions/idle/runs/" + run.ID + "/events HTTP/1.1\r\nHost: x\r\nLast-Event-ID: 1\r\n\r\n"
	conns := make([]net.Conn, 0, n)
	defer func() {
		for _, c := range conns {
			c.Close()
		}
	}()
	for i := range n {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatalf("stream %d: %v", i, err)
		}
		conns = append(conns, c)
		if _, err := io.WriteString(c, req); err != nil {
			t.Fatal(err)
		}
	}
	// Each stream is open once its headers and first comment came.
	for i, c := range conns {
		_ = c.SetReadDeadline(time.Now().Add(30 * time.Second))
		br := bufio.NewReaderSize(c, 512)
		line, err := br.ReadString('\n')
		if err != nil || !strings.Contains(line, "200") {
			t.Fatalf("stream %d: %q %v", i, line, err)
		}
	}
	waitFor(t, "every stream to open", func() bool { return b.srv.streams.Load() == int64(n) })
	m1 := memInUse()
	per := float64(int64(m1)-int64(m0)) / float64(n)
	t.Logf("%d idle streams: %.1f KB each (heap and stacks in use, client connections included), %d goroutines more",
		n, per/1024, runtime.NumGoroutine()-g0)
	if per > 20<<10 {
		t.Errorf("an idle stream costs %.1f KB, more than 20 KB", per/1024)
	}
	for _, c := range conns {
		c.Close()
	}
	conns = conns[:0]
	waitFor(t, "every stream to close", func() bool { return b.srv.streams.Load() == 0 })
	waitFor(t, "the streams' goroutines to end", func() bool { return runtime.NumGoroutine() <= g0+5 })
	if _, err := b.client.Stop(b.ctx, "idle"); err != nil {
		t.Fatal(err)
	}
}

// memInUse is the heap and stack memory in use after a collection.
func memInUse() uint64 {
	runtime.GC()
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.HeapInuse + ms.StackInuse
}

// waitFor waits until cond holds, checking every few milliseconds, for at
// most a minute.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}
