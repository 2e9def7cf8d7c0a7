package console_test

import (
	"bufio"
	"cmp"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/net/websocket"
)

// firefoxPath is Debian's Firefox ESR (apt-get install firefox-esr), or
// LANEFLEET_FIREFOX. A missing browser fails the tests: they never skip.
func firefoxPath() string { return cmp.Or(os.Getenv("LANEFLEET_FIREFOX"), "/usr/bin/firefox-esr") }

// bidi is a WebDriver BiDi session with a headless Firefox, driven over
// its remote agent's WebSocket (Firefox speaks WebDriver BiDi natively;
// its CDP is gone, and geckodriver, which only WebDriver classic needs,
// is not packaged by Debian). It knows the few commands the tests use:
// navigate, evaluate, screenshot.
type bidi struct {
	ws      *websocket.Conn
	context string // the browsing context (the tab)

	mu      sync.Mutex
	next    int
	waiting map[int]chan bidiReply
	err     error // why the connection ended
}

// bidiTimeout bounds Firefox's start and each command: generous, as a
// loaded machine's Firefox takes a minute to open its first session.
const bidiTimeout = 3 * time.Minute

type bidiReply struct {
	Type    string          `json:"type"` // success, error, event
	ID      *int            `json:"id"`
	Result  json.RawMessage `json:"result"`
	Error   string          `json:"error"`
	Message string          `json:"message"`
}

// startFirefox starts a headless Firefox with a fresh profile and opens
// a BiDi session on its tab.
func startFirefox(t *testing.T) *bidi {
	t.Helper()
	path := firefoxPath()
	if _, err := os.Stat(path); err != nil {
		t.Fatalf("no browser at %s (%v): the console's Firefox tests need Debian's firefox-esr package (apt-get install firefox-esr; .ci/run installs it); they never skip", path, err)
	}
	profile := t.TempDir()
	// No first-run pages, no updates, no telemetry or other calls out.
	prefs := `user_pref("browser.shell.checkDefaultBrowser", false);
user_pref("datareporting.policy.dataSubmissionEnabled", false);
user_pref("toolkit.telemetry.reportingpolicy.firstRun", false);
user_pref("app.update.disabledForTesting", true);
user_pref("browser.startup.homepage_override.mstone", "ignore");
user_pref("network.captive-portal-service.enabled", false);
user_pref("network.connectivity-service.enabled", false);
user_pref("browser.safebrowsing.update.enabled", false);
user_pref("extensions.update.enabled", false);
user_pref("remote.prefs.recommended", true);
`
	if err := os.WriteFile(filepath.Join(profile, "user.js"), []byte(prefs), 0o600); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cmd := exec.CommandContext(ctx, path, "--headless", "--no-remote", "--profile", profile, "--remote-debugging-port=0",
		"--remote-allow-origins=http://localhost", "about:blank") // the WebSocket client sends an Origin
	cmd.Env = append(os.Environ(), "MOZ_HEADLESS_WIDTH=1280", "MOZ_HEADLESS_HEIGHT=900")
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		cancel()
		t.Fatalf("start %s: %v", path, err)
	}
	done := make(chan struct{})
	addr := make(chan string, 1)
	go func() {
		defer close(done)
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			if u, ok := strings.CutPrefix(sc.Text(), "WebDriver BiDi listening on "); ok {
				select {
				case addr <- strings.TrimSpace(u):
				default:
				}
			}
		}
	}()
	t.Cleanup(func() { cancel(); _ = cmd.Wait(); <-done })
	var url string
	select {
	case url = <-addr:
	case <-done:
		t.Fatalf("%s ended before its remote agent listened", path)
	case <-time.After(bidiTimeout):
		t.Fatalf("%s: no remote agent after %v", path, bidiTimeout)
	}
	ws, err := websocket.Dial(url+"/session", "", "http://localhost/")
	if err != nil {
		t.Fatalf("connect to %s: %v", url, err)
	}
	ws.MaxPayloadBytes = 64 << 20 // screenshots
	b := &bidi{ws: ws, waiting: map[int]chan bidiReply{}}
	go b.read()
	t.Cleanup(func() { _ = ws.Close() })
	var sess struct{ SessionID string }
	b.call(t, "session.new", map[string]any{"capabilities": map[string]any{}}, &sess)
	var tree struct {
		Contexts []struct{ Context string }
	}
	b.call(t, "browsingContext.getTree", map[string]any{}, &tree)
	if len(tree.Contexts) == 0 {
		t.Fatal("Firefox has no tab")
	}
	b.context = tree.Contexts[0].Context
	b.call(t, "browsingContext.setViewport", map[string]any{"context": b.context, "viewport": map[string]int{"width": 1280, "height": 900}}, nil)
	return b
}

