package bedrock_test

import (
	"context"
	"encoding/base64"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"

	"github.com/lanefleet/lanefleet/internal/bedrocktest"
	"github.com/lanefleet/lanefleet/message"
	"github.com/lanefleet/lanefleet/provider"
	"github.com/lanefleet/lanefleet/provider/bedrock"
)

const (
	akid   = "AKIAIOSFODNN7EXAMPLE"
	secret = "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY"
	akidB  = "AKIAI44QH8DHBEXAMPLE"
	secB   = "je7MtGbClwBF/2Zp9Utk/h3yCo8nvbEXAMPLEKEY"
	sonnet = "us.anthropic.claude-sonnet-4-5-20250929-v1:0"
)

// model is a Bedrock model served by the test server at base.
func model(base, id string) provider.Model {
	return provider.Model{ID: id, Provider: "amazon-bedrock", API: "bedrock-converse-stream", BaseURL: base, Reasoning: true,
		Input: []string{"text", "image"}, ContextWindow: 200000, MaxTokens: 64000,
		Cost: provider.ModelCost{Input: 3.3, Output: 16.5, CacheRead: 0.33, CacheWrite: 4.125}}
}

// adapter is a Bedrock adapter whose AWS configuration is the chain's
// result for region us-west-2 with the test access key (as the SDK's
// default chain gives from AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY).
func adapter() *bedrock.Adapter { return adapterWith(nil) }

// adapterWith is adapter sending through hc.
func adapterWith(hc *http.Client) *bedrock.Adapter {
	return bedrock.New(bedrock.Config{
		HTTPClient: hc,
		Now:        func() time.Time { return time.UnixMilli(1_750_000_000_000) },
		Load: func(context.Context) (aws.Config, error) {
			return aws.Config{Region: "us-west-2", Credentials: aws.NewCredentialsCache(credentials.NewStaticCredentialsProvider(akid, secret, ""))}, nil
		},
	})
}

// call streams req through a and returns the message, the error and the
// event types in order.
func call(t *testing.T, a *bedrock.Adapter, req *provider.Request) (message.Message, []provider.Event, error) {
	t.Helper()
	var evs []provider.Event
	msg, err := a.Stream(t.Context(), req, func(e provider.Event) { evs = append(evs, e) })
	return msg, evs, err
}

func types(evs []provider.Event) string {
	var s []string
	for _, e := range evs {
		s = append(s, string(e.Type))
	}
	return strings.Join(s, " ")
}

// dig returns the value at a path of keys and indices in decoded JSON.
func dig(v any, path ...any) any {
	for _, p := range path {
		switch k := p.(type) {
		case string:
			m, _ := v.(map[string]any)
			v = m[k]
		case int:
			l, _ := v.([]any)
			if k >= len(l) {
				return nil
			}
			v = l[k]
		}
	}
	return v
}

