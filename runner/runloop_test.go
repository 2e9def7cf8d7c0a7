package runner

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/lanefleet/lanefleet/authprofile"
	"github.com/lanefleet/lanefleet/events"
	"github.com/lanefleet/lanefleet/guard"
	"github.com/lanefleet/lanefleet/message"
	"github.com/lanefleet/lanefleet/provider"
	"github.com/lanefleet/lanefleet/provider/scripted"
	"github.com/lanefleet/lanefleet/provider/transform"
	"github.com/lanefleet/lanefleet/sanitize"
	"github.com/lanefleet/lanefleet/tools"
)

// TestToolLoopLimit: a turn whose model keeps calling tools stops at the
// run's tool-loop limit, its setting within the worker's, with a reply of
// its own (not the retry-limit text: nothing was retried).
func TestToolLoopLimit(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name            string
		worker, setting int
		want            int
	}{
		{"no setting: the worker's limit", 5, 0, 5},
		{"the run's setting lowers the worker's", 10, 3, 3},
		{"a setting above the worker's is capped by it", 4, 50, 4},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			// The same failing call each time: the loop detector is
			// set above the limit (TestToolLoopDetected covers it).
			r, err := New(Config{DefaultModel: "scripted/script", Resolver: multiResolver{}, MaxToolIterations: tt.worker, MaxToolRepeats: 100})
			if err != nil {
				t.Fatal(err)
			}
			in := &events.Inbound{Text: `#script {"replies":[{"toolCalls":[{"name":"again"}]}]}`}
			out, err := r.Run(t.Context(), Input{RunID: "r", Inbound: in, Settings: Settings{MaxToolIterations: tt.setting}}, &sink{})
			if err != nil {
				t.Fatal(err)
			}
			res := out.Result
			want := []events.Payload{{Text: fmt.Sprintf(TextToolLoopLimit, tt.want), IsError: true}}
			if e := res.Meta.Error; e == nil || e.Kind != KindToolLoopLimit ||
				e.Message != fmt.Sprintf("Tool loop stopped after %d model calls (max=%d).", tt.want, tt.want) || !reflect.DeepEqual(res.Payloads, want) {
				t.Fatalf("result %+v, error %+v", res, res.Meta.Error)
			}
			// The user message, then a call and its result per model call:
			// the turn is stored whole and the next message goes on from it.
			if len(out.Entries) != 1+2*tt.want {
				t.Fatalf("%d entries, want %d", len(out.Entries), 1+2*tt.want)
			}
		})
	}
}

// seq is a provider that fails its calls in order with errs (nil = answer
// "fine"), then answers; it records the key of every call.
type seq struct {
	mu   sync.Mutex
	errs []error
	keys []string
}

func (s *seq) Stream(ctx context.Context, req *provider.Request, emit func(provider.Event)) (message.Message, error) {
	s.mu.Lock()
	n := len(s.keys)
	s.keys = append(s.keys, req.APIKey.Reveal())
	s.mu.Unlock()
	k := &keyed{fn: func(*provider.Request) (string, error) {
		if n < len(s.errs) && s.errs[n] != nil {
			return "", s.errs[n]
		}
		return "fine", nil
	}}
	return k.Stream(ctx, req, emit)
}

func (s *seq) used() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return strings.Join(s.keys, ",")
}

// retrying lists a run's lifecycle retrying events as "attempt:delayMs".
func retrying(s *sink) []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []string
	for _, e := range s.evs {
		if e.Stream == events.StreamLifecycle && e.Data.Phase == events.PhaseRetrying {
			out = append(out, fmt.Sprintf("%d:%d", e.Data.Attempt, e.Data.DelayMs))
		}
	}
	return out
}

