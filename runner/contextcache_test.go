package runner

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/lanefleet/lanefleet/events"
	"github.com/lanefleet/lanefleet/message"
	"github.com/lanefleet/lanefleet/provider/openai"
	"github.com/lanefleet/lanefleet/tools"
)

// chain appends messages to entries as entries chained to the last one
// (in place when entries has room, as a lane's transcript grows).
func chain(entries []message.Entry, msgs ...message.Message) []message.Entry {
	b := &builder{now: time.Now, parent: lastID(entries)}
	for _, m := range msgs {
		b.add(m)
	}
	return append(entries, b.entries...)
}

// TestContextCacheMatchesFresh gives one session's cache the histories a
// session goes through and requires the context a fresh conversion makes
// every time, converting only the new entries when the history only grew.
func TestContextCacheMatchesFresh(t *testing.T) {
	t.Parallel()
	h := slices.Grow(pingPongHistory(20), 100)
	withImage := chain(h, message.Message{Role: message.RoleUser, Timestamp: 30,
		Content: message.BlocksOf(message.Text("look"), message.Image("image/png", "iVBORw0KGgo="))})
	answered := chain(withImage, message.Message{Role: message.RoleAssistant, Provider: "acme", Model: "m1", StopReason: message.StopStop,
		Content: message.BlocksOf(message.Text("a cat"))})
	parent := answered[len(answered)-1].ID
	compacted := append(slices.Clip(answered), message.Entry{Type: message.EntryCompaction, ID: "c0mpac71", ParentID: &parent,
		Timestamp: "2026-03-15T10:20:12.500Z", Fields: map[string]any{"summary": "ping-pong so far", "firstKeptEntryId": answered[18].ID, "tokensBefore": int64(99)}})
	afterCompaction := chain(compacted, message.User("next", 40))
	reread := make([]message.Entry, len(afterCompaction))
	for i, e := range afterCompaction {
		reread[i] = e.Clone()
		if e.Message != nil {
			m := e.Message.Clone()
			reread[i].Message = &m
		}
	}
	rewritten := slices.Clone(reread)
	changed := rewritten[3].Message.Clone()
	changed.Content = message.BlocksOf(message.Text("pong, rewritten"))
	rewritten[3].Message = &changed
	branched := chain(slices.Clone(h[:10]), message.User("another branch", 50))
	steps := []struct {
		name     string
		history  []message.Entry
		extended bool
	}{
		{"empty", nil, false},
		{"first run", h[:10], false},
		{"a turn later", h[:12], true},
		{"same history again", h[:12], true},
		{"another worker's turns", h[:20], true},
		{"an image", withImage, true},
		{"the image answered: pruned", answered, true},
		{"a compaction", compacted, false},
		{"a turn after it", afterCompaction, true},
		{"re-read from the store", reread, false},
		{"an entry rewritten", rewritten, false},
		{"rollback", rewritten[:8], false},
		{"a branch off an earlier entry", branched, false},
	}
	// None of these writes an array below a length it was handed at
	// before: the same whether the caller promises so or not.
	for _, appendOnly := range []bool{false, true} {
		c := newContextCache(ContextCacheBytesDefault)
		for _, st := range steps {
			before := c.extended.Load()
			sc := c.acquire("k", st.history, appendOnly)
			got := sc.base
			c.release(sc)
			if want := contextOf(st.history); !reflect.DeepEqual(got, want) {
				t.Fatalf("%s (append only %v): cached context differs:\n got %+v\nwant %+v", st.name, appendOnly, got, want)
			}
			if ext := c.extended.Load() > before; ext != st.extended {
				t.Errorf("%s (append only %v): extended %v, want %v", st.name, appendOnly, ext, st.extended)
			}
		}
		sc := c.acquire("k", answered, appendOnly)
		if sc.base[len(h)].Content.Blocks[1].Type != message.BlockText {
			t.Error("the answered image was sent again")
		}
		c.release(sc)
	}
}