// TestText: a plain reply streams as text events; the request is signed
// with SigV4 for the configured region and names the model in its path;
// the system prompt and the last user message carry cache points; usage
// and its cost (from the catalog price) arrive in the final event.
func TestText(t *testing.T) {
	t.Parallel()
	srv := bedrocktest.New(t, map[string]string{akid: secret}, func(int, bedrocktest.Seen) bedrocktest.Reply {
		return bedrocktest.NewFrames().Start().Text(0, "Hel", "lo", " there").Stop("end_turn",
			map[string]any{"inputTokens": 1200, "outputTokens": 300, "cacheReadInputTokens": 1000, "cacheWriteInputTokens": 200, "totalTokens": 2700})
	})
	m := model(srv.URL, sonnet)
	msg, evs, err := call(t, adapter(), &provider.Request{Model: m, SystemPrompt: "Be brief.", Messages: []message.Message{message.User("hi", 1)}})
	if err != nil {
		t.Fatal(err)
	}
	if got := types(evs); got != "start text_start text_delta text_delta text_delta text_end done" {
		t.Errorf("events %s", got)
	}
	if msg.Content.Text() != "Hello there" || msg.StopReason != message.StopStop || msg.Provider != "amazon-bedrock" || msg.API != "bedrock-converse-stream" {
		t.Errorf("message %+v", msg)
	}
	final := evs[len(evs)-1].Message.Usage
	want := 1200*3.3/1e6 + 300*16.5/1e6 + 1000*0.33/1e6 + 200*4.125/1e6
	if final.Input != 1200 || final.Output != 300 || final.CacheRead != 1000 || final.CacheWrite != 200 || final.TotalTokens != 2700 ||
		math.Abs(final.Cost.Total-want) > 1e-12 {
		t.Errorf("usage in the final event %+v, want cost %v", final, want)
	}
	r := srv.Requests(t)[0]
	if r.Path != bedrocktest.ModelPath(sonnet) || r.Signer != akid || r.Region != "us-west-2" {
		t.Errorf("request %s signed by %s for %s", r.Path, r.Signer, r.Region)
	}
	if dig(r.Body, "system", 0, "text") != "Be brief." || dig(r.Body, "system", 1, "cachePoint", "type") != "default" {
		t.Errorf("system %v", dig(r.Body, "system"))
	}
	if dig(r.Body, "messages", 0, "content", 0, "text") != "hi" || dig(r.Body, "messages", 0, "content", 1, "cachePoint", "type") != "default" {
		t.Errorf("messages %v", dig(r.Body, "messages"))
	}
	if dig(r.Body, "inferenceConfig", "maxTokens") != float64(32000) {
		t.Errorf("inferenceConfig %v", dig(r.Body, "inferenceConfig"))
	}
}

// TestToolTurn: a tool call streams as toolcall events with its
// arguments; the next request replays it as a toolUse block followed by
// the toolResult of its id, and offers the tools.
func TestToolTurn(t *testing.T) {
	t.Parallel()
	srv := bedrocktest.New(t, map[string]string{akid: secret}, func(n int, _ bedrocktest.Seen) bedrocktest.Reply {
		if n == 0 {
			return bedrocktest.NewFrames().Start().Text(0, "Checking.").ToolUse(1, "tooluse_kZJMlvQmRJ6eAyJE5GIl7Q", "get_weather", `{"city":`, `"Paris"}`).
				Stop("tool_use", map[string]any{"inputTokens": 40, "outputTokens": 20, "totalTokens": 60})
		}
		return bedrocktest.NewFrames().Start().Text(0, "Sunny, 21°C.").Stop("end_turn", map[string]any{"inputTokens": 90, "outputTokens": 8, "totalTokens": 98})
	})
	m := model(srv.URL, sonnet)
	tools := []provider.Tool{{Name: "get_weather", Description: "Weather by city", Parameters: map[string]any{"type": "object", "properties": map[string]any{"city": map[string]any{"type": "string"}}}}}
	history := []message.Message{message.User("Weather in Paris?", 1)}
	a := adapter()
	msg, evs, err := call(t, a, &provider.Request{Model: m, Messages: history, Tools: tools})
	if err != nil {
		t.Fatal(err)
	}
	if got := types(evs); got != "start text_start text_delta text_end toolcall_start toolcall_delta toolcall_delta toolcall_end done" {
		t.Errorf("events %s", got)
	}
	tc := msg.Content.Blocks[1]
	if msg.StopReason != message.StopToolUse || tc.Type != message.BlockToolCall || tc.ID != "tooluse_kZJMlvQmRJ6eAyJE5GIl7Q" || tc.Name != "get_weather" ||
		!reflect.DeepEqual(tc.Arguments, map[string]any{"city": "Paris"}) {
		t.Fatalf("message %+v", msg)
	}
	result := message.Message{Role: message.RoleToolResult, ToolCallID: tc.ID, ToolName: tc.Name, Content: message.BlocksOf(message.Text("sunny, 21")), Timestamp: 3}
	history = append(history, msg, result)
	msg, _, err = call(t, a, &provider.Request{Model: m, Messages: history, Tools: tools})
	if err != nil || msg.Content.Text() != "Sunny, 21°C." {
		t.Fatalf("second turn %+v, %v", msg, err)
	}
	r := srv.Requests(t)[1]
	if dig(r.Body, "toolConfig", "tools", 0, "toolSpec", "name") != "get_weather" ||
		dig(r.Body, "toolConfig", "tools", 0, "toolSpec", "inputSchema", "json", "properties", "city", "type") != "string" {
		t.Errorf("toolConfig %v", dig(r.Body, "toolConfig"))
	}
	use := dig(r.Body, "messages", 1, "content", 1, "toolUse")
	if dig(use, "toolUseId") != tc.ID || dig(use, "name") != "get_weather" || dig(use, "input", "city") != "Paris" {
		t.Errorf("replayed call %v", dig(r.Body, "messages", 1))
	}
	res := dig(r.Body, "messages", 2, "content", 0, "toolResult")
	if dig(r.Body, "messages", 2, "role") != "user" || dig(res, "toolUseId") != tc.ID || dig(res, "status") != "success" || dig(res, "content", 0, "text") != "sunny, 21" {
		t.Errorf("tool result %v", dig(r.Body, "messages", 2))
	}
}

