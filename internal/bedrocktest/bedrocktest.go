// Package bedrocktest is a local Amazon Bedrock Runtime endpoint for tests:
// it checks every request's SigV4 signature with the AWS SDK's own signer
// and answers ConverseStream calls with event-stream frames built by the
// SDK's own encoder, or with error responses as Bedrock sends them.
package bedrocktest

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/aws/protocol/eventstream"
	v4 "github.com/aws/aws-sdk-go-v2/aws/signer/v4"
)

// Seen is one request the server accepted: its path, who signed it (an
// access key id, or "bearer:<token>"), the region it was signed for and
// its JSON body.
type Seen struct {
	Path   string
	Signer string
	Region string
	Body   map[string]any
}

// Reply is what the server answers one request with: a status, the
// x-amzn-ErrorType of an error, and a body (event-stream frames or an
// error's JSON).
type Reply struct {
	Status    int    // 0 = 200
	ErrorType string // an error's exception
	Body      []byte
	Header    map[string]string // more response headers (a throttle's Retry-After)
}

// Server is a Bedrock Runtime endpoint: it checks every request's SigV4
// signature with the SDK's own signer against the secrets it knows (a
// bearer token passes as itself), records the request and answers with
// the reply its answer function picks.
type Server struct {
	*httptest.Server
	secrets map[string]string         // access key id → secret access key
	answer  func(n int, r Seen) Reply // picks the reply to the nth accepted request

	mu   sync.Mutex
	reqs []Seen
	bad  []string // requests refused, and why
}

// New starts a server that knows secrets (access key id → secret access
// key) and answers with answer; it stops when t ends.
func New(t *testing.T, secrets map[string]string, answer func(n int, r Seen) Reply) *Server {
	t.Helper()
	s := &Server{secrets: secrets, answer: answer}
	s.Server = httptest.NewServer(http.HandlerFunc(s.serve))
	t.Cleanup(s.Close)
	return s
}

// NewTLS is New over HTTPS (the SDK sends a bearer token
// only over HTTPS); call with its Client.
func NewTLS(t *testing.T, secrets map[string]string, answer func(n int, r Seen) Reply) *Server {
	t.Helper()
	s := &Server{secrets: secrets, answer: answer}
	s.Server = httptest.NewTLSServer(http.HandlerFunc(s.serve))
	t.Cleanup(s.Close)
	return s
}

func (s *Server) serve(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	who, region, why := s.verify(r, body)
	if why != "" {
		s.mu.Lock()
		s.bad = append(s.bad, why)
		s.mu.Unlock()
		writeReply(w, ErrorReply(403, "InvalidSignatureException", why))
		return
	}
	rec := Seen{Path: r.URL.Path, Signer: who, Region: region}
	if err := json.Unmarshal(body, &rec.Body); err != nil {
		writeReply(w, ErrorReply(400, "SerializationException", err.Error()))
		return
	}
	s.mu.Lock()
	n := len(s.reqs)
	s.reqs = append(s.reqs, rec)
	s.mu.Unlock()
	writeReply(w, s.answer(n, rec))
}

// verify checks r's Authorization: a bearer token, or a SigV4 signature
// recomputed with the SDK's signer over the headers it names, the body's
// hash, the service "bedrock", its region and its time.
func (s *Server) verify(r *http.Request, body []byte) (who, region, why string) {
	auth := r.Header.Get("Authorization")
	if tok, ok := strings.CutPrefix(auth, "Bearer "); ok {
		return "bearer:" + tok, "", ""
	}
	rest, ok := strings.CutPrefix(auth, "AWS4-HMAC-SHA256 ")
	if !ok {
		return "", "", "no SigV4 authorization: " + auth
	}
	fields := map[string]string{}
	for _, f := range strings.Split(rest, ",") {
		k, v, _ := strings.Cut(strings.TrimSpace(f), "=")
		fields[k] = v
	}
	scope := strings.Split(fields["Credential"], "/")
	if len(scope) != 5 || scope[3] != "bedrock" || scope[4] != "aws4_request" {
		return "", "", "bad credential scope: " + fields["Credential"]
	}
	akid, region := scope[0], scope[2]
	secret, ok := s.secrets[akid]
	if !ok {
		return "", "", "unknown access key " + akid
	}
	at, err := time.Parse("20060102T150405Z", r.Header.Get("X-Amz-Date"))
	if err != nil {
		return "", "", "bad X-Amz-Date"
	}
	// The request again, with only the headers the signature names.
	u := *r.URL
	u.Scheme, u.Host = "http", r.Host
	again, _ := http.NewRequest(r.Method, u.String(), bytes.NewReader(body))
	again.Header = http.Header{}
	for _, h := range strings.Split(fields["SignedHeaders"], ";") {
		switch h {
		case "host":
		case "content-length":
			again.ContentLength = int64(len(body))
		default:
			again.Header[http.CanonicalHeaderKey(h)] = r.Header.Values(h)
		}
	}
	sum := sha256.Sum256(body)
	creds := aws.Credentials{AccessKeyID: akid, SecretAccessKey: secret, SessionToken: r.Header.Get("X-Amz-Security-Token")}
	if err := v4.NewSigner().SignHTTP(context.Background(), creds, again, hex.EncodeToString(sum[:]), "bedrock", region, at); err != nil {
		return "", "", err.Error()
	}
	if want := again.Header.Get("Authorization"); want != auth {
		return "", "", fmt.Sprintf("signature mismatch:\n got %s\nwant %s", auth, want)
	}
	return akid, region, ""
}