// TestContextCacheAppendOnly: a history over the array the cached context
// was built from, whose caller promised never to write it below its
// length (Input.HistoryAppendOnly), is checked by its new entries alone
// (none of the 1,000 before compared), and what the checks left still
// catch gives the fresh context every time: an entry rewritten in a new
// array (fails without the array check), a rollback grown again in the
// same array, breaking the promise (fails without the check of the last
// entry the context was built from), a compaction and a branch appended
// in place.
func TestContextCacheAppendOnly(t *testing.T) {
	t.Parallel()
	h := slices.Grow(pingPongHistory(1000), 100)
	turn := func(hist []message.Entry, i int) []message.Entry {
		return chain(hist, message.User(fmt.Sprint("ping again ", i), int64(2000+i)), message.Message{Role: message.RoleAssistant,
			StopReason: message.StopStop, Provider: "acme", Model: "m1", API: "openai-completions", Content: message.BlocksOf(message.Text("pong"))})
	}
	// Each history is made when its step comes (some are written over
	// the array of the one before).
	var grown, rewritten, rolledBack, compacted, afterCompaction []message.Entry
	steps := []struct {
		name     string
		history  func() []message.Entry
		extended bool
		compared bool // the entries before the new ones compared
	}{
		{"first run", func() []message.Entry { return h }, false, false},
		{"a turn later, same array", func() []message.Entry { grown = turn(h, 0); return grown }, true, false},
		{"the same history again", func() []message.Entry { return grown }, true, false},
		{"an entry rewritten, in a new array", func() []message.Entry {
			rewritten = slices.Grow(slices.Clone(grown), 100)
			changed := rewritten[3].Message.Clone()
			changed.Content = message.BlocksOf(message.Text("pong, rewritten"))
			rewritten[3].Message = &changed
			return rewritten
		}, false, true},
		{"a turn later, the new array", func() []message.Entry { rewritten = turn(rewritten, 1); return rewritten }, true, false},
		{"a rollback grown again in place", func() []message.Entry {
			// Six entries back and eight on, over the same array.
			rolledBack = turn(turn(turn(turn(rewritten[:len(rewritten)-6], 2), 3), 4), 5)
			return rolledBack
		}, false, false},
		{"a compaction appended in place", func() []message.Entry {
			parent := rolledBack[len(rolledBack)-1].ID
			compacted = append(rolledBack, message.Entry{Type: message.EntryCompaction, ID: "c0mpac71", ParentID: &parent,
				Timestamp: "2026-03-15T10:20:12.500Z", Fields: map[string]any{"summary": "ping-pong so far", "firstKeptEntryId": rolledBack[900].ID, "tokensBefore": int64(99)}})
			return compacted
		}, false, false},
		{"a turn after it", func() []message.Entry { afterCompaction = turn(compacted, 6); return afterCompaction }, true, false},
		{"a branch appended in place", func() []message.Entry {
			b := &builder{now: time.Now, parent: afterCompaction[len(afterCompaction)-9].ID}
			b.add(message.User("another branch", 3000))
			return append(afterCompaction, b.entries...)
		}, false, false},
	}
	c := newContextCache(ContextCacheBytesDefault)
	for _, st := range steps {
		hist := st.history()
		ext0, cmp0 := c.extended.Load(), c.compared.Load()
		sc := c.acquire("k", hist, true)
		got := sc.base
		c.release(sc)
		if want := contextOf(hist); !reflect.DeepEqual(got, want) {
			t.Fatalf("%s: cached context differs from a fresh one", st.name)
		}
		if ext := c.extended.Load() > ext0; ext != st.extended {
			t.Errorf("%s: extended %v, want %v", st.name, ext, st.extended)
		}
		if cmp := c.compared.Load() > cmp0; cmp != st.compared {
			t.Errorf("%s: compared %d entries, want them compared: %v", st.name, c.compared.Load()-cmp0, st.compared)
		}
	}
	// Without the promise every turn compares the whole history.
	c = newContextCache(ContextCacheBytesDefault)
	c.release(c.acquire("k", h, false))
	c.release(c.acquire("k", grown, false))
	if n := c.compared.Load(); n != int64(len(h)-1) {
		t.Errorf("without the promise: %d entries compared, want %d", n, len(h)-1)
	}
}

