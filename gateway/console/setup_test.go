package console_test

import (
	"cmp"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/chromedp/cdproto/cdp"
	"github.com/chromedp/cdproto/page"
	"github.com/chromedp/chromedp"
	"github.com/rs/zerolog"

	"github.com/lanefleet/lanefleet"
	"github.com/lanefleet/lanefleet/gateway"
	"github.com/lanefleet/lanefleet/gateway/auth"
	"github.com/lanefleet/lanefleet/internal/fleet"
	"github.com/lanefleet/lanefleet/internal/natstest"
	"github.com/lanefleet/lanefleet/sandbox"
	"github.com/lanefleet/lanefleet/tools"
)

func TestMain(m *testing.M) {
	sandbox.Main() // the in-process member's exec would re-run this binary
	os.Exit(m.Run())
}

// chromiumPath is Debian's Chromium (apt-get install chromium), or
// LANEFLEET_CHROMIUM. A missing browser fails the tests: they never skip.
func chromiumPath() string { return cmp.Or(os.Getenv("LANEFLEET_CHROMIUM"), "/usr/bin/chromium") }

// bundle is a fleet (an embedded nats-server and one in-process worker
// with the scripted models, asking approval for the write tool), a
// gateway serving the console in front of it, and one headless Chromium
// whose tabs the tests drive.
type bundle struct {
	url     string // the gateway's
	natsURL string
	client  *lanefleet.Client
	tokens  map[string]string // by name
	root    string            // the sessions' workspaces
	browser context.Context
	shots   string
	ctx     context.Context
}

// testTokens: two tenants, a viewer of the first and an admin.
var testTokens = []gateway.TokenEntry{
	{Name: "acme", Role: auth.Sender, Prefixes: []string{"acme:"}},
	{Name: "globex", Role: auth.Sender, Prefixes: []string{"globex:"}},
	{Name: "acme-viewer", Role: auth.Viewer, Prefixes: []string{"acme:"}},
	{Name: "root", Role: auth.Admin, Prefixes: []string{""}},
	{Name: "bulk", Role: auth.Sender, Prefixes: []string{"bulk:"}},
}

func setup(t *testing.T) *bundle {
	t.Helper()
	b := startFleet(t)
	b.browser = startBrowser(t)
	return b
}

// startFleet starts the bundle's fleet and gateway, without a browser.
func startFleet(t *testing.T) *bundle {
	t.Helper()
	ns := natstest.Start(t)
	b := &bundle{natsURL: ns.URL, tokens: map[string]string{}, root: t.TempDir()}
	log := zerolog.New(zerolog.NewTestWriter(t)).Level(zerolog.WarnLevel)
	models, profiles := acmeFiles(t, acmeServer(t).URL)
	m, err := fleet.Start(t.Context(), fleet.Config{NATSURL: ns.URL, Scripted: true, AckWait: 5 * time.Second, LeaseTTL: 30 * time.Second,
		IdleRelease: -1, Logger: log, DefaultModel: "scripted/echo", WorkspaceRoot: b.root, ToolPolicy: tools.Policy{Approve: []string{"write"}},
		ModelsFile: models, AuthProfiles: profiles, Env: func(string) string { return "" }})
	if err != nil {
		t.Fatal(err)
	}
	mctx, stop := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := m.Run(mctx); err != nil {
			t.Errorf("member: %v", err)
		}
	}()
	t.Cleanup(func() { stop(); <-done })
	c, err := lanefleet.Connect(ns.URL)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	b.client = c
	var file struct {
		Tokens []gateway.TokenEntry `json:"tokens"`
	}
	for _, e := range testTokens {
		tok, hash := gateway.NewToken()
		b.tokens[e.Name] = tok
		e.Hash = hash
		file.Tokens = append(file.Tokens, e)
	}
	raw, _ := json.Marshal(file)
	toks, err := gateway.ParseTokens(strings.NewReader(string(raw)))
	if err != nil {
		t.Fatal(err)
	}
	srv, err := gateway.New(gateway.Config{Client: c, Tokens: toks, Logger: &log, FleetEvery: 300 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	ts := httptest.NewUnstartedServer(srv)
	ts.Config = srv.HTTPServer()
	ts.Start()
	t.Cleanup(ts.Close)
	t.Cleanup(srv.Close)
	b.url = ts.URL
	b.shots = cmp.Or(os.Getenv("LANEFLEET_CONSOLE_SHOTS"), t.TempDir())
	// The API calls' deadline: the whole test's, generous on a loaded
	// machine (the race detector slows the fleet and gateway tenfold).
	bound := 4 * time.Minute
	if raceEnabled {
		bound = 12 * time.Minute
	}
	ctx, cancel := context.WithTimeout(t.Context(), bound)
	t.Cleanup(cancel)
	b.ctx = ctx
	return b
}

// acmeServer is provider acme's Chat Completions endpoint: it answers
// 429 to profile acme:a's key and "fine" to any other.
func acmeServer(t *testing.T) *httptest.Server {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") == "Bearer sk-acme-a" {
			w.Header().Set("Content-Type", "application/json")
			w.Header().Set("Retry-After", "60")
			w.WriteHeader(http.StatusTooManyRequests)
			_, _ = io.WriteString(w, `{"error":{"message":"Rate limit reached for requests","type":"requests","code":"rate_limit_exceeded"}}`)
			return
		}
		w.Header().Set("Content-Type", "text/event-stream")
		_, _ = io.WriteString(w, `data: {"id":"c1","object":"chat.completion.chunk","choices":[{"index":0,"delta":{"role":"assistant","content":"fine"}}]}`+"\n\n"+
			`data: {"id":"c1","object":"chat.completion.chunk","choices":[{"index":0,"delta":{},"finish_reason":"stop"}],"usage":{"prompt_tokens":10,"completion_tokens":1,"total_tokens":11}}`+"\n\n"+
			"data: [DONE]\n\n")
	}))
	t.Cleanup(srv.Close)
	return srv
}