func writeReply(w http.ResponseWriter, rp Reply) {
	if rp.Status == 0 {
		rp.Status = 200
	}
	if rp.Status == 200 {
		w.Header().Set("Content-Type", "application/vnd.amazon.eventstream")
	} else {
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("X-Amzn-Errortype", rp.ErrorType+":http://internal.amazon.com/coral/com.amazon.bedrock/")
	}
	w.Header().Set("X-Amzn-Requestid", "9251f066-a420-483b-b3ae-7485084f6dc6")
	for k, v := range rp.Header {
		w.Header().Set(k, v)
	}
	w.WriteHeader(rp.Status)
	_, _ = w.Write(rp.Body)
}

// ErrorReply is an error response as Bedrock sends one.
func ErrorReply(status int, exception, msg string) Reply {
	b, _ := json.Marshal(map[string]string{"message": msg})
	return Reply{Status: status, ErrorType: exception, Body: b}
}

// Requests returns the requests the server accepted, and fails the test
// on any it refused.
func (s *Server) Requests(t *testing.T) []Seen {
	t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, why := range s.bad {
		t.Errorf("request refused: %s", why)
	}
	return append([]Seen(nil), s.reqs...)
}

// Frames encodes events with the SDK's event-stream encoder as Bedrock
// sends them: each an "event" message with its :event-type and a JSON
// payload (with the "p" padding Bedrock adds), or an "exception".
type Frames struct {
	buf bytes.Buffer
	enc *eventstream.Encoder
}

// NewFrames starts an empty stream.
func NewFrames() *Frames { return &Frames{enc: eventstream.NewEncoder()} }

// Event adds an event of type typ with payload.
func (f *Frames) Event(typ string, payload map[string]any) *Frames {
	payload["p"] = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123"[:8+len(typ)]
	data, _ := json.Marshal(payload)
	err := f.enc.Encode(&f.buf, eventstream.Message{Headers: eventstream.Headers{
		{Name: ":event-type", Value: eventstream.StringValue(typ)},
		{Name: ":content-type", Value: eventstream.StringValue("application/json")},
		{Name: ":message-type", Value: eventstream.StringValue("event")},
	}, Payload: data})
	if err != nil {
		panic(err)
	}
	return f
}

// Exception adds an exception of type typ ("throttlingException").
func (f *Frames) Exception(typ, msg string) *Frames {
	data, _ := json.Marshal(map[string]string{"message": msg})
	err := f.enc.Encode(&f.buf, eventstream.Message{Headers: eventstream.Headers{
		{Name: ":exception-type", Value: eventstream.StringValue(typ)},
		{Name: ":content-type", Value: eventstream.StringValue("application/json")},
		{Name: ":message-type", Value: eventstream.StringValue("exception")},
	}, Payload: data})
	if err != nil {
		panic(err)
	}
	return f
}

// Start adds messageStart.
func (f *Frames) Start() *Frames {
	return f.Event("messageStart", map[string]any{"role": "assistant"})
}

// Text adds a text block idx of parts.
func (f *Frames) Text(idx int, parts ...string) *Frames {
	for _, p := range parts {
		f.Event("contentBlockDelta", map[string]any{"contentBlockIndex": idx, "delta": map[string]any{"text": p}})
	}
	return f.Event("contentBlockStop", map[string]any{"contentBlockIndex": idx})
}

// ToolUse adds a tool call block idx with its input in parts.
func (f *Frames) ToolUse(idx int, id, name string, input ...string) *Frames {
	f.Event("contentBlockStart", map[string]any{"contentBlockIndex": idx, "start": map[string]any{"toolUse": map[string]any{"toolUseId": id, "name": name}}})
	for _, in := range input {
		f.Event("contentBlockDelta", map[string]any{"contentBlockIndex": idx, "delta": map[string]any{"toolUse": map[string]any{"input": in}}})
	}
	return f.Event("contentBlockStop", map[string]any{"contentBlockIndex": idx})
}

// Reasoning adds a reasoning delta to block idx.
func (f *Frames) Reasoning(idx int, delta map[string]any) *Frames {
	return f.Event("contentBlockDelta", map[string]any{"contentBlockIndex": idx, "delta": map[string]any{"reasoningContent": delta}})
}

// StopBlock ends block idx.
func (f *Frames) StopBlock(idx int) *Frames {
	return f.Event("contentBlockStop", map[string]any{"contentBlockIndex": idx})
}

// Bytes returns the frames so far.
func (f *Frames) Bytes() []byte { return f.buf.Bytes() }

// Stop ends the message with reason and usage: the reply of the frames.
func (f *Frames) Stop(reason string, usage map[string]any) Reply {
	f.Event("messageStop", map[string]any{"stopReason": reason})
	f.Event("metadata", map[string]any{"usage": usage, "metrics": map[string]any{"latencyMs": 412}})
	return Reply{Body: f.buf.Bytes()}
}

// ModelPath is the ConverseStream path of a model id (unescaped).
func ModelPath(id string) string { return "/model/" + id + "/converse-stream" }
