package runner

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"runtime/metrics"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/lanefleet/lanefleet/events"
	"github.com/lanefleet/lanefleet/message"
	"github.com/lanefleet/lanefleet/provider"
	"github.com/lanefleet/lanefleet/provider/anthropic"
	"github.com/lanefleet/lanefleet/provider/google"
	"github.com/lanefleet/lanefleet/provider/openai"
)

// pongSSE is a Chat Completions stream answering "pong".
const pongSSE = `data: {"choices":[{"index":0,"delta":{"content":"pong"},"finish_reason":null}]}` + "\n\n" +
	`data: {"choices":[{"index":0,"delta":{},"finish_reason":"stop"}],"usage":{"prompt_tokens":2,"completion_tokens":1,"total_tokens":3}}` + "\n\ndata: [DONE]\n\n"

// anthropicPongSSE is an Anthropic Messages stream answering "pong".
const anthropicPongSSE = "event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"usage\":{\"input_tokens\":2,\"output_tokens\":1}}}\n\n" +
	"event: content_block_start\ndata: {\"type\":\"content_block_start\",\"index\":0,\"content_block\":{\"type\":\"text\",\"text\":\"\"}}\n\n" +
	"event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\"pong\"}}\n\n" +
	"event: content_block_stop\ndata: {\"type\":\"content_block_stop\",\"index\":0}\n\n" +
	"event: message_delta\ndata: {\"type\":\"message_delta\",\"delta\":{\"stop_reason\":\"end_turn\"},\"usage\":{\"output_tokens\":1}}\n\n" +
	"event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n"

// geminiPongSSE is a Gemini streamGenerateContent stream answering "pong".
const geminiPongSSE = `data: {"candidates":[{"content":{"parts":[{"text":"pong"}],"role":"model"},"index":0,"finishReason":"STOP"}],"usageMetadata":{"promptTokenCount":2,"candidatesTokenCount":1,"totalTokenCount":3}}` + "\n\n"

// responsesPongSSE is a Responses stream answering "pong".
const responsesPongSSE = "event: response.output_item.added\ndata: {\"type\":\"response.output_item.added\",\"item\":{\"id\":\"msg_1\",\"type\":\"message\",\"status\":\"in_progress\",\"content\":[],\"role\":\"assistant\"},\"output_index\":0,\"sequence_number\":1}\n\n" +
	"event: response.output_text.delta\ndata: {\"type\":\"response.output_text.delta\",\"content_index\":0,\"delta\":\"pong\",\"item_id\":\"msg_1\",\"output_index\":0,\"sequence_number\":2}\n\n" +
	"event: response.output_item.done\ndata: {\"type\":\"response.output_item.done\",\"item\":{\"id\":\"msg_1\",\"type\":\"message\",\"status\":\"completed\",\"content\":[{\"type\":\"output_text\",\"text\":\"pong\",\"annotations\":[]}],\"role\":\"assistant\"},\"output_index\":0,\"sequence_number\":3}\n\n" +
	"event: response.completed\ndata: {\"type\":\"response.completed\",\"response\":{\"status\":\"completed\",\"usage\":{\"input_tokens\":2,\"output_tokens\":1,\"total_tokens\":3}}}\n\n"

// pongServer is an endpoint answering every request with "pong" over real
// HTTP, in the stream of the API its path names: Chat Completions,
// Responses, Anthropic Messages or Gemini.
func pongServer(tb testing.TB) *httptest.Server {
	return recordingPongServer(tb, nil)
}

// recordingPongServer is pongServer giving every request's path and body
// to record first (nil: none).
func recordingPongServer(tb testing.TB, record func(path string, body []byte)) *httptest.Server {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if record == nil {
			_, _ = io.Copy(io.Discard, r.Body) // a body left unread past 256 KB closes the connection
		} else {
			body, _ := io.ReadAll(r.Body)
			record(r.URL.Path, body)
		}
		w.Header().Set("Content-Type", "text/event-stream")
		switch {
		case strings.HasSuffix(r.URL.Path, "/messages"):
			_, _ = w.Write([]byte(anthropicPongSSE))
		case strings.HasSuffix(r.URL.Path, ":streamGenerateContent"):
			_, _ = w.Write([]byte(geminiPongSSE))
		case strings.HasSuffix(r.URL.Path, "/responses"):
			_, _ = w.Write([]byte(responsesPongSSE))
		default:
			_, _ = w.Write([]byte(pongSSE))
		}
	}))
	tb.Cleanup(srv.Close)
	return srv
}

