package events

import (
	"bytes"
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/vmihailenco/msgpack/v5"
)

func mustPack(t testing.TB, v any) []byte {
	t.Helper()
	b, err := msgpack.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestDecodeInbound(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		ct      string
		data    []byte
		max     int
		want    string // text of the decoded message
		errPart string // substring of the error, "" = success
	}{
		{"json typed by hand", "", []byte(`{"text":"hi"}`), 0, "hi", ""},
		{"json with leading space", "", []byte(" \n{\"text\":\"hi\"}"), 0, "hi", ""},
		{"json by header", "application/json", []byte(`{"text":"hi","mode":"collect"}`), 0, "hi", ""},
		{"msgpack default", "", mustPack(t, map[string]any{"text": "hi", "v": 1}), 0, "hi", ""},
		{"msgpack by header", ContentMsgpack, mustPack(t, map[string]any{"text": "yo"}), 0, "yo", ""},
		{"malformed json", "", []byte(`{"text":`), 0, "", "malformed JSON"},
		{"json trailing data", "", []byte(`{"text":"a"} {}`), 0, "", "trailing data"},
		{"malformed msgpack", "", []byte{0x85, 0x01}, 0, "", "malformed msgpack"},
		{"empty payload", "", nil, 0, "", "empty payload"},
		{"empty text", "", []byte(`{"text":"  "}`), 0, "", "text: empty"},
		// Unknown top-level fields (a newer sender's) are ignored, in JSON
		// as in msgpack; they dead-lettered the message.
		{"unknown json field", "", []byte(`{"text":"hi","priority":"high","meta":{"a":[1,2]}}`), 0, "hi", ""},
		{"unknown msgpack field", "", mustPack(t, map[string]any{"text": "a", "bogus": 1}), 0, "a", ""},
		{"json field names ignore case", "", []byte(`{"TEXT":"hi","Extra":1}`), 0, "hi", ""},
		{"a typo leaves the message empty", "", []byte(`{"txt":"hi"}`), 0, "", `text: empty: a message needs text, an image or tool results (ignored unknown fields: txt)`},
		{"unknown json fields are bounded", "", []byte(`{"text":"a","blob":"` + strings.Repeat("x", MaxUnknownBytes) + `"}`), 0, "", "unknown fields hold 65542 bytes, the limit is 65536"},
		{"unknown msgpack fields are bounded", "", mustPack(t, map[string]any{"text": "a", "blob": strings.Repeat("x", MaxUnknownBytes)}), 0, "", "the limit is 65536"},
		{"unknown field inside a known one", "", []byte(`{"runSettings":{"temperature":1},"x":1}`), 0, "", `unknown field "temperature"`},
		{"wrong type", "", []byte(`{"text":5}`), 0, "", `field "text" must be string`},
		{"oversized", "", []byte(`{"text":"` + strings.Repeat("a", 100) + `"}`), 50, "", "limit is 50"},
		{"future version", "", []byte(`{"v":2,"text":"a"}`), 0, "", "unsupported schema version 2"},
		{"bad mode", "", []byte(`{"text":"a","mode":"sideways"}`), 0, "", "unknown queue mode"},
		{"bad thinking", "", []byte(`{"text":"a","thinking":"max"}`), 0, "", "unknown thinking level"},
		{"bad model", "", []byte(`{"text":"a","model":"gpt"}`), 0, "", "not provider/model-id"},
		{"bad image", "", []byte(`{"images":[{"mimeType":"image/png","data":"%%%"}]}`), 0, "", "not valid base64"},
		{"image only is fine", "", []byte(`{"images":[{"mimeType":"image/png","data":"aGk="}]}`), 0, "", ""},
		{"invalid utf-8 text", "", mustPack(t, map[string]any{"text": "a\xff"}), 0, "", "UTF-8"},
		{"bad session field", "", []byte(`{"text":"a","session":""}`), 0, "a", ""},
		// A settings message needs no text, and may carry nothing else.
		{"settings message", "", []byte(`{"queueSettings":{"mode":"coalesce","debounceMs":0,"cap":5,"drop":"oldest"}}`), 0, "", ""},
		{"settings with text", "", []byte(`{"text":"a","queueSettings":{"mode":"collect"}}`), 0, "", "carries nothing else"},
		{"settings bad drop", "", []byte(`{"queueSettings":{"drop":"all"}}`), 0, "", "unknown drop policy"},
		{"settings bad debounce", "", []byte(`{"queueSettings":{"debounceMs":-1}}`), 0, "", "debounceMs"},
		{"settings longest debounce", "", []byte(`{"queueSettings":{"debounceMs":60000}}`), 0, "", ""},
		// A session cannot hold its lane's slot for long with a long quiet time.
		{"settings debounce over a minute", "", []byte(`{"queueSettings":{"debounceMs":60001}}`), 0, "", "debounceMs: 60001 is not between 0 and 60000"},
		{"settings hour debounce", "", []byte(`{"queueSettings":{"debounceMs":3600000}}`), 0, "", "debounceMs"},
		{"settings bad cap", "", []byte(`{"queueSettings":{"cap":-2}}`), 0, "", "queueSettings.cap"},
		{"settings bad mode", "", []byte(`{"queueSettings":{"mode":"sometimes"}}`), 0, "", "unknown queue mode"},
		{"stop command", "", []byte(`{"stop":true}`), 0, "", ""},
		{"stop with text", "", []byte(`{"stop":true,"text":"a"}`), 0, "", "a stop command carries nothing else"},
		{"stop with mode", "", []byte(`{"stop":true,"mode":"interrupt"}`), 0, "", "a stop command carries nothing else"},
		{"stop with settings", "", []byte(`{"stop":true,"queueSettings":{"cap":2}}`), 0, "", "a stop command carries nothing else"},
		{"stop false is empty", "", []byte(`{"stop":false}`), 0, "", "empty"},
		// A heartbeat is a prompt.
		{"heartbeat", "", []byte(`{"text":"check in","heartbeat":true}`), 0, "check in", ""},
		{"heartbeat stop", "", []byte(`{"stop":true,"heartbeat":true}`), 0, "", "heartbeat: a heartbeat is a prompt"},
		{"heartbeat settings", "", []byte(`{"heartbeat":true,"queueSettings":{"cap":2}}`), 0, "", "heartbeat: a heartbeat is a prompt"},
		// Without text a heartbeat runs on the heartbeat prompt (HEARTBEAT.md).
		{"heartbeat without text", "", []byte(`{"heartbeat":true}`), 0, "", ""},
		// Run settings: a settings message of its own, bounded and validated.
		{"run settings", "", []byte(`{"runSettings":{"model":"acme/m1","thinking":"HIGH","authProfile":"acme:a","historyLimit":5,"maxToolIterations":9,"maxToolRepeats":2,"tools":{"allow":["web_*","read"],"deny":["exec"],"approve":["write"]}}}`), 0, "", ""},
		{"run and queue settings", "", []byte(`{"queueSettings":{"mode":"collect"},"runSettings":{"reset":true}}`), 0, "", ""},
		{"run settings msgpack", ContentMsgpack, mustPack(t, map[string]any{"runSettings": map[string]any{"model": "a/b"}}), 0, "", ""},
		{"run settings with text", "", []byte(`{"text":"a","runSettings":{"model":"a/b"}}`), 0, "", "a settings message carries nothing else"},
		{"run settings with model", "", []byte(`{"model":"a/b","runSettings":{"thinking":"low"}}`), 0, "", "a settings message carries nothing else"},
		{"queue settings with thinking", "", []byte(`{"thinking":"low","queueSettings":{"cap":2}}`), 0, "", "a settings message carries nothing else"},
		{"run settings bad model", "", []byte(`{"runSettings":{"model":"gpt 4"}}`), 0, "", "runSettings.model"},
		{"run settings bad thinking", "", []byte(`{"runSettings":{"thinking":"max"}}`), 0, "", "runSettings.thinking"},
		{"run settings bad profile", "", []byte(`{"runSettings":{"authProfile":"a b"}}`), 0, "", "runSettings.authProfile"},
		{"run settings long profile", "", []byte(`{"runSettings":{"authProfile":"` + strings.Repeat("p", 129) + `"}}`), 0, "", "runSettings.authProfile"},
		{"run settings bad history", "", []byte(`{"runSettings":{"historyLimit":-1}}`), 0, "", "runSettings.historyLimit"},
		{"run settings huge history", "", []byte(`{"runSettings":{"historyLimit":100001}}`), 0, "", "runSettings.historyLimit"},
		{"run settings bad iterations", "", []byte(`{"runSettings":{"maxToolIterations":10001}}`), 0, "", "runSettings.maxToolIterations"},
		{"run settings bad repeats", "", []byte(`{"runSettings":{"maxToolRepeats":-1}}`), 0, "", "runSettings.maxToolRepeats"},
		{"run settings bad tool", "", []byte(`{"runSettings":{"tools":{"deny":["ex ec"]}}}`), 0, "", "runSettings.tools.deny[0]"},
		{"run settings bracket glob", "", []byte(`{"runSettings":{"tools":{"allow":["[a"]}}}`), 0, "", "runSettings.tools.allow[0]"},
		{"run settings too many tools", "", []byte(`{"runSettings":{"tools":{"approve":["` + strings.Repeat(`t","`, 64) + `t"]}}}`), 0, "", "65 patterns"},
		{"run settings unknown field", "", []byte(`{"runSettings":{"temperature":1}}`), 0, "", `unknown field "temperature"`},
		{"stop with run settings", "", []byte(`{"stop":true,"runSettings":{"model":"a/b"}}`), 0, "", "a stop command carries nothing else"},
		{"message auth profile", "", []byte(`{"text":"a","authProfile":"acme:b"}`), 0, "a", ""},
		{"message bad auth profile", "", []byte(`{"text":"a","authProfile":"a\u0000b"}`), 0, "", "authProfile"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			in, err := DecodeInbound(tt.ct, tt.data, tt.max)
			if tt.errPart != "" {
				var de *DecodeError
				if !errors.As(err, &de) || !strings.Contains(err.Error(), tt.errPart) {
					t.Fatalf("err = %v, want a DecodeError containing %q", err, tt.errPart)
				}
				return
			}
			if err != nil {
				t.Fatalf("unexpected error: %v", err)
			}
			if in.Text != tt.want {
				t.Fatalf("text = %q, want %q", in.Text, tt.want)
			}
		})
	}
}

