package gateway

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/lanefleet/lanefleet/events"
	"github.com/lanefleet/lanefleet/gateway/auth"
	"github.com/lanefleet/lanefleet/internal/fleet"
	"github.com/lanefleet/lanefleet/internal/natstest"
	"github.com/lanefleet/lanefleet/sessionindex"
	"github.com/lanefleet/lanefleet/tools"
)

// sessionsPage is the body of GET /api/sessions.
type sessionsPage struct {
	Sessions []SessionItem `json:"sessions"`
	Next     any           `json:"next"`
	// Total is left out when the fleet does not count (a tenant's scope,
	// a query): -1 here.
	Total int `json:"total"`
}

// UnmarshalJSON reads a page, Total -1 when it is left out.
func (p *sessionsPage) UnmarshalJSON(b []byte) error {
	type page sessionsPage
	v := page{Total: -1}
	if err := json.Unmarshal(b, &v); err != nil {
		return err
	}
	*p = sessionsPage(v)
	return nil
}

// streamed sends text to key as who and reads the run's stream to its end.
func (b *bundle) streamed(t *testing.T, who, key, body string) []sseEvent {
	t.Helper()
	resp := b.do(t, who, "POST", "/api/sessions/"+escapeKey(key)+"/messages", body)
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("send to %s: %d", key, resp.StatusCode)
	}
	evs, err := readSSE(resp.Body, nil)
	if err != nil {
		t.Fatal(err)
	}
	return evs
}

// TestSessionsListing: GET /api/sessions pages with an opaque cursor,
// searches keys case-insensitively, says each session's state, turns
// and agent, and lists only the caller's sessions; offset still pages
// as before.
func TestSessionsListing(t *testing.T) {
	t.Parallel()
	b := setup(t, setupOpts{})
	for _, key := range []string{"acme:Alpha", "acme:beta", "acme:gamma"} {
		b.streamed(t, "acme", key, `{"text":"hi","stream":true}`)
	}
	b.streamed(t, "globex", "globex:alpha", `{"text":"hi","stream":true}`)
	b.streamed(t, "root", "agent:ops:alpha", `{"text":"hi","stream":true}`)
	get := func(who, query string) sessionsPage {
		t.Helper()
		resp := b.do(t, who, "GET", "/api/sessions"+query, "")
		var p sessionsPage
		readJSON(t, resp, &p)
		if resp.StatusCode != 200 {
			t.Fatalf("%s %s: %d", who, query, resp.StatusCode)
		}
		return p
	}
	keys := func(p sessionsPage) []string {
		var out []string
		for _, s := range p.Sessions {
			out = append(out, s.Key)
		}
		return out
	}
	all := get("acme", "")
	if got := keys(all); !slices.Equal(got, []string{"acme:gamma", "acme:beta", "acme:Alpha"}) || all.Total != -1 || all.Next != "" {
		t.Fatalf("acme lists %v (total %d, next %v)", got, all.Total, all.Next)
	}
	for _, s := range all.Sessions {
		if s.State != "idle" || s.Turns != 1 || s.LastActivity.IsZero() || time.Since(s.LastActivity) > time.Minute || s.Agent != "" {
			t.Fatalf("session %+v", s)
		}
	}
	// A page at a time, by cursor.
	var paged []string
	cursor := ""
	for range 4 {
		p := get("acme-viewer", "?limit=2&cursor="+cursor)
		paged = append(paged, keys(p)...)
		if p.Total != -1 {
			t.Fatalf("total %d: a tenant's sessions are not counted", p.Total)
		}
		cursor, _ = p.Next.(string)
		if cursor == "" {
			break
		}
	}
	if !slices.Equal(paged, keys(all)) {
		t.Fatalf("pages list %v, want %v", paged, keys(all))
	}
	// Search, case-insensitive, within the caller's sessions.
	if p := get("acme", "?q=ALP"); !slices.Equal(keys(p), []string{"acme:Alpha"}) || p.Total != -1 {
		t.Fatalf("q=ALP: %v", keys(p))
	}
	if p := get("root", "?q=alpha"); !slices.Equal(keys(p), []string{"agent:ops:alpha", "globex:alpha", "acme:Alpha"}) || p.Sessions[0].Agent != "ops" {
		t.Fatalf("root q=alpha: %+v", p.Sessions)
	}
	// Offset, as before cursors: next is the next offset.
	if p := get("acme", "?limit=1&offset=1"); !slices.Equal(keys(p), []string{"acme:beta"}) || p.Next != float64(2) {
		t.Fatalf("offset: %v next %v", keys(p), p.Next)
	}
	wantProblem(t, b.do(t, "acme", "GET", "/api/sessions?cursor=!!!", ""), 400, CodeInvalidInput)
	wantProblem(t, b.do(t, "acme", "GET", "/api/sessions?cursor=bm9wZQ", ""), 400, CodeInvalidInput)
	wantProblem(t, b.do(t, "acme", "GET", "/api/sessions?cursor=MS5hYmM&offset=1", ""), 400, CodeInvalidInput)
	wantProblem(t, b.do(t, "acme", "GET", "/api/sessions?q="+strings.Repeat("x", 300), ""), 400, CodeInvalidInput)
}