// TestRetryEventsSayWhatWhyAndHowLong: a same-key retry's wait is a
// retrying event naming the failure's kind (a provider's 503 is a server
// error, not a timeout), the retry of how many and the wait, and its end a
// retry event before the call is made again; a run whose retries all fail
// ends with the same kind in its error.
func TestRetryEventsSayWhatWhyAndHowLong(t *testing.T) {
	t.Parallel()
	unavailable := &provider.Error{Reason: provider.ReasonTimeout, Status: 503, Message: "Service Unavailable"}
	lifecycle := func(s *sink) []string {
		s.mu.Lock()
		defer s.mu.Unlock()
		var out []string
		for _, e := range s.evs {
			switch {
			case e.Stream == events.StreamLifecycle && e.Data.Phase == events.PhaseRetrying:
				out = append(out, fmt.Sprintf("retrying %d/%d in %dms: %s", e.Data.Attempt, e.Data.MaxAttempts, e.Data.DelayMs, e.Data.Error))
			case e.Stream == events.StreamLifecycle && e.Data.Phase == events.PhaseRetry:
				out = append(out, fmt.Sprintf("retry %d/%d", e.Data.Attempt, e.Data.MaxAttempts))
			case e.Stream == events.StreamAssistant:
				out = append(out, "reply")
			}
		}
		return out
	}
	for _, tt := range []struct {
		name    string
		errs    []error
		want    []string
		wantErr string
	}{
		{"a 503, then an answer", []error{unavailable}, []string{
			"retrying 1/2 in 1ms: server error (HTTP 503): Service Unavailable",
			"retry 1/2",
			"reply",
		}, ""},
		{"503 on every call", []error{unavailable, unavailable, unavailable}, []string{
			"retrying 1/2 in 1ms: server error (HTTP 503): Service Unavailable",
			"retry 1/2",
			"retrying 2/2 in 2ms: server error (HTTP 503): Service Unavailable",
			"retry 2/2",
		}, "server error (HTTP 503): Service Unavailable"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			s := &sink{}
			r, err := New(Config{DefaultModel: "acme/m1", Resolver: multiResolver{acme: &seq{errs: tt.errs}},
				Auth:  oneProfile(authprofile.Config{Fleet: authprofile.FleetDefaults()}, time.Now),
				Retry: RetryPolicy{MaxRetries: 2, BaseDelay: time.Millisecond, MaxDelay: time.Second}})
			if err != nil {
				t.Fatal(err)
			}
			out, err := r.Run(t.Context(), Input{RunID: "r", Inbound: &events.Inbound{Text: "hi"}}, s)
			if err != nil {
				t.Fatal(err)
			}
			if got := lifecycle(s); !reflect.DeepEqual(got, tt.want) {
				t.Errorf("events:\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(tt.want, "\n"))
			}
			got := ""
			if e := out.Result.Meta.Error; e != nil {
				got = e.Message
			}
			if got != tt.wantErr {
				t.Errorf("the run's error %q, want %q", got, tt.wantErr)
			}
		})
	}
}

func oneProfile(cfg authprofile.Config, now func() time.Time) *MemoryAuth {
	store := authprofile.Store{Usage: map[string]authprofile.State{}, Profiles: []authprofile.Profile{
		{ID: "acme:a", Type: authprofile.TypeAPIKey, Provider: "acme", Key: "sk-a"},
	}}
	return NewMemoryAuth(store, cfg, now)
}

// TestSameKeyRetry: transient failures are retried on the same key with
// backoff before the run loop sees them (pi's auto-retry), and each wait is
// an event; failures that waiting does not mend are not.
func TestSameKeyRetry(t *testing.T) {
	t.Parallel()
	overloaded := &provider.Error{Reason: provider.ReasonOverloaded, Status: 529, Message: "overloaded_error: Overloaded"}
	limited := func(after time.Duration) error {
		return &provider.Error{Reason: provider.ReasonRateLimit, Status: 429, Message: "429 rate limit reached", RetryAfter: after}
	}
	policy := RetryPolicy{BaseDelay: time.Millisecond, MaxDelay: time.Second}
	tests := []struct {
		name     string
		errs     []error
		profiles int
		timeout  time.Duration
		policy   RetryPolicy
		keys     string   // keys of the calls, in order
		waits    []string // retrying events, "attempt:delayMs"
		kind     string   // the result's error kind, "" = answered
	}{
		{"529 then an answer: one retry on the same key", []error{overloaded}, 1, 0, policy,
			"sk-a,sk-a", []string{"1:1"}, ""},
		{"overloaded on every call: three retries with backoff, then the failure stands", []error{overloaded, overloaded, overloaded, overloaded}, 1, 0, policy,
			"sk-a,sk-a,sk-a,sk-a", []string{"1:1", "2:2", "3:4"}, "provider_error"},
		{"a Retry-After longer than the backoff is waited instead", []error{limited(30 * time.Millisecond)}, 1, 0, policy,
			"sk-a,sk-a", []string{"1:30"}, ""},
		{"a Retry-After beyond the longest wait: no retry on this key", []error{limited(time.Hour)}, 1, 0, policy,
			"sk-a", nil, "provider_error"},
		{"a rate limit with another profile ready rotates instead", []error{limited(0)}, 2, 0, policy,
			"sk-a,sk-b", nil, ""},
		{"an overload with another profile ready is retried on the same key first", []error{overloaded}, 2, 0, policy,
			"sk-a,sk-a", []string{"1:1"}, ""},
		{"a rejected request is not retried", []error{&provider.Error{Reason: provider.ReasonFormat, Status: 400, Message: "messages: roles must be strings"}}, 1, 0, policy,
			"sk-a", nil, "provider_error"},
		{"a quota answered with 429 is billing: not retried", []error{&provider.Error{Reason: provider.ReasonBilling, Status: 429, Message: "You exceeded your current quota (insufficient_quota)"}}, 1, 0, policy,
			"sk-a", nil, "provider_error"},
		{"a context overflow is not retried", []error{&provider.Error{Reason: provider.ReasonContextOverflow, Status: 400, Message: "prompt is too long: 208423 tokens > 200000 maximum"}}, 1, 0, policy,
			"sk-a", nil, "context_overflow"},
		{"a wait the attempt cannot afford is not made", []error{overloaded}, 1, 500 * time.Millisecond, RetryPolicy{BaseDelay: time.Second},
			"sk-a", nil, "provider_error"},
		{"retries off", []error{overloaded}, 1, 0, RetryPolicy{MaxRetries: -1},
			"sk-a", nil, "provider_error"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			p := &seq{errs: tt.errs}
			auth := oneProfile(authprofile.Config{Fleet: authprofile.FleetDefaults()}, time.Now)
			if tt.profiles == 2 {
				auth = twoProfiles(time.Now)
			}
			s := &sink{}
			r, err := New(Config{DefaultModel: "acme/m1", Resolver: multiResolver{acme: p}, Auth: auth, Retry: tt.policy, AttemptTimeout: tt.timeout})
			if err != nil {
				t.Fatal(err)
			}
			out, err := r.Run(t.Context(), Input{RunID: "r", Inbound: &events.Inbound{Text: "hi"}}, s)
			if err != nil {
				t.Fatal(err)
			}
			if got := p.used(); got != tt.keys {
				t.Errorf("keys %s, want %s", got, tt.keys)
			}
			if got := retrying(s); !reflect.DeepEqual(got, tt.waits) {
				t.Errorf("retrying events %v, want %v", got, tt.waits)
			}
			kind := ""
			if e := out.Result.Meta.Error; e != nil {
				kind = e.Kind
			}
			if kind != tt.kind {
				t.Fatalf("result %+v, error %+v: want kind %q", out.Result, out.Result.Meta.Error, tt.kind)
			}
			if kind == "" && out.Result.Payloads[0].Text != "fine" {
				t.Fatalf("payloads %+v", out.Result.Payloads)
			}
			// Only a failure that stands is stored: a retried one is not
			// (the retrying events say why), a rotation's is.
			failed := 0
			for _, e := range out.Entries {
				if m := e.Message; m != nil && m.Role == message.RoleAssistant && m.StopReason == message.StopError {
					failed++
				}
			}
			want := 0
			if kind != "" {
				want = 1
			}
			if tt.profiles == 2 && len(tt.waits) == 0 && kind == "" {
				want = 1 // the rotated-away failure of profile a
			}
			if failed != want {
				t.Fatalf("%d failed replies stored, want %d", failed, want)
			}
		})
	}
}