// read hands each command's reply to its caller; events are dropped.
func (b *bidi) read() {
	for {
		var raw []byte
		err := websocket.Message.Receive(b.ws, &raw)
		b.mu.Lock()
		if err != nil {
			b.err = err
			for id, ch := range b.waiting {
				close(ch)
				delete(b.waiting, id)
			}
			b.mu.Unlock()
			return
		}
		var r bidiReply
		if json.Unmarshal(raw, &r) == nil && r.ID != nil {
			if ch, ok := b.waiting[*r.ID]; ok {
				ch <- r
				delete(b.waiting, *r.ID)
			}
		}
		b.mu.Unlock()
	}
}

// do sends a command and decodes its result into out (nil: none).
func (b *bidi) do(method string, params any, out any) error {
	b.mu.Lock()
	if b.err != nil {
		b.mu.Unlock()
		return b.err
	}
	b.next++
	id := b.next
	ch := make(chan bidiReply, 1)
	b.waiting[id] = ch
	b.mu.Unlock()
	if err := websocket.JSON.Send(b.ws, map[string]any{"id": id, "method": method, "params": params}); err != nil {
		return err
	}
	select {
	case r, ok := <-ch:
		switch {
		case !ok:
			return fmt.Errorf("%s: the connection ended: %w", method, b.err)
		case r.Type == "error":
			return fmt.Errorf("%s: %s: %s", method, r.Error, r.Message)
		case out != nil:
			return json.Unmarshal(r.Result, out)
		}
		return nil
	case <-time.After(bidiTimeout):
		return fmt.Errorf("%s: no answer in %v", method, bidiTimeout)
	}
}

func (b *bidi) call(t *testing.T, method string, params any, out any) {
	t.Helper()
	if err := b.do(method, params, out); err != nil {
		t.Fatal(err)
	}
}

// eval evaluates expr in the tab (awaiting a promise) and decodes its
// value, which expr gives as JSON text (JSON.stringify).
func (b *bidi) eval(expr string, out any) error {
	var res struct {
		Type             string
		Result           struct{ Type, Value any }
		ExceptionDetails struct{ Text string }
	}
	err := b.do("script.evaluate", map[string]any{"expression": "(async () => JSON.stringify(await (" + expr + ")))()",
		"target": map[string]string{"context": b.context}, "awaitPromise": true, "resultOwnership": "none"}, &res)
	if err != nil {
		return err
	}
	if res.Type != "success" {
		return fmt.Errorf("evaluate %.80s: %s", expr, res.ExceptionDetails.Text)
	}
	s, _ := res.Result.Value.(string)
	if out == nil || s == "" {
		return nil
	}
	return json.Unmarshal([]byte(s), out)
}

// ffTab is the Firefox tab as the tests drive it: the page's own DOM
// calls for clicks and typing (BiDi's input actions are not needed for
// what these cases check), polls for the page's state.
type ffTab struct {
	b  *bidi
	bn *bundle
}

func (f *ffTab) navigate(t *testing.T, url string) {
	t.Helper()
	f.b.call(t, "browsingContext.navigate", map[string]any{"context": f.b.context, "url": url, "wait": "complete"}, nil)
}

