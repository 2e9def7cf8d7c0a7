package adapter_test

import (
	"errors"
	"net/http"
	"testing"
	"time"

	"github.com/lanefleet/lanefleet/message"
	"github.com/lanefleet/lanefleet/provider"
	"github.com/lanefleet/lanefleet/provider/internal/adapter"
	"github.com/lanefleet/lanefleet/provider/internal/sse"
	"github.com/lanefleet/lanefleet/provider/internal/stream"
	"github.com/lanefleet/lanefleet/provider/internal/wiretest"
)

// textParser writes each event's data to one text block; "end" is the
// terminal event and "fail" a broken one.
type textParser struct {
	b     *stream.Builder
	text  int
	ended bool
	fail  *provider.Error
}

func (p *textParser) Event(ev sse.Event) *provider.Error {
	switch string(ev.Data) {
	case "end":
		p.ended = true
	case "fail":
		return stream.Protocol("test: bad event")
	default:
		p.b.Append(p.text, string(ev.Data))
	}
	return nil
}

func (p *textParser) Ended() bool   { return p.ended }
func (p *textParser) HasStop() bool { return false }
func (p *textParser) Outcome() (message.StopReason, *provider.Error) {
	if p.fail != nil {
		return "", p.fail
	}
	return message.StopStop, nil
}

// TestRun: each step of a call ends the message its own way — a request
// that cannot be built or joined to its base URL as a format error named
// for the adapter, before anything is sent; an HTTP error and a broken
// event as classified; the parser's outcome as the stop reason or the
// failure — and events after the terminal one are not applied.
func TestRun(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name      string
		buildErr  error
		base      string // "" = the server's
		status    int
		body      string
		fail      *provider.Error
		wantStop  message.StopReason
		wantText  string
		wantError string // the error's message, "" for none
		wantWhy   provider.Reason
		wantSent  bool
	}{
		{
			name: "whole reply", status: 200, body: "data: he\n\ndata: llo\n\ndata: end\n\ndata: late\n\n",
			wantStop: message.StopStop, wantText: "hello", wantSent: true,
		},
		{
			name: "build fails", buildErr: errors.New("bad tool schema"),
			wantStop: message.StopError, wantError: "test: build request: bad tool schema", wantWhy: provider.ReasonFormat,
		},
		{
			name: "bad base URL", base: "api.example.com",
			wantStop: message.StopError, wantError: `test: base URL must be an absolute http or https URL: scheme "", host ""`, wantWhy: provider.ReasonFormat,
		},
		{
			name: "HTTP error", status: 429, body: `{"error":{"message":"slow down"}}`,
			wantStop: message.StopError, wantError: "slow down", wantWhy: provider.ReasonRateLimit, wantSent: true,
		},
		{
			name: "event fails", status: 200, body: "data: par\n\ndata: fail\n\n",
			wantStop: message.StopError, wantText: "par", wantError: "test: bad event", wantWhy: provider.ReasonTimeout, wantSent: true,
		},
		{
			name: "outcome fails", status: 200, body: "data: par\n\n", fail: &provider.Error{Reason: provider.ReasonUnknown, Message: "test: refused"},
			wantStop: message.StopError, wantText: "par", wantError: "test: refused", wantWhy: provider.ReasonUnknown, wantSent: true,
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			srv := wiretest.ServeBody(t, tc.status, "text/event-stream", []byte(tc.body), 0)
			base := tc.base
			if base == "" {
				base = srv.URL + "/v1"
			}
			c := adapter.NewClient("test", adapter.Config{
				Headers: map[string]string{"x-api-key": "from-config", "x-extra": "1"},
				Now:     func() time.Time { return time.UnixMilli(7) },
			})
			// Done comes once nothing reads the body: at once when it was
			// never sent (a bad base URL), else once the transport closed it.
			done := make(chan struct{}, 2)
			var types []string
			msg, err := c.Run(t.Context(), &provider.Request{Model: provider.Model{ID: "m"}}, func(e provider.Event) { types = append(types, string(e.Type)) }, adapter.Spec{
				Build: func() (adapter.Call, error) {
					h := http.Header{}
					h.Set("x-api-key", "from-adapter")
					return adapter.Call{Base: base, Path: "x", Header: h, Body: []byte(`{"q":1}`), Done: func() { done <- struct{}{} }}, tc.buildErr
				},
				Parse: func(b *stream.Builder) adapter.Parser { return &textParser{b: b, text: b.BeginText(), fail: tc.fail} },
			})
			var pe *provider.Error
			gotErr := ""
			if errors.As(err, &pe) {
				gotErr = pe.Message
			}
			if (err == nil) != (tc.wantError == "") || gotErr != tc.wantError || err != nil && provider.ReasonOf(err) != tc.wantWhy {
				t.Errorf("error %v (%s), want %q (%s)", err, provider.ReasonOf(err), tc.wantError, tc.wantWhy)
			}
			if msg.StopReason != tc.wantStop || msg.Content.Text() != tc.wantText || msg.Timestamp != 7 || msg.Usage == nil {
				t.Errorf("message %+v", msg)
			}
			// The events open with start and close with done or error.
			last := message.StopReason("done")
			if tc.wantError != "" {
				last = "error"
			}
			if len(types) < 2 || types[0] != "start" || types[len(types)-1] != string(last) {
				t.Errorf("events %v", types)
			}
			if tc.buildErr == nil {
				if tc.wantSent {
					select {
					case <-done:
					case <-time.After(time.Minute):
						t.Error("Done not called after the body was sent")
					}
				} else {
					select {
					case <-done:
					default:
						t.Error("Done not called when Run returned, for a body never sent")
					}
				}
				select {
				case <-done:
					t.Error("Done called twice")
				default:
				}
			}
			reqs := srv.Requests()
			if !tc.wantSent {
				if len(reqs) != 0 {
					t.Errorf("sent %d requests", len(reqs))
				}
				return
			}
			// The call goes to its path under the base URL, with the
			// Config's headers over the adapter's.
			r := srv.Last(t)
			if r.Path != "/v1/x" || string(r.Body) != `{"q":1}` || r.Header.Get("x-api-key") != "from-config" || r.Header.Get("x-extra") != "1" {
				t.Errorf("request %s %q with x-api-key %q, x-extra %q", r.Path, r.Body, r.Header.Get("x-api-key"), r.Header.Get("x-extra"))
			}
		})
	}
}