// TestThinking: reasoning deltas stream as thinking with their signature,
// redacted reasoning as a redacted block holding its bytes; replayed, both
// go back byte for byte as reasoningContent, and the request asks for
// thinking with a budget.
func TestThinking(t *testing.T) {
	t.Parallel()
	redacted := []byte{0x01, 0x02, 0xfe, 0xff, 'o', 'p', 'a', 'q', 'u', 'e'}
	srv := bedrocktest.New(t, map[string]string{akid: secret}, func(int, bedrocktest.Seen) bedrocktest.Reply {
		f := bedrocktest.NewFrames().Start()
		f.Reasoning(0, map[string]any{"text": "The user wants "}).Reasoning(0, map[string]any{"text": "a number."}).
			Reasoning(0, map[string]any{"signature": "EqQBCkYIBRgCIkBsig"}).Reasoning(0, map[string]any{"signature": "part2"}).StopBlock(0)
		f.Reasoning(1, map[string]any{"redactedContent": base64.StdEncoding.EncodeToString(redacted)}).StopBlock(1)
		return f.Text(2, "42").Stop("end_turn", map[string]any{"inputTokens": 10, "outputTokens": 50, "totalTokens": 60})
	})
	m := model(srv.URL, sonnet)
	a := adapter()
	msg, evs, err := call(t, a, &provider.Request{Model: m, Messages: []message.Message{message.User("a number", 1)}, Thinking: provider.ThinkingMedium})
	if err != nil {
		t.Fatal(err)
	}
	if got := types(evs); !strings.HasPrefix(got, "start thinking_start thinking_delta thinking_delta thinking_end thinking_start thinking_delta thinking_end text_start") {
		t.Errorf("events %s", got)
	}
	th, rd := msg.Content.Blocks[0], msg.Content.Blocks[1]
	if th.Thinking != "The user wants a number." || th.ThinkingSignature != "EqQBCkYIBRgCIkBsigpart2" || th.Redacted {
		t.Errorf("thinking %+v", th)
	}
	if !rd.Redacted || rd.ThinkingSignature != base64.StdEncoding.EncodeToString(redacted) {
		t.Errorf("redacted %+v", rd)
	}
	first := srv.Requests(t)[0]
	if dig(first.Body, "additionalModelRequestFields", "thinking", "type") != "enabled" ||
		dig(first.Body, "additionalModelRequestFields", "thinking", "budget_tokens") != float64(8192) ||
		dig(first.Body, "inferenceConfig", "maxTokens") != float64(32000+8192) || dig(first.Body, "inferenceConfig", "temperature") != nil {
		t.Errorf("thinking request %v %v", dig(first.Body, "additionalModelRequestFields"), dig(first.Body, "inferenceConfig"))
	}
	_, _, err = call(t, a, &provider.Request{Model: m, Messages: []message.Message{message.User("a number", 1), msg, message.User("again", 3)}, Thinking: provider.ThinkingMedium})
	if err != nil {
		t.Fatal(err)
	}
	r := srv.Requests(t)[1]
	content := dig(r.Body, "messages", 1, "content")
	if dig(content, 0, "reasoningContent", "reasoningText", "text") != "The user wants a number." ||
		dig(content, 0, "reasoningContent", "reasoningText", "signature") != "EqQBCkYIBRgCIkBsigpart2" ||
		dig(content, 1, "reasoningContent", "redactedContent") != base64.StdEncoding.EncodeToString(redacted) ||
		dig(content, 2, "text") != "42" {
		t.Errorf("replayed reasoning %v", content)
	}
}

