package sessionsvc_test

import (
	"context"
	"encoding/json"
	"fmt"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nats.go/micro"
	"github.com/rs/zerolog"
	"github.com/vmihailenco/msgpack/v5"

	"github.com/lanefleet/lanefleet/events"
	"github.com/lanefleet/lanefleet/internal/embedded"
	"github.com/lanefleet/lanefleet/internal/natstest"
	"github.com/lanefleet/lanefleet/kvstore"
	"github.com/lanefleet/lanefleet/lanes"
	"github.com/lanefleet/lanefleet/lanes/sessionsvc"
	"github.com/lanefleet/lanefleet/message"
)

// bundle is a lane service on a real JetStream server, with the handles a
// test needs to write what a worker would.
type bundle struct {
	nc      *nats.Conn
	js      jetstream.JetStream
	lanes   *kvstore.Lanes
	streams *lanes.Streams
	svc     *sessionsvc.Service
	ctx     context.Context
}

// setup starts a server (maxPayload bytes per message; 0 for the default),
// the fleet's streams and buckets, and the service.
func setup(t *testing.T, maxPayload int32) *bundle {
	t.Helper()
	no := false
	srv, err := embedded.Start(embedded.Config{Name: "svc", DataDir: t.TempDir(), SyncAlways: &no, MaxPayload: maxPayload})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Shutdown(); srv.WaitForShutdown() })
	nc := natstest.Connect(t, srv.ClientURL())
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	t.Cleanup(cancel)
	streams, err := lanes.EnsureStreams(ctx, js, lanes.StreamConfig{})
	if err != nil {
		t.Fatal(err)
	}
	l, err := kvstore.Open(ctx, js, kvstore.Config{})
	if err != nil {
		t.Fatal(err)
	}
	svc, err := sessionsvc.Serve(nc, sessionsvc.Config{Lanes: l, Inbound: streams.Inbound, Events: streams.Events, Worker: "w1",
		Logger: zerolog.New(zerolog.NewTestWriter(t)).Level(zerolog.WarnLevel)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = svc.Stop() })
	return &bundle{nc: nc, js: js, lanes: l, streams: streams, svc: svc, ctx: ctx}
}

// request sends body to op of token's lane and decodes the reply into v,
// or returns the service's error.
func (b *bundle) request(t *testing.T, token, op string, body any, v any) *sessionsvc.Error {
	t.Helper()
	var data []byte
	switch x := body.(type) {
	case nil:
	case []byte:
		data = x
	case string:
		data = []byte(x)
	default:
		var err error
		if data, err = json.Marshal(body); err != nil {
			t.Fatal(err)
		}
	}
	msg, err := b.nc.RequestWithContext(b.ctx, sessionsvc.Subject(token, op), data)
	if err != nil {
		t.Fatalf("%s %s: %v", token, op, err)
	}
	if code := msg.Header.Get(micro.ErrorCodeHeader); code != "" {
		return &sessionsvc.Error{Code: code, Description: msg.Header.Get(micro.ErrorHeader)}
	}
	if err := msgpack.Unmarshal(msg.Data, v); err != nil {
		t.Fatalf("%s %s: decode reply: %v", token, op, err)
	}
	return nil
}

// commit writes a turn record of the lane under its lease, as a worker does.
func (b *bundle) commit(t *testing.T, token string, rec kvstore.Record) {
	t.Helper()
	lease, err := b.lanes.Acquire(b.ctx, token, kvstore.LeaseInfo{Worker: "test"})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = lease.Release(b.ctx) }()
	if _, err := lease.PutRecord(b.ctx, rec); err != nil {
		t.Fatal(err)
	}
}

// publishEvent stores an event of a run as a worker does.
func (b *bundle) publishEvent(t *testing.T, token string, ev *events.Event, asJSON bool) {
	t.Helper()
	data, ct, err := events.EncodeEvent(ev, asJSON)
	if err != nil {
		t.Fatal(err)
	}
	m := nats.NewMsg(events.EventPrefix + token + "." + ev.RunID)
	m.Data = data
	m.Header.Set(events.HeaderContentType, ct)
	m.Header.Set(events.HeaderStream, ev.Stream)
	if _, err := b.js.PublishMsg(b.ctx, m); err != nil {
		t.Fatal(err)
	}
}

func entry(id string, size int) message.Entry {
	return message.Entry{Type: message.EntryCustom, ID: id, Fields: map[string]any{"data": strings.Repeat("x", size)}}
}

func ids(entries []message.Entry) string {
	var out []string
	for _, e := range entries {
		out = append(out, e.ID)
	}
	return strings.Join(out, " ")
}

