package fleet

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/lanefleet/lanefleet"
	"github.com/lanefleet/lanefleet/events"
	"github.com/lanefleet/lanefleet/hooks"
	"github.com/lanefleet/lanefleet/internal/natstest"
	"github.com/lanefleet/lanefleet/message"
	"github.com/lanefleet/lanefleet/provider"
	"github.com/lanefleet/lanefleet/provider/scripted"
	"github.com/lanefleet/lanefleet/redact"
)

// The member's secrets in these tests: its NATS password and a provider
// key in its environment.
const (
	natsPassword = "nats-password-4f9c2b7e"
	providerKey  = "sk-test-live-0123456789abcdef"
)

// maskingMember runs a member with the two secrets and the scripted models.
func maskingMember(t *testing.T, cfg Config) (*Member, *lanefleet.Client, context.Context) {
	t.Helper()
	cfg.DataDir, cfg.Password = t.TempDir(), natsPassword
	cfg.Env = func(name string) string {
		if name == "OPENAI_API_KEY" {
			return providerKey
		}
		return ""
	}
	if cfg.DefaultModel == "" {
		cfg.DefaultModel = "scripted/echo"
	}
	return runMember(t, cfg)
}

// runView is what a sender sees of one run: its events' texts and its
// final result.
type runView struct {
	deltas []string // the assistant deltas, in order
	texts  []string // every other text the events carry (JSON of their data)
	result *events.Result
	runErr error
}

// watch sends text to session and collects what the run shows.
func watch(t *testing.T, ctx context.Context, c *lanefleet.Client, session, text string, opts ...lanefleet.SendOption) runView {
	t.Helper()
	run, err := c.Send(ctx, session, text, opts...)
	if err != nil {
		t.Fatal(err)
	}
	var v runView
	for ev, err := range run.Events(ctx) {
		if err != nil {
			t.Fatal(err)
		}
		if ev.Stream == events.StreamAssistant && ev.Data.Delta != "" {
			v.deltas = append(v.deltas, ev.Data.Delta)
		}
		data, _ := json.Marshal(ev.Data)
		v.texts = append(v.texts, ev.Stream+" "+string(data))
		if ev.Terminal() {
			break
		}
	}
	v.result, v.runErr = run.Wait(ctx)
	return v
}

// historyTexts renders a session's transcript: one line per message.
func historyTexts(t *testing.T, ctx context.Context, c *lanefleet.Client, session string) []string {
	t.Helper()
	h, err := c.History(ctx, session)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range h {
		if m := e.Message; m != nil {
			args, _ := json.Marshal(m.ToolCalls())
			out = append(out, fmt.Sprintf("%s: %q %s %q", m.Role, m.Content.Text(), args, m.ErrorMessage))
		}
	}
	return out
}

