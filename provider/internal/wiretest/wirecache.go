package wiretest

import (
	"bytes"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/lanefleet/lanefleet/message"
	"github.com/lanefleet/lanefleet/provider"
	"github.com/lanefleet/lanefleet/provider/internal/wirecache"
)

// Wire is one adapter's request builder and wire cache, for the tests
// every wire cache must pass: the cached body is the uncached one, byte
// for byte, whatever the session went through.
type Wire[M, C any] struct {
	// Build builds req's body with cache (nil: without one).
	Build func(req *provider.Request, cache *wirecache.Cache[M, C]) ([]byte, error)
	// New returns an empty cache of at most maxBytes.
	New func(maxBytes int) *wirecache.Cache[M, C]
	// Model is the adapter's model, whose replies History and Turn hold.
	Model provider.Model
	// Reply, when set, is Turn for adapters whose replies carry more than
	// tool calls.
	Reply func(step string, ids ...string) []message.Message
	// Thinking is the thinking level of the requests of Steps.
	Thinking provider.ThinkingLevel
}

// History is an n-message session of w.Model's replies (see History).
func (w Wire[M, C]) History(n int) []message.Message {
	return History(n, w.Model.Provider, w.Model.API, w.Model.ID)
}

// Turn is an assistant reply of w.Model calling tools ids, then their
// results: w.Reply's when set (step makes its other ids unique), else a
// message of the calls alone.
func (w Wire[M, C]) Turn(step string, ids ...string) []message.Message {
	if w.Reply != nil {
		return w.Reply(step, ids...)
	}
	var calls []message.Block
	for _, id := range ids {
		calls = append(calls, message.ToolCall(id, "read", map[string]any{"path": id}))
	}
	out := []message.Message{{Role: message.RoleAssistant, StopReason: message.StopToolUse, Provider: w.Model.Provider,
		Model: w.Model.ID, API: w.Model.API, Content: message.BlocksOf(calls...)}}
	for _, id := range ids {
		out = append(out, message.Message{Role: message.RoleToolResult, ToolCallID: id, ToolName: "read",
			Content: message.BlocksOf(message.Text("result of " + id))})
	}
	return out
}

// Same builds req with cache and without it and fails t unless both
// succeed with the same bytes.
func (w Wire[M, C]) Same(t testing.TB, what string, req *provider.Request, cache *wirecache.Cache[M, C]) {
	t.Helper()
	got, err := w.Build(req, cache)
	if err != nil {
		t.Fatalf("%s: %v", what, err)
	}
	want, err := w.Build(req, nil)
	if err != nil {
		t.Fatalf("%s: %v", what, err)
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("%s: cached body differs:\n got %s\nwant %s", what, got, want)
	}
}

// Step is one request of a session in Steps; an unnamed struct type, so
// that tables of steps may leave out the field names.
type Step = struct {
	Name   string
	Model  provider.Model
	System string
	Msgs   []message.Message
	// Reusing says whether some messages' JSON must come from the cache.
	Reusing bool
	// Change, when set, changes the history in place before the step.
	Change func()
}