func (f *ffTab) eval(t *testing.T, expr string, out any) {
	t.Helper()
	if err := f.b.eval(expr, out); err != nil {
		t.Fatalf("at %s: %v", f.where(), err)
	}
}

// wait polls expr until it is truthy.
func (f *ffTab) wait(t *testing.T, expr string) {
	t.Helper()
	deadline := time.Now().Add(90 * time.Second)
	for {
		var ok bool
		err := f.b.eval("Boolean("+expr+")", &ok)
		if err == nil && ok {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("at %s, waiting for %s: %v", f.where(), expr, err)
		}
		// The next poll is a round trip to the browser: a page's
		// change shows within one.
		if err := f.b.eval("new Promise((r) => requestAnimationFrame(() => setTimeout(r, 20)))", nil); err != nil {
			t.Fatalf("waiting for %s: %v", expr, err)
		}
	}
}

func (f *ffTab) where() string {
	var s string
	if err := f.b.eval(`location.href + ': ' + document.body.innerText.slice(0, 600)`, &s); err != nil {
		return "(unknown: " + err.Error() + ")"
	}
	return s
}

func (f *ffTab) text(t *testing.T, sel string) string {
	t.Helper()
	var s string
	f.eval(t, `(document.querySelector(`+jsString(sel)+`) || {}).textContent || ''`, &s)
	return s
}

func (f *ffTab) count(t *testing.T, sel string) int {
	t.Helper()
	var n int
	f.eval(t, `document.querySelectorAll(`+jsString(sel)+`).length`, &n)
	return n
}

func (f *ffTab) click(t *testing.T, sel string) {
	t.Helper()
	var ok bool
	f.eval(t, `(() => { const el = document.querySelector(`+jsString(sel)+`); if (!el) return false; el.click(); return true; })()`, &ok)
	if !ok {
		t.Fatalf("at %s: nothing to click at %s", f.where(), sel)
	}
}

// setValue types into a field as a person's input would leave it.
func (f *ffTab) setValue(t *testing.T, sel, v string) {
	t.Helper()
	f.eval(t, `(() => { const el = document.querySelector(`+jsString(sel)+`); el.value = `+jsString(v)+`; el.dispatchEvent(new Event('input', { bubbles: true })); return true; })()`, nil)
}

// goTo opens a console route and waits for its page.
func (f *ffTab) goTo(t *testing.T, hash string) {
	t.Helper()
	f.eval(t, `(() => { document.getElementById('main').removeAttribute('data-ready');
		if (location.hash === `+jsString(hash)+`) window.dispatchEvent(new HashChangeEvent('hashchange')); else location.hash = `+jsString(hash)+`; return true; })()`, nil)
	f.wait(t, `document.getElementById('main').hasAttribute('data-ready')`)
}

// login opens the console's log-in page and logs in as token name.
func (f *ffTab) login(t *testing.T, name string) {
	t.Helper()
	f.navigate(t, f.bn.url+"/#/login")
	f.wait(t, `document.querySelector('#token')`)
	f.setValue(t, "#token", f.bn.tokens[name])
	f.click(t, `form.login button[type=submit]`)
	f.wait(t, signedInAs(name))
}

// shot saves a screenshot of the tab as name.png and logs its path.
func (f *ffTab) shot(t *testing.T, name string) {
	t.Helper()
	var res struct{ Data string }
	f.b.call(t, "browsingContext.captureScreenshot", map[string]any{"context": f.b.context, "origin": "document"}, &res)
	png, err := base64.StdEncoding.DecodeString(res.Data)
	if err != nil || len(png) == 0 {
		t.Fatalf("screenshot: %v", cmp.Or(err, errors.New("empty")))
	}
	p := filepath.Join(f.bn.shots, name+".png")
	if err := os.WriteFile(p, png, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("screenshot: %s", p)
}