// TestImage: an image goes to Bedrock as its format and raw bytes (base64
// in the JSON), in a user message and in a tool result.
func TestImage(t *testing.T) {
	t.Parallel()
	srv := bedrocktest.New(t, map[string]string{akid: secret}, func(int, bedrocktest.Seen) bedrocktest.Reply {
		return bedrocktest.NewFrames().Start().Text(0, "A red dot.").Stop("end_turn", map[string]any{"inputTokens": 1500, "outputTokens": 5, "totalTokens": 1505})
	})
	png := base64.StdEncoding.EncodeToString([]byte("\x89PNG\r\n\x1a\nfake"))
	user := message.Message{Role: message.RoleUser, Content: message.BlocksOf(message.Text("What is this?"), message.Image("image/png", png)), Timestamp: 1}
	call1 := message.Message{Role: message.RoleAssistant, API: "bedrock-converse-stream", Provider: "bedrock", Model: sonnet,
		Content: message.BlocksOf(message.ToolCall("tooluse_1", "screenshot", nil)), StopReason: message.StopToolUse, Timestamp: 2}
	shot := message.Message{Role: message.RoleToolResult, ToolCallID: "tooluse_1", ToolName: "screenshot", Content: message.BlocksOf(message.Image("image/jpeg", png)), Timestamp: 3}
	msg, _, err := call(t, adapter(), &provider.Request{Model: model(srv.URL, sonnet), Messages: []message.Message{user, call1, shot}})
	if err != nil || msg.Content.Text() != "A red dot." {
		t.Fatalf("%+v, %v", msg, err)
	}
	r := srv.Requests(t)[0]
	img := dig(r.Body, "messages", 0, "content", 1, "image")
	if dig(img, "format") != "png" || dig(img, "source", "bytes") != png {
		t.Errorf("user image %v", img)
	}
	res := dig(r.Body, "messages", 2, "content", 0, "toolResult", "content")
	if dig(res, 0, "text") != "(see attached image)" || dig(res, 1, "image", "format") != "jpeg" || dig(res, 1, "image", "source", "bytes") != png {
		t.Errorf("tool result image %v", res)
	}
	// The history offers no tools but replays a call: its tool is declared.
	if dig(r.Body, "toolConfig", "tools", 0, "toolSpec", "name") != "screenshot" {
		t.Errorf("toolConfig %v", dig(r.Body, "toolConfig"))
	}
}