// TestHistoryPages: on a server with a 16 KiB max payload, a transcript of
// records larger than a page together is read in pages that each fit, a
// record is split between pages when it must be, and the pages add up to
// every entry once, in order, with the newest session id.
func TestHistoryPages(t *testing.T) {
	t.Parallel()
	const maxPayload = 16 << 10
	b := setup(t, maxPayload)
	var want []string
	for turn := 1; turn <= 6; turn++ {
		rec := kvstore.Record{InboundSeq: uint64(turn), RunID: fmt.Sprint(turn), SessionID: fmt.Sprintf("sess-%d", turn/4)}
		for i := range 4 {
			e := entry(fmt.Sprintf("t%de%d", turn, i), 3000)
			rec.Entries = append(rec.Entries, e)
			want = append(want, e.ID)
		}
		b.commit(t, "paged", rec)
	}
	// A record that alone fills most of a message: it fits a page of its own.
	big := kvstore.Record{InboundSeq: 7, RunID: "7", SessionID: "sess-big", Entries: []message.Entry{entry("big", maxPayload-300)}}
	b.commit(t, "paged", big)
	want = append(want, "big")

	var (
		got   []message.Entry
		pages int
		split bool
		q     sessionsvc.HistoryRequest
		sid   string
	)
	for {
		var page sessionsvc.HistoryReply
		if err := b.request(t, "paged", sessionsvc.OpHistory, q, &page); err != nil {
			t.Fatal(err)
		}
		pages++
		got = append(got, page.Entries...)
		if page.SessionID != "" {
			sid = page.SessionID
		}
		if page.Skip > 0 {
			split = true
		}
		if !page.More {
			break
		}
		q = sessionsvc.HistoryRequest{From: page.Next, Skip: page.Skip}
		if pages > 50 {
			t.Fatal("no end of pages")
		}
	}
	if ids(got) != strings.Join(want, " ") {
		t.Fatalf("entries\n got %s\nwant %s", ids(got), strings.Join(want, " "))
	}
	if pages < 6 || !split || sid != "sess-big" {
		t.Fatalf("%d pages, a record split: %v, session id %q", pages, split, sid)
	}
	if got[0].Fields["data"] != entry("", 3000).Fields["data"] {
		t.Fatalf("entry content changed: %v", got[0].Fields)
	}
	// An empty lane has an empty transcript.
	var empty sessionsvc.HistoryReply
	if err := b.request(t, "nobody", sessionsvc.OpHistory, nil, &empty); err != nil || len(empty.Entries) != 0 || empty.More {
		t.Fatalf("empty lane: %+v, %v", empty, err)
	}
}

// TestEventsCatchUp: the events of a run come back in stored order from the
// seq asked for, with the run's state; a walk resumes at the cursor; JSON
// and msgpack events both pass through as stored.
func TestEventsCatchUp(t *testing.T) {
	t.Parallel()
	b := setup(t, 0)
	tok := "viewer"
	// Another run of the lane, and a run of another lane, interleaved:
	// neither may show up.
	for seq := uint64(1); seq <= 5; seq++ {
		b.publishEvent(t, tok, &events.Event{RunID: "41", SessionKey: tok, Seq: seq, Attempt: 1, Stream: events.StreamAssistant, Data: events.EventData{Delta: "a"}}, seq%2 == 0)
		b.publishEvent(t, tok, &events.Event{RunID: "40", SessionKey: tok, Seq: seq, Stream: events.StreamAssistant}, false)
		b.publishEvent(t, "other", &events.Event{RunID: "41", SessionKey: "other", Seq: seq, Stream: events.StreamAssistant}, false)
	}
	decode := func(rep sessionsvc.EventsReply) (seqs []uint64) {
		for _, se := range rep.Events {
			ev, err := events.DecodeEvent(se.ContentType(), se.Data)
			if err != nil {
				t.Fatal(err)
			}
			if ev.RunID != "41" || ev.SessionKey != tok {
				t.Fatalf("event of another run: %+v", ev)
			}
			seqs = append(seqs, ev.Seq)
		}
		return seqs
	}
	var rep sessionsvc.EventsReply
	if err := b.request(t, tok, sessionsvc.OpEvents, sessionsvc.EventsRequest{Run: "41"}, &rep); err != nil {
		t.Fatal(err)
	}
	if got := fmt.Sprint(decode(rep)); got != "[1 2 3 4 5]" || rep.State != sessionsvc.StateRunning || rep.More {
		t.Fatalf("from 1: %s, state %s, more %v", got, rep.State, rep.More)
	}
	cursor := rep.Next
	// From a seq: only what the caller has not seen.
	rep = sessionsvc.EventsReply{}
	if err := b.request(t, tok, sessionsvc.OpEvents, sessionsvc.EventsRequest{Run: "41", From: 4}, &rep); err != nil {
		t.Fatal(err)
	}
	if got := fmt.Sprint(decode(rep)); got != "[4 5]" {
		t.Fatalf("from 4: %s", got)
	}
	// More events and the final; the walk resumes at the cursor.
	b.publishEvent(t, tok, &events.Event{RunID: "41", SessionKey: tok, Seq: 6, Attempt: 1, Stream: events.StreamLifecycle, Data: events.EventData{Phase: events.PhaseEnd}}, false)
	b.publishEvent(t, tok, &events.Event{RunID: "41", SessionKey: tok, Seq: 7, Attempt: 1, Stream: events.StreamFinal, Data: events.EventData{Result: &events.Result{Payloads: []events.Payload{{Text: "done"}}}}}, true)
	b.publishEvent(t, tok, &events.Event{RunID: "41", SessionKey: tok, Seq: 8, Attempt: 1, Stream: events.StreamAssistant}, false) // after the final: never returned
	rep = sessionsvc.EventsReply{}
	if err := b.request(t, tok, sessionsvc.OpEvents, sessionsvc.EventsRequest{Run: "41", From: 6, After: cursor}, &rep); err != nil {
		t.Fatal(err)
	}
	if got := fmt.Sprint(decode(rep)); got != "[6 7]" || rep.State != sessionsvc.StateDone || !rep.Events[1].JSON {
		t.Fatalf("after the cursor: %s, state %s", got, rep.State)
	}
}