// TestRetryDoesNotResendFailedReplies: the retried request carries the
// same conversation as the failed one: the failed reply is stored, and
// what every adapter sends (transform.Messages) leaves it out.
func TestRetryDoesNotResendFailedReplies(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	var roles [][]message.Role
	p := &keyed{fn: func(req *provider.Request) (string, error) {
		mu.Lock()
		defer mu.Unlock()
		var rs []message.Role
		for _, m := range transform.Messages(req.Messages, req.Model, nil) {
			rs = append(rs, m.Role)
		}
		roles = append(roles, rs)
		if len(roles) == 1 {
			return "", &provider.Error{Reason: provider.ReasonOverloaded, Status: 529, Message: "overloaded_error: Overloaded"}
		}
		return "fine", nil
	}}
	out := runOnce(t, Config{DefaultModel: "acme/m1", Resolver: multiResolver{acme: p}, Retry: RetryPolicy{BaseDelay: time.Millisecond}},
		events.Inbound{Text: "hi"})
	if out.Result.Meta.Error != nil || len(roles) != 2 || !reflect.DeepEqual(roles[0], roles[1]) {
		t.Fatalf("result %+v; requests %v", out.Result, roles)
	}
}

func TestRetryPolicyDelay(t *testing.T) {
	t.Parallel()
	p := RetryPolicy{}.withDefaults()
	tests := []struct {
		n          int
		retryAfter time.Duration
		want       time.Duration
		ok         bool
	}{
		{1, 0, 2 * time.Second, true},
		{2, 0, 4 * time.Second, true},
		{3, 0, 8 * time.Second, true},
		{4, 0, 0, false},                              // past MaxRetries
		{0, 0, 0, false},                              // no retry 0
		{1, 30 * time.Second, 30 * time.Second, true}, // the server's delay when longer
		{3, 5 * time.Second, 8 * time.Second, true},   // the backoff when longer
		{1, 60 * time.Second, 60 * time.Second, true}, // MaxDelay itself is waited
		{1, 61 * time.Second, 0, false},               // longer: not on this key
		{2, 1500 * time.Millisecond, 4 * time.Second, true},
	}
	for _, tt := range tests {
		d, ok := p.Delay(tt.n, tt.retryAfter)
		if d != tt.want || ok != tt.ok {
			t.Errorf("Delay(%d, %v) = %v, %v; want %v, %v", tt.n, tt.retryAfter, d, ok, tt.want, tt.ok)
		}
	}
	if _, ok := (RetryPolicy{MaxRetries: -1}).withDefaults().Delay(1, 0); ok {
		t.Error("MaxRetries -1 retried")
	}
}

