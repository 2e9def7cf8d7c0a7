// Package wiretest serves recorded provider responses from real HTTP servers
// for adapter tests: SSE bodies go out in small flushed writes (splitting
// lines and UTF-8 sequences), error bodies whole with their status; the
// server records what the client sent. It also offers servers that break
// the way networks do: a reset connection and a stalled stream.
package wiretest

import (
	"encoding/json"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"
)

// Case is one entry of a cases.json file (see shared/wire/README.md).
type Case struct {
	File         string            `json:"file"`
	API          string            `json:"api"`
	Status       int               `json:"status"`
	Headers      map[string]string `json:"headers"`
	Path         string            `json:"path"`
	Model        *string           `json:"model"`
	Origin       string            `json:"origin"`
	Expect       Expect            `json:"expect"`
	Alternatives []*string         `json:"errorClassAlternatives"`
}

// Expect is what a client must assemble from a case.
type Expect struct {
	Text              string     `json:"text"`
	Thinking          *string    `json:"thinking"`
	ThinkingSignature *string    `json:"thinkingSignature"`
	ToolCalls         []ToolCall `json:"toolCalls"`
	Usage             *Usage     `json:"usage"`
	StopReason        string     `json:"stopReason"`
	ErrorClass        *string    `json:"errorClass"`
	ErrorMessage      string     `json:"errorMessage"`
}

// ToolCall is an expected tool call; ID is nil when the wire carries none.
type ToolCall struct {
	ID        *string        `json:"id"`
	Name      string         `json:"name"`
	Arguments map[string]any `json:"arguments"`
}

// Usage holds token counts as the wire gives them.
type Usage struct {
	Input      int64  `json:"input"`
	Output     int64  `json:"output"`
	CacheRead  int64  `json:"cacheRead"`
	CacheWrite int64  `json:"cacheWrite"`
	Reasoning  *int64 `json:"reasoning"`
}

// Cases loads testdata/cases.json of the calling package, keeping the cases
// whose api is one of apis.
func Cases(t testing.TB, apis ...string) []Case {
	t.Helper()
	data, err := os.ReadFile(filepath.Join("testdata", "cases.json"))
	if err != nil {
		t.Fatal(err)
	}
	var all []Case
	if err := json.Unmarshal(data, &all); err != nil {
		t.Fatal(err)
	}
	var out []Case
	for _, c := range all {
		for _, a := range apis {
			if c.API == a {
				out = append(out, c)
			}
		}
	}
	if len(out) == 0 {
		t.Fatalf("no cases for %v", apis)
	}
	return out
}

// Body reads testdata/<file>.
func Body(t testing.TB, file string) []byte {
	t.Helper()
	data, err := os.ReadFile(filepath.Join("testdata", file))
	if err != nil {
		t.Fatal(err)
	}
	return data
}

// Request is what the server received.
type Request struct {
	Method  string
	Path    string
	RawPath string // the path as sent, escaped
	Query   string
	Header  http.Header
	Body    []byte
}

// Server is a test server with the requests it received.
type Server struct {
	*httptest.Server
	mu   sync.Mutex
	reqs []Request
}

// Requests returns the requests received so far.
func (s *Server) Requests() []Request {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]Request(nil), s.reqs...)
}

// Last returns the last request received; it fails t when there is none.
func (s *Server) Last(t testing.TB) Request {
	t.Helper()
	r := s.Requests()
	if len(r) == 0 {
		t.Fatal("no request received")
	}
	return r[len(r)-1]
}

func (s *Server) record(r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	s.mu.Lock()
	s.reqs = append(s.reqs, Request{Method: r.Method, Path: r.URL.Path, RawPath: r.URL.EscapedPath(), Query: r.URL.RawQuery, Header: r.Header.Clone(), Body: body})
	s.mu.Unlock()
}

// New starts a server running h after recording each request; it is closed
// when the test ends.
func New(t testing.TB, h http.HandlerFunc) *Server {
	t.Helper()
	s := &Server{}
	s.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.record(r)
		h(w, r)
	}))
	t.Cleanup(s.Close)
	return s
}

// Reply writes status, headers and body, in flushed pieces of chunk bytes
// when chunk > 0.
func Reply(w http.ResponseWriter, status int, headers map[string]string, body []byte, chunk int) {
	for k, v := range headers {
		w.Header().Set(k, v)
	}
	w.WriteHeader(status)
	if chunk <= 0 {
		_, _ = w.Write(body)
		return
	}
	f, _ := w.(http.Flusher)
	for len(body) > 0 {
		n := min(chunk, len(body))
		if _, err := w.Write(body[:n]); err != nil {
			return
		}
		if f != nil {
			f.Flush()
		}
		body = body[n:]
	}
}

// Serve starts a server answering every request with the case's status,
// headers and body (SSE bodies in 7-byte pieces).
func Serve(t testing.TB, c Case) *Server {
	t.Helper()
	body := Body(t, c.File)
	chunk := 0
	if filepath.Ext(c.File) == ".sse" {
		chunk = 7
	}
	return New(t, func(w http.ResponseWriter, r *http.Request) { Reply(w, c.Status, c.Headers, body, chunk) })
}

// ServeBody starts a server answering with status, content type and body in
// pieces of chunk bytes (0 = whole).
func ServeBody(t testing.TB, status int, contentType string, body []byte, chunk int) *Server {
	t.Helper()
	return New(t, func(w http.ResponseWriter, r *http.Request) {
		Reply(w, status, map[string]string{"Content-Type": contentType}, body, chunk)
	})
}

// Reset starts a server that sends a 200 SSE header and prefix, then resets
// the TCP connection.
func Reset(t testing.TB, prefix []byte) *Server {
	t.Helper()
	return New(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		w.WriteHeader(http.StatusOK)
		_, _ = w.Write(prefix)
		w.(http.Flusher).Flush()
		conn, _, err := http.NewResponseController(w).Hijack()
		if err != nil {
			return
		}
		if tc, ok := conn.(*net.TCPConn); ok {
			_ = tc.SetLinger(0) // RST instead of FIN
		}
		_ = conn.Close()
	})
}

// Stall starts a server that sends a 200 SSE header and prefix, then sends
// nothing until the client gives up or the test ends.
func Stall(t testing.TB, prefix []byte) *Server {
	t.Helper()
	done := make(chan struct{})
	s := New(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		w.WriteHeader(http.StatusOK)
		_, _ = w.Write(prefix)
		w.(http.Flusher).Flush()
		select {
		case <-r.Context().Done():
		case <-done:
		case <-time.After(time.Minute):
		}
	})
	t.Cleanup(func() { close(done) })
	return s
}