// TestEventsBatches: a run with more events than one reply carries comes
// back in several replies (More), each within the server's max payload.
func TestEventsBatches(t *testing.T) {
	t.Parallel()
	b := setup(t, 16<<10)
	const n = 60
	for seq := uint64(1); seq <= n; seq++ {
		b.publishEvent(t, "long", &events.Event{RunID: "9", SessionKey: "long", Seq: seq, Stream: events.StreamAssistant,
			Data: events.EventData{Delta: strings.Repeat("d", 1000)}}, false)
	}
	var (
		got     uint64
		replies int
		q       = sessionsvc.EventsRequest{Run: "9"}
	)
	for {
		var rep sessionsvc.EventsReply
		if err := b.request(t, "long", sessionsvc.OpEvents, q, &rep); err != nil {
			t.Fatal(err)
		}
		replies++
		for _, se := range rep.Events {
			ev, err := events.DecodeEvent(se.ContentType(), se.Data)
			if err != nil || ev.Seq != got+1 {
				t.Fatalf("event %+v after %d: %v", ev, got, err)
			}
			got = ev.Seq
		}
		if !rep.More {
			break
		}
		q = sessionsvc.EventsRequest{Run: "9", From: got + 1, After: rep.Next}
	}
	if got != n || replies < 4 {
		t.Fatalf("%d events in %d replies", got, replies)
	}
}

// TestEventsState: a run with no event is queued while its message waits on
// the lane, unknown when the lane has no such message; a committed turn
// whose final event never reached the stream ends with the final stored in
// its record.
func TestEventsState(t *testing.T) {
	t.Parallel()
	b := setup(t, 0)
	ack, err := b.js.Publish(b.ctx, events.InboundPrefix+"waiting", []byte(`{"text":"hi"}`))
	if err != nil {
		t.Fatal(err)
	}
	other, err := b.js.Publish(b.ctx, events.InboundPrefix+"someone-else", []byte(`{"text":"hi"}`))
	if err != nil {
		t.Fatal(err)
	}
	state := func(tok, run string) string {
		var rep sessionsvc.EventsReply
		if err := b.request(t, tok, sessionsvc.OpEvents, sessionsvc.EventsRequest{Run: run}, &rep); err != nil {
			t.Fatal(err)
		}
		return rep.State
	}
	if s := state("waiting", fmt.Sprint(ack.Sequence)); s != sessionsvc.StateQueued {
		t.Fatalf("waiting message: %s", s)
	}
	// Another lane's message is not a run of this one.
	if s := state("waiting", fmt.Sprint(other.Sequence)); s != sessionsvc.StateUnknown {
		t.Fatalf("another lane's message: %s", s)
	}
	if s := state("waiting", "999"); s != sessionsvc.StateUnknown {
		t.Fatalf("no such message: %s", s)
	}

	// A committed turn whose final never reached the stream: its events end
	// with the attempt's end, and the final is in the record.
	final, _, err := events.EncodeEvent(&events.Event{Stream: events.StreamFinal, Data: events.EventData{Result: &events.Result{Payloads: []events.Payload{{Text: "kept"}}}}}, false)
	if err != nil {
		t.Fatal(err)
	}
	b.publishEvent(t, "lost", &events.Event{RunID: "5", SessionKey: "lost", Seq: 1, Attempt: 2, Stream: events.StreamLifecycle, Data: events.EventData{Phase: events.PhaseStart}}, false)
	if s := state("lost", "5"); s != sessionsvc.StateRunning {
		t.Fatalf("a run that started: %s", s)
	}
	b.publishEvent(t, "lost", &events.Event{RunID: "5", SessionKey: "lost", Seq: 2, Attempt: 2, Stream: events.StreamLifecycle, Data: events.EventData{Phase: events.PhaseEnd}}, false)
	if s := state("lost", "5"); s != sessionsvc.StateRunning {
		t.Fatalf("a run that ended its attempt, not committed yet: %s", s)
	}
	b.commit(t, "lost", kvstore.Record{InboundSeq: 5, RunID: "5", Final: final})
	var rep sessionsvc.EventsReply
	if err := b.request(t, "lost", sessionsvc.OpEvents, sessionsvc.EventsRequest{Run: "5"}, &rep); err != nil {
		t.Fatal(err)
	}
	if rep.State != sessionsvc.StateDone || len(rep.Events) != 3 {
		t.Fatalf("record final: state %s, %d events", rep.State, len(rep.Events))
	}
	ev, err := events.DecodeEvent(rep.Events[2].ContentType(), rep.Events[2].Data)
	if err != nil || !ev.Terminal() || ev.Seq != 3 || ev.Attempt != 2 || ev.RunID != "5" || ev.SessionKey != "lost" || ev.Data.Result.Payloads[0].Text != "kept" {
		t.Fatalf("final from the record: %+v, %v", ev, err)
	}
	// Its events expired: the record still ends the run.
	b.commit(t, "expired", kvstore.Record{InboundSeq: 6, RunID: "6", Final: final})
	rep = sessionsvc.EventsReply{}
	if err := b.request(t, "expired", sessionsvc.OpEvents, sessionsvc.EventsRequest{Run: "6"}, &rep); err != nil || rep.State != sessionsvc.StateDone || len(rep.Events) != 1 {
		t.Fatalf("events expired: %+v, %v", rep, err)
	}
}

