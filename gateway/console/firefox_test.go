package console_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/lanefleet/lanefleet/events"
)

// TestConsoleFirefox runs the console's main cases in headless Firefox
// (Debian's firefox-esr, over WebDriver BiDi): one tab, the cases in
// turn. TestConsole covers the rest in Chromium.
func TestConsoleFirefox(t *testing.T) {
	b := startFleet(t)
	ff := &ffTab{b: startFirefox(t), bn: b}
	b.send(t, "acme", "acme:ff-1", "hello", "")
	b.send(t, "globex", "globex:ff-theirs", "private", "")

	t.Run("a sender sees only its sessions", func(t *testing.T) {
		ff.login(t, "acme")
		ff.wait(t, `document.querySelector('#sessions')`)
		list := ff.text(t, "#sessions")
		if !strings.Contains(list, "acme:ff-1") || strings.Contains(list, "globex") {
			t.Fatalf("acme's list: %q", list)
		}
		if n := ff.count(t, `#nav a[href="#/fleet"], #nav a[href="#/ops"]`); n != 0 {
			t.Fatalf("a sender sees %d admin links", n)
		}
		var loc string
		ff.eval(t, `location.href`, &loc)
		if strings.Contains(loc, b.tokens["acme"]) {
			t.Fatal("the token is in the address")
		}
		ff.shot(t, "firefox-sessions")
	})

	t.Run("the composer streams the reply", func(t *testing.T) {
		const key = "acme:ff-chat"
		if st := b.api(t, "acme", "PATCH", sessionPath(key, "settings"), map[string]any{"run": map[string]any{"model": "scripted/script"}}, nil); st != 200 {
			t.Fatalf("settings: %d", st)
		}
		ff.goTo(t, route("s", key))
		ff.setValue(t, "#message", script(map[string]any{"text": "alpha beta gamma", "chunks": 3, "delayMs": 1200}))
		ff.click(t, "#send")
		ff.wait(t, `(() => { const l = document.querySelector('[data-live] .streamed'); const s = document.querySelector('[data-live] .run-state');
			return l && s && s.dataset.state === 'running' && l.textContent !== '' && !l.textContent.includes('gamma'); })()`)
		ff.wait(t, `!document.querySelector('[data-live]') && document.querySelector('#transcript').textContent.includes('alpha beta gamma')`)
		ff.shot(t, "firefox-session")
	})

	t.Run("a tool-calling run's timeline", func(t *testing.T) {
		const key = "acme:ff-tools"
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
		ff.goTo(t, route("s", key, "runs", run))
		ff.wait(t, `document.querySelector('#run-summary [data-k=status] dd').textContent === 'done'`)
		ff.click(t, `.ev.tool[data-tool=read] summary`)
		args, result := ff.text(t, `.ev.tool[data-tool=read] pre.args`), ff.text(t, `.ev.tool[data-tool=read] pre.result`)
		if !strings.Contains(args, `"path": "notes.txt"`) || !strings.Contains(result, "hello from the notes") {
			t.Fatalf("tool call: args %q, result %q", args, result)
		}
		ff.shot(t, "firefox-run")
	})

	t.Run("a run's model attempts and the session's runs", func(t *testing.T) {
		const key = "acme:ff-hop"
		run := b.send(t, "acme", key, "hello", "acme/m1") // acme:a answers 429, acme:b "fine"
		ff.goTo(t, route("s", key))
		if got := ff.text(t, `#runs tbody tr:first-child`); !strings.Contains(got, run) || !strings.Contains(got, "done") || !strings.Contains(got, "acme/m1") {
			t.Fatalf("the session's runs: %q", got)
		}
		ff.click(t, `#runs tbody tr:first-child a`)
		ff.wait(t, `document.querySelector('#run-summary [data-k=status] dd')?.textContent === 'done'`)
		if got := ff.text(t, `.ev.attempt[data-attempt="2"] .what`); got != "Model attempt 2: acme/m1 with auth profile acme:b · after rate_limit" {
			t.Fatalf("second attempt: %q", got)
		}
	})

	t.Run("approve a pending call", func(t *testing.T) {
		const key = "acme:ff-approve"
		pending(t, b, key, "f1")
		ff.goTo(t, route("s", key))
		ff.click(t, `#approvals button[data-call=f1][data-decision=approve]`)
		ff.wait(t, `!document.querySelector('[data-live]') && !document.querySelector('#approvals button') &&
			[...document.querySelectorAll('#transcript .msg.assistant .text')].pop()?.textContent === 'written and done'`)
		tok, _ := events.KeyToken(key)
		if data, err := os.ReadFile(filepath.Join(b.root, tok, "approved.txt")); err != nil || string(data) != "yes" {
			t.Fatalf("the approved call: %q %v", data, err)
		}
	})

	t.Run("a viewer has no controls", func(t *testing.T) {
		const key = "acme:ff-watched"
		pending(t, b, key, "v1")
		ff.eval(t, `(() => { sessionStorage.clear(); return true; })()`, nil)
		ff.login(t, "acme-viewer")
		ff.goTo(t, route("s", key))
		// The page draws the session after its API calls answer: wait for it.
		ff.wait(t, `document.querySelector('#approvals')?.textContent.includes('approved.txt')`)
		if got := ff.text(t, "#approvals"); !strings.Contains(got, "approved.txt") {
			t.Fatalf("the viewer does not see the pending call: %q", got)
		}
		for _, sel := range []string{"#composer", "#send", "button[data-decision]", "form.settings", "#forget"} {
			if n := ff.count(t, sel); n != 0 {
				t.Fatalf("the viewer's page has %s", sel)
			}
		}
		ff.shot(t, "firefox-viewer")
	})
}
