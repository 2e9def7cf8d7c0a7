package runner

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/lanefleet/lanefleet/events"
	"github.com/lanefleet/lanefleet/provider"
	"github.com/lanefleet/lanefleet/provider/openai"
)

// chatServer is an OpenAI chat completions endpoint that answers 429 to
// the bearer keys in limited and streams "fine" to any other.
func chatServer(t *testing.T, limited ...string) *httptest.Server {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		key := strings.TrimPrefix(r.Header.Get("Authorization"), "Bearer ")
		for _, k := range limited {
			if key == k {
				w.Header().Set("Content-Type", "application/json")
				w.Header().Set("Retry-After", "30")
				w.WriteHeader(http.StatusTooManyRequests)
				fmt.Fprint(w, `{"error":{"message":"Rate limit reached for requests (key `+key+`)","type":"requests","code":"rate_limit_exceeded"}}`)
				return
			}
		}
		w.Header().Set("Content-Type", "text/event-stream")
		fmt.Fprint(w, `data: {"id":"c1","object":"chat.completion.chunk","choices":[{"index":0,"delta":{"role":"assistant","content":"fine"}}]}`+"\n\n")
		fmt.Fprint(w, `data: {"id":"c1","object":"chat.completion.chunk","choices":[{"index":0,"delta":{},"finish_reason":"stop"}],"usage":{"prompt_tokens":10,"completion_tokens":1,"total_tokens":11}}`+"\n\n")
		fmt.Fprint(w, "data: [DONE]\n\n")
	}))
	t.Cleanup(srv.Close)
	return srv
}

// httpResolver serves "acme/*" and "other/*" from OpenAI-compatible
// endpoints.
type httpResolver struct{ acme, other string }

func (r httpResolver) Resolve(ref string) (provider.Model, provider.Provider, error) {
	p, id, _ := strings.Cut(ref, "/")
	base := r.acme
	if p == "other" {
		base = r.other
	}
	return provider.Model{Provider: p, ID: id, API: "openai-completions", BaseURL: base, ContextWindow: 200000},
		openai.NewCompletions(openai.Config{}), nil
}

// TestAttemptEvents pins the attempt events: one as each model attempt
// starts, in order, naming the model, the auth profile (never its key),
// the fallback hop and the failover reason of the attempt before it.
func TestAttemptEvents(t *testing.T) {
	t.Parallel()
	type attempt struct {
		n               int
		provider, model string
		profile         string
		hop             int
		reason          string
	}
	cases := []struct {
		name      string
		limited   []string // keys the acme endpoint answers 429
		fallbacks []string
		want      []attempt
	}{
		{"a 429 on profile a rotates to b", []string{"sk-a"}, nil, []attempt{
			{1, "acme", "m1", "acme:a", 0, ""},
			{2, "acme", "m1", "acme:b", 0, "rate_limit"},
		}},
		{"429 on every profile falls back to the next model", []string{"sk-a", "sk-b"}, []string{"other/m9"}, []attempt{
			{1, "acme", "m1", "acme:a", 0, ""},
			{2, "acme", "m1", "acme:b", 0, "rate_limit"},
			{3, "other", "m9", "", 1, "rate_limit"},
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			acme, other := chatServer(t, tc.limited...), chatServer(t)
			cfg := Config{DefaultModel: "acme/m1", Fallbacks: tc.fallbacks, Resolver: httpResolver{acme: acme.URL, other: other.URL},
				Auth: twoProfiles(nil)}
			cfg.Retry.MaxRetries = -1
			r, err := New(cfg)
			if err != nil {
				t.Fatal(err)
			}
			s := &sink{}
			out, err := r.Run(t.Context(), Input{RunID: "run", SessionID: "sid", Inbound: &events.Inbound{Text: "hi"}}, s)
			if err != nil {
				t.Fatal(err)
			}
			if out.Result.Meta.Error != nil || out.Result.Payloads[0].Text != "fine" {
				t.Fatalf("result %+v", out.Result)
			}
			var got []attempt
			for _, ev := range s.evs {
				if ev.Stream != events.StreamAttempt {
					continue
				}
				d := ev.Data
				if strings.Contains(fmt.Sprintf("%+v", d), "sk-") {
					t.Fatalf("attempt event carries a key: %+v", d)
				}
				got = append(got, attempt{d.Attempt, d.Provider, d.Model, d.AuthProfile, d.Hop, d.Reason})
			}
			if fmt.Sprint(got) != fmt.Sprint(tc.want) {
				t.Fatalf("attempt events:\n got %+v\nwant %+v", got, tc.want)
			}
		})
	}
}