// TestErrors: Bedrock's errors, in a response or inside the stream, end
// the call classified by their exception, the partial reply kept.
func TestErrors(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name     string
		reply    bedrocktest.Reply
		want     provider.Reason
		status   int
		text     string // the partial reply
		errorMsg string
	}{
		{name: "context overflow", reply: bedrocktest.ErrorReply(400, "ValidationException", "The model returned the following errors: Input is too long for requested model."),
			want: provider.ReasonContextOverflow, status: 400, errorMsg: "400 ValidationException: The model returned the following errors: Input is too long for requested model."},
		{name: "throttled", reply: bedrocktest.ErrorReply(429, "ThrottlingException", "Too many tokens, please wait before trying again."),
			want: provider.ReasonRateLimit, status: 429, errorMsg: "429 ThrottlingException: Too many tokens, please wait before trying again."},
		{name: "model not ready", reply: bedrocktest.ErrorReply(429, "ModelNotReadyException", "Model is not ready to serve inference requests."),
			want: provider.ReasonOverloaded, status: 429},
		{name: "service unavailable", reply: bedrocktest.ErrorReply(503, "ServiceUnavailableException", "Bedrock is unable to process your request."),
			want: provider.ReasonOverloaded, status: 503},
		{name: "access denied", reply: bedrocktest.ErrorReply(403, "AccessDeniedException", "You don't have access to the model with the specified model ID."),
			want: provider.ReasonAuth, status: 403},
		{name: "throttled inside the stream", reply: bedrocktest.Reply{Body: bedrocktest.NewFrames().Start().Event("contentBlockDelta", map[string]any{"contentBlockIndex": 0, "delta": map[string]any{"text": "par"}}).
			Exception("throttlingException", "Too many requests, please wait before trying again.").Bytes()},
			want: provider.ReasonRateLimit, text: "par", errorMsg: "ThrottlingException: Too many requests, please wait before trying again."},
		{name: "stream error inside the stream", reply: bedrocktest.Reply{Body: bedrocktest.NewFrames().Start().Exception("modelStreamErrorException", "The model stream failed.").Bytes()},
			want: provider.ReasonTimeout},
		{name: "cut before messageStop", reply: bedrocktest.Reply{Body: bedrocktest.NewFrames().Start().Text(0, "half").Bytes()},
			want: provider.ReasonTimeout, text: "half", errorMsg: "bedrock: stream ended before messageStop"},
		{name: "a corrupted frame", reply: bedrocktest.Reply{Body: corrupt(bedrocktest.NewFrames().Start().Text(0, "par").Stop("end_turn", map[string]any{}).Body)},
			want: provider.ReasonTimeout, errorMsg: "bedrock: read stream: bedrock: malformed event-stream frame: message checksum"},
		{name: "context window stop reason", reply: bedrocktest.NewFrames().Start().Text(0, "x").Stop("model_context_window_exceeded", map[string]any{}),
			want: provider.ReasonContextOverflow, text: "x"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			srv := bedrocktest.New(t, map[string]string{akid: secret}, func(int, bedrocktest.Seen) bedrocktest.Reply { return tc.reply })
			msg, evs, err := call(t, adapter(), &provider.Request{Model: model(srv.URL, sonnet), Messages: []message.Message{message.User("hi", 1)}})
			var pe *provider.Error
			if !errors.As(err, &pe) || pe.Reason != tc.want || pe.Status != tc.status {
				t.Fatalf("error %v (%s), want %s with status %d", err, provider.ReasonOf(err), tc.want, tc.status)
			}
			if msg.StopReason != message.StopError || msg.Content.Text() != tc.text || (tc.errorMsg != "" && msg.ErrorMessage != tc.errorMsg) {
				t.Errorf("message %q stop %s error %q", msg.Content.Text(), msg.StopReason, msg.ErrorMessage)
			}
			if last := evs[len(evs)-1]; last.Type != provider.EventError {
				t.Errorf("last event %s", last.Type)
			}
			srv.Requests(t)
		})
	}
}

// TestProfileKeys: a request's key overrides the chain: an access key
// pair is signed with SigV4 as that key, any other key is a Bedrock API
// key sent as a bearer token.
func TestProfileKeys(t *testing.T) {
	t.Parallel()
	srv := bedrocktest.NewTLS(t, map[string]string{akid: secret, akidB: secB}, func(int, bedrocktest.Seen) bedrocktest.Reply {
		return bedrocktest.NewFrames().Start().Text(0, "ok").Stop("end_turn", map[string]any{"inputTokens": 1, "outputTokens": 1, "totalTokens": 2})
	})
	a := adapterWith(srv.Client())
	for _, tc := range []struct {
		key  provider.Secret
		want string
	}{
		{"", akid},
		{akidB + ":" + secB, akidB},
		{"ABSKQmVkcm9ja0FQSUtleS1leGFtcGxl", "bearer:ABSKQmVkcm9ja0FQSUtleS1leGFtcGxl"},
	} {
		if _, _, err := call(t, a, &provider.Request{Model: model(srv.URL, sonnet), Messages: []message.Message{message.User("hi", 1)}, APIKey: tc.key}); err != nil {
			t.Fatal(err)
		}
		reqs := srv.Requests(t)
		if got := reqs[len(reqs)-1].Signer; got != tc.want {
			t.Errorf("key %q: signed by %s, want %s", tc.key.Reveal()[:min(4, len(tc.key))], got, tc.want)
		}
	}
}