// TestSettingsAndImport: stored settings come back; an import stores a pi
// session into a new session only, and not while a worker holds the lane.
func TestSettingsAndImport(t *testing.T) {
	t.Parallel()
	b := setup(t, 0)
	var s sessionsvc.SettingsReply
	if err := b.request(t, "cfg", sessionsvc.OpSettings, nil, &s); err != nil || s.Settings != nil {
		t.Fatalf("no settings: %+v, %v", s, err)
	}
	lease, err := b.lanes.Acquire(b.ctx, "cfg", kvstore.LeaseInfo{Worker: "test"})
	if err != nil {
		t.Fatal(err)
	}
	if err := lease.PutSettings(b.ctx, []byte(`{"mode":"collect","cap":3}`)); err != nil {
		t.Fatal(err)
	}
	// Held by a "worker": an import must wait.
	file := `{"type":"session","version":3,"id":"imported-1","timestamp":"2026-01-01T00:00:00.000Z","cwd":"/"}
{"type":"message","id":"a1","parentId":null,"timestamp":"2026-01-01T00:00:00.000Z","message":{"role":"user","content":"hi","timestamp":1}}
not json
`
	var imp sessionsvc.ImportReply
	if err := b.request(t, "cfg", sessionsvc.OpImport, file, &imp); err == nil || err.Code != sessionsvc.CodeBusy {
		t.Fatalf("import while held: %v", err)
	}
	if err := lease.Release(b.ctx); err != nil {
		t.Fatal(err)
	}
	if err := b.request(t, "cfg", sessionsvc.OpSettings, "{}", &s); err != nil || s.Settings == nil || s.Settings.Mode != "collect" || s.Settings.Cap != 3 {
		t.Fatalf("settings: %+v, %v", s.Settings, err)
	}
	if err := b.request(t, "cfg", sessionsvc.OpImport, file, &imp); err != nil || imp != (sessionsvc.ImportReply{SessionID: "imported-1", Entries: 1, Skipped: 1}) {
		t.Fatalf("import: %+v, %v", imp, err)
	}
	if err := b.request(t, "cfg", sessionsvc.OpImport, file, &imp); err == nil || err.Code != sessionsvc.CodeNotEmpty {
		t.Fatalf("second import: %v", err)
	}
	var page sessionsvc.HistoryReply
	if err := b.request(t, "cfg", sessionsvc.OpHistory, nil, &page); err != nil || ids(page.Entries) != "a1" || page.SessionID != "imported-1" {
		t.Fatalf("imported history: %+v, %v", page, err)
	}
}

// TestSettingsUnreadable: a stored settings record that does not read is
// answered as the worker runs the session, on the defaults, with the
// session's state as usual and a note saying what is wrong with the record;
// a readable record written over it is answered as usual again.
func TestSettingsUnreadable(t *testing.T) {
	t.Parallel()
	b := setup(t, 0)
	tests := []struct {
		name   string
		record string
		want   string // in Unreadable
	}{
		{"not JSON", "\x00\xffgarbage", "settings: malformed JSON"},
		{"truncated", `{"mode":"collect","run":{"model":`, "settings: malformed JSON"},
		{"wrong type", `{"cap":"three"}`, `must be int`},
		{"unknown mode", `{"mode":"sideways"}`, `unknown queue mode "sideways"`},
		{"bad stored model", `{"run":{"model":"gpt"}}`, `runSettings.model: "gpt" is not provider/model-id`},
		{"oversized", `{"mode":"collect","drop":"` + strings.Repeat("x", events.MaxSettingsBytes) + `"}`, "bytes, the limit is 65536"},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			token := fmt.Sprint("corrupt", i)
			lease, err := b.lanes.Acquire(b.ctx, token, kvstore.LeaseInfo{Worker: "test"})
			if err != nil {
				t.Fatal(err)
			}
			state := &events.SessionState{AuthProfile: "acme:work", Turns: 1}
			if _, err := lease.PutRecord(b.ctx, kvstore.Record{InboundSeq: 1, RunID: "1", State: state}); err != nil {
				t.Fatal(err)
			}
			if err := lease.PutSettings(b.ctx, []byte(tt.record)); err != nil {
				t.Fatal(err)
			}
			var s sessionsvc.SettingsReply
			if err := b.request(t, token, sessionsvc.OpSettings, nil, &s); err != nil {
				t.Fatalf("an unreadable record failed the request: %v", err)
			}
			if s.Settings != nil || s.Run != nil || !strings.Contains(s.Unreadable, tt.want) || strings.Contains(s.Unreadable, "invalid message") {
				t.Fatalf("reply %+v; want the defaults and a note with %q", s, tt.want)
			}
			if s.State == nil || !reflect.DeepEqual(*s.State, *state) {
				t.Fatalf("state %+v, want %+v", s.State, state)
			}
			if err := lease.PutSettings(b.ctx, []byte(`{"mode":"collect","run":{"thinking":"high"}}`)); err != nil {
				t.Fatal(err)
			}
			s = sessionsvc.SettingsReply{}
			if err := b.request(t, token, sessionsvc.OpSettings, nil, &s); err != nil || s.Unreadable != "" ||
				s.Settings == nil || s.Settings.Mode != "collect" || s.Run == nil || s.Run.Thinking != "high" {
				t.Fatalf("after a readable record: %+v, %v", s, err)
			}
		})
	}
}