// TestApprovals: GET /api/approvals lists the calls waiting for approval
// across the caller's sessions, with their arguments; approving one
// through the session route runs it and empties the list.
func TestApprovals(t *testing.T) {
	t.Parallel()
	b := setup(t, setupOpts{member: func(c *fleet.Config) {
		c.WorkspaceRoot = t.TempDir()
		c.ToolPolicy = tools.Policy{Approve: []string{"write"}}
	}})
	script := func(id string) string {
		s := `#script {"replies":[{"toolCalls":[{"id":"` + id + `","name":"write","arguments":{"path":"a.txt","content":"<script>alert(1)</script>"}}]},{"text":"done"}]}`
		b, _ := json.Marshal(map[string]any{"text": s, "model": "scripted/script", "stream": true})
		return string(b)
	}
	b.streamed(t, "acme", "acme:ap", script("x1"))
	b.streamed(t, "root", "globex:ap", script("y1"))
	type approvals struct {
		Approvals []ApprovalItem `json:"approvals"`
	}
	list := func(who string) approvals {
		t.Helper()
		resp := b.do(t, who, "GET", "/api/approvals", "")
		var a approvals
		readJSON(t, resp, &a)
		if resp.StatusCode != 200 || a.Approvals == nil {
			t.Fatalf("%s: %d", who, resp.StatusCode)
		}
		return a
	}
	for _, who := range []string{"acme", "acme-viewer"} {
		a := list(who)
		if len(a.Approvals) != 1 {
			t.Fatalf("%s: %+v", who, a)
		}
		ap := a.Approvals[0]
		args, _ := ap.Arguments.(map[string]any)
		if ap.Session != "acme:ap" || ap.Call != "x1" || ap.Tool != "write" || ap.Run == "" || args["path"] != "a.txt" ||
			time.Since(ap.RequestedAt) > time.Minute {
			t.Fatalf("%s: %+v", who, ap)
		}
	}
	if a := list("root"); len(a.Approvals) != 2 {
		t.Fatalf("root: %+v", a)
	}
	if a := list("globex"); len(a.Approvals) != 1 || a.Approvals[0].Session != "globex:ap" {
		t.Fatalf("globex: %+v", a)
	}
	evs := b.streamed(t, "acme", "acme:ap", `{"text":"","toolResults":[{"toolCallId":"x1","text":"approve"}],"model":"scripted/script","stream":true}`)
	_ = evs
	if a := list("acme"); len(a.Approvals) != 0 {
		t.Fatalf("after approving: %+v", a)
	}
}

// fillSessions stores a run's event and an index entry for n sessions
// key(i) directly on their streams: to the listing, each is a session
// with a run.
func fillSessions(t testing.TB, url string, n int, key func(i int) string) {
	t.Helper()
	nc := natstest.Connect(t, url)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	ev, _ := json.Marshal(events.Event{V: events.Version, Seq: 1, Stream: events.StreamLifecycle, Data: events.EventData{Phase: events.PhaseStart}})
	for i := range n {
		tok, err := events.KeyToken(key(i))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := js.PublishAsync(fmt.Sprintf("%s%s.%d", events.EventPrefix, tok, i+1), ev); err != nil {
			t.Fatal(err)
		}
		subj, _ := sessionindex.Subject(key(i))
		if _, err := js.PublishAsync(subj, fmt.Appendf(nil, `{"run":"%d"}`, i+1)); err != nil {
			t.Fatal(err)
		}
		if i%1000 == 999 || i == n-1 {
			select {
			case <-js.PublishAsyncComplete():
			case <-time.After(time.Minute):
				t.Fatal("publishing the sessions took over a minute")
			}
		}
	}
}

// TestSessionsTenThousand: a page of 10,000 sessions is served, searched
// and scoped by the fleet (BenchmarkSessionsPage measures how fast).
func TestSessionsTenThousand(t *testing.T) {
	t.Parallel()
	b := setup(t, setupOpts{})
	fillSessions(t, b.url, 10000, func(i int) string { return fmt.Sprintf("acme:user-%05d", i) })
	fillSessions(t, b.url, 100, func(i int) string { return fmt.Sprintf("globex:user-%05d", i) })
	b.do(t, "acme", "GET", "/api/sessions?limit=1", "").Body.Close() // warm up the connections
	start := time.Now()
	resp := b.do(t, "acme", "GET", "/api/sessions?limit=100", "")
	var p sessionsPage
	readJSON(t, resp, &p)
	took := time.Since(start)
	t.Logf("a page of 100 of 10,000 sessions: %v", took)
	if p.Total != -1 || len(p.Sessions) != 100 || p.Sessions[0].Key != "acme:user-09999" || p.Next == "" {
		t.Fatalf("total %d, %d sessions, next %v", p.Total, len(p.Sessions), p.Next)
	}
	resp = b.do(t, "acme", "GET", "/api/sessions?q=USER-0012&limit=1000", "")
	readJSON(t, resp, &p)
	if p.Total != -1 || len(p.Sessions) != 10 {
		t.Fatalf("q: total %d, %d sessions", p.Total, len(p.Sessions))
	}
}

