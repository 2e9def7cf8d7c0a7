package console_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/lanefleet/lanefleet/events"
	"github.com/lanefleet/lanefleet/gateway/console"
	"github.com/lanefleet/lanefleet/internal/natstest"
	"github.com/lanefleet/lanefleet/sessionindex"
)

// TestConsole drives the console in headless Chromium against a real
// fleet and gateway: one fleet and one browser, a tab per case.
func TestConsole(t *testing.T) {
	b := setup(t)

	t.Run("headers", func(t *testing.T) {
		t.Parallel()
		for _, path := range []string{"/", "/console/app.js", "/console/style.css", "/console/nothing.js"} {
			req, _ := http.NewRequestWithContext(b.ctx, "GET", b.url+path, nil)
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			h := resp.Header
			if h.Get("Content-Security-Policy") != console.CSP || h.Get("X-Content-Type-Options") != "nosniff" || h.Get("Referrer-Policy") != "no-referrer" {
				t.Fatalf("%s: headers %v", path, h)
			}
			for _, d := range []string{"default-src 'self'", "script-src 'self'", "frame-ancestors 'none'", "object-src 'none'", "base-uri 'none'"} {
				if !strings.Contains(console.CSP, d) {
					t.Fatalf("the CSP lacks %s", d)
				}
			}
			want := http.StatusOK
			if strings.Contains(path, "nothing") {
				want = http.StatusNotFound
			}
			if resp.StatusCode != want {
				t.Fatalf("%s: %d, want %d", path, resp.StatusCode, want)
			}
		}
		var me struct {
			Name     string
			Role     string
			Prefixes []string
		}
		if st := b.api(t, "acme-viewer", "GET", "/api/me", nil, &me); st != 200 || me.Name != "acme-viewer" || me.Role != "viewer" || len(me.Prefixes) != 1 || me.Prefixes[0] != "acme:" {
			t.Fatalf("me: %d %+v", st, me)
		}
		if st := b.api(t, "", "GET", "/api/me", nil, nil); st != http.StatusUnauthorized {
			t.Fatalf("me without a token: %d", st)
		}
	})

	t.Run("a sender sees only its sessions", func(t *testing.T) {
		t.Parallel()
		b.send(t, "acme", "acme:mine-1", "hello", "")
		b.send(t, "acme", "acme:mine-2", "hello", "")
		b.send(t, "globex", "globex:theirs", "private", "")
		tb := b.open(t, "")
		tb.shot(t, "login")
		tb.login(t, "acme")
		tb.wait(t, `document.querySelector('#sessions')`)
		list := tb.text(t, "#sessions")
		if !strings.Contains(list, "acme:mine-1") || !strings.Contains(list, "acme:mine-2") || strings.Contains(list, "globex") {
			t.Fatalf("acme's list: %q", list)
		}
		if n := tb.count(t, `#nav a[href="#/fleet"], #nav a[href="#/ops"]`); n != 0 {
			t.Fatalf("a sender sees %d admin links", n)
		}
		if loc := eval[string](t, tb, `location.href`); strings.Contains(loc, b.tokens["acme"]) {
			t.Fatal("the token is in the address")
		}
		tb.shot(t, "sessions")
		// A session of another tenant is a 404 like one nobody uses.
		tb.goTo(t, route("s", "globex:theirs"))
		if got := tb.text(t, "main"); strings.Contains(got, "private") || !strings.Contains(got, "no such session") {
			t.Fatalf("acme on globex's session: %q", got)
		}
	})

	t.Run("the composer streams the reply", func(t *testing.T) {
		t.Parallel()
		const key = "acme:chat"
		if st := b.api(t, "acme", "PATCH", sessionPath(key, "settings"), map[string]any{"run": map[string]any{"model": "scripted/script"}}, nil); st != 200 {
			t.Fatalf("settings: %d", st)
		}
		tb := b.open(t, "acme")
		tb.goTo(t, route("s", key))
		// Three deltas, 1.2 s apart: the first shows while the run goes on.
		msg := script(map[string]any{"text": "alpha beta gamma", "chunks": 3, "delayMs": 1200, "thinking": "weighing it"})
		tb.run(t, chromedp.SetValue(chromedp.CSS("#message"), msg), chromedp.Click(chromedp.CSS("#send")))
		partial, _ := tb.wait(t, `(() => { const l = document.querySelector('[data-live] .streamed'); const s = document.querySelector('[data-live] .run-state');
			return l && s && s.dataset.state === 'running' && l.textContent !== '' && !l.textContent.includes('gamma') ? l.textContent : ''; })()`).(string)
		tb.shot(t, "session-streaming")
		tb.wait(t, `!document.querySelector('[data-live]') && document.querySelector('#transcript').textContent.includes('alpha beta gamma')`)
		if !strings.HasPrefix("alpha beta gamma", partial) {
			t.Fatalf("streamed %q before the end", partial)
		}
		if n := tb.count(t, `#transcript details.thinking`); n != 1 {
			t.Fatalf("%d folded thinking blocks", n)
		}
		tb.shot(t, "session")
	})

	t.Run("a tool-calling run's timeline", func(t *testing.T) {
		t.Parallel()
		const key = "acme:tools"
		tok, _ := events.KeyToken(key)
		if err := os.MkdirAll(filepath.Join(b.root, tok), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(b.root, tok, "notes.txt"), []byte("hello from the notes"), 0o644); err != nil {
			t.Fatal(err)
		}
		run := b.send(t, "acme", key, script(
			map[string]any{"text": "Reading.", "toolCalls": []map[string]any{{"id": "r1", "name": "read", "arguments": map[string]any{"path": "notes.txt"}}}},
			map[string]any{"text": "The notes say hello."}), "scripted/script")
		tb := b.open(t, "acme")
		tb.goTo(t, route("s", key, "runs", run))
		if st := tb.text(t, `#run-summary [data-k=status] dd`); st != "done" {
			t.Fatalf("status %q", st)
		}
		tb.click(t, `.ev.tool[data-tool=read] summary`)
		args, result := tb.text(t, `.ev.tool[data-tool=read] pre.args`), tb.text(t, `.ev.tool[data-tool=read] pre.result`)
		if !strings.Contains(args, `"path": "notes.txt"`) || !strings.Contains(result, "hello from the notes") {
			t.Fatalf("tool call: args %q, result %q", args, result)
		}
		if d := tb.text(t, `.ev.tool[data-tool=read] .dur`); !strings.HasSuffix(d, "ms") && !strings.HasSuffix(d, " s") {
			t.Fatalf("duration %q", d)
		}
		for _, k := range []string{"model", "tokens", "attempts", "workers"} {
			if v := tb.text(t, `#run-summary [data-k=`+k+`] dd`); v == "" || v == "—" {
				t.Fatalf("summary %s: %q", k, v)
			}
		}
		tb.shot(t, "run")
		// The session page folds the call and its result together.
		tb.goTo(t, route("s", key))
		if got := tb.text(t, `#transcript details.tool`); !strings.Contains(got, "notes.txt") || !strings.Contains(got, "hello from the notes") {
			t.Fatalf("transcript tool call: %q", got)
		}
		// On a phone: one column, nothing wider than the screen.
		tb.run(t, chromedp.EmulateViewport(390, 844, chromedp.EmulateMobile, chromedp.EmulateScale(2)))
		tb.goTo(t, route("s", key))
		if w := eval[[]int](t, tb, `[document.documentElement.scrollWidth, window.innerWidth]`); w[0] > w[1] {
			t.Fatalf("the page is %d px wide on a %d px screen", w[0], w[1])
		}
		tb.shot(t, "session-phone")
	})

	t.Run("a run's model attempts and their hop", func(t *testing.T) {
		t.Parallel()
		const key = "acme:hop"
		run := b.send(t, "acme", key, "hello", "acme/m1") // acme:a answers 429, acme:b "fine"
		tb := b.open(t, "acme")
		tb.goTo(t, route("s", key, "runs", run))
		tb.wait(t, `document.querySelector('#run-summary [data-k=status] dd').textContent === 'done'`)
		if n := tb.count(t, `.ev.attempt`); n != 2 {
			t.Fatalf("%d model attempts in the timeline, want 2", n)
		}
		first, second := tb.text(t, `.ev.attempt[data-attempt="1"] .what`), tb.text(t, `.ev.attempt[data-attempt="2"] .what`)
		if first != "Model attempt 1: acme/m1 with auth profile acme:a" {
			t.Fatalf("first attempt: %q", first)
		}
		if second != "Model attempt 2: acme/m1 with auth profile acme:b · after rate_limit" {
			t.Fatalf("second attempt: %q", second)
		}
		if got := tb.text(t, `#run-summary [data-k=tried] dd`); got != "acme/m1 (acme:a) → acme/m1 (acme:b)" {
			t.Fatalf("models tried: %q", got)
		}
		if strings.Contains(tb.text(t, "main"), "sk-acme") {
			t.Fatal("a key is on the page")
		}
		tb.shot(t, "run-hop")
	})

	t.Run("a session's runs", func(t *testing.T) {
		t.Parallel()
		const key = "acme:many-runs"
		var ids []string
		for i := range 10 {
			ids = append(ids, b.send(t, "acme", key, fmt.Sprintf("message %d", i), ""))
		}
		failed := b.send(t, "acme", key, script(map[string]any{"error": map[string]any{"status": 400, "message": "bad request"}}), "scripted/script")
		tb := b.open(t, "acme")
		tb.goTo(t, route("s", key))
		rows := func() []string {
			return eval[[]string](t, tb, `[...document.querySelectorAll('#runs tbody tr')].map((r) => r.dataset.run + ' ' + r.querySelector('.chip').textContent + ' ' + r.cells[5].textContent)`)
		}
		got := rows()
		want := []string{failed + " failed scripted/script"}
		for i := 9; i > 0; i-- {
			want = append(want, ids[i]+" done scripted/echo")
		}
		if strings.Join(got, "|") != strings.Join(want, "|") {
			t.Fatalf("the first page of runs:\n%q\nwant\n%q", got, want)
		}
		if got := tb.text(t, "#runs-count"); !strings.HasPrefix(got, "10 of 11 runs") {
			t.Fatalf("count: %q", got)
		}
		if d := tb.text(t, `#runs tbody tr:nth-child(2) td:nth-child(4)`); !strings.HasSuffix(d, "ms") && !strings.HasSuffix(d, " s") {
			t.Fatalf("duration %q", d)
		}
		tb.shot(t, "session-runs")
		tb.click(t, "#older-runs")
		tb.wait(t, `document.querySelectorAll('#runs tbody tr').length === 11 && !document.querySelector('#older-runs')`)
		if got := rows(); got[10] != ids[0]+" done scripted/echo" {
			t.Fatalf("the older page: %q", got[10:])
		}
		// Each run links to its timeline.
		tb.click(t, fmt.Sprintf(`#runs tr[data-run="%s"] a`, ids[9]))
		tb.wait(t, `document.querySelector('#run-id')?.textContent === `+jsString(ids[9])+` && document.querySelector('#run-summary [data-k=status] dd').textContent === 'done'`)
	})

	t.Run("approve a pending call", func(t *testing.T) {
		t.Parallel()
		const key = "acme:approve"
		pending(t, b, key, "w1")
		tb := b.open(t, "acme")
		tb.goTo(t, route("s", key))
		if got := tb.text(t, "#approvals"); !strings.Contains(got, "approved.txt") {
			t.Fatalf("approvals box: %q", got)
		}
		tb.shot(t, "session-approval")
		tb.click(t, `#approvals button[data-call=w1][data-decision=approve]`)
		tb.wait(t, `!document.querySelector('[data-live]') && !document.querySelector('#approvals button') &&
			[...document.querySelectorAll('#transcript .msg.assistant .text')].pop()?.textContent === 'written and done'`)
		tok, _ := events.KeyToken(key)
		if data, err := os.ReadFile(filepath.Join(b.root, tok, "approved.txt")); err != nil || string(data) != "yes" {
			t.Fatalf("the approved call: %q %v", data, err)
		}
		// The inbox: every session's waiting calls, one click each.
		const other = "acme:approve-inbox"
		pending(t, b, other, "w2")
		tb.goTo(t, "#/approvals")
		if got := tb.text(t, `li.approval[data-call=w2]`); !strings.Contains(got, other) || !strings.Contains(got, "approved.txt") || !strings.Contains(got, "write") {
			t.Fatalf("the inbox's entry: %q", got)
		}
		tb.shot(t, "approvals")
		tb.click(t, `li.approval[data-call=w2] button[data-decision=approve]`)
		tb.wait(t, `document.querySelector('li.approval[data-call=w2] .outcome[data-finished]')`)
		if got := tb.text(t, `li.approval[data-call=w2] .outcome`); !strings.HasSuffix(got, "finished: written and done") {
			t.Fatalf("after approving from the inbox: %q", got)
		}
		tok, _ = events.KeyToken(other)
		if data, err := os.ReadFile(filepath.Join(b.root, tok, "approved.txt")); err != nil || string(data) != "yes" {
			t.Fatalf("the call approved from the inbox: %q %v", data, err)
		}
	})

	t.Run("a viewer has no controls", func(t *testing.T) {
		t.Parallel()
		const key = "acme:watched"
		pending(t, b, key, "v1")
		tb := b.open(t, "acme-viewer")
		tb.goTo(t, route("s", key))
		if got := tb.text(t, "#approvals"); !strings.Contains(got, "approved.txt") {
			t.Fatalf("the viewer does not see the pending call: %q", got)
		}
		for _, sel := range []string{"#composer", "#message", "#send", "#stop", "#interrupt", "button[data-decision]", "form.settings", "#forget", `#nav a[href="#/ops"]`, `#nav a[href="#/fleet"]`} {
			if n := tb.count(t, sel); n != 0 {
				t.Fatalf("the viewer's page has %s", sel)
			}
		}
		if tb.count(t, "#read-only") != 1 {
			t.Fatal("no note that the page is read-only")
		}
		tb.shot(t, "session-viewer")
		tb.goTo(t, "#/approvals")
		if n := tb.count(t, "button[data-decision]"); n != 0 {
			t.Fatalf("the viewer's inbox has %d decision buttons", n)
		}
	})

	t.Run("an admin replays a dead letter and forgets a session", func(t *testing.T) {
		t.Parallel()
		const key = "acme:dead"
		seq := deadLetter(t, b, key)
		tb := b.open(t, "root")
		tb.goTo(t, "#/ops")
		sel := fmt.Sprintf(`#dead-letters button[data-act=replay][data-seq="%d"]`, seq)
		tb.click(t, fmt.Sprintf(`#dead-letters button[data-act=show][data-seq="%d"]`, seq))
		tb.wait(t, `document.querySelector('#dead-detail dl')`)
		tb.shot(t, "operations")
		tb.click(t, sel)
		tb.wait(t, `document.querySelector('#dead-outcome').textContent.includes('replayed as run')`)
		if got := tb.text(t, "#dead-outcome"); !strings.Contains(got, fmt.Sprintf("dead letter %d replayed as run", seq)) || !strings.Contains(got, key) {
			t.Fatalf("outcome %q", got)
		}
		// Forget a session: a second click confirms.
		const gone = "acme:forget-me"
		b.send(t, "acme", gone, "remember me", "")
		tb.goTo(t, route("s", gone))
		tb.click(t, "#forget")
		if got := tb.text(t, "#forget"); got != "Confirm: forget it" {
			t.Fatalf("the first click: %q", got)
		}
		tb.clickTo(t, "#forget", `location.hash === '#/sessions'`)
		var hist struct{ Entries []any }
		if st := b.api(t, "acme", "GET", sessionPath(gone, "history"), nil, &hist); st != 200 || len(hist.Entries) != 0 {
			t.Fatalf("after forgetting: %d, %d entries", st, len(hist.Entries))
		}
		tb.goTo(t, "#/fleet")
		if got := tb.text(t, `#fleet-cards [data-k=workers] .value`); got != "1" {
			t.Fatalf("workers: %q", got)
		}
		// The numbers move: a snapshot from the stream replaces the first.
		first := eval[string](t, tb, `document.getElementById('main').dataset.fleetAt`)
		tb.wait(t, `document.getElementById('main').dataset.fleetAt !== `+jsString(first)+` && document.querySelector('#fleet-live').textContent.startsWith('Live')`)
		tb.shot(t, "fleet")
	})

	t.Run("no injected script runs", func(t *testing.T) {
		t.Parallel()
		keys := []string{`acme:<img src=x onerror="window.__xss=1">`, `acme:javascript:window.__xss=2//`}
		payload := `<script>window.__xss=3</script><img src=y onerror="window.__xss=4"> javascript:window.__xss=5`
		tok, _ := events.KeyToken(keys[0])
		if err := os.MkdirAll(filepath.Join(b.root, tok), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(b.root, tok, "x.txt"), []byte("result: "+payload), 0o644); err != nil {
			t.Fatal(err)
		}
		run := b.send(t, "acme", keys[0], script(
			map[string]any{"text": "text: " + payload, "thinking": "thinking: " + payload, "toolCalls": []map[string]any{
				{"id": "x1", "name": "read", "arguments": map[string]any{"path": "x.txt"}},
				{"id": "x2", "name": "lookup", "arguments": map[string]any{"q": "args: " + payload, "href": "javascript:window.__xss=6"}}}},
			map[string]any{"error": map[string]any{"status": 400, "message": "error: " + payload}}), "scripted/script")
		b.send(t, "acme", keys[1], "echo "+payload, "")
		tb := b.open(t, "acme")
		tb.goTo(t, "#/sessions")
		if got := tb.text(t, "#sessions"); !strings.Contains(got, keys[0]) || !strings.Contains(got, keys[1]) {
			t.Fatalf("the keys are not shown as text: %q", got)
		}
		tb.noScriptRan(t)
		for _, k := range keys {
			tb.goTo(t, "#/sessions")
			tb.clickTo(t, fmt.Sprintf(`#sessions a[href=%s]`, jsString(route("s", k))), `document.querySelector('#session-key')`)
			if got := tb.text(t, "#session-key"); got != k {
				t.Fatalf("key shown as %q", got)
			}
			openDetails(t, tb)
			if got := tb.text(t, "#transcript"); !strings.Contains(got, payload) {
				t.Fatalf("the transcript does not show the payload as text: %q", got)
			}
			tb.noScriptRan(t)
		}
		tb.goTo(t, route("s", keys[0], "runs", run))
		openDetails(t, tb)
		got := tb.text(t, "main")
		argsShown := strings.Trim(strings.NewReplacer(`\u003c`, "<", `\u003e`, ">").Replace(jsString("args: "+payload)), `"`) // as JSON text
		for _, want := range []string{argsShown, "result: " + payload, "error: " + payload, "text: " + payload} {
			if !strings.Contains(got, want) {
				t.Fatalf("the run page does not show %q as text", want)
			}
		}
		tb.noScriptRan(t)
		tb.shot(t, "xss")
	})

	// Alone, before the parallel cases: it logs a page's time (the
	// gateway's BenchmarkSessionsPage is where the page's speed is held
	// to a figure; a bound here would fail on a busy machine).
	t.Run("a page of 10,000 sessions", func(t *testing.T) {
		fillSessions(t, b, 10000, func(i int) string { return fmt.Sprintf("bulk:user-%05d", i) })
		tb := b.open(t, "bulk")
		eval[any](t, tb, `window.__fetches = []; null`)
		// The page's own clock, from the address to the table drawn: the
		// console's request, the gateway's and the fleet's answer, the DOM.
		ms := pageLoad(t, tb, "#/sessions")
		took := time.Duration(ms * float64(time.Millisecond))
		// Under a second on an idle machine (0.75 s measured with a load
		// average of 33 on 2 cores).
		t.Logf("a page of the 10,000 sessions requested, answered and drawn in %v", took)
		// A tenant's sessions are not counted (that would read each of
		// them): the page says what it shows and that more follow.
		if got := tb.text(t, "#sessions-count"); got != "50 on this page, more on the next" {
			t.Fatalf("count %q", got)
		}
		if n := tb.count(t, "#sessions tbody tr"); n != 50 { // sessions.js's pageSize
			t.Fatalf("%d rows", n)
		}
		tb.shot(t, "sessions-10000")
		tb.clickTo(t, "#next-page", `location.hash.includes('cursor=')`)
		if got := tb.text(t, "#sessions tbody tr:first-child th"); got != "bulk:user-09949" {
			t.Fatalf("the second page starts at %q", got)
		}
		// One request per page, not one per row.
		if got := eval[[]string](t, tb, `window.__fetches.filter((u) => u.startsWith('/api/'))`); len(got) != 2 ||
			!strings.HasPrefix(got[0], "/api/sessions?") || !strings.HasPrefix(got[1], "/api/sessions?") {
			t.Fatalf("API requests for two pages: %q", got)
		}
		tb.goTo(t, "#/sessions?q=user-0012")
		if n := tb.count(t, "#sessions tbody tr"); n != 10 {
			t.Fatalf("search: %d rows", n)
		}
		// Every session is counted, from the index's stream state: the
		// 10,000 and the earlier cases' few.
		all := b.open(t, "root")
		pageLoad(t, all, "#/sessions")
		n := indexed(t, b)
		if got, want := all.text(t, "#sessions-count"), thousands(n)+" sessions"; n < 10000 || got != want {
			t.Fatalf("root's count %q, want %q", got, want)
		}
	})

	t.Run("a run of 5,000 events", func(t *testing.T) {
		t.Parallel()
		const key, run = "acme:long", "900001"
		// 2,500 tool calls' start and result, as a worker publishes them
		// (a worker running them takes a minute under the race detector).
		publishRun(t, b, key, run, 2500)
		tb := b.open(t, "acme")
		took := time.Duration(pageLoad(t, tb, route("s", key, "runs", run)) * float64(time.Millisecond))
		n := eval[int](t, tb, `document.querySelector('#run-summary [data-k=events] dd').textContent.replace(/\D/g, '') | 0`)
		if n < 5000 {
			t.Fatalf("%d events read", n)
		}
		if items := tb.count(t, "#timeline > li"); items == 0 || items > 100 { // run.js's perPage
			t.Fatalf("%d timeline items in the page, want 1..100", items)
		}
		t.Logf("a run of %d events read and drawn in %v", n, took)
		if got := tb.text(t, `#run-summary [data-k=tools] dd`); got != "2,500" {
			t.Fatalf("tool calls %q", got)
		}
		tb.click(t, `.pager button:first-child`)
		if got := tb.text(t, "#timeline-where"); !strings.HasPrefix(got, "Items 1–") {
			t.Fatalf("first page: %q", got)
		}
		tb.shot(t, "run-long")
	})
}