// TestLastResort: a run whose every profile is cooling, with no other
// model to try, waits out the Retry-After of the profile that frees up
// first and calls the provider, instead of refusing; what waiting does not
// mend (a disabled key) and the reference's rules (no fleet policy) still
// refuse without a call.
func TestLastResort(t *testing.T) {
	t.Parallel()

	t.Run("after a 429 on the only key the next run waits for the Retry-After and is answered", func(t *testing.T) {
		t.Parallel()
		p := &seq{errs: []error{&provider.Error{Reason: provider.ReasonRateLimit, Status: 429, Message: "429 rate limit reached", RetryAfter: 40 * time.Millisecond}}}
		// The clock stands still between the runs: the second starts the
		// moment the first ended, with the whole Retry-After ahead.
		at := time.UnixMilli(time.Now().UnixMilli())
		clock := func() time.Time { return at }
		auth := oneProfile(authprofile.Config{Fleet: authprofile.FleetDefaults()}, clock)
		cfg := Config{DefaultModel: "acme/m1", Resolver: multiResolver{acme: p}, Auth: auth, Now: clock}
		first := runOnce(t, cfg, events.Inbound{Text: "hi"})
		if first.Result.Meta.Error == nil {
			t.Fatalf("first run %+v: want the rate-limit error", first.Result)
		}
		if st := auth.State("acme:a"); st.Models["m1"].CooldownUntil <= at.UnixMilli() {
			t.Fatalf("profile not cooling after the 429: %+v", st)
		}
		s := &sink{}
		r, err := New(Config{DefaultModel: "acme/m1", Resolver: multiResolver{acme: p}, Auth: auth, Retry: RetryPolicy{MaxRetries: -1}, Now: clock})
		if err != nil {
			t.Fatal(err)
		}
		out, err := r.Run(t.Context(), Input{RunID: "r2", Inbound: &events.Inbound{Text: "again"}}, s)
		if err != nil {
			t.Fatal(err)
		}
		if out.Result.Meta.Error != nil || out.Result.Payloads[0].Text != "fine" || p.used() != "sk-a,sk-a" {
			t.Fatalf("second run %+v, keys %s", out.Result, p.used())
		}
		if w := retrying(s); !reflect.DeepEqual(w, []string{"0:40"}) {
			t.Fatalf("retrying events %v: want one wait of the 40 ms Retry-After for the cooling profile", w)
		}
		if st := auth.State("acme:a"); len(st.Models) != 0 || st.CooldownUntil != 0 {
			t.Fatalf("a good answer did not clear the cooldown: %+v", st)
		}
	})

	cooling := func(st authprofile.State) *MemoryAuth {
		a := oneProfile(authprofile.Config{Fleet: authprofile.FleetDefaults()}, time.Now)
		a.store.Usage["acme:a"] = st
		return a
	}
	now := time.Now()
	tests := []struct {
		name  string
		auth  *MemoryAuth
		calls string
		text  string // the reply's text, prefix
	}{
		{"no Retry-After pending: called at once", cooling(authprofile.State{ErrorCount: 1, Models: map[string]authprofile.ModelState{
			"m1": {CooldownUntil: now.Add(time.Minute).UnixMilli(), ErrorCount: 1, LastFailureAt: now.UnixMilli(), FailureCounts: map[provider.Reason]int{provider.ReasonOverloaded: 1}}}}),
			"sk-a", "fine"},
		{"a Retry-After beyond the attempt timeout: refused without a call", cooling(authprofile.State{Models: map[string]authprofile.ModelState{
			"m1": {CooldownUntil: now.Add(time.Hour).UnixMilli(), RetryUntil: now.Add(time.Hour).UnixMilli(), ErrorCount: 1, FailureCounts: map[provider.Reason]int{provider.ReasonRateLimit: 1}}}}),
			"", "No available auth profile for acme (all in cooldown or unavailable)."},
		{"a disabled key is not a last resort", cooling(authprofile.State{DisabledUntil: now.Add(time.Hour).UnixMilli(), DisabledReason: provider.ReasonBilling,
			FailureCounts: map[provider.Reason]int{provider.ReasonBilling: 1}, ErrorCount: 1}),
			"", "All models failed (1): acme/m1: Provider acme has billing issue (skipping all models) (billing)"},
		{"a refused key is not a last resort", cooling(authprofile.State{CooldownUntil: now.Add(time.Minute).UnixMilli(),
			FailureCounts: map[provider.Reason]int{provider.ReasonAuth: 1}, ErrorCount: 1}),
			"", "All models failed (1): acme/m1: Provider acme has auth issue (skipping all models) (auth)"},
		{"the reference's rules (no fleet policy) refuse", func() *MemoryAuth {
			a := oneProfile(authprofile.Config{}, time.Now)
			a.store.Usage["acme:a"] = authprofile.State{CooldownUntil: now.Add(time.Minute).UnixMilli(), ErrorCount: 1}
			return a
		}(), "", "All models failed (1): acme/m1: Provider acme is in cooldown (all profiles unavailable) (rate_limit)"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			p := &seq{}
			out := runOnce(t, Config{DefaultModel: "acme/m1", Resolver: multiResolver{acme: p}, Auth: tt.auth, AttemptTimeout: time.Minute},
				events.Inbound{Text: "hi"})
			if got := p.used(); got != tt.calls {
				t.Fatalf("calls %q, want %q", got, tt.calls)
			}
			if len(out.Result.Payloads) == 0 || !strings.HasPrefix(out.Result.Payloads[0].Text, tt.text) {
				t.Fatalf("payloads %+v, want %q", out.Result.Payloads, tt.text)
			}
		})
	}
}

