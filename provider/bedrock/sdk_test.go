package bedrock

import (
	"bytes"
	"context"
	"encoding/base64"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/bedrockruntime"
	"github.com/aws/smithy-go"

	"github.com/lanefleet/lanefleet/message"
	"github.com/lanefleet/lanefleet/provider"
)

// The tests here hold the adapter's request and error reading to the
// SDK's: the same input sent by bedrockruntime.Client.ConverseStream and
// by the adapter must reach a server as the same request, and the same
// error response must read as the same exception.

const (
	testAKID   = "AKIAIOSFODNN7EXAMPLE"
	testSecret = "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY"
	// profileARN is a model id with the ':' and '/' that the path escapes.
	profileARN = "arn:aws:bedrock:us-west-2:123456789012:inference-profile/us.anthropic.claude-sonnet-4-5-20250929-v1:0"
)

// captured is a request as a server saw it.
type captured struct {
	uri, contentType, scope string
	body                    []byte
}

// capture is a server that records requests and answers each with reply.
func capture(t *testing.T, reply func(w http.ResponseWriter)) (*httptest.Server, func() []captured) {
	t.Helper()
	var mu sync.Mutex
	var got []captured
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		auth := r.Header.Get("Authorization")
		// The signature's scope and signed headers but the SDK retry
		// step's amz-sdk-* (the signature itself depends on the second it
		// was made).
		scope, _, _ := strings.Cut(auth, ", Signature=")
		scope = strings.NewReplacer("amz-sdk-invocation-id;", "", "amz-sdk-request;", "").Replace(scope)
		mu.Lock()
		got = append(got, captured{uri: r.RequestURI, contentType: r.Header.Get("Content-Type"), scope: scope, body: body})
		mu.Unlock()
		reply(w)
	}))
	t.Cleanup(srv.Close)
	return srv, func() []captured { mu.Lock(); defer mu.Unlock(); return append([]captured(nil), got...) }
}

// testConfig is the chain's result for us-west-2 with the test key.
func testConfig() aws.Config {
	return aws.Config{Region: "us-west-2", Credentials: aws.NewCredentialsCache(credentials.NewStaticCredentialsProvider(testAKID, testSecret, ""))}
}

// sdkCall sends in with the SDK's client to base and returns its error.
func sdkCall(t *testing.T, base string, in *bedrockruntime.ConverseStreamInput) error {
	t.Helper()
	c := bedrockruntime.NewFromConfig(testConfig(), func(o *bedrockruntime.Options) {
		o.BaseEndpoint = aws.String(base)
		o.Retryer = aws.NopRetryer{}
	})
	_, err := c.ConverseStream(t.Context(), in)
	return err
}

// ownCall sends in the adapter's way to base and returns the error
// response read.
func ownCall(t *testing.T, base string, in *bedrockruntime.ConverseStreamInput) error {
	t.Helper()
	c := newClient(testConfig(), http.DefaultClient)
	cl, err := c.callFor(provider.Model{ID: aws.ToString(in.ModelId), BaseURL: base}, "")
	if err != nil {
		t.Fatal(err)
	}
	r, err := c.request(t.Context(), cl, in)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := c.send(r)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode/100 == 2 {
		_ = resp.Body.Close()
		return nil
	}
	return c.apiError(t.Context(), resp)
}