// TestContextCacheBounded keeps sessions within the byte budget, least
// recently used dropped first, none over half the budget kept.
func TestContextCacheBounded(t *testing.T) {
	t.Parallel()
	c := newContextCache(64 << 10)
	h := pingPongHistory(40)
	for i := range 50 {
		c.release(c.acquire(fmt.Sprint("s", i), h, false))
	}
	if c.take("s0") != nil {
		t.Error("the least recently used session is still kept")
	}
	if c.take("s49") == nil {
		t.Error("the latest session is not kept")
	}
	c.release(c.acquire("big", pingPongHistory(2000), false))
	if c.take("big") != nil {
		t.Error("a session over half the budget is kept")
	}
}

// TestContextCacheConcurrent runs sessions' histories through one cache at
// once (run with -race): every context is the fresh one.
func TestContextCacheConcurrent(t *testing.T) {
	t.Parallel()
	c := newContextCache(ContextCacheBytesDefault)
	h := pingPongHistory(80)
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			for i := range 40 {
				hist := h[:(i*3+g)%80]
				sc := c.acquire(fmt.Sprint("s", g%3), hist, false)
				// What a run appends in the spare capacity.
				out := append(sc.base, message.User("the turn's", 1))
				ok := reflect.DeepEqual(out[:len(sc.base)], contextOf(hist))
				c.release(sc)
				if !ok {
					t.Errorf("session %d run %d: cached context differs", g%3, i)
					return
				}
			}
		})
	}
	wg.Wait()
}

