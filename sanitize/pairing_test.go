package sanitize

import (
	"reflect"
	"strings"
	"testing"

	"github.com/lanefleet/lanefleet/message"
)

// transcript builds messages from a shorthand: "u" a user message, "a:x,y"
// an assistant message calling x and y ("a:" none), "e:x" one that stopped
// on an error, "r:x" a result for x ("r:" one without an id).
func transcript(spec string) []message.Message {
	var msgs []message.Message
	for _, f := range strings.Fields(spec) {
		role, ids, _ := strings.Cut(f, ":")
		switch role {
		case "u":
			msgs = append(msgs, message.User("q", 0))
		case "a", "e":
			m := message.Message{Role: message.RoleAssistant, StopReason: message.StopToolUse, Content: message.BlocksOf()}
			if role == "e" {
				m.StopReason = message.StopError
			}
			for id := range strings.SplitSeq(ids, ",") {
				if id != "" {
					m.Content.Blocks = append(m.Content.Blocks, message.ToolCall(id, "read", map[string]any{}))
				}
			}
			msgs = append(msgs, m)
		case "r":
			msgs = append(msgs, message.Message{Role: message.RoleToolResult, ToolCallID: ids, ToolName: "read"})
		}
	}
	return msgs
}

// shorthand renders messages as transcript writes them, a synthetic result
// as "s:x".
func shorthand(msgs []message.Message) string {
	var out []string
	for _, m := range msgs {
		switch {
		case m.Role == message.RoleUser:
			out = append(out, "u")
		case m.Role == message.RoleAssistant:
			var ids []string
			for _, c := range appendCalls(nil, &m) {
				ids = append(ids, c.id)
			}
			out = append(out, "a:"+strings.Join(ids, ","))
		case m.IsError && m.Content.Text() == MissingToolResultText:
			out = append(out, "s:"+m.ToolCallID)
		default:
			out = append(out, "r:"+m.ToolCallID)
		}
	}
	return strings.Join(out, " ")
}

// TestPairingPlace: a message outside a span is kept, a result there is an
// orphan, and an assistant message with calls takes its whole span.
func TestPairingPlace(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		in      string
		want    string // the output after placing msgs[0]
		next    int
		orphans int
	}{
		{"u r:x", "u", 1, 0},
		{"r:x u", "", 1, 1},
		{"a: r:x", "a:", 1, 0},   // no calls: no span
		{"e:x r:x", "a:x", 1, 0}, // stopped on an error: no span
		{"a:x u r:x a:y", "a:x r:x u", 3, 0},
	} {
		p := pairing{out: lazyCopy{src: transcript(tc.in)}}
		next := p.place(0)
		if got := shorthand(p.out.result()); got != tc.want || next != tc.next || p.rep.DroppedOrphanCount != tc.orphans {
			t.Errorf("%s: placed %q, next %d, %d orphans; want %q, %d, %d", tc.in, got, next, p.rep.DroppedOrphanCount, tc.want, tc.next, tc.orphans)
		}
	}
}

// TestPendingCalls: the calls with an id of an assistant message that did
// not stop on an error or abort.
func TestPendingCalls(t *testing.T) {
	t.Parallel()
	aborted := transcript("a:x")[0]
	aborted.StopReason = message.StopAborted
	noID := transcript("a:x")[0]
	noID.Content.Blocks = append(noID.Content.Blocks, message.ToolCall("", "read", nil), message.Text("t"))
	for _, tc := range []struct {
		name string
		m    message.Message
		want []callRef
	}{
		{"calls", transcript("a:x,y")[0], []callRef{{"x", "read", -1}, {"y", "read", -1}}},
		{"stopped on an error", transcript("e:x")[0], nil},
		{"aborted", aborted, nil},
		{"a call without an id and a text are passed over", noID, []callRef{{"x", "read", -1}}},
	} {
		if got := pendingCalls(nil, &tc.m); !reflect.DeepEqual(got, tc.want) {
			t.Errorf("%s: %v, want %v", tc.name, got, tc.want)
		}
	}
}

// TestPairingMatch: a span's first result per call is its result, a later
// one is ignored, a result for no call is an orphan, and a span with both a
// matched result and another message is a change.
func TestPairingMatch(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		in      string // msgs[0] is the assistant message
		results []int  // per call
		end     int
		orphans int
		changed bool
	}{
		{"a:x,y r:y r:x", []int{2, 1}, 3, 0, false},
		{"a:x r:x r:x u", []int{1}, 4, 0, true},
		{"a:x r:z r: u", []int{-1}, 4, 2, true},
		{"a:x,x r:x", []int{1, -1}, 2, 0, false},
		{"a:x u u", []int{-1}, 3, 0, false},
		{"a:x r:x a:y r:y", []int{1}, 2, 0, false},
	} {
		msgs := transcript(tc.in)
		p := pairing{out: lazyCopy{src: msgs}, calls: pendingCalls(nil, &msgs[0])}
		end := p.match(0)
		var results []int
		for _, c := range p.calls {
			results = append(results, c.result)
		}
		if end != tc.end || !reflect.DeepEqual(results, tc.results) || p.rep.DroppedOrphanCount != tc.orphans || p.changed != tc.changed {
			t.Errorf("%s: end %d results %v orphans %d changed %v", tc.in, end, results, p.rep.DroppedOrphanCount, p.changed)
		}
	}
}