// richRequest has every part buildInput maps: a system prompt, text and
// images, a tool call and its result with an image, thinking with a
// signature and redacted thinking, tools, cache points.
func richRequest() *provider.Request {
	png := base64.StdEncoding.EncodeToString([]byte("\x89PNG\r\n\x1a\nfake<&>"))
	return &provider.Request{
		Model:        provider.Model{ID: profileARN, API: "bedrock-converse-stream", Reasoning: true, Input: []string{"text", "image"}, MaxTokens: 64000},
		SystemPrompt: "Be brief <and> exact & kind.", Thinking: provider.ThinkingHigh,
		Tools: []provider.Tool{{Name: "get_weather", Description: "Weather by city", Parameters: map[string]any{
			"type": "object", "properties": map[string]any{"city": map[string]any{"type": "string", "enum": []any{"Paris", "Köln"}}, "days": map[string]any{"type": "integer", "maximum": 1e21}},
			"required": []any{"city"}}}},
		Messages: []message.Message{
			{Role: message.RoleUser, Content: message.BlocksOf(message.Text("What is this? \u2028 \"quoted\""), message.Image("image/png", png)), Timestamp: 1},
			{Role: message.RoleAssistant, API: "bedrock-converse-stream", Model: profileARN, StopReason: message.StopToolUse, Timestamp: 2,
				Content: message.BlocksOf(
					message.Block{Type: message.BlockThinking, Thinking: "Let me look.", ThinkingSignature: "EqQBCkYIBRgCIkBsig"},
					message.Block{Type: message.BlockThinking, Redacted: true, ThinkingSignature: base64.StdEncoding.EncodeToString([]byte{1, 2, 0xfe})},
					message.Text("Checking."), message.ToolCall("tooluse_1", "get_weather", map[string]any{"city": "Paris", "n": 1.5}))},
			{Role: message.RoleToolResult, ToolCallID: "tooluse_1", ToolName: "get_weather", IsError: true,
				Content: message.BlocksOf(message.Text("sunny"), message.Image("image/jpeg", png)), Timestamp: 3},
			message.User("And tomorrow?", 4),
		},
	}
}

// TestRequestAsSDK: a rich request (every part buildInput maps, a model
// id that is an inference profile ARN) reaches the server from the
// adapter as from the SDK's client: the same path with the model id
// escaped as the SDK escapes it, the same Content-Type, the same body
// byte for byte (the SDK's serializer), signed for the same scope and
// headers.
func TestRequestAsSDK(t *testing.T) {
	srv, got := capture(t, func(w http.ResponseWriter) {
		w.Header().Set("X-Amzn-Errortype", "ValidationException")
		w.WriteHeader(400)
		_, _ = w.Write([]byte(`{"message":"stop here"}`))
	})
	in, err := buildInput(richRequest())
	if err != nil {
		t.Fatal(err)
	}
	_ = sdkCall(t, srv.URL, in)
	_ = ownCall(t, srv.URL, in)
	reqs := got()
	if len(reqs) != 2 {
		t.Fatalf("%d requests", len(reqs))
	}
	sdk, own := reqs[0], reqs[1]
	if want := "/model/" + strings.NewReplacer(":", "%3A", "/", "%2F").Replace(profileARN) + "/converse-stream"; sdk.uri != want {
		t.Errorf("the SDK's path %s, want %s", sdk.uri, want)
	}
	if own.uri != sdk.uri || own.contentType != sdk.contentType || own.scope != sdk.scope {
		t.Errorf("request\n own %s %s %s\n sdk %s %s %s", own.uri, own.contentType, own.scope, sdk.uri, sdk.contentType, sdk.scope)
	}
	if !bytes.Equal(own.body, sdk.body) {
		t.Errorf("body\n own %s\n sdk %s", own.body, sdk.body)
	}
	for _, part := range []string{`"cachePoint"`, `"reasoningContent"`, `"redactedContent"`, `"toolResult"`, `"image"`, `"toolConfig"`, `"additionalModelRequestFields"`} {
		if !bytes.Contains(sdk.body, []byte(part)) {
			t.Errorf("the request has no %s: %s", part, sdk.body)
		}
	}
}