// TestNoRegion: AWS's own endpoint needs a region; without one the call
// fails as auth before anything is sent, saying what to set.
func TestNoRegion(t *testing.T) {
	t.Parallel()
	a := bedrock.New(bedrock.Config{Load: func(context.Context) (aws.Config, error) { return aws.Config{}, nil }})
	m := model("https://bedrock-runtime.{region}.amazonaws.com", sonnet)
	_, _, err := call(t, a, &provider.Request{Model: m, Messages: []message.Message{message.User("hi", 1)}})
	if provider.ReasonOf(err) != provider.ReasonAuth || !strings.Contains(err.Error(), "AWS_REGION") {
		t.Fatalf("error %v", err)
	}
}

// TestLongRepliesOnReusedConnections: long replies read whole, one call
// after another on the adapter's kept-alive connections. (The SDK closed
// the request body it built while the transport was finishing with it,
// which made the transport drop the connection under the reply: about
// one call in four ended in "use of closed network connection".)
func TestLongRepliesOnReusedConnections(t *testing.T) {
	t.Parallel()
	f := bedrocktest.NewFrames().Start()
	var want strings.Builder
	for i := range 2000 {
		w := fmt.Sprintf("word%d ", i)
		want.WriteString(w)
		f.Event("contentBlockDelta", map[string]any{"contentBlockIndex": 0, "delta": map[string]any{"text": w}})
	}
	body := f.StopBlock(0).Stop("end_turn", map[string]any{"inputTokens": 20, "outputTokens": 2000, "totalTokens": 2020})
	srv := bedrocktest.New(t, map[string]string{akid: secret}, func(int, bedrocktest.Seen) bedrocktest.Reply { return body })
	a := adapter()
	for i := range 10 {
		msg, _, err := call(t, a, &provider.Request{Model: model(srv.URL, sonnet), Messages: []message.Message{message.User("hi", 1)}})
		if err != nil || msg.Content.Text() != want.String() {
			t.Fatalf("call %d: %d bytes of text, %v", i, len(msg.Content.Text()), err)
		}
	}
}

// corrupt flips a byte of body's second frame (past its prelude): the
// first text delta.
func corrupt(body []byte) []byte {
	out := append([]byte(nil), body...)
	first := int(binary.BigEndian.Uint32(out))
	out[first+30] ^= 0xff
	return out
}

// TestEnvBearerToken: AWS_BEARER_TOKEN_BEDROCK, which the SDK's client
// options turn into a bearer token preferred over the chain's keys, signs
// a call that has no key of its own.
func TestEnvBearerToken(t *testing.T) {
	t.Setenv("AWS_BEARER_TOKEN_BEDROCK", "ABSKZW52LXRva2Vu")
	srv := bedrocktest.NewTLS(t, map[string]string{akid: secret}, func(int, bedrocktest.Seen) bedrocktest.Reply {
		return bedrocktest.NewFrames().Start().Text(0, "ok").Stop("end_turn", map[string]any{"inputTokens": 1, "outputTokens": 1, "totalTokens": 2})
	})
	if _, _, err := call(t, adapterWith(srv.Client()), &provider.Request{Model: model(srv.URL, sonnet), Messages: []message.Message{message.User("hi", 1)}}); err != nil {
		t.Fatal(err)
	}
	if got := srv.Requests(t); len(got) != 1 || got[0].Signer != "bearer:ABSKZW52LXRva2Vu" {
		t.Errorf("requests %+v", got)
	}
}

// TestCancelBeforeHeaders: a call whose context ends while Bedrock has
// not answered yet ends at once, aborted (the request is sent under the
// call's context).
func TestCancelBeforeHeaders(t *testing.T) {
	t.Parallel()
	got := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body) // then the server sees the client go
		close(got)
		<-r.Context().Done()
	}))
	t.Cleanup(srv.Close)
	ctx, cancel := context.WithCancel(t.Context())
	go func() {
		<-got
		cancel()
	}()
	_, err := adapter().Stream(ctx, &provider.Request{Model: model(srv.URL, sonnet), Messages: []message.Message{message.User("hi", 1)}}, nil)
	if provider.ReasonOf(err) != provider.ReasonAborted {
		t.Fatalf("error %v (%s)", err, provider.ReasonOf(err))
	}
}