// Steps builds, with one cache and without it, the requests of a session
// of h = w.History(40) with model m through what every session goes
// through (new turns, messages rewritten and replaced in place, call
// arguments and a result's id replaced, a result become an error, a result
// cut, another model's reply, the history limit, a compaction, a
// rollback), then through own(h)'s steps (built before any step runs),
// then a changed system prompt, none, an empty request and a new start.
// Every body must be the uncached one byte for byte, cached JSON reused
// exactly where a step says so, and at least 100 messages reused in all.
func (w Wire[M, C]) Steps(t *testing.T, m provider.Model, own func(h []message.Message) []Step) {
	t.Helper()
	h := w.History(40)
	cut := slices.Clone(h) // a tool result cut by overflow recovery
	cut[10].Content = message.BlocksOf(message.Text("[truncated]"))
	other := slices.Clone(h)
	other[13].Provider, other[13].Model = "xai", "grok-4"
	compacted := append([]message.Message{message.User("The conversation so far: a summary.", 3)}, h[30:]...)
	steps := []Step{
		{"first turn", m, "sys", h[:4], false, nil},
		{"second turn", m, "sys", h[:8], true, nil},
		{"long session", m, "sys", h[:40], true, nil},
		{"same again", m, "sys", h[:40], true, nil},
		{"a text rewritten in place", m, "sys", h[:40], true, func() { h[5].Content.Blocks[0].Text = "Let me look again." }},
		{"a message replaced in place", m, "sys", h[:40], true, func() { h[8] = message.User("another question", 1) }},
		{"tool call arguments replaced", m, "sys", h[:40], true, func() {
			h[13].Content.Blocks[1].Arguments = map[string]any{"path": "other.go"}
		}},
		{"a tool result's id changed", m, "sys", h[:40], true, func() { h[14].ToolCallID = "call_x" }},
		{"a tool result became an error", m, "sys", h[:40], true, func() { h[18].IsError = true }},
		{"tool result cut", m, "sys", cut, true, nil},
		{"another model's reply in the history", m, "sys", other, true, nil},
		{"history limit drops the oldest turns", m, "sys", h[12:40], true, nil},
		{"compaction", m, "sys", compacted, true, nil},
		{"rollback", m, "sys", h[:6], true, nil},
	}
	steps = append(steps, own(h)...)
	steps = append(steps, Step{"system prompt changed", m, "other sys", h[:20], true, nil}, Step{"no system prompt", m, "", h[:24], true, nil},
		Step{"empty", m, "", nil, false, nil}, Step{"after empty", m, "", h[:4], false, nil})
	cache := w.New(wirecache.BytesDefault)
	for _, st := range steps {
		if st.Change != nil {
			st.Change()
		}
		req := &provider.Request{Model: st.Model, SystemPrompt: st.System, Messages: st.Msgs, SessionID: "s1", Thinking: w.Thinking,
			Tools: []provider.Tool{{Name: "read", Parameters: map[string]any{"type": "object"}}}}
		before := cache.Reused.Load()
		w.Same(t, st.Name, req, cache)
		if reused := cache.Reused.Load() - before; (reused > 0) != st.Reusing {
			t.Errorf("%s: %d messages reused, want reuse %v", st.Name, reused, st.Reusing)
		}
	}
	if n := cache.Reused.Load(); n < 100 {
		t.Errorf("only %d messages reused over the session", n)
	}
}

// RandomEdits builds a session's requests through 400 random edits of its
// history (turns added, the front dropped with or without a summary,
// rollbacks, messages rewritten or replaced in place, tool results cut,
// given images or their tool name, calls renamed, models switched), with
// one cache and without it: the bodies are the same, byte for byte, and at
// least 1,000 messages are reused in all. The sequence is fixed, so a
// failing step can be replayed.
func (w Wire[M, C]) RandomEdits(t *testing.T, models ...provider.Model) {
	t.Helper()
	cache := w.New(wirecache.BytesDefault)
	seed := uint64(1)
	rnd := func(n int) int {
		seed = seed*6364136223846793005 + 1442695040888963407
		return int((seed >> 33) % uint64(n))
	}
	var hist []message.Message
	m := models[0]
	for step := range 400 {
		switch rnd(10) {
		case 0, 1, 2:
			hist = append(hist, w.History(4+rnd(4))...)
		case 3:
			ids := []string{fmt.Sprint("t", step)}
			for range rnd(3) {
				ids = append(ids, fmt.Sprint("t", step, "_", len(ids)))
			}
			hist = append(hist, w.Turn(fmt.Sprint(step), ids...)...)
		case 4: // compaction, or the history limit
			if len(hist) > 0 && rnd(2) == 0 {
				hist = append([]message.Message{message.User("summary", 9)}, hist[rnd(len(hist)):]...)
			} else if len(hist) > 0 {
				hist = hist[rnd(len(hist)):]
			}
		case 5: // rollback
			if len(hist) > 0 {
				hist = hist[:rnd(len(hist))]
			}
		case 6: // a message changed in place
			if len(hist) > 0 {
				i := rnd(len(hist))
				if len(hist[i].Content.Blocks) > 0 && hist[i].Content.Blocks[0].Type == message.BlockText {
					hist[i].Content.Blocks[0].Text += " (edited)"
				} else {
					hist[i] = message.User("replaced", 7)
				}
			}
		case 7: // the last tool result cut, given an image, or its tool name lost
			for i := len(hist) - 1; i >= 0; i-- {
				if hist[i].Role == message.RoleToolResult {
					switch rnd(3) {
					case 0:
						hist[i].Content = message.BlocksOf(message.Text("[truncated]"))
					case 1:
						hist[i].Content = message.BlocksOf(message.Text("see"), message.Image("image/png", "iVBORw0KGgo="))
					case 2:
						hist[i].ToolName = ""
					}
					break
				}
			}
		case 8:
			m = models[rnd(len(models))]
		case 9: // the last call renamed in place
			for i := len(hist) - 1; i >= 0; i-- {
				if bs := hist[i].Content.Blocks; hist[i].Role == message.RoleAssistant && len(bs) > 0 && bs[len(bs)-1].Type == message.BlockToolCall {
					bs[len(bs)-1].Name += "x"
					break
				}
			}
		}
		w.Same(t, fmt.Sprint("step ", step), &provider.Request{Model: m, SystemPrompt: "sys", Messages: hist, SessionID: "s1"}, cache)
	}
	if n := cache.Reused.Load(); n < 1000 {
		t.Errorf("only %d messages reused", n)
	}
}

