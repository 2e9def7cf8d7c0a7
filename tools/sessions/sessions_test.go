package sessions

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/lanefleet/lanefleet/events"
	"github.com/lanefleet/lanefleet/governance"
	"github.com/lanefleet/lanefleet/message"
	"github.com/lanefleet/lanefleet/tools"
)

// TestPolicy: a session reaches its own tenant's sessions (and with
// ScopeAgent its own agent's), never another tenant's; without a tenant
// only itself.
func TestPolicy(t *testing.T) {
	t.Parallel()
	tenant := Policy{}
	agent := Policy{Scope: ScopeAgent}
	slash := Policy{Tenants: governance.TenantRule{Separator: "/"}}
	off := Policy{Tenants: governance.TenantRule{Off: true}}
	cases := []struct {
		p              Policy
		caller, target string
		want           bool
	}{
		{tenant, "acme:a", "acme:b", true},
		{tenant, "acme:a", "acme:a", true},
		{tenant, "acme:a", "globex:a", false},
		{tenant, "acme:a", "acme", false},          // no tenant
		{tenant, "acme:a", "acmex:a", false},       // a prefix of the name is not the tenant
		{tenant, "alice", "bob", false},            // no tenants: only itself
		{tenant, "alice", "alice", true},           // itself
		{tenant, "acme:a", "ACME:a", false},        // case matters
		{tenant, "acme:a", "acme:" + "\x00", true}, // Allows decides scope only; target checks the key
		{agent, "agent:x:1", "agent:x:2", true},
		{agent, "agent:x:1", "agent:y:1", false},
		{agent, "acme:a", "acme:b", true},
		{slash, "acme/a", "acme/b", true},
		{slash, "acme/a", "acme:b", false},
		{off, "acme:a", "acme:b", false},
	}
	for _, c := range cases {
		if got := c.p.Allows(c.caller, c.target); got != c.want {
			t.Errorf("%+v %q -> %q: %v", c.p, c.caller, c.target, got)
		}
	}
	if err := (Policy{Scope: "all"}).Validate(); err == nil {
		t.Error("scope all accepted")
	}
	// A spawn carries every session above the child: no deeper than it
	// can name.
	if err := (Policy{MaxDepth: events.MaxAncestors + 1}).Validate(); err == nil {
		t.Error("a depth deeper than a spawn can carry accepted")
	}
	if err := (Policy{MaxDepth: events.MaxAncestors}).Validate(); err != nil {
		t.Errorf("depth %d refused: %v", events.MaxAncestors, err)
	}
	if p, k := tenant.Prefixes("acme:a"); len(p) != 1 || p[0] != "acme:" || k != nil {
		t.Errorf("prefixes %v %v", p, k)
	}
	if p, k := tenant.Prefixes("alice"); p != nil || len(k) != 1 || k[0] != "alice" {
		t.Errorf("prefixes %v %v", p, k)
	}
}

// memBackend is an in-memory Backend: sessions and their transcripts, and
// what was sent.
type memBackend struct {
	sessions []Info
	history  map[string][][]message.Entry // turns, oldest first
	// reads counts the turns History handed over.
	reads   int
	sent    []string
	spawned []spawnCall
}

type spawnCall struct {
	key, publishID string
	in             *events.Inbound
}

func (b *memBackend) List(_ context.Context, prefixes, keys []string, limit int) ([]Info, error) {
	var out []Info
	for _, s := range b.sessions {
		ok := false
		for _, p := range prefixes {
			ok = ok || strings.HasPrefix(s.Key, p)
		}
		for _, k := range keys {
			ok = ok || s.Key == k
		}
		if ok && len(out) < limit {
			out = append(out, s)
		}
	}
	return out, nil
}

// History hands over turns newest first as the fleet's does (turn i+1 is
// history[key][i]; a message's text is its bytes).
func (b *memBackend) History(_ context.Context, key string, q HistoryQuery, fn func(uint64, []message.Entry) bool) (HistoryRead, error) {
	var read HistoryRead
	turns := b.history[key]
	for i := len(turns) - 1; i >= 0; i-- {
		turn := uint64(i + 1)
		if q.Before > 0 && turn >= q.Before {
			continue
		}
		if read.Turns >= max(q.MaxTurns, 1) || read.Turns > 0 && read.Bytes >= q.MaxBytes {
			read.More, read.Next = true, turn+1
			return read, nil
		}
		read.Turns++
		b.reads++
		for _, e := range turns[i] {
			read.Bytes += len(e.Message.Content.Text())
		}
		if !fn(turn, turns[i]) {
			read.More, read.Next = i > 0, turn
			return read, nil
		}
	}
	return read, nil
}

