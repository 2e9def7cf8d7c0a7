package wirecache

import (
	"bytes"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"
	"unsafe"

	"github.com/lanefleet/lanefleet/message"
	"github.com/lanefleet/lanefleet/provider"
)

type testMsg struct {
	Text string `json:"text"`
}

type testBody struct {
	Model    string    `json:"model"`
	Messages []testMsg `json:"messages"`
}

func equalMsg(a, b *testMsg) bool { return *a == *b }

// formsOf starts the forms of req's messages as they are, for model "m".
func formsOf[M, C any](c *Cache[M, C], req *provider.Request, n int) Forms[M, C] {
	if c == nil || req.SessionID == "" {
		return Forms[M, C]{Out: make([]M, 0, n)}
	}
	prev := c.Take(req.SessionID)
	return c.forms(req.SessionID, prev, prev.takeConvs(), key(provider.Model{ID: "m"}, false), req.Messages, req.Immutable, n)
}

// request builds one request of session id through the cache and checks
// its body is json.Marshal's.
func request(t *testing.T, c *Cache[testMsg, struct{}], id string, texts []string) {
	t.Helper()
	f := formsOf(c, &provider.Request{SessionID: id}, len(texts))
	for _, s := range texts {
		f.Add(-1, testMsg{Text: s}, -1)
	}
	msgs := f.Out
	body := testBody{Model: "m"}
	got, err := f.Marshal(&body, &body.Messages, "messages")
	if err != nil {
		t.Fatal(err)
	}
	want, err := json.Marshal(testBody{Model: "m", Messages: msgs})
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("cached body differs:\n%s\n%s", got, want)
	}
}

// TestSparesHoldNothing: after a session's request shrinks (a compaction,
// a rollback), the arrays kept as the next request's spares hold none of
// the earlier requests' messages or JSON — memory the budget does not
// charge — and what the session is charged covers what it keeps.
func TestSparesHoldNothing(t *testing.T) {
	c := New[testMsg, struct{}](64<<20, equalMsg)
	big := make([]string, 100)
	for i := range big {
		big[i] = strings.Repeat(string(rune('a'+i%26)), 10<<10)
	}
	request(t, c, "s", big)
	request(t, c, "s", big[:1]) // reuses one message's JSON
	request(t, c, "s", []string{"summary"})
	s := c.Take("s")
	if s == nil {
		t.Fatal("the session was not kept")
	}
	for i, m := range s.spareMsgs[:cap(s.spareMsgs)] {
		if m.Text != "" {
			t.Fatalf("spare message %d still holds %d bytes", i, len(m.Text))
		}
	}
	for i, b := range s.spareEnc[:cap(s.spareEnc)] {
		if b != nil {
			t.Fatalf("spare JSON %d still holds %d bytes", i, len(b))
		}
	}
	if charged, kept := s.Charged(); charged < kept {
		t.Fatalf("charged %d bytes for %d bytes of JSON kept", charged, kept)
	}
}

// TestNewBudget: the adapters' WireCacheBytes rule, in one place: 0 is
// the default budget, below 0 no cache (which keeps nothing and still
// builds the body).
func TestNewBudget(t *testing.T) {
	t.Parallel()
	tests := []struct {
		maxBytes int
		want     int // the budget, -1: no cache
	}{{0, BytesDefault}, {-1, -1}, {-BytesDefault, -1}, {1 << 10, 1 << 10}}
	for _, tt := range tests {
		c := New[testMsg, struct{}](tt.maxBytes, equalMsg)
		if tt.want < 0 {
			if c != nil {
				t.Errorf("New(%d) is a cache, want none", tt.maxBytes)
			}
			request(t, c, "s", []string{"a", "b"})
			if c.Take("s") != nil {
				t.Errorf("New(%d) kept a session", tt.maxBytes)
			}
			continue
		}
		// A session charged just over half the budget is not kept.
		big := strings.Repeat("x", tt.want/4)
		request(t, c, "s", []string{big})
		if c.Take("s") != nil {
			t.Errorf("New(%d) kept a session of over half of %d bytes", tt.maxBytes, tt.want)
		}
		request(t, c, "s", []string{big[:tt.want/16]})
		if c.Take("s") == nil {
			t.Errorf("New(%d) did not keep a session of an eighth of %d bytes", tt.maxBytes, tt.want)
		}
	}
}

// TestImmutableNotComparedAgain: the messages a caller promised never to
// write again (provider.Request.Immutable), over the same array in two
// requests, are taken as the same without comparing them (a message
// rewritten there against the promise is not seen), up to the smaller of
// the two promises; without the promise, or over another array, they are
// compared.
func TestImmutableNotComparedAgain(t *testing.T) {
	t.Parallel()
	c := New[testMsg, struct{}](1<<20, equalMsg)
	run := func(req *provider.Request) (same int) {
		f := formsOf(c, req, len(req.Messages))
		same = f.same
		for i := range req.Messages {
			_, h := f.Form(i, func() struct{} { return struct{}{} })
			f.Add(i, testMsg{Text: req.Messages[i].Content.Text()}, h)
		}
		body := testBody{Model: "m"}
		if _, err := f.Marshal(&body, &body.Messages, "messages"); err != nil {
			t.Fatal(err)
		}
		return same
	}
	arr := make([]message.Message, 0, 16)
	for i := range 8 {
		arr = append(arr, message.User(fmt.Sprint("m", i), int64(i)))
	}
	run(&provider.Request{SessionID: "s", Messages: arr[:4], Immutable: 3})
	arr[1] = message.User("rewritten against the promise", 1)
	arr[3] = message.User("rewritten past it", 3)
	if same := run(&provider.Request{SessionID: "s", Messages: arr[:6], Immutable: 6}); same != 3 {
		t.Fatalf("promised: %d messages taken as the last request's, want 3 (the smaller promise, not compared; the next compared)", same)
	}
	if same := run(&provider.Request{SessionID: "s", Messages: arr[:6]}); same != 1 {
		t.Fatalf("no promise: %d messages the same, want 1 (compared with what was sent)", same)
	}
	other := slices.Clone(arr[:6])
	run(&provider.Request{SessionID: "s", Messages: arr[:6], Immutable: 6})
	other[0] = message.User("another array", 0)
	if same := run(&provider.Request{SessionID: "s", Messages: other, Immutable: 6}); same != 0 {
		t.Fatalf("another array: %d messages the same, want 0 (compared)", same)
	}
}

// TestKeptJSONInOneArray: a growing session's kept JSON is its joined
// array alone: when that array grows into a new one, the JSON of every
// message moves with it, so no message's JSON keeps an earlier request's
// array alive (memory the budget does not charge: a session's arrays
// grow by a quarter, so the earlier ones came to four times its charge).
func TestKeptJSONInOneArray(t *testing.T) {
	t.Parallel()
	c := New[testMsg, struct{}](64<<20, equalMsg)
	var texts []string
	for i := range 300 {
		texts = append(texts, fmt.Sprint("message number ", i))
		request(t, c, "s", texts)
	}
	s := c.Take("s")
	if s == nil {
		t.Fatal("the session was not kept")
	}
	lo := uintptr(unsafe.Pointer(unsafe.SliceData(s.joined)))
	hi := lo + uintptr(cap(s.joined))
	outside := 0
	for _, b := range s.enc {
		if p := uintptr(unsafe.Pointer(unsafe.SliceData(b))); p < lo || p >= hi {
			outside++
		}
	}
	if outside > 0 {
		t.Fatalf("%d of %d messages' JSON outside the session's joined array", outside, len(s.enc))
	}
}