// TestTruncationIsSavedAsABranch: an oversized tool result of an earlier
// turn that overflows the context is cut once and stays cut: the turn that
// cut it re-appends the branch from that result on (the earlier turn's
// record is not rewritten), so the next turn sends the cut result at once,
// with no failed call and no second recovery.
func TestTruncationIsSavedAsABranch(t *testing.T) {
	t.Parallel()
	// A large window: the per-request guard leaves a result of up to
	// `window` chars alone, more than the 400 000 chars overflow recovery
	// keeps (with smaller windows the guard always cuts deeper first).
	// keep is in bytes here: the notice's "⚠️" and "—" take more bytes
	// than UTF-16 units.
	const window, keep = 1_000_000, 400_000 + 8
	var mu sync.Mutex
	var sent []int // the longest tool result of each request
	p := &keyed{fn: func(req *provider.Request) (string, error) {
		longest := 0
		for _, m := range req.Messages {
			if m.Role == message.RoleToolResult {
				longest = max(longest, len(m.Content.Text()))
			}
		}
		mu.Lock()
		sent = append(sent, longest)
		mu.Unlock()
		if longest > keep {
			return "", &provider.Error{Reason: provider.ReasonContextOverflow, Status: 400, Message: "prompt is too long"}
		}
		return "fits now", nil
	}}
	big := strings.Repeat("log line\n", 50_000) // 450 000 chars
	history := toolHistory(big)
	cfg := Config{DefaultModel: "acme/m1", Resolver: multiResolver{acme: p, window: window}}
	first := runOnce(t, cfg, events.Inbound{Text: "summarise the log"}, history...)
	if first.Result.Meta.Error != nil || first.Result.Payloads[0].Text != "fits now" || len(sent) != 2 || sent[1] > keep {
		t.Fatalf("first turn %+v, requests' longest results %v", first.Result, sent)
	}
	// The turn starts with the re-appended tail of the branch: the cut
	// result (a child of the call that asked for it) and the answer after it.
	e := first.Entries
	if len(e) < 4 || e[0].Message.Role != message.RoleToolResult || *e[0].ParentID != history[1].ID ||
		len(e[0].Message.Content.Text()) > keep || e[0].ID == history[2].ID ||
		e[1].Message.Content.Text() != "read it" || *e[1].ParentID != e[0].ID || *e[2].ParentID != e[1].ID {
		t.Fatalf("turn entries do not branch off the cut result: %+v", e)
	}
	if history[2].Message.Content.Text() != big {
		t.Fatal("the earlier turn's record was rewritten")
	}
	// The next turn reads the cut branch: one call, no overflow.
	second := runOnce(t, cfg, events.Inbound{Text: "and the errors?"}, append(append([]message.Entry(nil), history...), first.Entries...)...)
	if second.Result.Meta.Error != nil || len(sent) != 3 || sent[2] > keep || sent[2] == 0 {
		t.Fatalf("second turn %+v, requests' longest results %v", second.Result, sent)
	}
}

// TestAnsweredImagesNotResent: images of user turns the model has already
// answered are replaced by a note in requests (runtime spec §10.3); the
// new prompt's image is sent and the stored history keeps its images.
func TestAnsweredImagesNotResent(t *testing.T) {
	t.Parallel()
	const png = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8BQDwAEhQGAhKmMIQAAAABJRU5ErkJggg=="
	var req *provider.Request
	p := &keyed{fn: func(r *provider.Request) (string, error) { req = r; return "a cat again", nil }}
	b := &builder{now: time.Now}
	b.add(message.Message{Role: message.RoleUser, Timestamp: 1, Content: message.BlocksOf(message.Text("what is this?"), message.Image("image/png", png))})
	b.add(message.Message{Role: message.RoleAssistant, StopReason: message.StopStop, Provider: "acme", Model: "m1", API: "openai-completions",
		Content: message.BlocksOf(message.Text("a cat"))})
	out := runOnce(t, Config{DefaultModel: "acme/m1", Resolver: multiResolver{acme: p}},
		events.Inbound{Text: "and this?", Images: []events.Image{{MimeType: "image/png", Data: png}}}, b.entries...)
	if out.Result.Meta.Error != nil || len(req.Messages) != 3 {
		t.Fatalf("result %+v, request %+v", out.Result, req)
	}
	kinds := func(m message.Message) string {
		var ks []string
		for _, bl := range m.Content.Blocks {
			k := string(bl.Type)
			if bl.Type == message.BlockText {
				k += ":" + bl.Text
			}
			ks = append(ks, k)
		}
		return strings.Join(ks, ",")
	}
	if got := kinds(req.Messages[0]); got != "text:what is this?,text:"+sanitize.ImagePrunedText {
		t.Errorf("answered turn sent as %s", got)
	}
	if got := kinds(req.Messages[2]); got != "text:and this?,image" {
		t.Errorf("new prompt sent as %s", got)
	}
	if b.entries[0].Message.Content.Blocks[1].Type != message.BlockImage {
		t.Error("the stored history lost its image")
	}
}