// TestHostileRequests: every malformed request gets a 400 error reply,
// decided from the subject and the bytes alone; the lane always comes from
// the subject.
func TestHostileRequests(t *testing.T) {
	t.Parallel()
	b := setup(t, 0)
	tests := []struct {
		name        string
		token, op   string
		body        string
		wantCode    string
		wantMention string
	}{
		{"non-canonical token", "=YWxpY2U", sessionsvc.OpHistory, "", sessionsvc.CodeBadRequest, "plain key"},
		{"undecodable token", "=!!", sessionsvc.OpHistory, "", sessionsvc.CodeBadRequest, "not a lane token"},
		{"unknown field", "a", sessionsvc.OpHistory, `{"from":1,"session":"bob"}`, sessionsvc.CodeBadRequest, "unknown field"},
		{"trailing data", "a", sessionsvc.OpHistory, `{} {}`, sessionsvc.CodeBadRequest, "after the object"},
		{"not JSON", "a", sessionsvc.OpEvents, "\x81\xa3run\xa11", sessionsvc.CodeBadRequest, "malformed JSON"},
		{"oversized", "a", sessionsvc.OpEvents, `{"run":"1","from":1` + strings.Repeat(" ", sessionsvc.MaxRequestBytes) + `}`, sessionsvc.CodeBadRequest, "larger than"},
		{"negative skip", "a", sessionsvc.OpHistory, `{"skip":-1}`, sessionsvc.CodeBadRequest, "negative"},
		{"no run", "a", sessionsvc.OpEvents, `{}`, sessionsvc.CodeBadRequest, "not a run id"},
		{"run zero", "a", sessionsvc.OpEvents, `{"run":"0"}`, sessionsvc.CodeBadRequest, "not a run id"},
		{"run with zeros", "a", sessionsvc.OpEvents, `{"run":"007"}`, sessionsvc.CodeBadRequest, "not a run id"},
		{"run overflow", "a", sessionsvc.OpEvents, `{"run":"18446744073709551616"}`, sessionsvc.CodeBadRequest, "not a run id"},
		{"run wildcard", "a", sessionsvc.OpEvents, `{"run":">"}`, sessionsvc.CodeBadRequest, "not a run id"},
		{"settings body", "a", sessionsvc.OpSettings, `{"mode":"collect"}`, sessionsvc.CodeBadRequest, "unknown field"},
		{"import garbage", "a", sessionsvc.OpImport, "\x00\x01", sessionsvc.CodeBadRequest, "not a pi session file"},
		{"import no header", "a", sessionsvc.OpImport, `{"type":"message","id":"x"}`, sessionsvc.CodeBadRequest, "not a pi session file"},
		{"import huge id", "a", sessionsvc.OpImport, `{"type":"session","version":3,"id":"` + strings.Repeat("i", 300) + `"}`, sessionsvc.CodeBadRequest, "longer than"},
		// 3 bytes a value in the file, hundreds decoded: refused before
		// anything is decoded.
		{"import too many values", "a", sessionsvc.OpImport, `{"type":"session","version":3,"id":"s"}` + "\n" +
			`{"type":"custom","id":"c","parentId":null,"customType":"x","data":[` + strings.Repeat("{},", sessionsvc.MaxImportValues) + `{}]}`,
			sessionsvc.CodeBadRequest, "JSON values"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var v map[string]any
			err := b.request(t, tt.token, tt.op, tt.body, &v)
			if err == nil || err.Code != tt.wantCode || !strings.Contains(err.Description, tt.wantMention) {
				t.Fatalf("reply %v, error %v; want code %s mentioning %q", v, err, tt.wantCode, tt.wantMention)
			}
		})
	}
	// The import of a bad file stored nothing.
	var page sessionsvc.HistoryReply
	if err := b.request(t, "a", sessionsvc.OpHistory, nil, &page); err != nil || len(page.Entries) != 0 {
		t.Fatalf("history after bad imports: %+v, %v", page, err)
	}
}

// TestStopWaitsAndHandsOver: requests in flight finish or fail with a
// retryable error when the service stops; afterwards another worker's
// service answers, and none at all means no responders.
func TestStopWaitsAndHandsOver(t *testing.T) {
	t.Parallel()
	b := setup(t, 0)
	var wg sync.WaitGroup
	errs := make(chan error, 50)
	for range 50 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			msg, err := b.nc.RequestWithContext(b.ctx, sessionsvc.Subject("busy", sessionsvc.OpHistory), nil)
			switch {
			case err != nil:
				errs <- err
			case msg.Header.Get(micro.ErrorCodeHeader) != "" && msg.Header.Get(micro.ErrorCodeHeader) != sessionsvc.CodeUnavailable:
				errs <- fmt.Errorf("error reply %s", msg.Header.Get(micro.ErrorCodeHeader))
			}
		}()
	}
	if err := b.svc.Stop(); err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		// A request sent after the stop finds no responders: never a hang.
		if err != nats.ErrNoResponders {
			t.Fatal(err)
		}
	}
	if _, err := b.nc.RequestWithContext(b.ctx, sessionsvc.Subject("busy", sessionsvc.OpHistory), nil); err != nats.ErrNoResponders {
		t.Fatalf("after stop: %v", err)
	}
	svc2, err := sessionsvc.Serve(b.nc, sessionsvc.Config{Lanes: b.lanes, Inbound: b.streams.Inbound, Events: b.streams.Events, Worker: "w2"})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = svc2.Stop() }()
	var page sessionsvc.HistoryReply
	if err := b.request(t, "busy", sessionsvc.OpHistory, nil, &page); err != nil {
		t.Fatal(err)
	}
}