func TestOversizedIsErrTooLarge(t *testing.T) {
	t.Parallel()
	_, err := DecodeInbound("", make([]byte, 10), 5)
	if !errors.Is(err, ErrTooLarge) {
		t.Fatalf("err = %v, want ErrTooLarge", err)
	}
}

func TestInboundRoundTrip(t *testing.T) {
	t.Parallel()
	for _, asJSON := range []bool{false, true} {
		in := &Inbound{ID: "m1", Text: "hello", Mode: "steer", Model: "scripted/echo", Thinking: "low",
			Images: []Image{{MimeType: "image/png", Data: "aGk="}}}
		data, ct, err := EncodeInbound(in, asJSON)
		if err != nil {
			t.Fatal(err)
		}
		if IsJSON(ct, data) != asJSON {
			t.Fatalf("content type %q does not match format", ct)
		}
		got, err := DecodeInbound(ct, data, 0)
		if err != nil {
			t.Fatal(err)
		}
		if got.Text != "hello" || got.Mode != "steer" || len(got.Images) != 1 || got.V != Version {
			t.Fatalf("round trip = %+v", got)
		}
	}
}

func TestEventRoundTrip(t *testing.T) {
	t.Parallel()
	ev := &Event{RunID: "42", SessionKey: "a.b", Seq: 7, Stream: StreamFinal, TS: 1,
		Data: EventData{Result: &Result{Payloads: []Payload{{Text: "hi"}}, Meta: Meta{DurationMs: 5,
			AgentMeta: &AgentMeta{SessionID: "s", Provider: "scripted", Model: "echo", Usage: &UsageMeta{Input: 3}},
			Error:     &RunError{Kind: "provider_error", Message: "boom"}}}}}
	for _, asJSON := range []bool{false, true} {
		data, ct, err := EncodeEvent(ev, asJSON)
		if err != nil {
			t.Fatal(err)
		}
		got, err := DecodeEvent(ct, data)
		if err != nil {
			t.Fatal(err)
		}
		if !got.Terminal() || got.Data.Result.Payloads[0].Text != "hi" || got.Data.Result.Meta.AgentMeta.Usage.Input != 3 || got.Data.Result.Meta.Error.Kind != "provider_error" {
			t.Fatalf("round trip (json=%v) = %+v", asJSON, got)
		}
	}
	if _, err := DecodeEvent("", []byte(`{"seq":1}`)); err == nil {
		t.Fatal("event without stream accepted")
	}
}