// TestSenderReadsItsOwnWordsBack: whatever a sender sends — a message, a
// client tool's result, a session file it imports — it reads back as it
// sent it, in its events, its reply (a model repeating it) and its
// history, also when its words are the worker's secrets. So a word list
// tells nothing: a run with the worker's NATS password or provider key
// looks exactly like one with a wrong guess of the same shape. (The
// worker masked every publish in place: the secrets came back as
// "nat***…", and the sender knew which of its words were secrets.)
func TestSenderReadsItsOwnWordsBack(t *testing.T) {
	t.Parallel()
	_, c, ctx := maskingMember(t, Config{NoBuiltinTools: true})
	weather := events.ClientTool{Name: "weather", Description: "Current weather",
		Parameters: map[string]any{"type": "object", "properties": map[string]any{"city": map[string]any{"type": "string"}}}}

	// see runs everything a sender can send with word in it and returns
	// what it reads back, word replaced by W.
	see := func(i int, word string) string {
		var view []string
		session := fmt.Sprintf("eve:%d", i)
		// A message, which the echo model repeats.
		v := watch(t, ctx, c, session, "is it "+word+"?")
		if v.runErr != nil {
			t.Fatalf("%s: %v", word, v.runErr)
		}
		// The deltas' text (where they split is pinned by redact's
		// TestStreamSplitsTellNothing: here frames also split by time).
		view = append(view, strings.Join(v.deltas, ""), v.result.Payloads[0].Text)
		// A client tool's result.
		script := `#script {"replies":[{"toolCalls":[{"id":"call_1","name":"weather","arguments":{"city":"Lisbon"}}]},{"text":"noted"}]}`
		v = watch(t, ctx, c, session, script, lanefleet.WithModel("scripted/script"), lanefleet.WithTools(weather))
		if len(v.result.Meta.PendingToolCalls) != 1 {
			t.Fatalf("%s: %+v", word, v.result.Meta)
		}
		v = watch(t, ctx, c, session, "", lanefleet.WithModel("scripted/script"), lanefleet.WithTools(weather),
			lanefleet.WithToolResults(events.ToolResult{ToolCallID: "call_1", Text: "the answer is " + word}))
		for _, s := range v.texts {
			if strings.HasPrefix(s, events.StreamTool) {
				view = append(view, s)
			}
		}
		view = append(view, historyTexts(t, ctx, c, session)...)
		// A session file, imported and exported.
		file := `{"type":"session","version":3,"id":"s1","timestamp":"2026-01-01T00:00:00.000Z"}` + "\n" +
			`{"type":"message","id":"m1","parentId":null,"timestamp":"2026-01-01T00:00:01.000Z","message":{"role":"user","content":"remember ` + word + `","timestamp":1}}` + "\n" +
			`{"type":"message","id":"m2","parentId":"m1","timestamp":"2026-01-01T00:00:02.000Z","message":{"role":"assistant","content":[{"type":"text","text":"I will remember ` + word + `"}],"api":"x","provider":"x","model":"x","stopReason":"stop","timestamp":2}}` + "\n"
		imported := fmt.Sprintf("eve:import:%d", i)
		if err := c.Import(ctx, imported, strings.NewReader(file)); err != nil {
			t.Fatal(err)
		}
		var out bytes.Buffer
		if err := c.Export(ctx, imported, &out); err != nil {
			t.Fatal(err)
		}
		view = append(view, out.String())
		// A turn on the imported session: the echo and the history.
		v = watch(t, ctx, c, imported, "again "+word)
		view = append(view, strings.Join(v.deltas, ""))
		view = append(view, historyTexts(t, ctx, c, imported)...)
		return strings.ReplaceAll(strings.Join(view, "\n"), word, "W")
	}
	guess := "nats-password-00000000"
	want := see(0, guess)
	if !strings.Contains(want, "echo: is it W?") || !strings.Contains(want, "the answer is W") || !strings.Contains(want, "echo: again W") {
		t.Fatalf("the wrong guess's view:\n%s", want)
	}
	for i, word := range []string{natsPassword, providerKey} {
		if got := see(i+1, word); got != want {
			t.Errorf("with the secret %q the sender sees\n%s\nwith a wrong guess\n%s", word, got, want)
		}
	}
}

// leakScripts are named scripts (no sender wrote them) whose model and
// tools produce the provider key: a tool reads it, a command prints it,
// the model repeats it streaming it in many small deltas, a provider
// error echoes it.
func leakScripts() map[string]scripted.Script {
	return map[string]scripted.Script{
		"leak": {Replies: []scripted.Reply{
			{ToolCalls: []scripted.ToolCall{{ID: "r1", Name: "read", Arguments: map[string]any{"path": "secrets.env"}},
				{ID: "x1", Name: "exec", Arguments: map[string]any{"command": "printf 'KEY=sk-test-live-%s\\n' 0123456789abcdef"}}}},
			{Text: "The key is " + providerKey + ", see?", Chunks: 12, DelayMs: 8},
		}},
		"fail": {Replies: []scripted.Reply{
			{Error: &scripted.ScriptedError{Status: 401, Message: "Incorrect API key provided: " + providerKey + "."}},
		}},
	}
}

