package failover_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/lanefleet/lanefleet/provider"
	"github.com/lanefleet/lanefleet/provider/failover"
)

// wireCase is one entry of testdata/cases.json (a copy of shared/wire).
type wireCase struct {
	File    string            `json:"file"`
	Status  int               `json:"status"`
	Headers map[string]string `json:"headers"`
	Expect  struct {
		ErrorClass   *string `json:"errorClass"`
		ErrorMessage string  `json:"errorMessage"`
	} `json:"expect"`
	Alternatives []*string `json:"errorClassAlternatives"`
}

// TestFromHTTPWireBodies classifies every recorded error body.
func TestFromHTTPWireBodies(t *testing.T) {
	t.Parallel()
	data, err := os.ReadFile("testdata/cases.json")
	if err != nil {
		t.Fatal(err)
	}
	var cases []wireCase
	if err := json.Unmarshal(data, &cases); err != nil {
		t.Fatal(err)
	}
	now := time.Date(2025, 5, 29, 10, 15, 0, 0, time.UTC)
	n := 0
	for _, c := range cases {
		if filepath.Ext(c.File) != ".json" {
			continue
		}
		n++
		t.Run(c.File, func(t *testing.T) {
			body, err := os.ReadFile(filepath.Join("testdata", c.File))
			if err != nil {
				t.Fatal(err)
			}
			h := http.Header{}
			for k, v := range c.Headers {
				h.Set(k, v)
			}
			e := failover.FromHTTP(c.Status, h, body, nil, now)
			if e.Message != c.Expect.ErrorMessage {
				t.Errorf("message = %q, want %q", e.Message, c.Expect.ErrorMessage)
			}
			if want := *c.Expect.ErrorClass; string(e.Reason) != want {
				t.Errorf("reason = %s, want %s", e.Reason, want)
			}
			if e.Status != c.Status {
				t.Errorf("status = %d", e.Status)
			}
		})
	}
	if n == 0 {
		t.Fatal("no error bodies")
	}
}

func TestRetryAfter(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	hdr := func(kv ...string) http.Header {
		h := http.Header{}
		for i := 0; i < len(kv); i += 2 {
			h.Set(kv[i], kv[i+1])
		}
		return h
	}
	for _, tc := range []struct {
		name string
		h    http.Header
		body string
		msg  string
		want time.Duration
	}{
		{"seconds", hdr("Retry-After", "23"), "", "", 23 * time.Second},
		{"milliseconds header wins", hdr("Retry-After", "23", "retry-after-ms", "1500"), "", "", 1500 * time.Millisecond},
		{"http date", hdr("Retry-After", now.Add(90*time.Second).Format(http.TimeFormat)), "", "", 90 * time.Second},
		{"date in the past", hdr("Retry-After", now.Add(-time.Minute).Format(http.TimeFormat)), "", "", 0},
		{"gemini retryDelay", nil, `{"details":[{"retryDelay": "45.5s"}]}`, "", 45500 * time.Millisecond},
		{"openai message", nil, "", "Please try again in 1.574s. Visit", 1574 * time.Millisecond},
		{"openai message ms", nil, "", "Please try again in 20ms.", 20 * time.Millisecond},
		{"none", nil, "", "slow down", 0},
		{"garbage header", hdr("Retry-After", "soon"), "", "", 0},
	} {
		if got := failover.RetryAfter(tc.h, []byte(tc.body), tc.msg, now); got != tc.want {
			t.Errorf("%s: got %v, want %v", tc.name, got, tc.want)
		}
	}
}