func TestQueueSettingsApply(t *testing.T) {
	t.Parallel()
	ms := func(v int64) *int64 { return &v }
	var stored *QueueSettings
	// Aliases are stored normalised; unset fields stay unset.
	stored = stored.Apply(&QueueSettings{Mode: "coalesce", Drop: "oldest"})
	if got := stored.String(); got != "mode collect, drop old" {
		t.Fatalf("first change: %s", got)
	}
	// A change replaces only the fields it sets; a zero debounce is a value.
	stored = stored.Apply(&QueueSettings{DebounceMs: ms(0), Cap: 3})
	if got := stored.String(); got != "mode collect, debounce 0ms, cap 3, drop old" {
		t.Fatalf("second change: %s", got)
	}
	// Reset clears first, then applies what the change sets.
	stored = stored.Apply(&QueueSettings{Reset: true, Mode: "steer"})
	if got := stored.String(); got != "mode steer" || stored.Reset {
		t.Fatalf("reset: %s", got)
	}
}

func FuzzDecodeInbound(f *testing.F) {
	f.Add("", []byte(`{"text":"hi"}`))
	f.Add("application/json", []byte(`{"text":"a","images":[{"mimeType":"image/png","data":"aGk="}]}`))
	f.Add("", mustPack(f, map[string]any{"text": "hi", "mode": "collect"}))
	f.Add("", []byte{0x85, 0x01})
	// The attacks of issue 10: an allocation bomb, deep nesting.
	f.Add("", bomb)
	f.Add(ContentMsgpack, nested(MaxDepth+1))
	f.Add("", nestedMaps(100))
	f.Add("", unhex("81 a5 746f6f6c73 91 82 a4 6e616d65 a1 78 aa 706172616d6574657273 81 a1 61 dfffffffff"))
	f.Add(ContentJSON, []byte(`{"text":"a","tools":[{"name":"x","parameters":{"a":`+strings.Repeat("[", 20000)+`}}]}`))
	f.Add(ContentJSON, []byte(`{"runSettings":{"model":"a/b","thinking":"low","authProfile":"a:b","historyLimit":3,"maxToolIterations":4,"tools":{"allow":["x*"],"deny":["y"]}},"queueSettings":{"cap":2}}`))
	f.Add("", mustPack(f, map[string]any{"runSettings": map[string]any{"tools": map[string]any{"deny": []string{"exec"}}, "reset": true}}))
	f.Add("", mustPack(f, map[string]any{"text": "a", "authProfile": "acme:a"}))
	f.Fuzz(func(t *testing.T, ct string, data []byte) {
		in, err := DecodeInbound(ct, data, 1<<16)
		if err != nil {
			var de *DecodeError
			if !errors.As(err, &de) {
				t.Fatalf("error is not a DecodeError: %T %v", err, err)
			}
			return
		}
		if in.Validate() != nil {
			t.Fatal("decoded message does not validate")
		}
		for _, asJSON := range []bool{false, true} {
			b, ct2, err := EncodeInbound(in, asJSON)
			if err != nil {
				t.Fatal(err)
			}
			back, err := DecodeInbound(ct2, b, 0)
			if err != nil || back.Text != in.Text {
				t.Fatalf("re-decode: %v", err)
			}
		}
	})
}