// BenchmarkSessionsPage: a page of 100 of 10,000 sessions, through the
// gateway and the fleet's listing.
func BenchmarkSessionsPage(b *testing.B) {
	for _, limit := range []int{1, 100} {
		b.Run(fmt.Sprintf("limit=%d", limit), func(b *testing.B) {
			bd := setup(b, setupOpts{noTokens: true})
			fillSessions(b, bd.url, 10000, func(i int) string { return fmt.Sprintf("acme:user-%05d", i) })
			url := fmt.Sprintf("%s/api/sessions?limit=%d", bd.ts.URL, limit)
			for b.Loop() {
				resp, err := bd.ts.Client().Get(url)
				if err != nil {
					b.Fatal(err)
				}
				var p sessionsPage
				if err := json.NewDecoder(resp.Body).Decode(&p); err != nil || len(p.Sessions) != limit {
					b.Fatalf("%v %d", err, p.Total)
				}
				resp.Body.Close()
			}
		})
	}
}

// TestScopeMatchesPrincipal: the scope the gateway hands the fleet's
// listings reaches exactly the sessions the caller's token does.
func TestScopeMatchesPrincipal(t *testing.T) {
	t.Parallel()
	keys := []string{"acme:1", "acme", "acme:x:y", "globex:1", "solo", "solo:2", "agent:main:acme:1", ""}
	for _, p := range []*auth.Principal{
		{Role: auth.Sender, Prefixes: []string{"acme:"}},
		{Role: auth.Viewer, Prefixes: []string{"acme:", "globex:"}, Sessions: []string{"solo"}},
		{Role: auth.Sender, Sessions: []string{"solo"}},
		{Role: auth.Admin, Prefixes: []string{""}},
		{Role: auth.Viewer},
	} {
		sc := scopeOf(p)
		for _, k := range keys {
			if k == "" {
				continue // no listing has a session without a key
			}
			if got, want := sc.Allows(k), p.AllowsSession(k); got != want {
				t.Errorf("%+v: %q: scope %v, token %v", p, k, got, want)
			}
		}
	}
}

// TestForget: an admin forgets an idle session (transcript, settings and
// run events go; it leaves the listing); a running one is refused with
// 409 until it is stopped; other roles get 403.
func TestForget(t *testing.T) {
	t.Parallel()
	b := setup(t, setupOpts{})
	b.streamed(t, "acme", "acme:old", `{"text":"remember me","stream":true}`)
	wantProblem(t, b.do(t, "acme", "DELETE", "/api/sessions/acme:old", ""), 403, CodeForbidden)
	resp := b.do(t, "root", "DELETE", "/api/sessions/acme:old", "")
	var fr struct {
		Session string
		Keys    int
		Events  int
	}
	readJSON(t, resp, &fr)
	if resp.StatusCode != 200 || fr.Session != "acme:old" || fr.Keys == 0 || fr.Events == 0 {
		t.Fatalf("forget: %d %+v", resp.StatusCode, fr)
	}
	if h, err := b.client.History(b.ctx, "acme:old"); err != nil || len(h) != 0 {
		t.Fatalf("history after forget: %d entries, %v", len(h), err)
	}
	resp = b.do(t, "acme", "GET", "/api/sessions", "")
	var p sessionsPage
	readJSON(t, resp, &p)
	if len(p.Sessions) != 0 || p.Total != -1 { // a tenant's sessions are not counted
		t.Fatalf("still listed: %+v (total %d)", p.Sessions, p.Total)
	}
	// A session that runs is not forgotten.
	slow, _ := json.Marshal(map[string]any{"model": "scripted/script", "text": `#script {"replies":[{"text":"slow","delayMs":60000}]}`})
	resp = b.do(t, "acme", "POST", "/api/sessions/acme:busy/messages", string(slow))
	resp.Body.Close()
	for {
		resp = b.do(t, "acme", "GET", "/api/sessions?q=busy", "")
		readJSON(t, resp, &p)
		if len(p.Sessions) == 1 && p.Sessions[0].State == "running" {
			break
		}
		select {
		case <-b.ctx.Done():
			t.Fatalf("never running: %+v", p.Sessions)
		case <-time.After(20 * time.Millisecond):
		}
	}
	wantProblem(t, b.do(t, "root", "DELETE", "/api/sessions/acme:busy", ""), 409, CodeSessionBusy)
	resp = b.do(t, "acme", "POST", "/api/sessions/acme:busy/stop", "")
	resp.Body.Close()
	for {
		resp = b.do(t, "root", "DELETE", "/api/sessions/acme:busy", "")
		resp.Body.Close()
		if resp.StatusCode == 200 {
			break
		}
		if resp.StatusCode != 409 {
			t.Fatalf("forget after stop: %d", resp.StatusCode)
		}
		select {
		case <-b.ctx.Done():
			t.Fatal("still busy after the stop")
		case <-time.After(50 * time.Millisecond): // the stopped turn lets its lane go
		}
	}
}