func TestClassifyHTTP(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		in   failover.Info
		want provider.Reason
	}{
		// OpenAI insufficient_quota arrives as 429 but is billing.
		{failover.Info{Status: 429, Type: "insufficient_quota", Code: "insufficient_quota", Message: "You exceeded your current quota, please check your plan and billing details."}, provider.ReasonBilling},
		{failover.Info{Status: 402, Message: "Insufficient credits"}, provider.ReasonBilling},
		// Gemini invalid key is a 400 with reason API_KEY_INVALID.
		{failover.Info{Status: 400, Type: "INVALID_ARGUMENT", Code: "API_KEY_INVALID", Message: "API key not valid. Please pass a valid API key."}, provider.ReasonAuthPermanent},
		{failover.Info{Status: 401, Type: "invalid_request_error", Code: "invalid_api_key", Message: "Incorrect API key provided"}, provider.ReasonAuthPermanent},
		{failover.Info{Status: 403, Message: "Forbidden"}, provider.ReasonAuth},
		{failover.Info{Status: 529, Type: "overloaded_error", Message: "Overloaded"}, provider.ReasonOverloaded},
		{failover.Info{Status: 503, Message: "The engine is currently overloaded, please try again later"}, provider.ReasonOverloaded},
		{failover.Info{Status: 503, Message: "upstream connect error"}, provider.ReasonTimeout},
		{failover.Info{Status: 502, Message: "Bad gateway"}, provider.ReasonTimeout},
		{failover.Info{Status: 400, Message: "prompt is too long: 208423 tokens > 200000 maximum"}, provider.ReasonContextOverflow},
		{failover.Info{Status: 400, Message: "messages: roles must alternate between \"user\" and \"assistant\""}, provider.ReasonRoleOrdering},
		{failover.Info{Status: 400, Message: "image exceeds 5 MB maximum"}, provider.ReasonImageSize},
		{failover.Info{Status: 400, Message: "something odd"}, provider.ReasonFormat},
		{failover.Info{Status: 413, Message: "Request Entity Too Large"}, provider.ReasonContextOverflow},
		// The reference's status table (runtime spec §15) over what the
		// text says, and the text where the table has no entry.
		{failover.Info{Status: 503, Message: "Service Unavailable"}, provider.ReasonTimeout},
		{failover.Info{Status: 429, Message: "Insufficient credits, please upgrade your plan"}, provider.ReasonRateLimit},
		{failover.Info{Status: 401, Message: "Your API key has been revoked"}, provider.ReasonAuthPermanent},
		{failover.Info{Status: 403, Message: "Your credit balance is too low"}, provider.ReasonAuth},
		{failover.Info{Status: 400, Message: "request timed out"}, provider.ReasonFormat},
		{failover.Info{Status: 500, Message: "Internal Server Error"}, provider.ReasonUnknown},
		{failover.Info{Status: 500, Message: "500 Internal Server Error"}, provider.ReasonTimeout},
		{failover.Info{Status: 500, Message: "Internal server error", Type: "api_error",
			Body: `{"type":"error","error":{"type":"api_error","message":"Internal server error"}}`}, provider.ReasonTimeout},
		{failover.Info{Status: 404, Message: "Not Found"}, provider.ReasonUnknown},
		{failover.Info{Status: 404, Message: "model not found"}, provider.ReasonModelNotFound},
		{failover.Info{Status: 529, Message: "Overloaded"}, provider.ReasonOverloaded},
		{failover.Info{Status: 500, Message: "upstream request timeout"}, provider.ReasonTimeout},
		{failover.Info{Status: 0, Type: "server_is_overloaded", Message: "busy"}, provider.ReasonOverloaded},
		{failover.Info{Status: 0, Message: "Provider disconnected unexpectedly"}, provider.ReasonTimeout},
		{failover.Info{Status: 0, Message: "mystery"}, provider.ReasonTimeout},
		{failover.Info{Status: 418, Message: "teapot"}, provider.ReasonUnknown},
	} {
		if got := failover.ClassifyHTTP(tc.in); got != tc.want {
			t.Errorf("%+v: got %s, want %s", tc.in, got, tc.want)
		}
	}
}

// codeErr is an error with a message of its own and a network error code.
type codeErr struct {
	msg  string
	code syscall.Errno
}

func (e codeErr) Error() string { return e.msg }
func (e codeErr) Unwrap() error { return e.code }

type timeoutErr struct{}

func (timeoutErr) Error() string   { return "i/o timeout" }
func (timeoutErr) Timeout() bool   { return true }
func (timeoutErr) Temporary() bool { return true }

func TestClassifyError(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		err  error
		want provider.Reason
	}{
		{nil, ""},
		{&provider.Error{Reason: provider.ReasonBilling}, provider.ReasonBilling},
		{fmt.Errorf("wrap: %w", &provider.Error{Reason: provider.ReasonFormat}), provider.ReasonFormat},
		{fmt.Errorf("x: %w", errors.Join(errors.New("a"), contextCanceled())), provider.ReasonAborted},
		{io.ErrUnexpectedEOF, provider.ReasonTimeout},
		// The network error codes the reference names are timeouts; a
		// refused connection is not (runtime spec §15).
		{fmt.Errorf("read: %w", syscall.ECONNRESET), provider.ReasonTimeout},
		{fmt.Errorf("read: %w", syscall.ECONNABORTED), provider.ReasonTimeout},
		{fmt.Errorf("dial: %w", syscall.ETIMEDOUT), provider.ReasonTimeout},
		{fmt.Errorf("connect ECONNREFUSED: %w", syscall.ECONNREFUSED), provider.ReasonUnknown},
		{fmt.Errorf("write: %w", syscall.EPIPE), provider.ReasonUnknown},
		// A transport failure is classified by its cause, not by the
		// digits of its addresses: a refused port 42909 is no 429 (the
		// anthropic adapter's refused-connection test once got one).
		{refusedAt(42909), provider.ReasonUnknown},
		{refusedAt(50301), provider.ReasonUnknown},
		// A timeout-like message wins over what else it says.
		{errors.New("rate limit check timed out"), provider.ReasonTimeout},
		{timeoutErr{}, provider.ReasonTimeout},
		{errors.New("429 Too Many Requests"), provider.ReasonRateLimit},
		{errors.New("Overloaded"), provider.ReasonOverloaded},
		// A leading transient status is timeout, as the reference says
		// (runtime spec §25).
		{errors.New("529 Overloaded"), provider.ReasonTimeout},
		{errors.New("what"), provider.ReasonUnknown},
	} {
		if got := failover.ClassifyError(tc.err); got != tc.want {
			t.Errorf("%v: got %s, want %s", tc.err, got, tc.want)
		}
	}
}