// urlResolver resolves every reference to one model of api (default:
// OpenAI-compatible) at a base URL.
type urlResolver struct {
	url  string
	prov provider.Provider
	api  string
}

func (r urlResolver) Resolve(string) (provider.Model, provider.Provider, error) {
	m := provider.Model{Provider: "acme", ID: "m1", API: "openai-completions", BaseURL: r.url + "/v1", ContextWindow: 1_000_000}
	switch r.api {
	case "anthropic-messages":
		m.API, m.BaseURL = r.api, r.url
	case "google-generative-ai":
		m.API, m.ID = r.api, "gemini-2.5-flash"
	case "openai-responses":
		m.API = r.api
	}
	return m, r.prov, nil
}

// sessionAPIs are the wire APIs BenchmarkSessionTurns runs a session
// through, each its adapter against pongServer (prov(wireCacheBytes):
// the adapter with that wire cache setting, 0 its default).
var sessionAPIs = []struct {
	api  string
	prov func(wireCacheBytes int) provider.Provider
}{
	{"openai-completions", func(n int) provider.Provider { return openai.NewCompletions(openai.Config{WireCacheBytes: n}) }},
	{"openai-responses", func(n int) provider.Provider { return openai.NewResponses(openai.Config{WireCacheBytes: n}) }},
	{"anthropic-messages", func(n int) provider.Provider { return anthropic.New(anthropic.Config{WireCacheBytes: n}) }},
	{"google-generative-ai", func(n int) provider.Provider { return google.New(google.Config{WireCacheBytes: n}) }},
}

// pingPongHistory is a chat session of n messages as the fleet stores it:
// user "ping i", assistant "pong" of the same model.
func pingPongHistory(n int) []message.Entry {
	b := &builder{now: time.Now}
	for i := 0; len(b.entries) < n; i++ {
		b.add(message.User(fmt.Sprintf("ping %d", i), int64(i)))
		b.add(message.Message{Role: message.RoleAssistant, StopReason: message.StopStop, Provider: "acme", Model: "m1", API: "openai-completions",
			Content: message.BlocksOf(message.Text("pong")), Usage: &message.Usage{Input: 2, Output: 1, TotalTokens: 3}, Timestamp: int64(i)})
	}
	return b.entries[:n]
}