// TestCostInResult: the result's usage carries the cost of every call of
// the run (agentMeta.usage.cost the sum, lastCallUsage.cost the last
// call's), and Output.Usage sums every call for a session's running total.
func TestCostInResult(t *testing.T) {
	t.Parallel()
	calls := 0
	p := provider.Func(func(_ context.Context, req *provider.Request, emit func(provider.Event)) (message.Message, error) {
		calls++
		out := message.Message{Role: message.RoleAssistant, Provider: "acme", Model: "m1", API: "openai-completions", StopReason: message.StopStop,
			Content: message.BlocksOf(message.Text("done")),
			Usage: &message.Usage{Input: 100, Output: 10 * int64(calls), TotalTokens: 100 + 10*int64(calls),
				Cost: message.Cost{Input: 0.001, Output: 0.0001 * float64(calls), Total: 0.001 + 0.0001*float64(calls)}}}
		if calls == 1 {
			out.StopReason = message.StopToolUse
			out.Content = message.BlocksOf(message.ToolCall("c1", "lookup", map[string]any{}))
		}
		emit(provider.Event{Type: provider.EventDone, Message: &out})
		return out, nil
	})
	out := runOnce(t, Config{DefaultModel: "acme/m1", Resolver: multiResolver{acme: p}}, events.Inbound{Text: "hi"})
	am := out.Result.Meta.AgentMeta
	if calls != 2 || am.Usage == nil || am.Usage.Cost == nil || am.LastCallUsage.Cost == nil {
		t.Fatalf("%d calls, agent meta %+v", calls, am)
	}
	near := func(a, b float64) bool { return a-b < 1e-12 && b-a < 1e-12 }
	if c := am.Usage.Cost; !near(c.Total, 0.0023) || !near(c.Input, 0.002) || !near(c.Output, 0.0003) {
		t.Errorf("usage cost %+v, want the sum of both calls", c)
	}
	if c := am.LastCallUsage.Cost; !near(c.Total, 0.0012) {
		t.Errorf("last call cost %+v", c)
	}
	if u := out.Usage; u.Input != 200 || u.Output != 30 || !near(u.Cost.Total, 0.0023) {
		t.Errorf("run total %+v", u)
	}
}

