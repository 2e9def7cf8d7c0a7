package openai

import (
	"bytes"
	"encoding/json"
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/lanefleet/lanefleet/events"
	"github.com/lanefleet/lanefleet/gateway/auth"
	"github.com/lanefleet/lanefleet/message"
	"github.com/lanefleet/lanefleet/sessionfile"
)

func TestSessionKey(t *testing.T) {
	t.Parallel()
	acme := &auth.Principal{Role: auth.Sender, Prefixes: []string{"acme:", "acme2:"}, Sessions: []string{"shared"}}
	root := &auth.Principal{Role: auth.Admin, Prefixes: []string{""}}
	keysOnly := &auth.Principal{Role: auth.Sender, Sessions: []string{"only"}}
	cases := []struct {
		name         string
		p            *auth.Principal
		header, user string
		want         string // "" with wantErr; a prefix for fresh keys ending in "*"
		wantErr      error
	}{
		{name: "user in the first prefix", p: acme, user: "alice", want: "acme:openai-user:alice"},
		{name: "user with colons stays inside the prefix", p: acme, user: "a:b", want: "acme:openai-user:a:b"},
		{name: "OpenClaw's form for a token that reaches everything", p: root, user: "alice", want: "agent:main:openai-user:alice"},
		{name: "no user: fresh", p: acme, want: "acme:openai:*"},
		{name: "header names a key in the prefix", p: acme, header: "acme:custom", user: "ignored", want: "acme:custom"},
		{name: "header names a single key", p: acme, header: "shared", want: "shared"},
		{name: "header in the second prefix", p: acme, header: "acme2:x", want: "acme2:x"},
		{name: "header outside: not found", p: acme, header: "beta:x", wantErr: errNotFound},
		{name: "header prefix lookalike", p: acme, header: "acme", wantErr: errNotFound},
		{name: "keys-only token names its key", p: keysOnly, header: "only", want: "only"},
		{name: "keys-only token without header", p: keysOnly, user: "bob", wantErr: errNoPrefix},
		{name: "user too long", p: acme, user: strings.Repeat("u", maxUser+1), wantErr: &convError{}},
		{name: "user not UTF-8", p: acme, user: "\xff", wantErr: &convError{}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			key, fresh, err := sessionKey(tc.p, tc.header, tc.user)
			if tc.wantErr != nil {
				var ce *convError
				if _, isConv := tc.wantErr.(*convError); isConv && errors.As(err, &ce) {
					return
				}
				if !errors.Is(err, tc.wantErr) {
					t.Fatalf("err = %v, want %v", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if pre, ok := strings.CutSuffix(tc.want, "*"); ok {
				if !fresh || !strings.HasPrefix(key, pre) || len(key) != len(pre)+16 {
					t.Fatalf("key %q fresh %v, want a fresh key after %q", key, fresh, pre)
				}
				return
			}
			if key != tc.want || fresh {
				t.Fatalf("key %q fresh %v, want %q", key, fresh, tc.want)
			}
			if !tc.p.AllowsSession(key) {
				t.Fatalf("key %q is outside the caller's reach", key)
			}
		})
	}
}

func TestRespIDRoundTrip(t *testing.T) {
	t.Parallel()
	for _, id := range []respID{
		{Session: "acme:openai-user:alice", Run: "42", Model: "fast", Created: 1795914754},
		{Session: "k", Run: "1", Background: true},
		{Session: strings.Repeat("é", events.MaxKeyBytes/2), Run: "18446744073709551615", Model: strings.Repeat("m", maxModelName), Created: 1 << 40},
	} {
		s := id.encode()
		if !strings.HasPrefix(s, respPrefix) || strings.ContainsAny(s, "/+=") {
			t.Fatalf("id %q: not resp_ and base64url", s)
		}
		got, err := decodeRespID(s)
		if err != nil || got != id {
			t.Fatalf("decode(%q) = %+v, %v; want %+v", s, got, err, id)
		}
	}
}

func TestRespIDRefusesMalformed(t *testing.T) {
	t.Parallel()
	good := respID{Session: "acme:x", Run: "7", Model: "m", Created: 1}.encode()
	for _, s := range []string{
		"", "resp_", "resp_!!!", "chatcmpl-" + good[len(respPrefix):], good + "A", good[:len(good)-2],
		respID{Session: "", Run: "7"}.encode(),       // no session
		respID{Session: "acme:x", Run: "0"}.encode(), // no run
		respID{Session: "acme:x", Run: "x"}.encode(),
		respPrefix + strings.Repeat("A", maxIDLen),
	} {
		if _, err := decodeRespID(s); !errors.Is(err, errNotFound) {
			t.Errorf("decode(%q): err %v, want errNotFound", s, err)
		}
	}
}

func FuzzDecodeRespID(f *testing.F) {
	f.Add(respID{Session: "acme:x", Run: "7", Model: "m", Created: 1, Background: true}.encode())
	f.Add("resp_AQA")
	f.Fuzz(func(t *testing.T, s string) {
		id, err := decodeRespID(s)
		if err != nil {
			return
		}
		again, err := decodeRespID(id.encode())
		if err != nil || again != id {
			t.Fatalf("%q decodes to %+v, which does not round-trip: %+v %v", s, id, again, err)
		}
	})
}

// transcript builds entries from messages.
func transcript(msgs ...message.Message) []message.Entry {
	var out []message.Entry
	for i := range msgs {
		e := message.Entry{Type: message.EntryMessage, ID: string(rune('a' + i)), Message: &msgs[i]}
		if i > 0 {
			parent := string(rune('a' + i - 1))
			e.ParentID = &parent
		}
		out = append(out, e)
	}
	return out
}

// compacted turns the marker message's entry into a compaction entry:
// the model sees a summary from there on, the client saw every message.
func compacted(entries []message.Entry) []message.Entry {
	for i, e := range entries {
		if e.Message != nil && e.Message.Role == "compaction-marker" {
			entries[i].Type, entries[i].Message = message.EntryCompaction, nil
			entries[i].Fields = map[string]any{"summary": "they talked about the weather", "firstKeptEntryId": e.ID}
		}
	}
	return entries
}

func assistant(text string, calls ...message.Block) message.Message {
	blocks := []message.Block{}
	if text != "" {
		blocks = append(blocks, message.Text(text))
	}
	return message.Message{Role: message.RoleAssistant, Content: message.BlocksOf(append(blocks, calls...)...), StopReason: message.StopStop}
}

func toolResult(id, text string) message.Message {
	return message.Message{Role: message.RoleToolResult, ToolCallID: id, Content: message.BlocksOf(message.Text(text))}
}

func TestProjectAndMatch(t *testing.T) {
	t.Parallel()
	// One turn that used a worker tool (w1) between two model calls,
	// then a turn stopped on a client tool (c1), then its result, and a
	// failed model call the client never saw.
	stored := project(compacted(transcript(
		message.User("weather?", 0),
		assistant("Let me look.", message.ToolCall("w1", "read", nil)),
		toolResult("w1", "file"),
		assistant("Looking it up.", message.ToolCall("c1", "get_weather", nil)),
		toolResult("c1", "sunny"),
		assistant("It is sunny."),
		message.Message{Role: "compaction-marker"}, // replaced by a compaction entry below
		message.User("thanks", 0),
		message.Message{Role: message.RoleAssistant, StopReason: message.StopError, ErrorMessage: "boom", Content: message.BlocksOf()},
		assistant("You're welcome."),
	)), map[string]bool{"c1": true})
	want := []item{
		{role: roleUser, text: "weather?"},
		{role: roleAssistant, text: "Let me look.\n\nLooking it up.", calls: []call{{ID: "c1", Name: "get_weather"}}},
		{role: roleTool, callID: "c1"},
		{role: roleAssistant, text: "It is sunny."},
		{role: roleUser, text: "thanks"},
		{role: roleAssistant, text: "You're welcome."},
	}
	if !reflect.DeepEqual(stored, want) {
		t.Fatalf("project:\n got %+v\nwant %+v", stored, want)
	}
	cases := []struct {
		name  string
		prior []item
		ok    bool
	}{
		{"nothing repeated", nil, true},
		{"the whole conversation", []item{
			{role: roleUser, text: "weather?"},
			{role: roleAssistant, text: "Let me look. Looking it up.", calls: []call{{ID: "c1", Name: "get_weather", Arguments: "{}"}}},
			{role: roleTool, callID: "c1", text: "whatever the client says"},
			{role: roleAssistant, text: "It is sunny."},
			{role: roleUser, text: " thanks "},
			{role: roleAssistant, text: "You're welcome."},
		}, true},
		{"the latest part", []item{{role: roleUser, text: "thanks"}, {role: roleAssistant, text: "You're welcome."}}, true},
		{"an edited reply", []item{{role: roleUser, text: "thanks"}, {role: roleAssistant, text: "You are welcome."}}, false},
		{"an edited question", []item{{role: roleUser, text: "thank you"}, {role: roleAssistant, text: "You're welcome."}}, false},
		{"a call the session did not make", []item{{role: roleAssistant, text: "It is sunny.", calls: []call{{ID: "c9"}}}}, false},
		{"more than the session holds", append(make([]item, 0), append(want, want...)...), false},
		{"the wrong end", []item{{role: roleUser, text: "weather?"}}, false},
	}
	for _, tc := range cases {
		err := matchTail(tc.prior, stored)
		var ce *convError
		if tc.ok != (err == nil) || err != nil && (!errors.As(err, &ce) || ce.status != 409) {
			t.Errorf("%s: err %v, want ok %v", tc.name, err, tc.ok)
		}
	}
}

func TestSplitAndInput(t *testing.T) {
	t.Parallel()
	items := []item{
		{role: roleUser, text: "a"},
		{role: roleAssistant, text: "b", calls: []call{{ID: "c1"}}},
		{role: roleTool, callID: "c1", text: "r1"},
		{role: roleUser, text: "more"},
		{role: roleUser, text: "and more"},
	}
	prior, input, err := split(items, "messages")
	if err != nil || len(prior) != 2 || len(input) != 3 {
		t.Fatalf("split: %d %d %v", len(prior), len(input), err)
	}
	in, err := newInput(input, "messages")
	if err != nil {
		t.Fatal(err)
	}
	if in.text != "more\n\nand more" || len(in.results) != 1 || in.results[0] != (events.ToolResult{ToolCallID: "c1", Text: "r1"}) {
		t.Fatalf("input: %+v", in)
	}
	if _, _, err := split(items[:2], "messages"); err == nil {
		t.Fatal("a conversation ending with the assistant was split")
	}
	if _, err := newInput([]item{{role: roleUser}}, "input"); err == nil {
		t.Fatal("an empty input was taken")
	}
}

func ev(seq uint64, stream, delta, text string) *events.Event {
	return &events.Event{Seq: seq, Stream: stream, Data: events.EventData{Delta: delta, Text: text}}
}

func TestNormalizer(t *testing.T) {
	t.Parallel()
	evs := []*events.Event{
		ev(1, events.StreamLifecycle, "", ""),
		// A model attempt is not content, whatever it carries.
		{Seq: 1, Stream: events.StreamAttempt, Data: events.EventData{Attempt: 1, Provider: "acme", Model: "m1", AuthProfile: "acme:a"}},
		ev(2, events.StreamThinking, "hm", "hm"),
		ev(3, events.StreamAssistant, "Hel", "Hel"),
		ev(4, events.StreamAssistant, "lo", "Hello"),
		ev(5, events.StreamTool, "", ""),
		{Seq: 5, Stream: events.StreamAttempt, Data: events.EventData{Attempt: 2, Provider: "acme", Model: "m1", AuthProfile: "acme:b", Reason: "rate_limit", Text: "x", Delta: "x"}},
		ev(6, events.StreamAssistant, "Done", "Done"), // the next model call
		// The worker dies; the next attempt replays the first call and
		// says more in the second.
		{Seq: 7, Stream: events.StreamLifecycle, Data: events.EventData{Phase: events.PhaseAborted}},
		{Seq: 8, Stream: events.StreamLifecycle, Data: events.EventData{Phase: events.PhaseRestart}},
		ev(9, events.StreamThinking, "hm", "hm"),
		ev(10, events.StreamAssistant, "Hello", "Hello"),
		ev(11, events.StreamAssistant, "Do", "Do"),
		ev(12, events.StreamAssistant, "ne!", "Done!"),
		ev(13, events.StreamAssistant, " Bye", "Done! Bye"),
	}
	var n normalizer
	var got []part
	for _, e := range evs {
		got = append(got, n.feed(e)...)
	}
	want := []part{
		{kind: kindReasoning, start: true, delta: "hm"},
		{kind: kindText, start: true, delta: "Hel"},
		{kind: kindText, delta: "lo"},
		{kind: kindText, start: true, delta: "Done"},
		{kind: kindText, delta: "!"},
		{kind: kindText, delta: " Bye"},
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("parts:\n got %+v\nwant %+v", got, want)
	}
}

// TestBuilderNumbersAlike pins that the same run's events give the same
// Responses events, numbered from 0 without a gap, and that a replay
// after a sequence number is the full stream's tail.
func TestBuilderNumbersAlike(t *testing.T) {
	t.Parallel()
	res := &events.Result{Meta: events.Meta{StopReason: "tool_calls", PendingToolCalls: []events.PendingCall{{ID: "c1", Name: "f", Arguments: `{"a":1}`}, {ID: "ap", Name: "exec", Approval: true}}}}
	run := []*events.Event{
		ev(1, events.StreamLifecycle, "", ""),
		ev(2, events.StreamThinking, "hm", "hm"),
		ev(3, events.StreamAssistant, "Hi", "Hi"),
		{Seq: 4, Stream: events.StreamFinal, Data: events.EventData{Result: res}},
	}
	stream := func(after int) []map[string]any {
		var out []map[string]any
		b := newBuilder(respID{Session: "s", Run: "3", Model: "m", Created: 5})
		b.emit = func(typ string, e map[string]any) {
			if b.seq > after {
				raw, _ := eventJSON(typ, b.seq, e)
				if !strings.HasPrefix(string(raw), `{"type":"`+typ+`","sequence_number":`) {
					t.Fatalf("event %s", raw)
				}
				var m map[string]any
				_ = json.Unmarshal(raw, &m)
				out = append(out, m)
			}
		}
		b.begin()
		for _, e := range run {
			b.feed(e)
		}
		return out
	}
	full := stream(-1)
	var types []string
	for i, e := range full {
		if e["sequence_number"] != float64(i) {
			t.Fatalf("event %d numbered %v", i, e["sequence_number"])
		}
		types = append(types, e["type"].(string))
	}
	want := []string{"response.created", "response.in_progress",
		"response.output_item.added", "response.content_part.added", "response.reasoning_text.delta",
		"response.reasoning_text.done", "response.content_part.done", "response.output_item.done",
		"response.output_item.added", "response.content_part.added", "response.output_text.delta",
		"response.output_text.done", "response.content_part.done", "response.output_item.done",
		"response.output_item.added", "response.function_call_arguments.delta", "response.function_call_arguments.done", "response.output_item.done",
		"response.completed"}
	if !reflect.DeepEqual(types, want) {
		t.Fatalf("types:\n got %q\nwant %q", types, want)
	}
	if tail := stream(9); !reflect.DeepEqual(tail, full[10:]) {
		t.Fatalf("the replay after 9 is not the stream's tail")
	}
	last := full[len(full)-1]["response"].(map[string]any)
	if last["status"] != "completed" || len(last["output"].([]any)) != 3 || last["output"].([]any)[1].(map[string]any)["content"].([]any)[0].(map[string]any)["text"] != "Hi" {
		t.Fatalf("final response: %v", last)
	}
}

func TestParseAliases(t *testing.T) {
	t.Parallel()
	got, err := ParseAliases([]string{"fast=anthropic/claude-haiku-4-5", " default = "})
	if err != nil || !reflect.DeepEqual(got, map[string]string{"fast": "anthropic/claude-haiku-4-5", "default": ""}) {
		t.Fatalf("%v %v", got, err)
	}
	for _, bad := range [][]string{{"fast"}, {"=x"}, {"a=b", "a=c"}} {
		if _, err := ParseAliases(bad); err == nil {
			t.Errorf("%q taken", bad)
		}
	}
}

func TestChatItems(t *testing.T) {
	t.Parallel()
	img := "data:image/png;base64,iVBORw0KGgo="
	var msgs []chatMessage
	if err := json.Unmarshal([]byte(`[
		{"role":"system","content":"be brief"},
		{"role":"developer","content":[{"type":"text","text":"really"}]},
		{"role":"user","content":[{"type":"text","text":"look "},{"type":"text","text":"here"},{"type":"image_url","image_url":{"url":"`+img+`","detail":"low"}}]},
		{"role":"assistant","content":null,"tool_calls":[{"id":"c1","type":"function","function":{"name":"f","arguments":"{\"a\":1}"}}]},
		{"role":"tool","tool_call_id":"c1","content":[{"type":"text","text":"done"}]},
		{"role":"assistant","content":[{"type":"text","text":" ok "},{"type":"refusal","refusal":"no"}]}
	]`), &msgs); err != nil {
		t.Fatal(err)
	}
	got, err := chatItems(msgs)
	if err != nil {
		t.Fatal(err)
	}
	want := []item{
		{role: roleUser, text: "look here", images: []events.Image{{MimeType: "image/png", Data: "iVBORw0KGgo="}}},
		{role: roleAssistant, calls: []call{{ID: "c1", Name: "f", Arguments: `{"a":1}`}}},
		{role: roleTool, text: "done", callID: "c1"},
		{role: roleAssistant, text: "ok no"},
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("items:\n got %+v\nwant %+v", got, want)
	}
	for _, bad := range []string{
		`[{"role":"function","content":"x"}]`,
		`[{"role":"tool","content":"x"}]`,
		`[{"role":"user","content":[{"type":"input_audio"}]}]`,
		`[{"role":"user","content":[{"type":"image_url","image_url":{"url":"https://example.com/a.png"}}]}]`,
		`[{"role":"user","content":[{"type":"image_url","image_url":{"url":"data:text/plain;base64,aGk="}}]}]`,
		`[{"role":"user","content":[{"type":"image_url","image_url":{"url":"data:image/png;base64,%%%"}}]}]`,
		`[{"role":"user","content":7}]`,
	} {
		var m []chatMessage
		if err := json.Unmarshal([]byte(bad), &m); err != nil {
			t.Fatal(err)
		}
		var ce *convError
		if _, err := chatItems(m); !errors.As(err, &ce) || ce.status != 400 || ce.param == "" {
			t.Errorf("%s: %v, want a 400 naming its param", bad, err)
		}
	}
}

func TestResponsesItems(t *testing.T) {
	t.Parallel()
	got, err := responsesItems(json.RawMessage(`"hi"`))
	if err != nil || !reflect.DeepEqual(got, []item{{role: roleUser, text: "hi"}}) {
		t.Fatalf("a string input: %+v %v", got, err)
	}
	got, err = responsesItems(json.RawMessage(`[
		{"role":"developer","content":"rules"},
		{"type":"message","role":"user","content":[{"type":"input_text","text":"weather?"}]},
		{"type":"reasoning","id":"rs_1","summary":[]},
		{"type":"message","role":"assistant","content":[{"type":"output_text","text":"Let me see."}]},
		{"type":"function_call","call_id":"c1","name":"get_weather","arguments":"{}"},
		{"type":"function_call","call_id":"c2","name":"get_time","arguments":"{}"},
		{"type":"function_call_output","call_id":"c1","output":"sunny"},
		{"type":"function_call_output","call_id":"c2","output":[{"type":"input_text","text":"noon"}]}
	]`))
	want := []item{
		{role: roleUser, text: "weather?"},
		{role: roleAssistant, text: "Let me see.", calls: []call{{ID: "c1", Name: "get_weather", Arguments: "{}"}, {ID: "c2", Name: "get_time", Arguments: "{}"}}},
		{role: roleTool, text: "sunny", callID: "c1"},
		{role: roleTool, text: "noon", callID: "c2"},
	}
	if err != nil || !reflect.DeepEqual(got, want) {
		t.Fatalf("items:\n got %+v %v\nwant %+v", got, err, want)
	}
	for _, bad := range []string{`null`, `7`, `[{"type":"item_reference","id":"x"}]`, `[{"type":"function_call_output","output":"x"}]`, `[{"role":"tool","content":"x"}]`} {
		if _, err := responsesItems(json.RawMessage(bad)); err == nil {
			t.Errorf("%s taken", bad)
		}
	}
}

// TestImportFile: the earlier conversation a request brings to a new
// session reads back as a pi session file whose messages say the same.
func TestImportFile(t *testing.T) {
	t.Parallel()
	prior := []item{
		{role: roleUser, text: "weather?", images: []events.Image{{MimeType: "image/png", Data: "iVBORw0KGgo="}}},
		{role: roleAssistant, text: "Looking.", calls: []call{{ID: "c1", Name: "get_weather", Arguments: `{"city":"Paris"}`}}},
		{role: roleTool, callID: "c1", text: "sunny"},
		{role: roleAssistant, text: "It is sunny."},
	}
	file, err := importFile(prior, "scripted/echo", "messages", time.Unix(1795914754, 0))
	if err != nil {
		t.Fatal(err)
	}
	entries, err := sessionfile.ReadEntries(bytes.NewReader(file))
	if err != nil {
		t.Fatal(err)
	}
	if len(entries) != 5 || !entries[0].IsHeader() {
		t.Fatalf("%d entries: %s", len(entries), file)
	}
	if got := project(entries, map[string]bool{"c1": true}); matchTail(prior, got) != nil {
		t.Fatalf("the imported conversation does not match the request's: %+v", got)
	}
	tr := entries[3].Message
	if tr.Role != message.RoleToolResult || tr.ToolName != "get_weather" || tr.Content.Text() != "sunny" {
		t.Fatalf("tool result: %+v", tr)
	}
	if m := entries[2].Message; m.Provider != "scripted" || m.Model != "echo" || m.StopReason != message.StopToolUse || m.ToolCalls()[0].Arguments["city"] != "Paris" {
		t.Fatalf("assistant: %+v", m)
	}
	if _, err := importFile([]item{{role: roleAssistant, calls: []call{{ID: "c", Arguments: "[1]"}}}}, "", "input", time.Now()); err == nil {
		t.Fatal("arguments that are no object were taken")
	}
}