// TestBacklog: the messages after the lane's last committed turn are
// counted (the processed ones still stored are not), with the oldest
// waiting one and the worker holding the lane.
func TestBacklog(t *testing.T) {
	t.Parallel()
	b := setup(t, 0)
	var rep sessionsvc.BacklogReply
	if err := b.request(t, "quiet", sessionsvc.OpBacklog, nil, &rep); err != nil || rep != (sessionsvc.BacklogReply{}) {
		t.Fatalf("empty lane: %+v, %v", rep, err)
	}
	var seqs []uint64
	for i := range 4 {
		ack, err := b.js.Publish(b.ctx, events.InboundPrefix+"busy", fmt.Appendf(nil, `{"text":"m%d"}`, i))
		if err != nil {
			t.Fatal(err)
		}
		seqs = append(seqs, ack.Sequence)
		if _, err := b.js.Publish(b.ctx, events.InboundPrefix+"other", []byte(`{"text":"x"}`)); err != nil {
			t.Fatal(err)
		}
	}
	if err := b.request(t, "busy", sessionsvc.OpBacklog, nil, &rep); err != nil || rep.Waiting != 4 || rep.OldestRun != fmt.Sprint(seqs[0]) || rep.OldestAt == 0 || rep.Holder != "" {
		t.Fatalf("nothing processed: %+v, %v", rep, err)
	}
	// Two turns committed (their messages not purged yet); a worker holds
	// the lane.
	b.commit(t, "busy", kvstore.Record{InboundSeq: seqs[1], RunID: fmt.Sprint(seqs[1])})
	lease, err := b.lanes.Acquire(b.ctx, "busy", kvstore.LeaseInfo{Worker: "w-7", Acquired: 1234})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = lease.Release(b.ctx) }()
	rep = sessionsvc.BacklogReply{}
	if err := b.request(t, "busy", sessionsvc.OpBacklog, "{}", &rep); err != nil {
		t.Fatal(err)
	}
	want := sessionsvc.BacklogReply{Waiting: 2, OldestRun: fmt.Sprint(seqs[2]), OldestAt: rep.OldestAt, Processed: seqs[1], Holder: "w-7", HeldSince: 1234, Lease: rep.Lease}
	if rep != want || rep.OldestAt == 0 {
		t.Fatalf("backlog = %+v, want %+v", rep, want)
	}
	// How the holder keeps its lease: renewed just now, lapsing within the
	// 30 s TTL.
	if l := rep.Lease; l == nil || l.Worker != "w-7" || l.Since != 1234 || l.Unresponsive || l.Lapsed ||
		l.RenewedAgoMs > l.LapsesInMs || l.LapsesInMs <= 0 || l.LapsesInMs > 30_000 {
		t.Fatalf("lease %+v", rep.Lease)
	}
	if err := b.request(t, "busy", sessionsvc.OpBacklog, `{"x":1}`, &rep); err == nil || err.Code != sessionsvc.CodeBadRequest {
		t.Fatalf("malformed request: %v", err)
	}

	// A worker that stopped without releasing its lane: once its lease
	// lapsed, the lane has no holder and the backlog says the lease lapsed.
	b.lapse(t, "gone", "w-dead")
	if _, err := b.js.Publish(b.ctx, events.InboundPrefix+"gone", []byte(`{"text":"m"}`)); err != nil {
		t.Fatal(err)
	}
	rep = sessionsvc.BacklogReply{}
	if err := b.request(t, "gone", sessionsvc.OpBacklog, nil, &rep); err != nil || rep.Holder != "" || rep.Lease == nil || !rep.Lease.Lapsed || rep.Lease.Worker != "" {
		t.Fatalf("after a lapse: %+v (lease %+v), %v", rep, rep.Lease, err)
	}
}