// pending sends key a message whose write call waits for approval (id
// call), and waits for that run's end.
func pending(t *testing.T, b *bundle, key, call string) {
	t.Helper()
	// The turn that runs the approved call plays the script too.
	if st := b.api(t, "acme", "PATCH", sessionPath(key, "settings"), map[string]any{"run": map[string]any{"model": "scripted/script"}}, nil); st != 200 {
		t.Fatalf("settings: %d", st)
	}
	b.send(t, "acme", key, script(
		map[string]any{"toolCalls": []map[string]any{{"id": call, "name": "write", "arguments": map[string]any{"path": "approved.txt", "content": "yes"}}}},
		map[string]any{"text": "written and done"}), "scripted/script")
	var ap struct {
		Approvals []struct{ ID string }
	}
	if st := b.api(t, "acme", "GET", sessionPath(key, "approvals"), nil, &ap); st != 200 || len(ap.Approvals) != 1 || ap.Approvals[0].ID != call {
		t.Fatalf("approvals of %s: %d %+v", key, st, ap)
	}
}

// deadLetter publishes to key's lane a message no worker can decode,
// waits for its run to end refused, and returns its dead letter's seq.
func deadLetter(t *testing.T, b *bundle, key string) uint64 {
	t.Helper()
	nc := natstest.Connect(t, b.natsURL)
	subj, _ := events.InboundSubject(key)
	msg, err := nc.RequestMsg(&nats.Msg{Subject: subj, Data: []byte{0xc1}}, 10*time.Second) // 0xc1 is never msgpack
	if err != nil {
		t.Fatal(err)
	}
	var ack struct{ Seq uint64 }
	if err := json.Unmarshal(msg.Data, &ack); err != nil || ack.Seq == 0 {
		t.Fatalf("publish ack %q: %v", msg.Data, err)
	}
	if _, err := b.client.Run(key, strconv.FormatUint(ack.Seq, 10)).Wait(b.ctx); err == nil {
		t.Fatal("the undecodable message ran")
	}
	var rep struct {
		Letters []struct {
			Seq     uint64
			Session string
		}
	}
	b.api(t, "root", "GET", "/api/dead-letters", nil, &rep)
	for _, l := range rep.Letters {
		if l.Session == key {
			return l.Seq
		}
	}
	t.Fatalf("no dead letter of %s in %+v", key, rep)
	return 0
}