// Bounded requires the cache to keep sessions within its byte budget,
// dropping the least recently used, to charge a session at least the
// JSON it keeps, and to keep none over half of the budget.
func (w Wire[M, C]) Bounded(t *testing.T) {
	t.Helper()
	cache := w.New(256 << 10)
	for i := range 50 {
		req := &provider.Request{Model: w.Model, Messages: w.History(40), SessionID: fmt.Sprint("s", i)}
		if _, err := w.Build(req, cache); err != nil {
			t.Fatal(err)
		}
	}
	if cache.Take("s0") != nil {
		t.Error("the least recently used session is still kept")
	}
	if s := cache.Take("s49"); s == nil {
		t.Error("the latest session is not kept")
	} else if charged, kept := s.Charged(); charged < kept {
		t.Errorf("a session is charged %d bytes for %d bytes of JSON it keeps", charged, kept)
	}
	big := &provider.Request{Model: w.Model, Messages: w.History(2000), SessionID: "big"}
	if _, err := w.Build(big, cache); err != nil {
		t.Fatal(err)
	}
	if cache.Take("big") != nil {
		t.Error("a session over half the budget is kept")
	}
}

// Concurrent builds prefixes of h as the requests of three sessions from
// eight goroutines at once (run it with -race): every body is the
// uncached one.
func (w Wire[M, C]) Concurrent(t *testing.T, m provider.Model, h []message.Message) {
	t.Helper()
	cache := w.New(wirecache.BytesDefault)
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			for i := range 30 {
				req := &provider.Request{Model: m, Messages: h[:1+(i*7+g)%len(h)], SessionID: fmt.Sprint("s", g%3)}
				got, err := w.Build(req, cache)
				if err != nil {
					t.Error(err)
					return
				}
				want, err := w.Build(req, nil)
				if err != nil {
					t.Error(err)
					return
				}
				if !bytes.Equal(got, want) {
					t.Errorf("session %d turn %d: cached body differs", g%3, i)
					return
				}
			}
		})
	}
	wg.Wait()
}

// BenchBuild builds the body of one session's turn at 2 (a fresh session),
// 200 and 2,000 history messages, as the turns of a long session do: the
// same history and a new prompt each time. A turn's cost should not grow
// with the session; without the wire cache (the baseline) and with it.
func (w Wire[M, C]) BenchBuild(b *testing.B) {
	for _, n := range []int{2, 200, 2000} {
		for _, cached := range []bool{false, true} {
			b.Run(fmt.Sprintf("messages=%d/wirecache=%v", n, cached), func(b *testing.B) {
				var cache *wirecache.Cache[M, C]
				if cached {
					cache = w.New(wirecache.BytesDefault)
				}
				msgs := append(w.History(n)[:n:n], message.User("", 2))
				m := w.Model
				m.MaxTokens, m.Input = 16384, []string{"text"}
				req := &provider.Request{Model: m, SystemPrompt: "You are a helpful assistant.", Messages: msgs, SessionID: "s1",
					Tools: []provider.Tool{{Name: "read", Description: "Read a file", Parameters: map[string]any{"type": "object"}}}}
				b.ReportAllocs()
				i := 0
				for b.Loop() {
					i++
					msgs[n] = message.User(fmt.Sprintf("and now %d?", i), 2)
					if _, err := w.Build(req, cache); err != nil {
						b.Fatal(err)
					}
				}
			})
		}
	}
}

