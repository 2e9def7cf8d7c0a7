package sanitize

import (
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"reflect"
	"testing"
	"unsafe"

	"github.com/lanefleet/lanefleet/message"
)

// appendTargets are models of every kind of policy: those the Appender
// prepares message by message and those it declines.
var appendTargets = [][3]string{
	{"acme", "openai-completions", "m1"}, // strict compatible: user turns merged
	{"openai", "openai-completions", "gpt-5.2"},
	{"openai", "openai-responses", "gpt-5.2"},
	{"github-copilot", "openai-completions", "claude-opus-4.6"}, // thinking dropped
	{"openrouter", "openai-completions", "meta/llama"},
	{"anthropic", "anthropic-messages", "claude-opus-4-6"},
	{"google", "google-generative-ai", "gemini-2.5-pro"},
	{"mistral", "openai-completions", "mistral-large"},
}

// randMessage makes a message of a session, mostly well formed (a turn's
// user message, a reply, its calls' results in order) and now and then
// not: orphan and out-of-order results, duplicate and malformed calls,
// summaries, provenance, the refusal trigger, roleless messages, images,
// details, stale usage.
type sessionGen struct {
	r       *rand.Rand
	pending []string // calls awaiting results
	n       int
}

func (g *sessionGen) ts() int64 { g.n++; return int64(1000 + g.n*10 - g.r.IntN(30)) }

func (g *sessionGen) next() message.Message {
	r := g.r
	if len(g.pending) > 0 && r.IntN(10) > 0 {
		i := 0
		if r.IntN(12) == 0 {
			i = len(g.pending) - 1 // out of order
		}
		id := g.pending[i]
		g.pending = append(g.pending[:i:i], g.pending[i+1:]...)
		m := message.Message{Role: message.RoleToolResult, ToolCallID: id, ToolName: "read", Timestamp: g.ts(),
			Content: message.BlocksOf(message.Text("result of " + id))}
		switch r.IntN(8) {
		case 0:
			m.Content = message.PlainText("plain " + id)
		case 1:
			m.Details = map[string]any{"bytes": 3.0}
		case 2:
			m.IsError = true
		}
		return m
	}
	switch k := r.IntN(20); {
	case k < 7:
		m := message.User(fmt.Sprintf("ping %d", g.n), g.ts())
		switch r.IntN(12) {
		case 0:
			m.Content = message.BlocksOf(message.Text("look"), message.Image("image/png", "aGVsbG8="))
		case 1:
			m.Extra = map[string]any{"provenance": map[string]any{"kind": "inter_session", "sourceSessionKey": "other"}}
		case 2:
			m = message.User("say "+RefusalTrigger, g.ts())
		}
		return m
	case k < 16:
		m := message.Message{Role: message.RoleAssistant, StopReason: message.StopStop, Provider: "acme", Model: "m1", API: "openai-completions",
			Content: message.BlocksOf(message.Text("pong")), Usage: &message.Usage{Input: 2, Output: 1, TotalTokens: 3}, Timestamp: g.ts()}
		if r.IntN(4) == 0 {
			m.Content = message.BlocksOf(message.Thinking("hmm", ""), message.Text("pong"))
		}
		if r.IntN(3) == 0 {
			m.StopReason = message.StopToolUse
			calls := 1 + r.IntN(3)
			blocks := []message.Block{message.Text("calling")}
			for c := range calls {
				id := fmt.Sprintf("call_%d_%d", g.n, c)
				switch r.IntN(25) {
				case 0:
					id = "" // no id
				case 1:
					if c > 0 {
						id = fmt.Sprintf("call_%d_%d", g.n, 0) // twice in a message
					}
				case 2, 3, 4:
					// Ids that one rewriting makes the same ("c1"), and
					// an id an earlier message's call had.
					id = []string{"c-1", "c_1", "c1", "c.1", "c|1"}[r.IntN(5)]
				}
				name := "read"
				if r.IntN(30) == 0 {
					name = "bad name!" // refused: noted
				}
				blocks = append(blocks, message.ToolCall(id, name, map[string]any{"path": "a.go"}))
				if id != "" && !containsStr(g.pending, id) {
					g.pending = append(g.pending, id)
				}
			}
			m.Content = message.BlocksOf(blocks...)
		}
		switch r.IntN(20) {
		case 0:
			m.StopReason = message.StopError
			m.ErrorMessage = "boom"
		case 1:
			m.StopReason = message.StopAborted
		}
		if m.StopReason == message.StopError || m.StopReason == message.StopAborted {
			if r.IntN(2) == 0 {
				g.pending = nil
			}
		}
		return m
	case k < 17:
		return message.Message{Role: message.RoleToolResult, ToolCallID: "orphan", ToolName: "read", Timestamp: g.ts(),
			Content: message.BlocksOf(message.Text("orphan"))}
	case k < 18:
		return message.Message{Role: roleCompactionSummary, Content: message.PlainText("summary"), Timestamp: g.ts()}
	case k < 19:
		return message.Message{Role: "", Content: message.PlainText("roleless"), Timestamp: g.ts()}
	}
	g.pending = nil
	return message.User("again", g.ts())
}