// TestErrorsAsSDK: error responses read as the SDK's client reads them:
// the exception from the x-amzn-ErrorType header, else the body's __type,
// else its code; the message from message or Message; a body that is not
// JSON, or none, as the SDK has it.
func TestErrorsAsSDK(t *testing.T) {
	for _, tc := range []struct {
		name, header, body string
		status             int
	}{
		{"header", "ThrottlingException:http://internal.amazon.com/coral/com.amazon.bedrock/", `{"message":"Too many tokens"}`, 429},
		{"__type", "", `{"__type":"com.amazon.coral.validate#ValidationException","message":"Input is too long"}`, 400},
		{"code and Message", "", `{"code":"ModelNotReadyException","Message":"Model is not ready"}`, 429},
		{"known exception, Message", "AccessDeniedException", `{"Message":"You don't have access"}`, 403},
		{"unknown exception", "SomethingNewException", `{"message":"new"}`, 400},
		{"no exception", "", `{"message":"what"}`, 500},
		{"empty body", "", ``, 503},
		{"not JSON", "", `<html>bad gateway</html>`, 502},
		{"a model error", "ModelErrorException", `{"message":"The model failed","originalStatusCode":500,"resourceName":"x"}`, 424},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv, _ := capture(t, func(w http.ResponseWriter) {
				if tc.header != "" {
					w.Header().Set("X-Amzn-Errortype", tc.header)
				}
				w.Header().Set("Content-Type", "application/json")
				w.WriteHeader(tc.status)
				_, _ = w.Write([]byte(tc.body))
			})
			in := &bedrockruntime.ConverseStreamInput{ModelId: aws.String("amazon.nova-lite-v1:0")}
			sdk, own := readError(sdkCall(t, srv.URL, in)), readError(ownCall(t, srv.URL, in))
			if own != sdk {
				t.Errorf("own %+v\nsdk %+v", own, sdk)
			}
		})
	}
}

// errorRead is what classification reads of an error.
type errorRead struct {
	api           bool
	code, message string
	status        int
}

func readError(err error) errorRead {
	var r errorRead
	var ae smithy.APIError
	if errors.As(err, &ae) {
		r.api, r.code, r.message = true, ae.ErrorCode(), ae.ErrorMessage()
	}
	var re interface{ HTTPStatusCode() int }
	if errors.As(err, &re) {
		r.status = re.HTTPStatusCode()
	}
	return r
}

// TestEndpointsAsSDK: the adapter's endpoint is the SDK client's for the
// same region and options: AWS's, a FIPS region name, FIPS and dual-stack
// endpoints, a base URL with a path.
func TestEndpointsAsSDK(t *testing.T) {
	for _, tc := range []struct {
		region, base    string
		fips, dualStack bool
	}{
		{region: "us-west-2"},
		{region: "fips-us-east-1"},
		{region: "us-east-1", fips: true},
		{region: "eu-west-1", dualStack: true},
		{region: "us-gov-west-1", fips: true, dualStack: true},
		{region: "eu-central-1", base: "http://127.0.0.1:1/proxy/"},
	} {
		eo := bedrockruntime.EndpointResolverOptions{}
		if tc.fips {
			eo.UseFIPSEndpoint = aws.FIPSEndpointStateEnabled
		}
		if tc.dualStack {
			eo.UseDualStackEndpoint = aws.DualStackEndpointStateEnabled
		}
		in := &bedrockruntime.ConverseStreamInput{ModelId: aws.String(profileARN)}
		rec := &recorder{}
		ac := testConfig()
		ac.Region = tc.region
		sdk := bedrockruntime.NewFromConfig(ac, func(o *bedrockruntime.Options) {
			o.HTTPClient, o.Retryer, o.EndpointOptions = rec, aws.NopRetryer{}, eo
			if tc.base != "" {
				o.BaseEndpoint = aws.String(tc.base)
			}
		})
		_, _ = sdk.ConverseStream(t.Context(), in)
		c := newClient(ac, rec)
		c.opts.EndpointOptions = eo
		cl, err := c.callFor(provider.Model{ID: profileARN, BaseURL: tc.base}, "")
		if err != nil {
			t.Fatal(err)
		}
		r, err := c.request(t.Context(), cl, in)
		if err != nil {
			t.Fatal(err)
		}
		if len(rec.urls) != 1 || r.URL.String() != rec.urls[0] || r.Header.Get("Authorization") == "" {
			t.Errorf("%+v: own %s, sdk %v", tc, r.URL, rec.urls)
		}
	}
}

// recorder records the URLs of the requests it is given and sends none.
type recorder struct{ urls []string }

func (r *recorder) Do(req *http.Request) (*http.Response, error) {
	r.urls = append(r.urls, req.URL.String())
	return nil, context.Canceled
}