// refusedAt is the error of a request refused at port on the loopback,
// as net/http returns it.
func refusedAt(port int) error {
	addr := &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: port}
	return &url.Error{Op: "Post", URL: "http://" + addr.String() + "/v1/messages",
		Err: &net.OpError{Op: "dial", Net: "tcp", Addr: addr, Err: os.NewSyscallError("connect", syscall.ECONNREFUSED)}}
}

// TestLabel: what a person reads for a failed call names a provider's 5xx
// a server error (its reason is timeout, but nothing timed out), keeps the
// provider's own HTTP status, and never one a failover error carries for
// its reason.
func TestLabel(t *testing.T) {
	t.Parallel()
	unavailable := &provider.Error{Reason: provider.ReasonTimeout, Status: 503, Message: "Service Unavailable"}
	for _, tc := range []struct {
		name string
		err  error
		want string
	}{
		{"no error", nil, ""},
		{"a 503: a server error, not a timeout", unavailable, "server error (HTTP 503)"},
		{"a 500 of unknown kind", &provider.Error{Reason: provider.ReasonUnknown, Status: 500, Message: "boom"}, "server error (HTTP 500)"},
		{"a 502 wrapped", fmt.Errorf("call: %w", &provider.Error{Reason: provider.ReasonTimeout, Status: 502}), "server error (HTTP 502)"},
		{"an overloaded 529 stays overloaded", &provider.Error{Reason: provider.ReasonOverloaded, Status: 529}, "overloaded (HTTP 529)"},
		{"a rate limit with its status", &provider.Error{Reason: provider.ReasonRateLimit, Status: 429}, "rate_limit (HTTP 429)"},
		// The run loop's failover error carries 408 for the reason
		// timeout; the provider's own 503 is what the call got.
		{"a failover error around a 503", &provider.Error{Reason: provider.ReasonTimeout, Status: 408, Message: "LLM request timed out.", Err: unavailable}, "server error (HTTP 503)"},
		{"a failover error around a stall", &provider.Error{Reason: provider.ReasonTimeout, Status: 408, Err: &provider.Error{Reason: provider.ReasonTimeout, Message: "stalled"}}, "timeout"},
		{"a stall: a timeout", &provider.Error{Reason: provider.ReasonTimeout, Message: "read stream: stalled"}, "timeout"},
		{"a plain error: its reason", errors.New("429 Too Many Requests"), "rate_limit"},
	} {
		if got := failover.Label(tc.err); got != tc.want {
			t.Errorf("%s: Label = %q, want %q", tc.name, got, tc.want)
		}
	}
}

func TestIsTimeoutError(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		err  error
		want bool
	}{
		{nil, false},
		{context.DeadlineExceeded, true},
		{fmt.Errorf("read: %w", os.ErrDeadlineExceeded), true},
		{timeoutErr{}, true},
		{errors.New("Request Timeout"), true},
		{errors.New("unhandled stop reason: abort"), true},
		{&provider.Error{Reason: provider.ReasonTimeout, Status: 503, Message: "Service Unavailable"}, false},
		{&provider.Error{Reason: provider.ReasonTimeout, Status: 408, Message: "Request Timeout"}, true},
		// A network error code is no timeout to the reference (Go's own
		// wording of it, "connection timed out", says it is).
		{codeErr{"connect ETIMEDOUT 10.0.0.1:443", syscall.ETIMEDOUT}, false},
		{fmt.Errorf("socket hang up: %w", syscall.ECONNRESET), false},
		{contextCanceled(), false},
	} {
		if got := failover.IsTimeoutError(tc.err); got != tc.want {
			t.Errorf("%v: %v, want %v", tc.err, got, tc.want)
		}
	}
}

func TestUserTextBillingNamesProvider(t *testing.T) {
	t.Parallel()
	got := failover.UserText("Your credit balance is too low", "anthropic", "claude-opus-4-6")
	want := "⚠️ anthropic (claude-opus-4-6) returned a billing error — your API key has run out of credits or has an insufficient balance. Check your anthropic billing dashboard and top up or switch to a different API key."
	if got != want {
		t.Errorf("got %q", got)
	}
	if got := failover.UserText("502 <!DOCTYPE html><html>Bad Gateway</html>", "", ""); got != "The AI service is temporarily unavailable (HTTP 502). Please try again in a moment." {
		t.Errorf("html page: %q", got)
	}
}

