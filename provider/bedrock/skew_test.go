package bedrock_test

import (
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/lanefleet/lanefleet/internal/bedrocktest"
	"github.com/lanefleet/lanefleet/message"
	"github.com/lanefleet/lanefleet/provider"
)

// TestClockSkewCorrected: on a host whose clock is an hour behind
// Bedrock's, the first call's signature is out of date and refused; the
// server's Date header on the refusal moves the signing time of the next
// call, which is accepted (the SDK's clock skew correction, which the
// adapter keeps without the SDK's retry step).
func TestClockSkewCorrected(t *testing.T) {
	t.Parallel()
	serverNow := func() time.Time { return time.Now().Add(time.Hour) }
	srv := bedrocktest.New(t, map[string]string{akid: secret}, func(int, bedrocktest.Seen) bedrocktest.Reply {
		r := bedrocktest.NewFrames().Start().Text(0, "ok").Stop("end_turn", map[string]any{"inputTokens": 2, "outputTokens": 1, "totalTokens": 3})
		r.Header = map[string]string{"Date": serverNow().UTC().Format(http.TimeFormat)}
		return r
	})
	var signedAt []time.Time
	front := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		at, _ := time.Parse("20060102T150405Z", r.Header.Get("X-Amz-Date"))
		signedAt = append(signedAt, at)
		if d := at.Sub(serverNow()); d > 5*time.Minute || d < -5*time.Minute {
			w.Header().Set("Date", serverNow().UTC().Format(http.TimeFormat))
			w.Header().Set("Content-Type", "application/json")
			w.Header().Set("X-Amzn-Errortype", "InvalidSignatureException")
			w.WriteHeader(http.StatusForbidden)
			_, _ = w.Write([]byte(`{"message":"Signature expired: is now earlier than (- 5 min.)"}`))
			return
		}
		srv.Config.Handler.ServeHTTP(w, r)
	}))
	t.Cleanup(front.Close)
	a := adapter()
	req := &provider.Request{Model: model(front.URL, sonnet), Messages: []message.Message{message.User("hi", 1)}}
	if _, _, err := call(t, a, req); err == nil {
		t.Fatal("a request signed an hour early was accepted")
	}
	msg, _, err := call(t, a, req)
	if err != nil || msg.Content.Text() != "ok" {
		t.Fatalf("the call after the server's Date: %v %+v (signed at %v, server at %v)", err, msg, signedAt, serverNow())
	}
	if got := srv.Requests(t); len(got) != 1 || got[0].Signer != akid {
		t.Errorf("requests %+v", got)
	}
}