// lapse takes token's lane as worker with a one-second lease and returns
// once the lease lapsed unreleased, as a worker that died leaves it.
func (b *bundle) lapse(t *testing.T, token, worker string) {
	t.Helper()
	short, err := kvstore.Open(b.ctx, b.js, kvstore.Config{LeaseTTL: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	w, err := b.js.KeyValue(b.ctx, kvstore.DefaultBucket)
	if err != nil {
		t.Fatal(err)
	}
	watch, err := w.Watch(b.ctx, token+".lease", jetstream.UpdatesOnly())
	if err != nil {
		t.Fatal(err)
	}
	defer watch.Stop()
	if _, err := short.Acquire(b.ctx, token, kvstore.LeaseInfo{Worker: worker}); err != nil {
		t.Fatal(err)
	}
	for {
		select {
		case e := <-watch.Updates():
			if e != nil && e.Operation() != jetstream.KeyValuePut {
				return
			}
		case <-b.ctx.Done():
			t.Fatal("the lease never lapsed")
		}
	}
}

// TestEventsLease: a follower that asks is told, while the run runs, how
// the lane's holder keeps its lease, or that the lease lapsed; a request
// that does not ask, or a run that ended, gets no lease.
func TestEventsLease(t *testing.T) {
	t.Parallel()
	b := setup(t, 0)
	ask := func(token string, q sessionsvc.EventsRequest) sessionsvc.EventsReply {
		t.Helper()
		var rep sessionsvc.EventsReply
		if err := b.request(t, token, sessionsvc.OpEvents, q, &rep); err != nil {
			t.Fatal(err)
		}
		return rep
	}
	start := &events.Event{RunID: "7", SessionKey: "held", Seq: 1, Attempt: 1, Stream: events.StreamLifecycle, Data: events.EventData{Phase: events.PhaseStart}}
	b.publishEvent(t, "held", start, false)
	lease, err := b.lanes.Acquire(b.ctx, "held", kvstore.LeaseInfo{Worker: "w-7", Acquired: 99})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = lease.Release(b.ctx) }()
	if rep := ask("held", sessionsvc.EventsRequest{Run: "7"}); rep.State != sessionsvc.StateRunning || rep.Lease != nil {
		t.Fatalf("not asked: %+v", rep)
	}
	rep := ask("held", sessionsvc.EventsRequest{Run: "7", From: 2, Open: true, Lease: true})
	if l := rep.Lease; rep.State != sessionsvc.StateRunning || l == nil || l.Worker != "w-7" || l.Since != 99 || l.Unresponsive || l.LapsesInMs <= 0 {
		t.Fatalf("asked while held: %+v, lease %+v", rep, rep.Lease)
	}

	// The run's worker died: its lease lapsed.
	start.SessionKey = "dead"
	b.publishEvent(t, "dead", start, false)
	b.lapse(t, "dead", "w-dead")
	rep = ask("dead", sessionsvc.EventsRequest{Run: "7", From: 2, Open: true, Lease: true})
	if l := rep.Lease; rep.State != sessionsvc.StateRunning || l == nil || !l.Lapsed || l.Worker != "" {
		t.Fatalf("asked after a lapse: %+v, lease %+v", rep, rep.Lease)
	}

	// A run that ended has no lease to tell.
	b.publishEvent(t, "held", &events.Event{RunID: "7", SessionKey: "held", Seq: 2, Attempt: 1, Stream: events.StreamFinal, Data: events.EventData{Result: &events.Result{}}}, false)
	if rep := ask("held", sessionsvc.EventsRequest{Run: "7", Lease: true}); rep.State != sessionsvc.StateDone || rep.Lease != nil {
		t.Fatalf("a run that ended: %+v", rep)
	}
}

// jsRequests counts the JetStream API requests (stream and bucket reads
// included) made on the bundle's server while fn runs: a subscription on
// another connection sees each one, and a flush of that connection after fn
// returns delivers every one fn's replies waited for.
func (b *bundle) jsRequests(t *testing.T) func(fn func()) []string {
	t.Helper()
	nc := natstest.Connect(t, b.nc.ConnectedUrl())
	ch := make(chan *nats.Msg, 4096)
	if _, err := nc.ChanSubscribe("$JS.API.>", ch); err != nil {
		t.Fatal(err)
	}
	drain := func() (subjects []string) {
		if err := nc.Flush(); err != nil {
			t.Fatal(err)
		}
		for {
			select {
			case m := <-ch:
				subjects = append(subjects, m.Subject)
			default:
				return subjects
			}
		}
	}
	return func(fn func()) []string {
		drain()
		fn()
		return drain()
	}
}

// TestEventsOpenCatchUp: a catch-up that finds no new event and says the
// caller's last event left the run running (Open) is answered running
// after the one read that found nothing, as if the service had read that
// event itself; without Open (the old request) the service also looks for
// the run's final in its record, and finds it there when the final never
// reached the stream. Open changes nothing for a caller that saw no event
// or when the walk finds events.
func TestEventsOpenCatchUp(t *testing.T) {
	t.Parallel()
	b := setup(t, 0)
	count := b.jsRequests(t)
	const tok = "quiet"
	for seq := uint64(1); seq <= 3; seq++ {
		b.publishEvent(t, tok, &events.Event{RunID: "7", SessionKey: tok, Seq: seq, Attempt: 1, Stream: events.StreamAssistant, Data: events.EventData{Delta: "a"}}, false)
	}
	ask := func(q sessionsvc.EventsRequest) (rep sessionsvc.EventsReply, reads []string) {
		t.Helper()
		reads = count(func() {
			if err := b.request(t, tok, sessionsvc.OpEvents, q, &rep); err != nil {
				t.Fatalf("%+v: %v", q, err)
			}
		})
		return rep, reads
	}
	first, _ := ask(sessionsvc.EventsRequest{Run: "7"})
	if len(first.Events) != 3 || first.State != sessionsvc.StateRunning {
		t.Fatalf("first catch-up: %d events, %s", len(first.Events), first.State)
	}
	cursor := first.Next

	// No news, the run's turn not committed: running either way, the old
	// request at the cost of a record read.
	oldRep, oldReads := ask(sessionsvc.EventsRequest{Run: "7", From: 4, After: cursor})
	newRep, newReads := ask(sessionsvc.EventsRequest{Run: "7", From: 4, After: cursor, Open: true})
	if oldRep.State != sessionsvc.StateRunning || newRep.State != sessionsvc.StateRunning || len(oldRep.Events)+len(newRep.Events) != 0 {
		t.Fatalf("no news: old %+v, open %+v", oldRep, newRep)
	}
	if len(newReads) != 1 || len(oldReads) <= len(newReads) {
		t.Fatalf("JetStream requests of a no-news catch-up: old %d %v, open %d %v", len(oldReads), oldReads, len(newReads), newReads)
	}
	t.Logf("JetStream requests of a no-news catch-up: old request %d %v, open %d %v", len(oldReads), oldReads, len(newReads), newReads)

	// The turn commits with its final in the record, and neither the
	// attempt's end nor the final reached the stream. Read in full, the
	// stream's last event leaves the run running; Open answers the same
	// from the caller's word. The old no-news request finds the record.
	final, _, err := events.EncodeEvent(&events.Event{Stream: events.StreamFinal, Data: events.EventData{Result: &events.Result{Payloads: []events.Payload{{Text: "kept"}}}}}, false)
	if err != nil {
		t.Fatal(err)
	}
	b.commit(t, tok, kvstore.Record{InboundSeq: 7, RunID: "7", Final: final})
	full, _ := ask(sessionsvc.EventsRequest{Run: "7", From: 4})
	open, _ := ask(sessionsvc.EventsRequest{Run: "7", From: 4, After: cursor, Open: true})
	if full.State != sessionsvc.StateRunning || open.State != sessionsvc.StateRunning || len(open.Events) != 0 {
		t.Fatalf("read in full: %s; open: %s with %d events", full.State, open.State, len(open.Events))
	}
	old, _ := ask(sessionsvc.EventsRequest{Run: "7", From: 4, After: cursor})
	if old.State != sessionsvc.StateDone || len(old.Events) != 1 {
		t.Fatalf("old request after the commit: %s with %d events", old.State, len(old.Events))
	}

	// New events: Open does not hide them, and a lifecycle end read by the
	// service itself sends it to the record as before.
	b.publishEvent(t, tok, &events.Event{RunID: "7", SessionKey: tok, Seq: 4, Attempt: 1, Stream: events.StreamLifecycle, Data: events.EventData{Phase: events.PhaseEnd}}, false)
	ended, _ := ask(sessionsvc.EventsRequest{Run: "7", From: 4, After: cursor, Open: true})
	if ended.State != sessionsvc.StateDone || len(ended.Events) != 2 {
		t.Fatalf("open request after the attempt's end: %s with %d events", ended.State, len(ended.Events))
	}
	if ev, err := events.DecodeEvent(ended.Events[1].ContentType(), ended.Events[1].Data); err != nil || !ev.Terminal() || ev.Seq != 5 {
		t.Fatalf("final from the record: %+v, %v", ev, err)
	}

	// A caller that saw no event: Open changes nothing (queued, unknown).
	ack, err := b.js.Publish(b.ctx, events.InboundPrefix+tok, []byte(`{"text":"hi"}`))
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		run  string
		from uint64
		want string
	}{
		{fmt.Sprint(ack.Sequence), 0, sessionsvc.StateQueued},
		{fmt.Sprint(ack.Sequence), 1, sessionsvc.StateQueued},
		{"999", 0, sessionsvc.StateUnknown},
		{"999", 1, sessionsvc.StateUnknown},
	} {
		if rep, _ := ask(sessionsvc.EventsRequest{Run: c.run, From: c.from, Open: true}); rep.State != c.want {
			t.Errorf("run %s from %d, open: %s, want %s", c.run, c.from, rep.State, c.want)
		}
	}
}