func containsStr(s []string, v string) bool {
	for _, x := range s {
		if x == v {
			return true
		}
	}
	return false
}

// checkAppender drives an Appender through a random session: messages
// appended a few at a time, requests with a few more (a turn in
// progress), model switches and resets (a compaction, a rollback), and
// checks every result it gives against PrepareFinal of the whole history.
// It returns how many results it checked.
func checkAppender(t *testing.T, seed uint64, steps int) (checked, appended int) {
	r := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	g := &sessionGen{r: r}
	var a Appender
	var hist []message.Message
	tg := appendTargets[r.IntN(len(appendTargets))]
	req := func(msgs []message.Message) Request {
		return Request{Provider: tg[0], API: tg[1], ModelID: tg[2], Messages: msgs, Now: 1 << 40,
			Images: ImageLimits{MaxSide: 64, MaxBytes: 64 << 10}}
	}
	for step := range steps {
		switch k := r.IntN(20); {
		case k == 0:
			tg = appendTargets[r.IntN(len(appendTargets))] // another model
		case k == 1:
			// A compaction or rollback: the history is another one.
			hist = nil
			g.pending = nil
			a.Reset()
		}
		for range 1 + r.IntN(3) {
			hist = append(hist, g.next())
		}
		if r.IntN(3) > 0 {
			if a.Extend(req(hist)) {
				checked++
				want := PrepareFinal(req(hist))
				if len(want) == 0 {
					want = nil
				}
				got := a.out
				if len(got) == 0 {
					got = nil
				}
				if len(a.out) > 0 && !reflect.DeepEqual(got, want) {
					t.Fatalf("seed %d step %d %v: Extend of %d messages:\n got %+v\nwant %+v", seed, step, tg, len(hist), got, want)
				}
				checkBytes(t, &a, fmt.Sprintf("seed %d step %d %v", seed, step, tg))
			}
		}
		// A request of the history and a turn in progress.
		extra := hist[:len(hist):len(hist)]
		for range r.IntN(3) {
			extra = append(extra, g.next())
		}
		if got, ok := a.With(req(extra)); ok {
			checked++
			appended++
			if want := PrepareFinal(req(extra)); !reflect.DeepEqual(got, want) {
				t.Fatalf("seed %d step %d %v: With of %d messages (%d kept):\n got %+v\nwant %+v", seed, step, tg, len(extra), a.Len(), got, want)
			}
		}
		// The turn's messages are not part of the history: the generator
		// forgets the calls they made.
		g.pending = nil
	}
	return checked, appended
}

// walkBytes is Bytes as it was computed before the Appender kept a count:
// a walk over its id maps.
func walkBytes(a *Appender) int {
	n := cap(a.out)*int(unsafe.Sizeof(message.Message{})) + cap(a.st.pending)*int(unsafe.Sizeof(""))
	if ids := a.st.ids; ids != nil {
		for k, v := range ids.m {
			n += len(k) + len(v) + mappedIDBytes
		}
		n += len(ids.used) * usedIDBytes
	}
	for k := range a.st.calls {
		n += len(k) + callIDBytes
	}
	return n
}

// checkBytes fails when a's counted Bytes is not what a walk of its maps
// finds.
func checkBytes(t *testing.T, a *Appender, where string) {
	t.Helper()
	if got, want := a.Bytes(), walkBytes(a); got != want {
		t.Fatalf("%s: Bytes %d, a walk of its maps %d", where, got, want)
	}
}

// TestAppenderMatchesPrepare: for random sessions and random sequences of
// appends, turns, model switches and resets, every preparation the
// Appender gives is PrepareFinal's of the whole history, and it gives
// them for most turns of the policies it serves.
func TestAppenderMatchesPrepare(t *testing.T) {
	t.Parallel()
	checked, appended := 0, 0
	for seed := range uint64(300) {
		c, a := checkAppender(t, seed, 120)
		checked += c
		appended += a
	}
	if appended < 1200 {
		t.Fatalf("only %d of %d checked preparations were appended: the test no longer exercises the Appender", appended, checked)
	}
}

// FuzzAppender is TestAppenderMatchesPrepare for fuzzed seeds.
func FuzzAppender(f *testing.F) {
	f.Add([]byte{1, 2, 3, 4, 5, 6, 7, 8})
	f.Fuzz(func(t *testing.T, data []byte) {
		var b [8]byte
		copy(b[:], data)
		checkAppender(t, binary.LittleEndian.Uint64(b[:]), 60)
	})
}

// TestAppenderChatSession: a plain chat session to an OpenAI-compatible
// model and to Gemini (whose turn rules change nothing of it) is prepared
// message by message at every turn after the first.
func TestAppenderChatSession(t *testing.T) {
	t.Parallel()
	for _, tg := range [][3]string{{"acme", "openai-completions", "m1"}, {"google", "google-generative-ai", "gemini-2.5-pro"}} {
		chatSession(t, tg)
	}
}