// TestLongSessionBodiesCached runs one session's turns through two
// runners, one with the context and wire caches and one without, against
// a real OpenAI-compatible endpoint, and requires the same request bytes
// at every model call: turns appended, turns of two model calls (a tool's
// result), a compaction, a rollback, a rewritten history, another model's
// turn.
func TestLongSessionBodiesCached(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	bodies := map[string][][]byte{}
	calls := map[string]int{}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		mu.Lock()
		bodies[r.URL.Path] = append(bodies[r.URL.Path], b)
		mu.Unlock()
		w.Header().Set("Content-Type", "text/event-stream")
		// A prompt asking for the tool gets a call of it (the turn then
		// makes a second model call with its result), anything else pong.
		if last := b[bytes.LastIndex(b, []byte(`"role":"`)):]; bytes.HasPrefix(last, []byte(`"role":"user","content":"use the tool`)) {
			mu.Lock()
			calls[r.URL.Path]++
			id := fmt.Sprintf("call_%d", calls[r.URL.Path])
			mu.Unlock()
			fmt.Fprintf(w, `data: {"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"id":%q,"type":"function","function":{"name":"act","arguments":"{\"n\":1}"}}]},"finish_reason":null}]}`+"\n\n"+
				`data: {"choices":[{"index":0,"delta":{},"finish_reason":"tool_calls"}]}`+"\n\ndata: [DONE]\n\n", id)
			return
		}
		_, _ = w.Write([]byte(pongSSE))
	}))
	defer srv.Close()
	runner := func(path string, cacheBytes int) *Runner {
		r, err := New(Config{DefaultModel: "acme/m1", ContextCacheBytes: cacheBytes, Tools: workspaceTools{tools.List{&countedTool{name: "act"}}},
			Resolver: urlResolver{url: srv.URL + path, prov: openai.NewCompletions(openai.Config{WireCacheBytes: cacheBytes})}})
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	cached, fresh := runner("/cached", 0), runner("/fresh", -1)
	var h []message.Entry
	turn := func(name string, hist []message.Entry) []message.Entry {
		in := Input{SessionKey: "k", SessionID: "s", RunID: name, Inbound: &events.Inbound{Text: name}, History: hist}
		out, err := cached.Run(context.Background(), in, nopSink{})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := fresh.Run(context.Background(), in, nopSink{}); err != nil {
			t.Fatal(err)
		}
		return append(hist, out.Entries...)
	}
	for i := range 12 {
		name := fmt.Sprint("turn ", i)
		if i%4 == 1 {
			name = fmt.Sprint("use the tool, turn ", i)
		}
		h = turn(name, h)
	}
	mid := h[len(h)-1].ID
	h = append(h, message.Entry{Type: message.EntryCompaction, ID: "c0mpac71", ParentID: &mid, Timestamp: "2026-03-15T10:20:12.500Z",
		Fields: map[string]any{"summary": "twelve turns", "firstKeptEntryId": h[20].ID, "tokensBefore": int64(99)}})
	for i := range 3 {
		h = turn(fmt.Sprint("after compaction ", i), h)
	}
	h = turn("rollback", slices.Clone(h[:10]))
	rewritten := slices.Clone(h)
	m := rewritten[5].Message.Clone()
	m.Content = message.BlocksOf(message.Text("rewritten"))
	rewritten[5].Message = &m
	h = turn("rewritten", rewritten)
	// A message replaced in place in the history the last run had.
	inPlace := message.Message{Role: message.RoleUser, Content: message.BlocksOf(message.Text("replaced in place")), Timestamp: 3}
	h[7].Message = &inPlace
	h = turn("after a message replaced in place", h)
	h = chain(h, message.Message{Role: message.RoleAssistant, Provider: "other", Model: "x", API: "openai-completions",
		StopReason: message.StopStop, Content: message.BlocksOf(message.Block{Type: message.BlockText, Text: "from another model", TextSignature: "sig"})})
	_ = turn("after another model", h)

	a, b := bodies["/cached/v1/chat/completions"], bodies["/fresh/v1/chat/completions"]
	if len(a) != 22 || len(b) != len(a) {
		t.Fatalf("%d and %d requests, want 22", len(a), len(b))
	}
	for i := range a {
		if !bytes.Equal(a[i], b[i]) {
			t.Fatalf("request %d differs:\ncached %s\n fresh %s", i, a[i], b[i])
		}
	}
	if n := cached.contexts.extended.Load(); n < 12 {
		t.Errorf("%d runs extended a cached context, want most", n)
	}
	sc := cached.contexts.take("k\x00s")
	if sc == nil || sc.sizes.Reused < 100 || sc.sizes.Measured < 22 {
		t.Errorf("the guard's estimates were not kept and reused: %+v", sc)
	}
}

// TestContextCacheCountsToolArguments: a tool call's arguments count
// toward the budget (a written file can be megabytes): a session holding
// 1 MiB of arguments is charged at least that, and is not kept in a cache
// whose half is smaller.
func TestContextCacheCountsToolArguments(t *testing.T) {
	t.Parallel()
	h := pingPongHistory(4)
	b := &builder{now: time.Now, entries: h}
	call := message.Message{Role: message.RoleAssistant, StopReason: message.StopToolUse, Provider: "acme", Model: "m1", API: "openai-completions",
		Content: message.BlocksOf(message.Block{Type: message.BlockToolCall, ID: "c1", Name: "write", Arguments: map[string]any{"content": strings.Repeat("x", 1<<20)}})}
	b.add(call)
	small := newContextCache(64 << 10)
	small.release(small.acquire("s", b.entries, false))
	if small.take("s") != nil {
		t.Fatal("a session holding 1 MiB of tool arguments was kept in a 64 KiB cache")
	}
	big := newContextCache(16 << 20)
	big.release(big.acquire("s", b.entries, false))
	if sc := big.take("s"); sc == nil || sc.size < 1<<20 {
		t.Fatalf("a session holding 1 MiB of tool arguments: %+v", sc)
	}
}