// foreign is an assistant turn of another model (its calls' ids in the
// Responses API's "call|item" form, its text signed, a thought signature
// on its call), optionally without its result or failed: what
// transform.Messages rewrites, drops or answers with a synthetic result.
func foreign(step int, kind int) []message.Message {
	id := fmt.Sprintf("call_%d|fc_%d", step, step)
	call := message.ToolCall(id, "read", map[string]any{"path": "x.go"})
	call.ThoughtSignature = "sig"
	reply := message.Message{Role: message.RoleAssistant, StopReason: message.StopToolUse, Provider: "other", Model: "o1", API: "openai-responses",
		Content: message.BlocksOf(message.Thinking("hmm", ""), message.Block{Type: message.BlockText, Text: "Looking.", TextSignature: "ts"}, call)}
	result := message.Message{Role: message.RoleToolResult, ToolCallID: id, ToolName: "read", Content: message.BlocksOf(message.Text("ok"))}
	switch kind {
	case 0:
		return []message.Message{reply, result}
	case 1: // no result: a synthetic one before the next message
		return []message.Message{reply}
	default: // failed: dropped
		reply.StopReason, reply.ErrorMessage = message.StopError, "boom"
		return []message.Message{reply}
	}
}

// Appends builds the requests of sessions held as a caller that keeps
// its history in one array does (the runner): each turn's messages go
// after the history in the array's spare capacity, and the history is
// promised never to be written again (provider.Request.Immutable); turns
// mix the adapter's replies, another model's (rewritten ids, dropped
// failures, calls left without results) and users' messages, and the
// session switches models, starts another array (a compaction, a
// rollback) or promises less, and the request's own messages before the
// history (a system prompt) change. With one cache and without it the
// bodies are the same, byte for byte. It returns the cache.
func (w Wire[M, C]) Appends(t *testing.T, models ...provider.Model) *wirecache.Cache[M, C] {
	t.Helper()
	return w.AppendsFrom(t, 7, 600, models...)
}

// FuzzAppends is a fuzz target of AppendsFrom's sessions of 120 requests
// (appends, compactions, model switches, changed system prompts, promises
// of less) from the fuzzer's seeds: every cached body is the whole
// conversion's.
func (w Wire[M, C]) FuzzAppends(f *testing.F, models ...provider.Model) {
	for _, seed := range []uint64{1, 7, 42} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, seed uint64) {
		w.AppendsFrom(t, seed, 120, models...)
	})
}

// AppendsFrom is Appends of steps requests, the session's changes drawn
// from seed (a fuzz target's input).
func (w Wire[M, C]) AppendsFrom(t *testing.T, seed uint64, steps int, models ...provider.Model) *wirecache.Cache[M, C] {
	t.Helper()
	cache := w.New(wirecache.BytesDefault)
	rnd := func(n int) int {
		seed = seed*6364136223846793005 + 1442695040888963407
		return int((seed >> 33) % uint64(n))
	}
	hist := make([]message.Message, 0, 8)
	turn := 0
	m := models[0]
	sys := "sys"
	for step := range steps {
		if rnd(15) == 0 { // the request's own messages before the history change
			sys = []string{"sys", "", "other sys"}[rnd(3)]
		}
		var add []message.Message
		switch rnd(12) {
		case 0, 1, 2:
			add = w.History(2 + rnd(4))
		case 3:
			add = w.Turn(fmt.Sprint(step), fmt.Sprint("t", step))
		case 4, 5:
			add = foreign(step, rnd(3))
		case 6:
			add = []message.Message{message.User(fmt.Sprint("question ", step), int64(step))}
		case 7, 8: // the turn is over
			hist, turn = hist[:len(hist)+turn], 0
		case 9:
			m = models[rnd(len(models))]
		case 10: // another array: a compaction or a rollback
			k := rnd(len(hist) + 1)
			next := append(make([]message.Message, 0, k+8), message.User("summary", 1))
			hist, turn = append(next, hist[:k]...), 0
		case 11: // a turn that failed: its messages dropped
			turn = 0
		}
		if len(add) > 0 {
			all := append(hist[:len(hist)+turn], add...)
			hist = all[:len(hist)]
			turn += len(add)
		}
		immutable := len(hist)
		if rnd(20) == 0 {
			immutable = rnd(immutable + 1)
		}
		req := &provider.Request{Model: m, SystemPrompt: sys, Messages: hist[:len(hist)+turn], SessionID: "s1", Immutable: immutable,
			Tools: []provider.Tool{{Name: "read", Parameters: map[string]any{"type": "object"}}}}
		w.Same(t, fmt.Sprint("step ", step), req, cache)
	}
	return cache
}