// openDetails unfolds every <details> of the page.
func openDetails(t *testing.T, tb *tab) {
	t.Helper()
	eval[any](t, tb, `document.querySelectorAll('details').forEach((d) => { d.open = true; }); null`)
}

// fillSessions makes n sessions with recent activity the quick way: a
// start event on a run of each and its session index entry, published as
// a worker would.
func fillSessions(t *testing.T, b *bundle, n int, key func(i int) string) {
	t.Helper()
	nc := natstest.Connect(t, b.natsURL)
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
			case <-b.ctx.Done():
				t.Fatal("publishing the sessions took too long")
			}
		}
	}
}

// indexed counts the session index's entries.
func indexed(t *testing.T, b *bundle) int {
	t.Helper()
	js, err := jetstream.New(natstest.Connect(t, b.natsURL))
	if err != nil {
		t.Fatal(err)
	}
	s, err := js.Stream(b.ctx, sessionindex.Stream)
	if err != nil {
		t.Fatal(err)
	}
	info, err := s.Info(b.ctx)
	if err != nil {
		t.Fatal(err)
	}
	return int(info.State.Msgs)
}

// thousands writes n as the console's num does: 10,012.
func thousands(n int) string {
	s := strconv.Itoa(n)
	for i := len(s) - 3; i > 0; i -= 3 {
		s = s[:i] + "," + s[i:]
	}
	return s
}