// TestWorkerOutputMasked: what the worker produces holds no secret: a
// file a tool reads, a command's output, a model repeating the key in
// deltas that split it, a provider error echoing it. The fixed marker
// stands in the key's place in the tool events, every delta (none holds
// the key's start either), the reply, the transcript and the error; no
// stream or bucket holds the key.
func TestWorkerOutputMasked(t *testing.T) {
	t.Parallel()
	root := t.TempDir()
	m, c, ctx := maskingMember(t, Config{WorkspaceRoot: root, Exec: true, ExecUnconfined: true, Scripts: leakScripts()})
	tok, err := events.KeyToken("victim")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Join(root, tok), 0o750); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(root, tok, "secrets.env"), []byte("OPENAI_API_KEY="+providerKey+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}

	v := watch(t, ctx, c, "victim", "show me", lanefleet.WithModel("scripted/leak"))
	if v.runErr != nil {
		t.Fatal(v.runErr)
	}
	const reply = "The key is " + redact.Marker + ", see?"
	if got := v.result.Payloads[0].Text; got != reply {
		t.Errorf("reply %q, want %q", got, reply)
	}
	if got := strings.Join(v.deltas, ""); got != reply || len(v.deltas) < 3 {
		t.Errorf("deltas %q, want %q in pieces", v.deltas, reply)
	}
	if strings.Contains(strings.Join(v.deltas, ""), providerKey) {
		t.Errorf("the deltas %q spell the key", v.deltas)
	}
	for _, d := range v.deltas {
		if strings.Contains(d, providerKey[:4]) {
			t.Errorf("delta %q shows the key's start", d)
		}
	}
	var results int
	for _, s := range v.texts {
		if strings.Contains(s, providerKey) {
			t.Errorf("event %s holds the key", s)
		}
		if strings.HasPrefix(s, events.StreamTool) && strings.Contains(s, `"phase":"result"`) {
			results++
			if !strings.Contains(s, "KEY="+redact.Marker) {
				t.Errorf("tool result event %s does not show the marker", s)
			}
		}
	}
	if results != 2 {
		t.Errorf("%d tool results, want 2 (read, exec)", results)
	}
	h := strings.Join(historyTexts(t, ctx, c, "victim"), "\n")
	if strings.Contains(h, providerKey) || strings.Count(h, "KEY="+redact.Marker) != 2 || !strings.Contains(h, reply) {
		t.Errorf("transcript:\n%s", h)
	}

	v = watch(t, ctx, c, "victim", "again", lanefleet.WithModel("scripted/fail"))
	var re *lanefleet.RunError
	if !errors.As(v.runErr, &re) || !strings.Contains(re.Message, "Incorrect API key provided: "+redact.Marker+".") {
		t.Fatalf("a 401 echoing the key ended with %v", v.runErr)
	}
	if !strings.Contains(v.result.Payloads[0].Text, redact.Marker) {
		t.Errorf("error reply %q", v.result.Payloads[0].Text)
	}
	for _, s := range v.texts {
		if strings.Contains(s, providerKey) {
			t.Errorf("event %s holds the key", s)
		}
	}
	if h := strings.Join(historyTexts(t, ctx, c, "victim"), "\n"); strings.Contains(h, providerKey) || !strings.Contains(h, "Incorrect API key provided: "+redact.Marker) {
		t.Errorf("transcript:\n%s", h)
	}
	for name, raw := range allStreams(t, ctx, m.JS) {
		if bytes.Contains(raw, []byte(providerKey)) {
			t.Errorf("stream %s holds the key", name)
		}
	}
}

// TestHookRepliesMasked: a before_agent_start hook's context and a
// before_tool_call hook's reason for blocking a call reach the model, the
// transcript and the events with the fixed marker in the key's place.
func TestHookRepliesMasked(t *testing.T) {
	t.Parallel()
	srv := natstest.Start(t)
	svc, err := hooks.Serve(natstest.Connect(t, srv.URL), hooks.ServeConfig{},
		hooks.Hook{Name: "context", BeforeAgentStart: func(context.Context, hooks.StartEvent) (hooks.StartResult, error) {
			return hooks.StartResult{PrependContext: "Deploy key: " + providerKey}, nil
		}},
		hooks.Hook{Name: "guard", BeforeToolCall: func(context.Context, hooks.ToolCallEvent) (hooks.ToolCallResult, error) {
			return hooks.ToolCallResult{Block: true, BlockReason: "not with " + providerKey}, nil
		}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = svc.Stop() })
	scripts := map[string]scripted.Script{"hooked": {Replies: []scripted.Reply{
		{ToolCalls: []scripted.ToolCall{{ID: "r1", Name: "read", Arguments: map[string]any{"path": "a.txt"}}}},
		{Text: "done"},
	}}}
	m, c, ctx := maskingMember(t, Config{NATSURL: srv.URL, WorkspaceRoot: t.TempDir(), Scripts: scripts,
		Hooks: HooksConfig{Names: []string{"context", "guard"}}})
	v := watch(t, ctx, c, "hooked", "go", lanefleet.WithModel("scripted/hooked"))
	if v.runErr != nil {
		t.Fatal(v.runErr)
	}
	var blocked bool
	for _, s := range v.texts {
		if strings.Contains(s, providerKey) {
			t.Errorf("event %s holds the key", s)
		}
		blocked = blocked || strings.Contains(s, "not with "+redact.Marker)
	}
	if !blocked {
		t.Errorf("no tool result event shows the masked reason:\n%s", strings.Join(v.texts, "\n"))
	}
	h := strings.Join(historyTexts(t, ctx, c, "hooked"), "\n")
	if strings.Contains(h, providerKey) || !strings.Contains(h, "Deploy key: "+redact.Marker) || !strings.Contains(h, "not with "+redact.Marker) {
		t.Errorf("transcript:\n%s", h)
	}
	for name, raw := range allStreams(t, ctx, m.JS) {
		if bytes.Contains(raw, []byte(providerKey)) {
			t.Errorf("stream %s holds the key", name)
		}
	}
}