// BenchmarkRunLongSession is one turn of a chat session at 100, 1,000 and
// 2,000 history messages, the run path the fleet runs (history → context
// → sanitising → Chat Completions body → HTTP → SSE) against a local
// endpoint; the baseline is a turn of a fresh session in the same run.
// What the longer ones add over it is what a turn costs per message of
// history.
func BenchmarkRunLongSession(b *testing.B) {
	srv := pongServer(b)
	r, err := New(Config{DefaultModel: "acme/m1", Resolver: urlResolver{url: srv.URL, prov: openai.NewCompletions(openai.Config{})}})
	if err != nil {
		b.Fatal(err)
	}
	for _, n := range []int{0, 100, 1000, 2000} {
		name := fmt.Sprintf("messages=%d", n)
		if n == 0 {
			name = "baseline=fresh-session"
		}
		b.Run(name, func(b *testing.B) {
			hist := pingPongHistory(n)
			b.ReportAllocs()
			i := 0
			for b.Loop() {
				i++
				in := Input{SessionKey: "k", SessionID: "s", RunID: fmt.Sprint("r", i), Inbound: &events.Inbound{Text: fmt.Sprint("ping ", i)}, History: hist}
				if _, err := r.Run(context.Background(), in, nopSink{}); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkSessionTurns runs the 1,000 turns of one chat session through
// the run path the fleet runs (history → context → sanitising → guard →
// Chat Completions body → HTTP → SSE), each turn's history the last one's
// with the turn's entries appended (as the lane's transcript cache hands
// it on: over the same array, promised append-only), and before each of them a turn of a fresh session, so that both
// see the same machine. It reports the median turn of the fresh sessions
// run in the last quarter's minutes, of the long session's first and last
// quarter, and the last quarter's ratio to the fresh turn (issue 36 item 3: ≤ 1.2× at the fleet's turn
// cost; here the turn is the runner's alone, without the lane's
// durable writes, so the ratio is the stricter one), and the
// microseconds the last quarter adds to a fresh turn.
func BenchmarkSessionTurns(b *testing.B) {
	srv := pongServer(b)
	for _, a := range sessionAPIs {
		b.Run("api="+a.api, func(b *testing.B) {
			r, err := New(Config{DefaultModel: "acme/m1", Resolver: urlResolver{url: srv.URL, prov: a.prov(0), api: a.api}})
			if err != nil {
				b.Fatal(err)
			}
			sessionTurns(b, r)
		})
	}
}

// sessionTurns is BenchmarkSessionTurns through r.
func sessionTurns(b *testing.B, r *Runner) {
	const turns = 1000
	b.ReportAllocs()
	var fresh, first, last []time.Duration
	// The process's CPU time over the fresh turns and over the last
	// quarter's (the mock endpoint's included): on a shared machine it
	// moves less than the time a turn takes.
	var freshCPU, lastCPU time.Duration
	// The process's allocations (objects, bytes) over the same turns.
	var freshAllocs, lastAllocs [2]uint64
	run := 0
	var allocs0 [2]uint64
	turn := func(key string, hist []message.Entry) (*Output, time.Duration, time.Duration) {
		run++
		in := Input{SessionKey: key, SessionID: key, RunID: fmt.Sprint("r", run), Inbound: &events.Inbound{Text: fmt.Sprint("ping ", run)}, History: hist, HistoryAppendOnly: true}
		allocs0 = heapAllocs()
		c0, t0 := cpuTime(), time.Now()
		out, err := r.Run(context.Background(), in, nopSink{})
		d, c := time.Since(t0), cpuTime()-c0
		if err != nil {
			b.Fatal(err)
		}
		return out, d, c
	}
	since := func(sum *[2]uint64) {
		a := heapAllocs()
		sum[0] += a[0] - allocs0[0]
		sum[1] += a[1] - allocs0[1]
	}
	session := 0
	for b.Loop() {
		session++
		var hist []message.Entry
		for t := range turns {
			_, df, cf := turn(fmt.Sprint("fresh-", session, "-", t), nil)
			if t >= turns*3/4 {
				since(&freshAllocs)
			}
			out, d, c := turn(fmt.Sprint("long-", session), hist)
			if t >= turns*3/4 {
				since(&lastAllocs)
			}
			hist = append(hist, out.Entries...)
			switch {
			case t < turns/4:
				first = append(first, d)
			case t >= turns*3/4:
				// The fresh turns of the same minutes: on a shared
				// machine the load of other minutes is not theirs.
				fresh = append(fresh, df)
				freshCPU += cf
				last = append(last, d)
				lastCPU += c
			}
		}
	}
	med := func(d []time.Duration) float64 {
		s := slices.Clone(d)
		slices.Sort(s)
		return float64(s[len(s)/2].Nanoseconds()) / 1e3
	}
	f, q1, q4 := med(fresh), med(first), med(last)
	b.ReportMetric(f, "fresh-µs")
	b.ReportMetric(q1, "first-quarter-µs")
	b.ReportMetric(q4, "last-quarter-µs")
	b.ReportMetric(q4/f, "last-quarter/fresh")
	b.ReportMetric(q4-f, "last-quarter-added-µs")
	fc := float64(freshCPU.Nanoseconds()) / 1e3 / float64(len(fresh))
	lc := float64(lastCPU.Nanoseconds()) / 1e3 / float64(len(last))
	b.ReportMetric(fc, "fresh-cpu-µs")
	b.ReportMetric(lc, "last-quarter-cpu-µs")
	b.ReportMetric(lc/fc, "last-quarter/fresh-cpu")
	n := float64(len(last))
	b.ReportMetric(float64(freshAllocs[0])/n, "fresh-allocs")
	b.ReportMetric(float64(lastAllocs[0])/n, "last-quarter-allocs")
	b.ReportMetric(float64(freshAllocs[1])/n/1024, "fresh-KiB")
	b.ReportMetric(float64(lastAllocs[1])/n/1024, "last-quarter-KiB")
}

// heapAllocs is the objects and bytes the process allocated so far
// (runtime/metrics: no stop of the world).
func heapAllocs() [2]uint64 {
	s := []metrics.Sample{{Name: "/gc/heap/allocs:objects"}, {Name: "/gc/heap/allocs:bytes"}}
	metrics.Read(s)
	return [2]uint64{s[0].Value.Uint64(), s[1].Value.Uint64()}
}

// cpuTime is the process's user and system time so far.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