// TestDecisionsBeforeTheFirstAttempt: what the reference decides before
// any attempt (runtime spec §3.1) throws without calling the provider: a
// context window under the hard minimum, a requested model that does not
// resolve, every profile unavailable with no fallbacks.
func TestDecisionsBeforeTheFirstAttempt(t *testing.T) {
	t.Parallel()
	now := time.UnixMilli(1750000000000)
	disabled := authprofile.State{DisabledUntil: now.Add(time.Hour).UnixMilli(), DisabledReason: provider.ReasonBilling,
		FailureCounts: map[provider.Reason]int{provider.ReasonBilling: 1}, ErrorCount: 1}
	tests := []struct {
		name     string
		window   int
		hardMin  int
		unknown  bool
		usage    map[string]authprofile.State
		fallback bool
		thrown   string          // the error's text (a plain error)
		reason   provider.Reason // a failover error's reason ("" = plain)
		status   int
		attempts int
	}{
		{"a window under the hard minimum", 8000, 0, false, nil, false,
			"Model context window too small (8000 tokens). Minimum is 16000.", provider.ReasonUnknown, 0, 0},
		{"the hard minimum itself is enough", 16000, 0, false, nil, false, "", "", 0, 1},
		{"a configured hard minimum", 30000, 32000, false, nil, false,
			"Model context window too small (30000 tokens). Minimum is 32000.", provider.ReasonUnknown, 0, 0},
		{"an unknown model", 200000, 0, true, nil, true,
			"Unknown model: anthropic/claude-opus-4-6", provider.ReasonModelNotFound, 0, 0},
		{"every profile disabled, no fallbacks", 200000, 0, false, map[string]authprofile.State{"p1": disabled, "p2": disabled}, false,
			"No available auth profile for anthropic (all in cooldown or unavailable).", "", 0, 0},
		{"every profile disabled, fallbacks: a failover error for the chain", 200000, 0, false, map[string]authprofile.State{"p1": disabled, "p2": disabled}, true,
			"No available auth profile for anthropic (all in cooldown or unavailable).", provider.ReasonBilling, 402, 0},
		// A window of 0 is unknown, not too small (the guard's default applies).
		{"no window known", 0, 0, false, nil, false, "", "", 0, 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			store := authprofile.Store{Usage: map[string]authprofile.State{}}
			for _, id := range []string{"p1", "p2"} {
				store.Profiles = append(store.Profiles, authprofile.Profile{ID: id, Type: authprofile.TypeAPIKey, Provider: "anthropic", Key: "sk-" + provider.Secret(id)})
			}
			for id, st := range tt.usage {
				store.Usage[id] = st
			}
			sl := &scriptedLoop{}
			m, _, w, err := setupModel(scenarioResolver{unresolvable: tt.unknown, window: tt.window}, "anthropic/claude-opus-4-6",
				guard.WindowConfig{HardMinTokens: float64(tt.hardMin)})
			if err == nil {
				req := loopReq{runID: "r", model: &m, contextWindow: w.Tokens,
					auth: NewMemoryAuth(store, authprofile.Config{}, func() time.Time { return now }), fallbackConfigured: tt.fallback,
					now: func() time.Time { return now }}
				_, err = runModel(t.Context(), req, sl)
			}
			if sl.n != tt.attempts {
				t.Errorf("%d attempts, want %d", sl.n, tt.attempts)
			}
			if tt.thrown == "" {
				if err != nil {
					t.Fatalf("thrown %v", err)
				}
				return
			}
			var pe *provider.Error
			switch {
			case err == nil:
				t.Fatalf("nothing thrown, want %q", tt.thrown)
			case tt.reason == "":
				if errors.As(err, &pe) || err.Error() != tt.thrown {
					t.Fatalf("thrown %T %v, want the plain error %q", err, err, tt.thrown)
				}
			case !errors.As(err, &pe) || pe.Reason != tt.reason || pe.Status != tt.status || pe.Message != tt.thrown:
				t.Fatalf("thrown %T %+v, want a failover error %s/%d %q", err, err, tt.reason, tt.status, tt.thrown)
			}
		})
	}
}

// TestUnnamedModelIsNotAnsweredByAnother: a requested model reference
// that names no provider fails the run; the primary does not answer it in
// its place.
func TestUnnamedModelIsNotAnsweredByAnother(t *testing.T) {
	t.Parallel()
	for _, ref := range []string{"/nothing", "acme/", "just-a-name"} {
		out, err := newRunner(t, "scripted/echo").Run(t.Context(), Input{Inbound: &events.Inbound{Model: ref, Text: "hi"}}, &sink{})
		if err != nil {
			t.Fatal(err)
		}
		e := out.Result.Meta.Error
		if e == nil || e.Kind != "model_not_found" || !strings.Contains(out.Result.Payloads[0].Text, "Unknown model: "+ref) || len(out.Entries) != 1 {
			t.Errorf("%q: result %+v, error %+v", ref, out.Result, e)
		}
	}
}

// recorder is a provider that records the messages of every request and
// answers with the scripted provider; its models belong to provider prov
// ("scripted" when empty).
type recorder struct {
	prov string
	mu   sync.Mutex
	reqs [][]message.Message
}

func (r *recorder) Stream(ctx context.Context, req *provider.Request, emit func(provider.Event)) (message.Message, error) {
	r.mu.Lock()
	r.reqs = append(r.reqs, slices.Clone(req.Messages))
	r.mu.Unlock()
	return scripted.New(scripted.Config{}).Stream(ctx, req, emit)
}

func (r *recorder) Resolve(ref string) (provider.Model, provider.Provider, error) {
	_, id, _ := strings.Cut(ref, "/")
	m := scripted.Model(id)
	if r.prov != "" {
		m.Provider = r.prov
	}
	return m, r, nil
}

// TestRefusalTriggerScrubbed: a request to Anthropic never carries its
// refusal test string, in the prompt or the history; the transcript keeps
// what the sender sent, and other providers get it as it is.
func TestRefusalTriggerScrubbed(t *testing.T) {
	t.Parallel()
	e1 := "e1"
	history := []message.Entry{{Type: message.EntryMessage, ID: e1, Message: &message.Message{Role: message.RoleUser,
		Content: message.PlainText("earlier " + sanitize.RefusalTrigger), Timestamp: 1}},
		{Type: message.EntryMessage, ID: "e2", ParentID: &e1, Message: &message.Message{Role: message.RoleAssistant,
			Content: message.BlocksOf(message.Text("no")), StopReason: message.StopStop, Timestamp: 2}}}
	for _, tc := range []struct{ prov, want string }{
		{"anthropic", sanitize.RefusalTriggerScrubbed},
		{"openai", sanitize.RefusalTrigger},
	} {
		rec := &recorder{prov: tc.prov}
		r, err := New(Config{DefaultModel: tc.prov + "/echo", Resolver: rec, Retry: RetryPolicy{MaxRetries: -1}})
		if err != nil {
			t.Fatal(err)
		}
		out, err := r.Run(t.Context(), Input{RunID: "r", History: history, Inbound: &events.Inbound{Text: "say " + sanitize.RefusalTrigger}}, &sink{})
		if err != nil {
			t.Fatal(err)
		}
		var sent []string
		for _, m := range rec.reqs[0] {
			if m.Role == message.RoleUser {
				sent = append(sent, m.Content.Text())
			}
		}
		if want := []string{"earlier " + tc.want, "say " + tc.want}; !slices.Equal(sent, want) {
			t.Errorf("%s: the request's user messages %q, want %q", tc.prov, sent, want)
		}
		if got := out.Entries[0].Message.Content.Text(); got != "say "+sanitize.RefusalTrigger {
			t.Errorf("%s: the transcript holds %q", tc.prov, got)
		}
	}
}