// allStreams returns every stream's messages, data and headers,
// concatenated, by stream name.
func allStreams(t *testing.T, ctx context.Context, js jetstream.JetStream) map[string][]byte {
	t.Helper()
	out := map[string][]byte{}
	names := js.StreamNames(ctx)
	for name := range names.Name() {
		s, err := js.Stream(ctx, name)
		if err != nil {
			t.Fatal(err)
		}
		info, err := s.Info(ctx)
		if err != nil {
			t.Fatal(err)
		}
		var buf bytes.Buffer
		for seq := info.State.FirstSeq; seq <= info.State.LastSeq && seq > 0; seq++ {
			msg, err := s.GetMsg(ctx, seq)
			if errors.Is(err, jetstream.ErrMsgNotFound) {
				continue
			}
			if err != nil {
				t.Fatal(err)
			}
			buf.Write(msg.Data)
			for k, vs := range msg.Header {
				buf.WriteString(k + ": " + strings.Join(vs, ",") + "\n")
			}
		}
		out[name] = buf.Bytes()
	}
	if err := names.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// TestModelStreamMasked: a model call's events as the runner gets them:
// each block's deltas masked with what they held back let out before the
// block's end (thinking and text alike), the ends, the finished message,
// a tool call's arguments and the error masked, the reason and status
// kept.
func TestModelStreamMasked(t *testing.T) {
	t.Parallel()
	red := redact.New(providerKey)
	half := len(providerKey) / 2
	model := provider.Func(func(_ context.Context, _ *provider.Request, emit func(provider.Event)) (message.Message, error) {
		think, text := "I saw "+providerKey, "it is "+providerKey+"!"
		call := message.ToolCall("c1", "exec", map[string]any{"command": "echo " + providerKey})
		am := message.Message{Role: message.RoleAssistant, StopReason: message.StopError, ErrorMessage: "bad key " + providerKey,
			Content: message.BlocksOf(message.Thinking(think, "sig"), message.Text(text), call)}
		emit(provider.Event{Type: provider.EventThinkingDelta, ContentIndex: 0, Delta: think[:len(think)-half]})
		emit(provider.Event{Type: provider.EventThinkingDelta, ContentIndex: 0, Delta: think[len(think)-half:]})
		emit(provider.Event{Type: provider.EventThinkingEnd, ContentIndex: 0, Content: think})
		emit(provider.Event{Type: provider.EventTextDelta, ContentIndex: 1, Delta: "it is sk-"})
		emit(provider.Event{Type: provider.EventTextDelta, ContentIndex: 1, Delta: providerKey[3:] + "!"})
		emit(provider.Event{Type: provider.EventTextEnd, ContentIndex: 1, Content: text})
		emit(provider.Event{Type: provider.EventTextDelta, ContentIndex: 3, Delta: "cut at sk-te"}) // never ended
		emit(provider.Event{Type: provider.EventToolCallEnd, ContentIndex: 2, ToolCall: &call})
		emit(provider.Event{Type: provider.EventError, Reason: message.StopError, Message: &am})
		return am, &provider.Error{Reason: provider.ReasonAuth, Status: 401, Message: "Incorrect API key provided: " + providerKey}
	})
	var got []string
	am, err := (&maskingProvider{p: model, red: red}).Stream(t.Context(), &provider.Request{}, func(ev provider.Event) {
		s := fmt.Sprintf("%s %d %q %q", ev.Type, ev.ContentIndex, ev.Delta, ev.Content)
		if ev.ToolCall != nil {
			s += fmt.Sprint(" ", ev.ToolCall.Arguments)
		}
		if ev.Message != nil {
			s += " " + ev.Message.ErrorMessage
		}
		got = append(got, s)
	})
	want := []string{
		`thinking_delta 0 "I saw " ""`,
		`thinking_delta 0 "[redacted]" ""`,
		`thinking_end 0 "" "I saw [redacted]"`,
		`text_delta 1 "it is " ""`,
		`text_delta 1 "[redacted]!" ""`,
		`text_end 1 "" "it is [redacted]!"`,
		`text_delta 3 "cut at " ""`,
		`toolcall_end 2 "" "" map[command:echo [redacted]]`,
		`text_delta 3 "sk-te" ""`,
		`error 0 "" "" bad key [redacted]`,
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("events\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	if b := am.Content.Blocks; b[0].Thinking != "I saw [redacted]" || b[0].ThinkingSignature != "sig" || b[1].Text != "it is [redacted]!" ||
		b[2].Arguments["command"] != "echo [redacted]" || am.ErrorMessage != "bad key [redacted]" {
		t.Errorf("message %+v", am)
	}
	var pe *provider.Error
	if !errors.As(err, &pe) || pe.Reason != provider.ReasonAuth || pe.Status != 401 || pe.Message != "Incorrect API key provided: [redacted]" {
		t.Errorf("error %#v", err)
	}
	// Not a provider error: its chain is kept.
	wrapped := maskError(red.Masker(nil), fmt.Errorf("send with %s: %w", providerKey, context.DeadlineExceeded))
	if !errors.Is(wrapped, context.DeadlineExceeded) || strings.Contains(wrapped.Error(), providerKey) {
		t.Errorf("wrapped error %v", wrapped)
	}
}

// TestSenderContent: where a turn finds what its sender supplied.
func TestSenderContent(t *testing.T) {
	t.Parallel()
	const w = "the-word-42"
	user := message.Entry{Type: message.EntryMessage, Message: &message.Message{Role: message.RoleUser, Content: message.PlainText("say " + w)}}
	call := message.Entry{Type: message.EntryMessage, Message: &message.Message{Role: message.RoleAssistant,
		Content: message.BlocksOf(message.ToolCall("c", "t", map[string]any{"q": []any{w}}))}}
	for _, tc := range []struct {
		name string
		sc   *senderContent
		want bool
	}{
		{"nothing", &senderContent{inbound: []*events.Inbound{{Text: "hello"}}}, false},
		{"the message", &senderContent{inbound: []*events.Inbound{{Text: "a " + w}}}, true},
		{"a client tool result", &senderContent{inbound: []*events.Inbound{{ToolResults: []events.ToolResult{{Text: w}}}}}, true},
		{"a client tool's schema", &senderContent{inbound: []*events.Inbound{{Tools: []events.ClientTool{{Name: "t", Parameters: map[string]any{"enum": []any{w}}}}}}}, true},
		{"the model named", &senderContent{inbound: []*events.Inbound{{Model: "x/" + w}}}, true},
		{"the history's user message", &senderContent{history: []message.Entry{user}}, true},
		{"the history's tool call", &senderContent{history: []message.Entry{call}}, true},
		{"an imported line", &senderContent{history: []message.Entry{{Type: "custom", Raw: []byte(`{"data":"` + w + `"}`)}}}, true},
		{"an entry's fields", &senderContent{history: []message.Entry{{Type: "custom", Fields: map[string]any{"data": map[string]any{"k": w}}}}}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			if got := tc.sc.supplied(w); got != tc.want {
				t.Errorf("supplied = %v, want %v", got, tc.want)
			}
		})
	}
}

// TestFailedAttemptMasked: an attempt the runner cannot run (here the
// session's workspace cannot be made, under a root whose path holds the
// worker's NATS password) shows its sender why, with the marker in the
// secret's place, in every aborted event and the final error.
func TestFailedAttemptMasked(t *testing.T) {
	t.Parallel()
	root := filepath.Join(t.TempDir(), "ws-"+natsPassword)
	_, c, ctx := maskingMember(t, Config{WorkspaceRoot: root})
	tok, err := events.KeyToken("blocked")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(root, 0o750); err != nil {
		t.Fatal(err)
	}
	// A file where the session's workspace directory should be.
	if err := os.WriteFile(filepath.Join(root, tok), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	v := watch(t, ctx, c, "blocked", "hi")
	var aborted []string
	for _, s := range v.texts {
		if strings.Contains(s, natsPassword) {
			t.Errorf("event %s holds the password", s)
		}
		if strings.Contains(s, `"phase":"aborted"`) {
			aborted = append(aborted, s)
		}
	}
	want := "workspace " + filepath.Join(filepath.Dir(root), "ws-"+redact.Marker, tok)
	if len(aborted) == 0 {
		t.Fatalf("no aborted event: %q", v.texts)
	}
	for _, s := range aborted {
		if !strings.Contains(s, want) || !strings.Contains(s, "not a directory") {
			t.Errorf("aborted event %s does not say why (%q)", s, want)
		}
	}
	var re *lanefleet.RunError
	if !errors.As(v.runErr, &re) || !strings.Contains(re.Message, want) {
		t.Fatalf("run ended with %v, want it to name %q", v.runErr, want)
	}
}