// acmeFiles writes a models file for provider acme (Chat Completions at
// url) and an auth-profiles.json with its profiles acme:a and acme:b.
func acmeFiles(t *testing.T, url string) (models, profiles string) {
	t.Helper()
	dir := t.TempDir()
	models, profiles = filepath.Join(dir, "models.json"), filepath.Join(dir, "auth-profiles.json")
	m := `{"providers":{"acme":{"baseUrl":` + jsString(url+"/v1") + `,"api":"openai-completions","models":[{"id":"m1","contextWindow":128000,"maxTokens":4096}]}}}`
	p := `{"version":1,"profiles":{"acme:a":{"type":"api_key","provider":"acme","key":"sk-acme-a"},"acme:b":{"type":"api_key","provider":"acme","key":"sk-acme-b"}},"order":{"acme":["acme:a","acme:b"]}}`
	for path, data := range map[string]string{models: m, profiles: p} {
		if err := os.WriteFile(path, []byte(data), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return models, profiles
}

// startBrowser starts one headless Chromium for the test's tabs.
func startBrowser(t *testing.T) context.Context {
	t.Helper()
	path := chromiumPath()
	if _, err := os.Stat(path); err != nil {
		t.Fatalf("no browser at %s (%v): the console's browser tests need Debian's chromium package (apt-get install chromium; .ci/run installs it); they never skip", path, err)
	}
	opts := []chromedp.ExecAllocatorOption{
		chromedp.ExecPath(path),
		chromedp.Headless,
		chromedp.NoSandbox,
		chromedp.DisableGPU,
		chromedp.NoFirstRun,
		chromedp.NoDefaultBrowserCheck,
		chromedp.Flag("disable-quic", true),
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.Flag("disable-dev-shm-usage", true),
		chromedp.UserDataDir(t.TempDir()),
		chromedp.WindowSize(1280, 900),
	}
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	bctx, cancelBrowser := chromedp.NewContext(actx)
	if err := chromedp.Do(bctx); err != nil {
		cancelBrowser()
		cancelAlloc()
		t.Fatalf("start %s: %v", path, err)
	}
	t.Cleanup(func() { cancelBrowser(); cancelAlloc() })
	return bctx
}

// watchJS runs in every document before the console's scripts: it
// records what would betray a script injected through data (a flag set,
// a CSP violation) and counts the console's API requests.
const watchJS = `
window.__xss = 0;
window.__csp = [];
document.addEventListener('securitypolicyviolation', (e) => window.__csp.push(e.violatedDirective + ' ' + e.blockedURI));
window.__fetches = [];
const realFetch = window.fetch;
window.fetch = function (input, init) {
  window.__fetches.push(String((input && input.url) || input));
  return realFetch.apply(this, arguments);
};
`

// tab is one browser tab, logged in as a token.
type tab struct {
	ctx     context.Context
	dialogs *atomic.Int32
	b       *bundle
}

// open opens a tab and logs in as token name ("" stays on the log-in page).
func (b *bundle) open(t *testing.T, name string) *tab {
	t.Helper()
	dialogs := new(atomic.Int32)
	var ctx context.Context
	ctx, cancel := chromedp.NewContext(b.browser, chromedp.WithListener(func(ev any) {
		if _, ok := ev.(*page.EventJavascriptDialogOpening); ok {
			dialogs.Add(1)
			// Dismissed, so the page goes on and the test says why it fails.
			go func() { _, _ = chromedp.Call(ctx, page.HandleJavaScriptDialog, page.HandleJavaScriptDialogParams{}) }()
		}
	}))
	t.Cleanup(cancel)
	// The tab lives as long as the context of its first run: this one,
	// without a deadline.
	if err := chromedp.Do(ctx); err != nil {
		t.Fatalf("open a tab: %v", err)
	}
	tb := &tab{ctx: ctx, dialogs: dialogs, b: b}
	tb.run(t, chromedp.Func(func(ctx context.Context, tg *chromedp.Target) error {
		_, err := cdp.Call(ctx, tg, page.AddScriptToEvaluateOnNewDocument, page.AddScriptToEvaluateOnNewDocumentParams{Source: watchJS})
		return err
	}), chromedp.Navigate(b.url+"/#/login"), chromedp.WaitVisible(chromedp.CSS("#token")))
	if name != "" {
		tb.login(t, name)
	}
	return tb
}

// login logs in with token name's token from the log-in page.
func (tb *tab) login(t *testing.T, name string) {
	t.Helper()
	tb.run(t, chromedp.SendKeys(chromedp.CSS("#token"), tb.b.tokens[name]), chromedp.Click(chromedp.CSS(`form.login button[type=submit]`)))
	tb.wait(t, signedInAs(name))
}

// signedInAs is a JavaScript condition: the console shows token name's
// identity and has drawn the page it went to after the log-in. A page
// that was signed in before shows the earlier identity and its own
// data-ready until the log-in's check answers: a test that went on at
// that point had its next route replaced by the log-in's home page
// (TestConsoleFirefox's viewer case in CI).
func signedInAs(name string) string {
	return `(document.querySelector('#me')?.textContent || '').startsWith(` + jsString(name+" ") + `) &&
		!location.hash.startsWith('#/login') && document.getElementById('main').hasAttribute('data-ready')`
}

// run runs actions in the tab, bounded by a deadline of its own (the
// tab's context must stay free of one: it holds the tab).
func (tb *tab) run(t *testing.T, actions ...chromedp.Action[chromedp.Void]) {
	t.Helper()
	ctx, cancel := context.WithTimeout(tb.ctx, time.Minute)
	defer cancel()
	if err := chromedp.Do(ctx, actions...); err != nil {
		t.Fatalf("browser at %s: %v", tb.where(), err)
	}
}

// where is the tab's address and what its page says, for a failure.
func (tb *tab) where() string {
	ctx, cancel := context.WithTimeout(tb.ctx, 5*time.Second)
	defer cancel()
	v, err := chromedp.Run(ctx, chromedp.Evaluate[string](`location.href + ': ' + document.body.innerText.slice(0, 800)`))
	if err != nil {
		return "(unknown: " + err.Error() + ")"
	}
	return v
}

// eval evaluates a JavaScript expression in the tab.
func eval[T any](t *testing.T, tb *tab, expr string) T {
	t.Helper()
	ctx, cancel := context.WithTimeout(tb.ctx, time.Minute)
	defer cancel()
	v, err := chromedp.Run(ctx, chromedp.Evaluate[T](expr))
	if err != nil {
		t.Fatalf("evaluate %.80s: %v", expr, err)
	}
	return v
}

// goTo opens a console route ("#/sessions") and waits for its page.
func (tb *tab) goTo(t *testing.T, hash string) {
	t.Helper()
	eval[any](t, tb, `document.getElementById('main').removeAttribute('data-ready');
		if (location.hash === `+jsString(hash)+`) window.dispatchEvent(new HashChangeEvent('hashchange')); else location.hash = `+jsString(hash)+`; null`)
	tb.wait(t, `document.getElementById('main').hasAttribute('data-ready')`)
}

// wait polls a JavaScript expression until it is truthy, and returns it.
func (tb *tab) wait(t *testing.T, expr string) any {
	t.Helper()
	ctx, cancel := context.WithTimeout(tb.ctx, time.Minute)
	defer cancel()
	v, err := chromedp.Run(ctx, chromedp.Poll[any](expr, chromedp.WithPollingTimeout(45*time.Second)))
	if err != nil {
		t.Fatalf("at %s, waiting for %s: %v", tb.where(), expr, err)
	}
	return v
}

// text is the textContent of the first element sel matches ("" for none).
func (tb *tab) text(t *testing.T, sel string) string {
	t.Helper()
	return eval[string](t, tb, `(document.querySelector(`+jsString(sel)+`) || {}).textContent || ''`)
}

// count is how many elements sel matches.
func (tb *tab) count(t *testing.T, sel string) int {
	t.Helper()
	return eval[int](t, tb, `document.querySelectorAll(`+jsString(sel)+`).length`)
}

// click clicks the first element sel matches.
func (tb *tab) click(t *testing.T, sel string) {
	t.Helper()
	tb.run(t, chromedp.Click(chromedp.CSS(sel)))
}

// clickTo clicks a link or button that leads to another page and waits
// until that page is drawn and cond holds. The page mark is cleared
// first: between the click and the hashchange event the old page's mark
// is still up, and a wait on it alone would read the old page.
func (tb *tab) clickTo(t *testing.T, sel, cond string) {
	t.Helper()
	eval[any](t, tb, `document.getElementById('main').removeAttribute('data-ready'); null`)
	tb.click(t, sel)
	tb.wait(t, `document.getElementById('main').hasAttribute('data-ready') && (`+cond+`)`)
}

// shot saves a screenshot of the whole page as name.png and logs its path.
func (tb *tab) shot(t *testing.T, name string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(tb.ctx, time.Minute)
	defer cancel()
	buf, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
	if err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(tb.b.shots, name+".png")
	if err := os.WriteFile(p, buf, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("screenshot: %s", p)
}

// noScriptRan fails t when anything injected through data ran: the flag
// a payload sets, a CSP violation, a dialog, or markup a payload would
// have made (an element with an inline handler, a script in the page's
// body, a javascript: link).
func (tb *tab) noScriptRan(t *testing.T) {
	t.Helper()
	type report struct {
		XSS     int      `json:"xss"`
		CSP     []string `json:"csp"`
		Markup  int      `json:"markup"`
		Scripts int      `json:"scripts"`
	}
	got := eval[report](t, tb, `({xss: window.__xss, csp: window.__csp, markup: document.querySelectorAll('[onerror], [onload], [onclick], a[href^="javascript:" i], iframe, object, embed').length,
		scripts: document.querySelectorAll('body script').length})`)
	if got.XSS != 0 || len(got.CSP) != 0 || got.Markup != 0 || got.Scripts != 0 || tb.dialogs.Load() != 0 {
		t.Fatalf("something injected ran or was built: flag %d, CSP violations %q, elements with handlers or javascript: links %d, scripts in the body %d, dialogs %d",
			got.XSS, got.CSP, got.Markup, got.Scripts, tb.dialogs.Load())
	}
}

// api calls the gateway as token name and decodes the JSON answer into
// out (nil: none); it returns the status.
func (b *bundle) api(t *testing.T, name, method, path string, body any, out any) int {
	t.Helper()
	var rd io.Reader
	if body != nil {
		raw, err := json.Marshal(body)
		if err != nil {
			t.Fatal(err)
		}
		rd = strings.NewReader(string(raw))
	}
	req, err := http.NewRequestWithContext(b.ctx, method, b.url+path, rd)
	if err != nil {
		t.Fatal(err)
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if name != "" {
		req.Header.Set("Authorization", "Bearer "+b.tokens[name])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	if out != nil && len(raw) > 0 {
		if err := json.Unmarshal(raw, out); err != nil {
			t.Fatalf("%s %s: %d %.300s: %v", method, path, resp.StatusCode, raw, err)
		}
	}
	return resp.StatusCode
}

// sessionPath is a session's API path.
func sessionPath(key string, rest ...string) string {
	p := "/api/sessions/" + url.PathEscape(key)
	for _, r := range rest {
		p += "/" + url.PathEscape(r)
	}
	return p
}

// route is the console's address of a session's page (and of a run).
func route(parts ...string) string {
	out := "#"
	for _, p := range parts {
		out += "/" + strings.ReplaceAll(url.QueryEscape(p), "+", "%20")
	}
	return out
}

// send sends text to key as token name (with model, when set) and waits
// for the run's end; it returns the run's id.
func (b *bundle) send(t *testing.T, name, key, text, model string) string {
	t.Helper()
	var rep struct {
		RunID string `json:"runId"`
	}
	req := map[string]any{"text": text}
	if model != "" {
		req["model"] = model
	}
	if st := b.api(t, name, "POST", sessionPath(key, "messages"), req, &rep); st != http.StatusAccepted || rep.RunID == "" {
		t.Fatalf("send to %s: %d %+v", key, st, rep)
	}
	var run struct{ Status string }
	if st := b.api(t, name, "GET", sessionPath(key, "runs", rep.RunID)+"?wait=60s", nil, &run); st != http.StatusOK || run.Status != "done" {
		t.Fatalf("run %s of %s: %d %+v", rep.RunID, key, st, run)
	}
	return rep.RunID
}

// script is a scripted/script message playing replies.
func script(replies ...map[string]any) string {
	raw, _ := json.Marshal(map[string]any{"replies": replies})
	return "#script " + string(raw)
}

func jsString(s string) string {
	raw, _ := json.Marshal(s)
	return string(raw)
}