// pageLoad opens a console route and returns the milliseconds, by the
// page's clock, until its page is drawn.
func pageLoad(t *testing.T, tb *tab, hash string) float64 {
	t.Helper()
	ctx, cancel := context.WithTimeout(tb.ctx, time.Minute)
	defer cancel()
	ms, err := chromedp.Run(ctx, chromedp.Evaluate[float64](`new Promise((resolve) => {
		const m = document.getElementById('main');
		m.removeAttribute('data-ready');
		const t0 = performance.now();
		const obs = new MutationObserver(() => {
			if (m.hasAttribute('data-ready')) { obs.disconnect(); resolve(performance.now() - t0); }
		});
		obs.observe(m, { attributes: true });
		const h = `+jsString(hash)+`;
		if (location.hash === h) window.dispatchEvent(new HashChangeEvent('hashchange')); else location.hash = h;
	})`, chromedp.EvalAwaitPromise))
	if err != nil {
		t.Fatalf("load %s: %v", hash, err)
	}
	return ms
}

// publishRun publishes the events of a run of n tool calls on key, as a
// worker would: start, each call's start and result, end, final.
func publishRun(t *testing.T, b *bundle, key, run string, n int) {
	t.Helper()
	nc := natstest.Connect(t, b.natsURL)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	tok, err := events.KeyToken(key)
	if err != nil {
		t.Fatal(err)
	}
	subject := events.EventPrefix + tok + "." + run
	ts := time.Now().UnixMilli()
	var seq uint64
	pub := func(stream string, d events.EventData) {
		seq++
		raw, _ := json.Marshal(events.Event{V: events.Version, RunID: run, SessionKey: key, Seq: seq, Attempt: 1, Stream: stream, TS: ts + int64(seq), Data: d})
		if _, err := js.PublishAsync(subject, raw); err != nil {
			t.Fatal(err)
		}
	}
	pub(events.StreamLifecycle, events.EventData{Phase: events.PhaseStart, Worker: "w-test", Attempt: 1})
	for i := range n {
		id := fmt.Sprintf("c%d", i)
		pub(events.StreamTool, events.EventData{Phase: events.PhaseStart, Name: "lookup", ToolCallID: id, Args: map[string]any{"i": i}})
		pub(events.StreamTool, events.EventData{Phase: events.PhaseResult, Name: "lookup", ToolCallID: id, Payload: map[string]any{"content": []map[string]any{{"type": "text", "text": fmt.Sprintf("found %d", i)}}}})
	}
	pub(events.StreamAssistant, events.EventData{Text: "all looked up", Delta: "all looked up"})
	pub(events.StreamLifecycle, events.EventData{Phase: events.PhaseEnd})
	pub(events.StreamFinal, events.EventData{Result: &events.Result{Payloads: []events.Payload{{Text: "all looked up"}}, Meta: events.Meta{StopReason: "stop"}}})
	select {
	case <-js.PublishAsyncComplete():
	case <-b.ctx.Done():
		t.Fatal("publishing the run took too long")
	}
}