func (b *memBackend) Send(_ context.Context, key, text, id string) (string, error) {
	b.sent = append(b.sent, key+"|"+id+"|"+text)
	return fmt.Sprint(len(b.sent)), nil
}

func entry(m message.Message) message.Entry { return message.Entry{Type: "message", Message: &m} }

func setup(t *testing.T, caller string) (*memBackend, tools.List) {
	t.Helper()
	now := time.Now()
	b := &memBackend{
		sessions: []Info{{Key: "acme:a", LastActivity: now}, {Key: "acme:b", LastActivity: now.Add(-time.Hour), Running: true}, {Key: "globex:z", LastActivity: now}},
		history: map[string][][]message.Entry{"acme:b": {
			{
				entry(message.User("what is the plan?", 1)),
				entry(message.Message{Role: message.RoleAssistant, Content: message.Content{Blocks: []message.Block{{Type: message.BlockThinking, Thinking: "secret thoughts"}, message.Text("ship friday"), message.ToolCall("c1", "exec", nil)}}}),
				entry(message.Message{Role: message.RoleToolResult, ToolName: "exec", Content: message.PlainText("ok")}),
			},
			{entry(message.User(strings.Repeat("é", messageChars+10), 2))},
		}},
	}
	l, err := Tools(b, Policy{}, caller, "7", nil)
	if err != nil {
		t.Fatal(err)
	}
	return b, l
}

func call(t *testing.T, l tools.List, name string, args map[string]any) (tools.Result, error) {
	t.Helper()
	tool, ok := l.Lookup(name)
	if !ok {
		t.Fatalf("no %s", name)
	}
	return tool.Call(context.Background(), tools.Call{ID: "c9", Key: "run7-c9", Name: name, Args: args})
}