// TestEventsFirstCatchUpReadsOnce: a caller that saw a run's events live
// and asks for the first time (no After) gets, when nothing is new, the
// answer the full walk gives (running, Next past the run's last event) from
// one read of the stream instead of one per event it saw. Whatever the one
// read cannot settle (new events, an attempt's end, no stored event) is
// answered by the walk as before.
func TestEventsFirstCatchUpReadsOnce(t *testing.T) {
	t.Parallel()
	b := setup(t, 0)
	count := b.jsRequests(t)
	final, _, err := events.EncodeEvent(&events.Event{Stream: events.StreamFinal, Data: events.EventData{Result: &events.Result{Payloads: []events.Payload{{Text: "kept"}}}}}, false)
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name   string
		stored int    // assistant events stored, seq 1 on
		last   string // the stream of one more event after them ("": none)
		from   uint64
		record bool // the run's committed turn record holds its final
		// want: the reply's state and event seqs; reads: the JetStream
		// requests it costs (0: more than one).
		want  string
		reads int
	}{
		{"nothing new", 20, "", 21, false, "running []", 1},
		{"nothing new, the caller's word not needed", 20, "", 21, true, "running []", 1},
		{"new events", 20, "", 18, false, "running [18 19 20]", 0},
		{"attempt ended", 5, events.StreamLifecycle, 7, true, "done [7]", 0},
		{"final stored", 5, events.StreamFinal, 6, false, "done [6]", 0},
		{"a seq past the store", 3, "", 9, false, "running []", 0},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tok, run := fmt.Sprintf("first%d", i), fmt.Sprint(100+i)
			for seq := 1; seq <= tt.stored; seq++ {
				b.publishEvent(t, tok, &events.Event{RunID: run, SessionKey: tok, Seq: uint64(seq), Attempt: 1, Stream: events.StreamAssistant, Data: events.EventData{Delta: "a"}}, seq%2 == 0)
			}
			switch tt.last {
			case events.StreamLifecycle:
				b.publishEvent(t, tok, &events.Event{RunID: run, SessionKey: tok, Seq: uint64(tt.stored + 1), Attempt: 1, Stream: events.StreamLifecycle, Data: events.EventData{Phase: events.PhaseEnd}}, false)
			case events.StreamFinal:
				b.publishEvent(t, tok, &events.Event{RunID: run, SessionKey: tok, Seq: uint64(tt.stored + 1), Attempt: 1, Stream: events.StreamFinal, Data: events.EventData{Result: &events.Result{}}}, false)
			}
			if tt.record {
				b.commit(t, tok, kvstore.Record{InboundSeq: uint64(100 + i), RunID: run, Final: final})
			}
			ask := func(q sessionsvc.EventsRequest) (rep sessionsvc.EventsReply, reads []string) {
				t.Helper()
				reads = count(func() {
					if err := b.request(t, tok, sessionsvc.OpEvents, q, &rep); err != nil {
						t.Fatalf("%+v: %v", q, err)
					}
				})
				return rep, reads
			}
			rep, reads := ask(sessionsvc.EventsRequest{Run: run, From: tt.from, Open: true})
			var seqs []uint64
			for _, se := range rep.Events {
				ev, err := events.DecodeEvent(se.ContentType(), se.Data)
				if err != nil {
					t.Fatal(err)
				}
				seqs = append(seqs, ev.Seq)
			}
			if got := fmt.Sprintf("%s %v", rep.State, seqs); got != tt.want {
				t.Fatalf("reply %s, want %s", got, tt.want)
			}
			if tt.reads > 0 && len(reads) != tt.reads || tt.reads == 0 && len(reads) < 2 {
				t.Fatalf("%d JetStream requests %v, want %d (0: more than one)", len(reads), reads, tt.reads)
			}
			// The reply's Next is the walk's: a catch-up resuming there
			// sees the event stored next, and nothing before it.
			b.publishEvent(t, tok, &events.Event{RunID: run, SessionKey: tok, Seq: 999, Attempt: 1, Stream: events.StreamAssistant}, false)
			next, _ := ask(sessionsvc.EventsRequest{Run: run, From: tt.from, After: rep.Next, Open: true})
			if rep.State == sessionsvc.StateRunning && (len(next.Events) != 1 || next.State != sessionsvc.StateRunning) {
				t.Fatalf("resumed at %d: %d events, %s; want the one stored since", rep.Next, len(next.Events), next.State)
			}
		})
	}
}