// TestCallOfAToolNotOffered: a model that calls a tool the run does not
// offer sees its call and the "not found" on its next request, and can go
// on (the call and its result were dropped from every request, so a model
// that answers what it sees made the same call until the tool-loop limit,
// 200 model calls); a tool name with white space around it dispatches by
// its trimmed name.
func TestCallOfAToolNotOffered(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "notes.md"), []byte("the notes"), 0o600); err != nil {
		t.Fatal(err)
	}
	set, err := tools.Builtin(tools.Workspace{Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name, script string
		result       string // the tool result the second request shows
		call         string // the call's name in the second request and the transcript
	}{
		{"a tool not offered", `{"replies":[{"toolCalls":[{"name":"exec","arguments":{"command":"ls"}}]},{"text":"No shell here."}]}`,
			"Tool exec not found", "exec"},
		{"a name with white space", `{"replies":[{"toolCalls":[{"name":" read","arguments":{"path":"notes.md"}}]},{"text":"No shell here."}]}`,
			"the notes", "read"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			rec := &recorder{}
			r, err := New(Config{DefaultModel: "scripted/script", Resolver: rec, Tools: workspaceTools{set}, Retry: RetryPolicy{MaxRetries: -1}})
			if err != nil {
				t.Fatal(err)
			}
			out, err := r.Run(t.Context(), Input{RunID: "r", Inbound: &events.Inbound{Text: "#script " + tc.script}}, &sink{})
			if err != nil {
				t.Fatal(err)
			}
			if res := out.Result; res.Meta.Error != nil || len(res.Payloads) != 1 || res.Payloads[0].Text != "No shell here." {
				t.Fatalf("result %+v (error %+v) after %d model calls", res.Payloads, res.Meta.Error, len(rec.reqs))
			}
			if len(rec.reqs) != 2 {
				t.Fatalf("%d model calls, want 2", len(rec.reqs))
			}
			second := rec.reqs[1]
			var call, result string
			for _, m := range second {
				for _, c := range m.ToolCalls() {
					call = c.Name
				}
				if m.Role == message.RoleToolResult {
					result = m.Content.Text()
				}
			}
			if call != tc.call || result != tc.result {
				t.Fatalf("the second request shows call %q with result %q, want %q and %q", call, result, tc.call, tc.result)
			}
		})
	}
}

// TestToolLoopDetected: a model that makes the same call with the same
// arguments and gets the same error again and again is stopped after
// MaxToolRepeats such calls (default 3) with a tool_loop reply, the
// session's setting within the worker's; the turn is stored whole.
func TestToolLoopDetected(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name            string
		worker, setting int
		want            int
	}{
		{"the default", 0, 0, guard.ToolRepeatsDefault},
		{"the session's setting lowers the worker's", 5, 2, 2},
		{"a setting above the worker's is capped by it", 2, 50, 2},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			rec := &recorder{}
			r, err := New(Config{DefaultModel: "scripted/script", Resolver: rec, MaxToolRepeats: tt.worker, Retry: RetryPolicy{MaxRetries: -1}})
			if err != nil {
				t.Fatal(err)
			}
			in := &events.Inbound{Text: `#script {"replies":[{"toolCalls":[{"name":"exec","arguments":{"command":"ls"}}]}]}`}
			out, err := r.Run(t.Context(), Input{RunID: "r", Inbound: in, Settings: Settings{MaxToolRepeats: tt.setting}}, &sink{})
			if err != nil {
				t.Fatal(err)
			}
			res := out.Result
			text := fmt.Sprintf(TextToolLoop, `"exec"`, tt.want, `"Tool exec not found"`)
			if e := res.Meta.Error; e == nil || e.Kind != KindToolLoop || !reflect.DeepEqual(res.Payloads, []events.Payload{{Text: text, IsError: true}}) {
				t.Fatalf("result %+v, error %+v", res.Payloads, res.Meta.Error)
			}
			if len(rec.reqs) != tt.want || len(out.Entries) != 1+2*tt.want {
				t.Fatalf("%d model calls and %d entries, want %d and %d", len(rec.reqs), len(out.Entries), tt.want, 1+2*tt.want)
			}
		})
	}
}
