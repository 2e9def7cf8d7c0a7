package fleet

import (
	"fmt"
	"strings"
	"testing"

	"github.com/lanefleet/lanefleet/events"
	"github.com/lanefleet/lanefleet/internal/natstest"
	"github.com/lanefleet/lanefleet/kvstore"
	"github.com/lanefleet/lanefleet/message"
	"github.com/lanefleet/lanefleet/tools"
	"github.com/lanefleet/lanefleet/tools/sessions"
)

// TestSessionHistoryReadsWhatItShows: sessions_history over the lanes
// bucket of a real server reads only the newest turns it shows, however
// long the session: a 400-turn session whose tool results hold 6 MB
// costs its last few turns and the listing of its keys, not the whole
// transcript (the old read loaded all of it); paging with the before
// value the answer gives walks back through it, each message once; and
// turns whose stored bytes pass the read's bound stop the read with a
// note that says how to go on.
func TestSessionHistoryReadsWhatItShows(t *testing.T) {
	t.Parallel()
	srv := natstest.Start(t)
	js := natstest.JetStream(t, srv.URL)
	ctx := t.Context()
	lanes, err := kvstore.Open(ctx, js, kvstore.Config{})
	if err != nil {
		t.Fatal(err)
	}
	const key, turns, toolBytes = "acme:long", 400, 16 << 10
	tok, err := events.KeyToken(key)
	if err != nil {
		t.Fatal(err)
	}
	lease, err := lanes.Acquire(ctx, tok, kvstore.LeaseInfo{Worker: "w"})
	if err != nil {
		t.Fatal(err)
	}
	result := strings.Repeat("r", toolBytes)
	for i := uint64(1); i <= turns; i++ {
		u := message.User(fmt.Sprintf("question %d", i), 1)
		a := message.Message{Role: message.RoleAssistant, Content: message.Content{Blocks: []message.Block{message.Text(fmt.Sprintf("answer %d", i)), message.ToolCall("c", "exec", nil)}}}
		r := message.Message{Role: message.RoleToolResult, ToolName: "exec", Content: message.PlainText(result)}
		rec := kvstore.Record{InboundSeq: 10 * i, RunID: fmt.Sprint(i), Entries: []message.Entry{
			{Type: message.EntryMessage, Message: &u}, {Type: message.EntryMessage, Message: &a}, {Type: message.EntryMessage, Message: &r}}}
		if _, err := lease.PutRecord(ctx, rec); err != nil {
			t.Fatal(err)
		}
	}
	list, err := sessions.Tools(&sessionBackend{m: &Member{Lanes: lanes}}, sessions.Policy{}, "acme:me", "1", nil)
	if err != nil {
		t.Fatal(err)
	}
	history, _ := list.Lookup("sessions_history")
	call := func(args map[string]any) (string, map[string]any) {
		t.Helper()
		args["sessionKey"] = key
		res, err := history.Call(ctx, tools.Call{ID: "h", Name: "sessions_history", Args: args})
		if err != nil {
			t.Fatal(err)
		}
		return res.Content[0].Text, res.Details
	}

	nc := js.Conn()
	in := nc.Stats().InBytes
	text, details := call(map[string]any{"limit": 5})
	loaded := nc.Stats().InBytes - in
	if text != "assistant: answer 398\n\nuser: question 399\n\nassistant: answer 399\n\nuser: question 400\n\nassistant: answer 400" {
		t.Errorf("history: %q", text)
	}
	if loaded > 256<<10 {
		t.Errorf("a history of 5 messages loaded %d bytes from the server (the transcript holds %d)", loaded, turns*toolBytes)
	}
	if details["before"] != "3980:1" {
		t.Errorf("before = %v, want 3980:1 (turn 398 up to its answer)", details["before"])
	}

	// Paging back with the before each answer gives reads every message
	// once, newest pages first.
	var pages []string
	before := ""
	for range turns {
		args := map[string]any{"limit": 7}
		if before != "" {
			args["before"] = before
		}
		text, details := call(args)
		pages = append(pages, text)
		b, ok := details["before"].(string)
		if !ok {
			break
		}
		before = b
	}
	var all []string
	for i := len(pages) - 1; i >= 0; i-- {
		all = append(all, strings.Split(pages[i], "\n\n")...)
	}
	if len(all) != 2*turns {
		t.Fatalf("paging read %d messages in %d pages, want %d", len(all), len(pages), 2*turns)
	}
	for i, m := range all {
		want := fmt.Sprintf("user: question %d", i/2+1)
		if i%2 == 1 {
			want = fmt.Sprintf("assistant: answer %d", i/2+1)
		}
		if m != want {
			t.Fatalf("message %d is %q, want %q", i, m, want)
		}
	}

	// A session whose turns store images: the read stops at its byte
	// bound with a note, and the before it gives goes on from there.
	const pics = "acme:pics"
	tok, err = events.KeyToken(pics)
	if err != nil {
		t.Fatal(err)
	}
	if lease, err = lanes.Acquire(ctx, tok, kvstore.LeaseInfo{Worker: "w"}); err != nil {
		t.Fatal(err)
	}
	image := strings.Repeat("A", 600<<10)
	for i := uint64(1); i <= 10; i++ {
		u := message.Message{Role: message.RoleUser, Content: message.Content{Blocks: []message.Block{message.Text(fmt.Sprintf("look %d", i)), message.Image("image/png", image)}}}
		if _, err := lease.PutRecord(ctx, kvstore.Record{InboundSeq: i, RunID: fmt.Sprint(i), Entries: []message.Entry{{Type: message.EntryMessage, Message: &u}}}); err != nil {
			t.Fatal(err)
		}
	}
	in = nc.Stats().InBytes
	res, err := history.Call(ctx, tools.Call{Name: "sessions_history", Args: map[string]any{"sessionKey": pics}})
	loaded = nc.Stats().InBytes - in
	if err != nil {
		t.Fatal(err)
	}
	text = res.Content[0].Text
	if !strings.HasPrefix(text, `[Older messages were not read: one call reads at most 200 turns or 4 MB of the stored transcript. For older messages call again with before "4".]`) ||
		!strings.HasSuffix(text, "user: look 4\n[image]\n\nuser: look 5\n[image]\n\nuser: look 6\n[image]\n\nuser: look 7\n[image]\n\nuser: look 8\n[image]\n\nuser: look 9\n[image]\n\nuser: look 10\n[image]") {
		t.Fatalf("history of images: %q", text)
	}
	if loaded > 5<<20 {
		t.Errorf("a history bound at 4 MB loaded %d bytes", loaded)
	}
	res, err = history.Call(ctx, tools.Call{Name: "sessions_history", Args: map[string]any{"sessionKey": pics, "before": res.Details["before"]}})
	if err != nil || res.Content[0].Text != "user: look 1\n[image]\n\nuser: look 2\n[image]\n\nuser: look 3\n[image]" || res.Details["before"] != nil {
		t.Fatalf("the page before: %v %v", res, err)
	}
	if _, err := history.Call(ctx, tools.Call{Name: "sessions_history", Args: map[string]any{"sessionKey": key, "before": "x:1"}}); err == nil || !strings.Contains(err.Error(), "not a before value") {
		t.Errorf("a bad before: %v", err)
	}
}