// TestPreparedMatchesWhole runs a session through the histories it goes
// through (turns, another worker's turns, an image pruned once answered,
// a compaction, a re-read, a rewritten entry, a rollback, a branch) on a
// runner that keeps its sessions' preparations and wire forms and on one
// that keeps nothing, through each wire API's adapter: every request body
// must be the same, and the first must have prepared only the new
// messages of most turns.
func TestPreparedMatchesWhole(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	bodies := map[string][]string{}
	srv := recordingPongServer(t, func(path string, body []byte) {
		mu.Lock()
		defer mu.Unlock()
		name, _, _ := strings.Cut(strings.TrimPrefix(path, "/"), "/")
		bodies[name] = append(bodies[name], string(body))
	})
	h := slices.Grow(pingPongHistory(20), 100)
	withImage := chain(h, message.Message{Role: message.RoleUser, Timestamp: 30,
		Content: message.BlocksOf(message.Text("look"), message.Image("image/png", "iVBORw0KGgo="))})
	answered := chain(withImage, message.Message{Role: message.RoleAssistant, Provider: "acme", Model: "m1", StopReason: message.StopStop,
		Content: message.BlocksOf(message.Text("a cat"))})
	parent := answered[len(answered)-1].ID
	compacted := append(slices.Clip(answered), message.Entry{Type: message.EntryCompaction, ID: "c0mpac71", ParentID: &parent,
		Timestamp: "2026-03-15T10:20:12.500Z", Fields: map[string]any{"summary": "ping-pong so far", "firstKeptEntryId": answered[18].ID, "tokensBefore": int64(99)}})
	afterCompaction := chain(compacted, message.User("next", 40), message.Message{Role: message.RoleAssistant, Provider: "acme", Model: "m1",
		StopReason: message.StopStop, Content: message.BlocksOf(message.Text("ok"))})
	rewritten := slices.Clone(afterCompaction)
	changed := rewritten[3].Message.Clone()
	changed.Content = message.BlocksOf(message.Text("pong, rewritten"))
	rewritten[3].Message = &changed
	branched := chain(slices.Clone(h[:10]), message.User("another branch", 50))
	histories := [][]message.Entry{nil, h[:10], h[:12], h[:12], h[:20], withImage, answered, compacted, afterCompaction,
		rewritten, rewritten[:8], rewritten[:10], branched}
	for _, a := range sessionAPIs {
		runners := map[string]*Runner{}
		for _, kind := range []string{"kept", "none"} {
			cacheBytes := 0
			if kind == "none" {
				cacheBytes = -1
			}
			r, err := New(Config{DefaultModel: "acme/m1", ContextCacheBytes: cacheBytes,
				Resolver: urlResolver{url: srv.URL + "/" + kind + "-" + a.api, prov: a.prov(cacheBytes), api: a.api}})
			if err != nil {
				t.Fatal(err)
			}
			runners[kind] = r
		}
		for i, hist := range histories {
			for kind, r := range runners {
				// Only the kept runner's caller promises its arrays
				// append-only (none of these writes one below a length
				// it handed over).
				in := Input{SessionKey: "k", SessionID: "s", RunID: fmt.Sprint("r", i), Inbound: &events.Inbound{Text: fmt.Sprint("turn ", i)},
					History: hist, HistoryAppendOnly: kind == "kept"}
				if _, err := r.Run(context.Background(), in, nopSink{}); err != nil {
					t.Fatalf("%s %s, history %d: %v", a.api, kind, i, err)
				}
			}
		}
		mu.Lock()
		kept, none := bodies["kept-"+a.api], bodies["none-"+a.api]
		mu.Unlock()
		if len(kept) != len(histories) || len(none) != len(histories) {
			t.Fatalf("%s: %d and %d requests, want %d each", a.api, len(kept), len(none), len(histories))
		}
		for i := range kept {
			if kept[i] != none[i] {
				t.Fatalf("%s, history %d: the request differs from the whole preparation's:\n got %s\nwant %s", a.api, i, kept[i], none[i])
			}
		}
		r := runners["kept"]
		r.contexts.mu.Lock()
		sc, _ := r.contexts.sessions.Peek("k\x00s")
		r.contexts.mu.Unlock()
		if sc == nil || sc.prepared.Len() == 0 {
			t.Fatalf("%s: the session's preparation was not kept", a.api)
		}
	}
}