func FuzzDecodeEvent(f *testing.F) {
	data, ct, _ := EncodeEvent(&Event{Stream: StreamAssistant, Data: EventData{Delta: "x"}}, false)
	f.Add(ct, data)
	f.Add("", []byte(`{"stream":"final","data":{"result":{"meta":{"durationMs":1}}}}`))
	f.Add("", bomb)
	f.Add("", nested(MaxDepth+1))
	f.Add("", mustEvent(f))
	f.Add(ContentMsgpack, unhex("82 a6 73747265616d a4 74657874 a4 64617461 81 a4 61726773 dd ffffffff"))
	f.Fuzz(func(t *testing.T, ct string, data []byte) {
		ev, err := DecodeEvent(ct, data)
		if err != nil {
			var de *DecodeError
			if !errors.As(err, &de) {
				t.Fatalf("error is not a DecodeError: %T %v", err, err)
			}
			return
		}
		// What decodes encodes, and decodes again.
		b, ct2, err := EncodeEvent(ev, false)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := DecodeEvent(ct2, b); err != nil {
			t.Fatalf("re-decode: %v", err)
		}
	})
}

// BenchmarkDecodeInbound measures the bounds walk's cost on a typical
// inbound message: checked is DecodeInbound (walk, decode, validate);
// unchecked the same decode and validation without the walk; walk the walk
// alone. The overhead is checked/unchecked.
func BenchmarkDecodeInbound(b *testing.B) {
	in := &Inbound{ID: "c0ffee-1234", Text: "hello there, how are you today? Tell me about the weather.",
		Model: "anthropic/claude-sonnet-4-6", Sent: 1700000000000}
	data, ct, _ := EncodeInbound(in, false)
	b.Run("checked", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := DecodeInbound(ct, data, 0); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("unchecked", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			var in Inbound
			dec := msgpack.GetDecoder()
			dec.Reset(bytes.NewReader(data))
			dec.DisallowUnknownFields(true)
			if err := dec.Decode(&in); err != nil {
				b.Fatal(err)
			}
			msgpack.PutDecoder(dec)
			if err := in.Validate(); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("walk", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if err := CheckMsgpack(data); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// BenchmarkDecodeEvent is BenchmarkDecodeInbound for events: a streamed
// delta (most events) and a final event with a result.
func BenchmarkDecodeEvent(b *testing.B) {
	delta, _, _ := EncodeEvent(&Event{RunID: "1234", SessionKey: "alice", Seq: 17, Attempt: 1, Stream: StreamAssistant, TS: 1700000000000,
		Data: EventData{Delta: "the weather ", Text: "Today the weather "}}, false)
	final, _, _ := EncodeEvent(&Event{RunID: "1234", SessionKey: "alice", Seq: 40, Attempt: 1, Stream: StreamFinal, TS: 1700000000000,
		Data: EventData{Result: &Result{Payloads: []Payload{{Text: strings.Repeat("Today the weather is fine. ", 20)}},
			Meta: Meta{DurationMs: 1234, StopReason: "stop", AgentMeta: &AgentMeta{SessionID: "0193c0de-aaaa-bbbb-cccc-1234567890ab",
				Provider: "anthropic", Model: "claude-sonnet-4-6", Usage: &UsageMeta{Input: 1200, Output: 300, Total: 1500}}}}}}, false)
	for _, tt := range []struct {
		name string
		data []byte
	}{{"delta", delta}, {"final", final}} {
		b.Run(tt.name+"/checked", func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, err := DecodeEvent(ContentMsgpack, tt.data); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run(tt.name+"/unchecked", func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				var e Event
				if err := msgpack.Unmarshal(tt.data, &e); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run(tt.name+"/walk", func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if err := CheckMsgpack(tt.data); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

func BenchmarkCodec(b *testing.B) {
	in := &Inbound{ID: "abc123", Text: "hello there, how are you today?", Mode: "followup"}
	packed, ct, _ := EncodeInbound(in, false)
	js, jct, _ := EncodeInbound(in, true)
	ev := &Event{RunID: "123", SessionKey: "alice", Seq: 3, Stream: StreamAssistant, TS: 1, Data: EventData{Delta: "hello ", Text: "hello "}}
	b.Run("inbound-decode-msgpack", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := DecodeInbound(ct, packed, 0); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("inbound-decode-json", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := DecodeInbound(jct, js, 0); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("event-encode-msgpack", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, _, err := EncodeEvent(ev, false); err != nil {
				b.Fatal(err)
			}
		}
	})
	evb, evct, _ := EncodeEvent(ev, false)
	b.Run("event-decode-msgpack", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := DecodeEvent(evct, evb); err != nil {
				b.Fatal(err)
			}
		}
	})
}

func TestRunSettingsApply(t *testing.T) {
	t.Parallel()
	var stored *Settings
	// Run settings alone leave the queue settings at their defaults.
	stored = stored.Apply(nil, &RunSettings{Model: "acme/m1", Thinking: "HIGH", Tools: &ToolPolicy{Deny: []string{"exec"}}})
	if got := stored.String(); got != "queue settings: defaults; run settings: model acme/m1, thinking high, tools deny exec" {
		t.Fatalf("first change: %s", got)
	}
	// Queue settings alone keep the run settings; a change replaces only
	// what it sets.
	stored = stored.Apply(&QueueSettings{Mode: "collect"}, &RunSettings{HistoryLimit: 4, AuthProfile: "acme:b"})
	if got := stored.String(); got != "queue settings: mode collect; run settings: model acme/m1, thinking high, auth profile acme:b, history limit 4, tools deny exec" {
		t.Fatalf("second change: %s", got)
	}
	// An empty tool policy clears the stored one; reset clears every run
	// setting and then applies the change; the queue part stays.
	stored = stored.Apply(nil, &RunSettings{Tools: &ToolPolicy{}})
	if stored.Run.Tools != nil {
		t.Fatalf("tools not cleared: %+v", stored.Run.Tools)
	}
	stored = stored.Apply(nil, &RunSettings{Reset: true, MaxToolIterations: 7})
	if got := stored.String(); got != "queue settings: mode collect; run settings: tool-loop limit 7" || stored.Run.Reset {
		t.Fatalf("reset: %s", got)
	}
	stored = stored.Apply(nil, &RunSettings{Reset: true})
	if stored.Run != nil || stored.String() != "queue settings: mode collect" {
		t.Fatalf("reset to nothing: %+v %s", stored.Run, stored)
	}
}

// TestStoredSettingsCompatible: a settings record written before run
// settings existed (the queue settings' own JSON) still reads, and a record
// with run settings reads as the queue settings it holds for a reader that
// knows none.
func TestStoredSettingsCompatible(t *testing.T) {
	t.Parallel()
	var s Settings
	if err := json.Unmarshal([]byte(`{"mode":"collect","cap":3}`), &s); err != nil || s.Mode != "collect" || s.Cap != 3 || s.Run != nil {
		t.Fatalf("old record: %+v %v", s, err)
	}
	b, err := json.Marshal(&Settings{QueueSettings: QueueSettings{Mode: "steer"}, Run: &RunSettings{Model: "a/b"}})
	if err != nil {
		t.Fatal(err)
	}
	if string(b) != `{"mode":"steer","run":{"model":"a/b"}}` {
		t.Fatalf("record = %s", b)
	}
	var old QueueSettings
	if err := json.Unmarshal(b, &old); err != nil || old.Mode != "steer" {
		t.Fatalf("old reader: %+v %v", old, err)
	}
}

func TestUsagePlus(t *testing.T) {
	t.Parallel()
	var total *UsageMeta
	if total.Plus(nil) != nil {
		t.Fatal("nil plus nil is not nil")
	}
	total = total.Plus(&UsageMeta{Input: 10, Output: 2, Total: 12})
	total = total.Plus(&UsageMeta{Input: 5, CacheRead: 3, Total: 8, Cost: &CostMeta{Input: 0.5, Total: 0.5}})
	want := UsageMeta{Input: 15, Output: 2, CacheRead: 3, Total: 20}
	if got := *total; got.Cost == nil || got.Cost.Total != 0.5 || got.Cost.Input != 0.5 {
		t.Fatalf("cost = %+v", got.Cost)
	}
	total.Cost = nil
	if *total != want {
		t.Fatalf("total = %+v, want %+v", *total, want)
	}
}