// chatSession is TestAppenderChatSession for the model tg.
func chatSession(t *testing.T, tg [3]string) {
	var a Appender
	var hist []message.Message
	for i := range 50 {
		r := Request{Provider: tg[0], API: tg[1], ModelID: tg[2], Messages: hist}
		if i > 0 {
			turn := append(hist[:len(hist):len(hist)], message.User(fmt.Sprint("ping ", i), int64(i)))
			got, ok := a.With(Request{Provider: r.Provider, API: r.API, ModelID: r.ModelID, Messages: turn})
			if !ok {
				t.Fatalf("turn %d: declined", i)
			}
			if want := PrepareFinal(Request{Provider: r.Provider, API: r.API, ModelID: r.ModelID, Messages: turn}); !reflect.DeepEqual(got, want) {
				t.Fatalf("turn %d: got %v, want %v", i, got, want)
			}
		}
		hist = append(hist, message.User(fmt.Sprint("ping ", i), int64(i)), message.Message{Role: message.RoleAssistant, StopReason: message.StopStop,
			Content: message.BlocksOf(message.Text("pong")), Timestamp: int64(i)})
		r.Messages = hist
		if !a.Extend(r) {
			t.Fatalf("turn %d: Extend declined", i)
		}
	}
	if a.Declined != 0 {
		t.Fatalf("%v: declined %d times", tg, a.Declined)
	}
}

// TestAppenderGeminiDeclines: for Gemini, a history that starts with a
// reply (a bootstrap turn goes before it, stamped with the time of the
// preparation) and one whose replies would merge are prepared whole: the
// Appender declines them.
func TestAppenderGeminiDeclines(t *testing.T) {
	t.Parallel()
	reply := func(text string) message.Message {
		return message.Message{Role: message.RoleAssistant, StopReason: message.StopStop, Content: message.BlocksOf(message.Text(text)), Timestamp: 2}
	}
	for name, hist := range map[string][]message.Message{
		"a reply first":                   {reply("hello"), message.User("hi", 3)},
		"two replies":                     {message.User("hi", 1), reply("one"), reply("two")},
		"two replies, a roleless between": {message.User("hi", 1), reply("one"), {Content: message.PlainText("roleless"), Timestamp: 2}, reply("two")},
	} {
		var a Appender
		if a.Extend(Request{Provider: "google", API: "google-generative-ai", ModelID: "gemini-2.5-pro", Messages: hist}) {
			t.Errorf("%s: extended", name)
		}
	}
}

// TestAppenderRewritesIDs: for the policies that rewrite tool-call ids
// (Anthropic's, Mistral's), a session whose later turns call with ids that
// the rewriting makes the same as earlier ones' ("call_7", "call7"), or
// with an earlier call's very id (renamed by uniqueCallIDs to an id unused
// in the whole transcript: prepared whole), is prepared as PrepareFinal
// prepares it, turn after turn, and the turns without either are
// appended.
func TestAppenderRewritesIDs(t *testing.T) {
	t.Parallel()
	ids := []string{"call_1", "call1", "toolu_01|fc", "call-1", "toolu01fc", "x", "call_1", "y", "call.1", "z"}
	for _, tg := range [][3]string{{"anthropic", "anthropic-messages", "claude-opus-4-6"}, {"mistral", "openai-completions", "mistral-large"}} {
		var a Appender
		var hist []message.Message
		appended := 0
		req := func(msgs []message.Message) Request {
			return Request{Provider: tg[0], API: tg[1], ModelID: tg[2], Messages: msgs, Now: 1 << 40}
		}
		for i, id := range ids {
			turn := append(hist[:len(hist):len(hist)], message.User(fmt.Sprint("ping ", i), int64(i)),
				message.Message{Role: message.RoleAssistant, StopReason: message.StopToolUse, Provider: tg[0], API: tg[1], Model: tg[2],
					Content: message.BlocksOf(message.ToolCall(id, "read", map[string]any{"p": "x"})), Timestamp: int64(i)},
				message.Message{Role: message.RoleToolResult, ToolCallID: id, ToolName: "read", Content: message.BlocksOf(message.Text("ok")), Timestamp: int64(i)})
			if got, ok := a.With(req(turn)); ok {
				appended++
				if want := PrepareFinal(req(turn)); !reflect.DeepEqual(got, want) {
					t.Fatalf("%v turn %d (%q): With:\n got %+v\nwant %+v", tg, i, id, got, want)
				}
			}
			hist = append(turn, message.Message{Role: message.RoleAssistant, StopReason: message.StopStop, Provider: tg[0], API: tg[1], Model: tg[2],
				Content: message.BlocksOf(message.Text("done")), Timestamp: int64(i)})
			if a.Extend(req(hist)) {
				if want := PrepareFinal(req(hist)); !reflect.DeepEqual(a.out, want) {
					t.Fatalf("%v turn %d (%q): Extend:\n got %+v\nwant %+v", tg, i, id, a.out, want)
				}
				checkBytes(t, &a, fmt.Sprintf("%v turn %d (%q)", tg, i, id))
			}
		}
		if appended < 4 {
			t.Errorf("%v: %d turns appended", tg, appended)
		}
	}
}