// TestPairingKeepOthers: a span's messages other than results follow in
// their order.
func TestPairingKeepOthers(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		in   string // the span
		want string
	}{
		{"r:x u r:y u", "u u"},
		{"r:x r:y", ""},
		{"u", "u"},
	} {
		p := pairing{out: lazyCopy{src: transcript(tc.in)}}
		p.keepOthers(0, len(p.out.src))
		if got := shorthand(p.out.result()); got != tc.want {
			t.Errorf("%s: kept %q, want %q", tc.in, got, tc.want)
		}
	}
}

// TestPairingCallOf: an id's first call, by scan or, past 16 calls, by
// index; none for an unknown or empty id.
func TestPairingCallOf(t *testing.T) {
	t.Parallel()
	few := "a:x,y,x"
	many := "a:" + strings.Repeat("p,", 15) + "x,y,x"
	for _, tc := range []struct {
		calls, id string
		want      int
	}{
		{few, "y", 1},
		{few, "x", 0},
		{few, "z", -1},
		{few, "", -1},
		{many, "p", 0},
		{many, "x", 15},
		{many, "y", 16},
		{many, "z", -1},
	} {
		m := transcript(tc.calls)[0]
		p := pairing{calls: pendingCalls(nil, &m)}
		p.indexCalls()
		if got := p.callOf(tc.id); got != tc.want || (p.index != nil) != (len(p.calls) > 16) {
			t.Errorf("%d calls, %q: call %d (indexed %v), want %d", len(p.calls), tc.id, got, p.index != nil, tc.want)
		}
	}
}

// TestPairingAnswer: each call gets its found result or a synthetic one,
// in call order; a repeated id gets none and is reported as a duplicate.
func TestPairingAnswer(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		in    string // msgs[0] is the assistant message
		found []int  // per call, its result
		want  string // the results placed
		added []string
		dups  int
	}{
		{"a:x,y r:y r:x", []int{2, 1}, "r:x r:y", nil, 0},
		{"a:x,y r:y", []int{-1, 1}, "s:x r:y", []string{"x"}, 0},
		{"a:x,x r:x", []int{1, -1}, "r:x", nil, 1},
		{"a:x,x", []int{-1, -1}, "s:x", []string{"x", "x"}, 1},
	} {
		msgs := transcript(tc.in)
		p := pairing{out: lazyCopy{src: msgs, n: 1}, calls: pendingCalls(nil, &msgs[0])}
		for c, r := range tc.found {
			p.calls[c].result = r
		}
		p.answer()
		got := strings.TrimPrefix(shorthand(p.out.result()), shorthand(msgs[:1])+" ")
		if got != tc.want || !reflect.DeepEqual(p.rep.AddedSyntheticFor, tc.added) || p.rep.DroppedDuplicateCount != tc.dups {
			t.Errorf("%s: placed %q, report %+v; want %q, added %v, %d duplicates", tc.in, got, p.rep, tc.want, tc.added, tc.dups)
		}
	}
}

// TestLazyCopy: messages kept in their place share the input; the first
// out of place copies what came before; a shared result cannot be
// appended into the input.
func TestLazyCopy(t *testing.T) {
	t.Parallel()
	src := transcript("u a:x r:x u")
	for _, tc := range []struct {
		name   string
		keep   []int // -1 adds a synthetic result
		want   string
		shared bool
	}{
		{"all in place", []int{0, 1, 2, 3}, "u a:x r:x u", true},
		{"a prefix", []int{0, 1}, "u a:x", true},
		{"one left out", []int{0, 2, 3}, "u r:x u", false},
		{"reordered", []int{0, 2, 1}, "u r:x a:x", false},
		{"added", []int{0, 1, -1}, "u a:x s:x", false},
		{"none", nil, "", true},
	} {
		l := lazyCopy{src: src}
		for _, i := range tc.keep {
			if i < 0 {
				l.add(SyntheticToolResult("x", "read", 0))
				continue
			}
			l.keep(i)
		}
		got := l.result()
		shared := len(got) == 0 || &got[0] == &src[0]
		if shorthand(got) != tc.want || shared != tc.shared || shared && cap(got) != len(got) {
			t.Errorf("%s: %q shared %v cap %d; want %q shared %v", tc.name, shorthand(got), shared, cap(got), tc.want, tc.shared)
		}
	}
}