// TestTools: list, history and send within the policy; thinking and
// (by default) tools left out of histories; provenance and the message id
// on what is sent.
func TestTools(t *testing.T) {
	t.Parallel()
	b, l := setup(t, "acme:a")
	res, err := call(t, l, "sessions_list", nil)
	if err != nil {
		t.Fatal(err)
	}
	text := res.Content[0].Text
	if !strings.Contains(text, "acme:a  idle  (this session)") || !strings.Contains(text, "acme:b  running") || strings.Contains(text, "globex") {
		t.Errorf("list: %q", text)
	}
	if res, _ := call(t, l, "sessions_list", map[string]any{"activeMinutes": 30}); strings.Contains(res.Content[0].Text, "acme:b") {
		t.Errorf("activeMinutes: %q", res.Content[0].Text)
	}
	res, err = call(t, l, "sessions_history", map[string]any{"sessionKey": "acme:b"})
	if err != nil {
		t.Fatal(err)
	}
	text = res.Content[0].Text
	if !strings.HasPrefix(text, "user: what is the plan?\n\nassistant: ship friday\n\nuser: éé") || strings.Contains(text, "secret thoughts") || strings.Contains(text, "tool") || !strings.HasSuffix(text, "[…cut]") {
		t.Errorf("history: %q", text)
	}
	res, _ = call(t, l, "sessions_history", map[string]any{"sessionKey": "acme:b", "includeTools": true, "limit": 3})
	if text := res.Content[0].Text; !strings.HasPrefix(text, "assistant: ship friday\n[tool call exec]\n\ntool result (exec): ok") {
		t.Errorf("history with tools: %q", text)
	}
	res, err = call(t, l, "sessions_send", map[string]any{"sessionKey": "acme:b", "message": "status?"})
	if err != nil || res.Details["status"] != "accepted" {
		t.Fatalf("%v %v", res, err)
	}
	if len(b.sent) != 1 || b.sent[0] != "acme:b|sessions_send-run7-c9|[Message from session acme:a, sent with sessions_send]\n\nstatus?" {
		t.Errorf("sent %q", b.sent)
	}
	for range SendsPerRun - 1 {
		if _, err := call(t, l, "sessions_send", map[string]any{"sessionKey": "acme:b", "message": "again"}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := call(t, l, "sessions_send", map[string]any{"sessionKey": "acme:b", "message": "one too many"}); err == nil || !strings.Contains(err.Error(), "the most allowed") {
		t.Errorf("cap: %v", err)
	}
}

// TestToolArgs: hostile arguments and out-of-scope sessions are refused
// before the backend is asked.
func TestToolArgs(t *testing.T) {
	t.Parallel()
	b, l := setup(t, "acme:a")
	cases := []struct {
		tool string
		args map[string]any
		want string
	}{
		{"sessions_list", map[string]any{"limit": 0}, "limit must be"},
		{"sessions_list", map[string]any{"limit": "x"}, "must be a number"},
		{"sessions_list", map[string]any{"activeMinutes": -1}, "must be positive"},
		{"sessions_history", nil, `missing required argument "sessionKey"`},
		{"sessions_history", map[string]any{"sessionKey": "globex:z"}, "out of reach"},
		{"sessions_history", map[string]any{"sessionKey": "acme"}, "out of reach"},
		{"sessions_history", map[string]any{"sessionKey": "  "}, "sessionKey is empty"},
		{"sessions_history", map[string]any{"sessionKey": "acme:" + strings.Repeat("x", 5000)}, "bytes, longer than"},
		{"sessions_history", map[string]any{"sessionKey": "acme:b\n"}, ""}, // trimmed: allowed
		{"sessions_history", map[string]any{"sessionKey": "acme:b\x00"}, "invalid characters"},
		{"sessions_history", map[string]any{"sessionKey": "acme:b", "includeTools": 3}, "must be a boolean"},
		{"sessions_history", map[string]any{"sessionKey": "acme:b", "limit": -1}, "limit must be"},
		{"sessions_send", map[string]any{"sessionKey": "acme:b"}, `missing required argument "message"`},
		{"sessions_send", map[string]any{"sessionKey": "acme:a", "message": "me"}, "itself"},
		{"sessions_send", map[string]any{"sessionKey": "globex:z", "message": "hi"}, "out of reach"},
		{"sessions_send", map[string]any{"sessionKey": "acme:b", "message": " "}, "message is empty"},
		{"sessions_send", map[string]any{"sessionKey": "acme:b", "message": strings.Repeat("x", maxSendBytes+1)}, "shorten it"},
		{"sessions_send", map[string]any{"sessionKey": "acme:b", "message": "a\xffb"}, "invalid characters"},
	}
	for _, c := range cases {
		_, err := call(t, l, c.tool, c.args)
		if c.want == "" {
			if err != nil {
				t.Errorf("%s %.60v: %v", c.tool, c.args, err)
			}
			continue
		}
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s %.60v: %v, want %q", c.tool, c.args, err, c.want)
		}
	}
	if len(b.sent) != 0 {
		t.Errorf("sent %q", b.sent)
	}
	// A session without a tenant lists and reads only itself.
	_, lone := setup(t, "alice")
	res, _ := call(t, lone, "sessions_list", nil)
	if !strings.Contains(res.Content[0].Text, "No sessions") {
		t.Errorf("lone list: %q", res.Content[0].Text)
	}
}

// FuzzSessionKey: any sessionKey argument is refused or allowed without
// a panic, and only within the caller's tenant.
func FuzzSessionKey(f *testing.F) {
	for _, s := range []string{"acme:b", "globex:z", "acme", "", "acme:\x00", strings.Repeat(":", 100)} {
		f.Add(s)
	}
	p := Policy{}
	f.Fuzz(func(t *testing.T, key string) {
		r := &run{b: &memBackend{}, p: p, caller: "acme:a"}
		got, err := r.target(map[string]any{"sessionKey": key})
		if err == nil && !strings.HasPrefix(got, "acme:") {
			t.Fatalf("%q reached %q", key, got)
		}
	})
}

func (b *memBackend) Spawn(_ context.Context, key string, in *events.Inbound, publishID string) (string, error) {
	b.spawned = append(b.spawned, spawnCall{key: key, in: in, publishID: publishID})
	return fmt.Sprint(len(b.spawned)), nil
}

// TestHistoryBounds: a history cut by its text's cap, or by the turns one
// call reads, says so with a before value that goes on where it stopped;
// a history stopped by its limit gives one in its details; the read
// hands over only the turns it needs.
func TestHistoryBounds(t *testing.T) {
	t.Parallel()
	long := strings.Repeat("w", messageChars-20)
	var turns [][]message.Entry
	for i := range 30 { // 30 turns of one long message each
		turns = append(turns, []message.Entry{entry(message.User(fmt.Sprintf("%d %s", i+1, long), 1))})
	}
	for range historyReadTurns + 5 { // then turns that show nothing without tools
		turns = append(turns, []message.Entry{entry(message.Message{Role: message.RoleToolResult, ToolName: "exec", Content: message.PlainText("ok")})})
	}
	b := &memBackend{history: map[string][][]message.Entry{"acme:b": turns}}
	l, err := Tools(b, Policy{}, "acme:a", "7", nil)
	if err != nil {
		t.Fatal(err)
	}
	res, err := call(t, l, "sessions_history", map[string]any{"sessionKey": "acme:b"})
	if err != nil {
		t.Fatal(err)
	}
	want := fmt.Sprintf(`[Older messages were not read: one call reads at most %d turns or 4 MB of the stored transcript. For older messages call again with before "%d".]`, historyReadTurns, len(turns)-historyReadTurns+1)
	if text := res.Content[0].Text; !strings.HasPrefix(text, want) || !strings.HasSuffix(text, "no messages in the turns read.") || b.reads != historyReadTurns {
		t.Fatalf("history of turns without text: %q after %d turns read", text, b.reads)
	}
	b.reads = 0
	res, err = call(t, l, "sessions_history", map[string]any{"sessionKey": "acme:b", "before": res.Details["before"]})
	if err != nil {
		t.Fatal(err)
	}
	text := res.Content[0].Text
	if !strings.HasPrefix(text, `[8 older messages left out: the history is capped at 48 KB. For older messages call again with before "19".]`) ||
		!strings.Contains(text, "\n\nuser: 19 w") || !strings.HasSuffix(text, "user: 30 "+long) || b.reads != 25 {
		t.Fatalf("history cut by its text's cap: %.300q after %d turns read", text, b.reads)
	}
	res, err = call(t, l, "sessions_history", map[string]any{"sessionKey": "acme:b", "before": res.Details["before"], "limit": 3})
	if err != nil || !strings.HasPrefix(res.Content[0].Text, "user: 16 w") || res.Details["before"] != "16" {
		t.Fatalf("the page before: %v %v", res, err)
	}
	res, err = call(t, l, "sessions_history", map[string]any{"sessionKey": "acme:b", "before": "1"})
	if err != nil || res.Content[0].Text != "Session acme:b has no messages before 1." || res.Details["before"] != nil {
		t.Fatalf("before the first turn: %v %v", res, err)
	}
	for _, bad := range []any{"x", "3:-1", "3:", 4} {
		if _, err := call(t, l, "sessions_history", map[string]any{"sessionKey": "acme:b", "before": bad}); err == nil {
			t.Errorf("before %v accepted", bad)
		}
	}
}

// FuzzHistoryBefore: any before argument is refused or read without a
// panic, and the before an answer gives reads back.
func FuzzHistoryBefore(f *testing.F) {
	for _, s := range []string{"", "2", "2:1", "0", "0:0", "18446744073709551615:3", "3:-1", ":", "x:1", " 4 "} {
		f.Add(s, int64(2))
	}
	b := &memBackend{history: map[string][][]message.Entry{"acme:b": {
		{entry(message.User("one", 1)), entry(message.User("two", 1))},
		{entry(message.User("three", 1))},
		{entry(message.User("four", 1)), entry(message.User("five", 1)), entry(message.User("six", 1))},
	}}}
	l, err := Tools(b, Policy{}, "acme:a", "7", nil)
	if err != nil {
		f.Fatal(err)
	}
	tool, _ := l.Lookup("sessions_history")
	f.Fuzz(func(t *testing.T, before string, limit int64) {
		res, err := tool.Call(context.Background(), tools.Call{Name: "sessions_history", Args: map[string]any{"sessionKey": "acme:b", "before": before, "limit": limit}})
		if err != nil {
			return
		}
		if next, ok := res.Details["before"].(string); ok {
			if _, _, err := parseCursor(next); err != nil {
				t.Fatalf("before %q gave %q, which does not parse: %v", before, next, err)
			}
		}
	})
}