func TestNormalizeThinkingLevel(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]provider.ThinkingLevel{
		"x-high": provider.ThinkingXHigh, "Extra High": provider.ThinkingXHigh, "on": provider.ThinkingLow,
		"think": provider.ThinkingMinimal, "max": provider.ThinkingHigh, "med": provider.ThinkingMedium,
		"OFF": provider.ThinkingOff,
	} {
		if got, ok := failover.NormalizeThinkingLevel(in); !ok || got != want {
			t.Errorf("%q: got %q %v, want %q", in, got, ok, want)
		}
	}
	if _, ok := failover.NormalizeThinkingLevel("auto"); ok {
		t.Error("auto is not a level")
	}
}

// FuzzClassify checks the classifiers never panic and agree with each other.
func FuzzClassify(f *testing.F) {
	for _, s := range []string{"", "429", "prompt is too long", "500 <html></html>", "image exceeds 5 MB", `{"error":{"message":"x"}}`, "Supported values are: 'low'"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		fl := failover.Classify(s)
		r := failover.ClassifyMessage(s)
		if fl.ContextOverflow && r != provider.ReasonContextOverflow && r != provider.ReasonImageSize {
			t.Errorf("%q: strict overflow but ClassifyMessage = %s", s, r)
		}
		_ = failover.UserText(s, "p", "m")
		_, _ = failover.ThinkingFallback(s, nil)
	})
}

func contextCanceled() error { return errStreamCanceled }

var errStreamCanceled = fmt.Errorf("stream: %w", context.Canceled)

// TestHTMLErrorPages: an HTML page behind a 5xx status (a proxy's, a
// CDN's) is transient, and the user is told the service is unavailable
// instead of being shown the page (runtime spec §14); an adapter words
// such a body "<status> <page>" as JavaScript clients do, so the same rule
// applies to it.
func TestHTMLErrorPages(t *testing.T) {
	t.Parallel()
	page := "<!DOCTYPE html><html><head><title>502</title></head><body>nginx</body></html>"
	unavailable := func(n int) string {
		return fmt.Sprintf("The AI service is temporarily unavailable (HTTP %d). Please try again in a moment.", n)
	}
	tests := []struct {
		text   string
		html   bool
		reason provider.Reason
		user   string
	}{
		{"502 " + page, true, provider.ReasonTimeout, unavailable(502)},
		{"HTTP 503 <html><body>x</body></html>", true, provider.ReasonTimeout, unavailable(503)},
		{"  504   <HTML>oops</HTML>  ", true, provider.ReasonTimeout, unavailable(504)},
		{"521 Web server is down", true, provider.ReasonTimeout, unavailable(521)},
		{"520 <html>x</html>", true, "", unavailable(520)},
		// Without its closing tag, or below 500, or without a status, it is
		// not an error page.
		{"500 <html>x", false, provider.ReasonTimeout, "500 <html>x"},
		{"429 <html>too many</html>", false, provider.ReasonRateLimit, failover.TextRateLimit},
		{page, false, "", page},
	}
	for _, tt := range tests {
		f := failover.Classify(tt.text)
		if f.HTMLErrorPage != tt.html || f.FailoverReason != tt.reason {
			t.Errorf("%q: html %v reason %q, want %v %q", tt.text, f.HTMLErrorPage, f.FailoverReason, tt.html, tt.reason)
		}
		if got := failover.UserText(tt.text, "", ""); got != tt.user {
			t.Errorf("%q: user text %q, want %q", tt.text, got, tt.user)
		}
	}
	// The reference's status table makes 502-504 timeout; any other
	// status is classified by its body, and a page says nothing (the run
	// loop still rotates on the "<status> <page>" text).
	for status, reason := range map[int]provider.Reason{502: provider.ReasonTimeout, 503: provider.ReasonTimeout, 521: provider.ReasonUnknown} {
		e := failover.FromHTTP(status, nil, []byte(page), nil, time.Time{})
		if want := fmt.Sprintf("%d %s", status, page); e.Message != want || e.Reason != reason {
			t.Errorf("FromHTTP(%d): %s %q", status, e.Reason, e.Message)
		}
		if got := failover.UserText(e.Message, "", ""); got != unavailable(status) {
			t.Errorf("FromHTTP(%d): user text %q", status, got)
		}
	}
	// A JSON body is not touched.
	if e := failover.FromHTTP(502, nil, []byte(`{"error":{"message":"bad gateway"}}`), nil, time.Time{}); e.Message != "bad gateway" {
		t.Errorf("JSON body: %q", e.Message)
	}
}