// BenchTurns builds the requests of a session's turns as the runner
// makes them (the history in one array, promised never to be written
// again, and the turn's message after it) up to 2,000 history messages,
// and before each the first turn of a fresh session, so that both see
// the same machine; it reports the median of each over the last quarter
// (the long session's at 1,500–2,000 messages) and their ratio.
func (w Wire[M, C]) BenchTurns(b *testing.B) {
	const turns = 500 // of four messages each
	cache := w.New(wirecache.BytesDefault)
	m := w.Model
	m.MaxTokens, m.Input = 16384, []string{"text"}
	tools := []provider.Tool{{Name: "read", Description: "Read a file", Parameters: map[string]any{"type": "object"}}}
	var fresh, last []time.Duration
	b.ReportAllocs()
	session := 0
	for b.Loop() {
		session++
		hist := make([]message.Message, 0, 16)
		for t := range turns {
			q := message.User(fmt.Sprintf("and now %d?", t), 2)
			f := &provider.Request{Model: m, SystemPrompt: "You are a helpful assistant.", Messages: []message.Message{q}, SessionID: fmt.Sprint("f", session, "-", t), Tools: tools}
			t0 := time.Now()
			if _, err := w.Build(f, cache); err != nil {
				b.Fatal(err)
			}
			df := time.Since(t0)
			msgs := append(hist, q)
			req := &provider.Request{Model: m, SystemPrompt: "You are a helpful assistant.", Messages: msgs, SessionID: fmt.Sprint("long", session), Tools: tools, Immutable: len(hist)}
			t0 = time.Now()
			if _, err := w.Build(req, cache); err != nil {
				b.Fatal(err)
			}
			d := time.Since(t0)
			if t >= turns*3/4 {
				fresh, last = append(fresh, df), append(last, d)
			}
			h := w.History(4)
			h[0] = q
			hist = append(hist, h...)
		}
	}
	med := func(d []time.Duration) float64 {
		s := slices.Clone(d)
		slices.Sort(s)
		return float64(s[len(s)/2].Nanoseconds()) / 1e3
	}
	b.ReportMetric(med(fresh), "fresh-µs")
	b.ReportMetric(med(last), "last-quarter-µs")
	b.ReportMetric(med(last)/med(fresh), "last-quarter/fresh")
}

// whole returns a body in parts joined, in a new array.
func whole(p wirecache.Parts) []byte {
	return bytes.Join(append([][]byte{p.Body}, p.More...), nil)
}

// Whole adapts a builder of bodies in parts (wirecache.Forms.MarshalParts)
// to Wire.Build: the body whole, its parts freed (Done) at once.
func Whole[M, C any](build func(*provider.Request, *wirecache.Cache[M, C]) (wirecache.Parts, error)) func(*provider.Request, *wirecache.Cache[M, C]) ([]byte, error) {
	return func(req *provider.Request, cache *wirecache.Cache[M, C]) ([]byte, error) {
		p, err := build(req, cache)
		if err != nil {
			return nil, err
		}
		b := whole(p)
		if p.Done != nil {
			p.Done()
		}
		return b, nil
	}
}

// InFlight is Whole, but each session's body stays in flight (its Done
// not called, as while the transport sends it) until the session's next
// request has been built, and that build fails if the body changed
// meanwhile: the cache must write nothing a body being sent reads, in
// whatever way the next request differs (a rollback, a compaction, a
// message changed in place).
func InFlight[M, C any](build func(*provider.Request, *wirecache.Cache[M, C]) (wirecache.Parts, error)) func(*provider.Request, *wirecache.Cache[M, C]) ([]byte, error) {
	type flight struct {
		p    wirecache.Parts
		sent []byte // its bytes when it was built
	}
	var mu sync.Mutex
	flying := map[string]flight{}
	return func(req *provider.Request, cache *wirecache.Cache[M, C]) ([]byte, error) {
		p, err := build(req, cache)
		if err != nil {
			return nil, err
		}
		b := whole(p)
		if cache == nil || req.SessionID == "" {
			if p.Done != nil {
				p.Done()
			}
			return b, nil
		}
		mu.Lock()
		prev, ok := flying[req.SessionID]
		flying[req.SessionID] = flight{p: p, sent: b}
		mu.Unlock()
		if ok {
			if now := whole(prev.p); !bytes.Equal(now, prev.sent) {
				return nil, fmt.Errorf("session %s: a body in flight changed while the next request was built:\n was %s\n now %s", req.SessionID, prev.sent, now)
			}
			if prev.p.Done != nil {
				prev.p.Done()
			}
		}
		return b, nil
	}
}
