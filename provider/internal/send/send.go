// Package send posts an adapter's request and hands back the open event
// stream, on net/http alone: one pooled client per origin of a base URL
// (keep-alive sized for many concurrent turns, HTTP/2 where the server
// offers it, dead HTTP/2 connections found by pings), no retries (the run
// loop owns them), the API path joined to the base URL the way the
// providers' SDKs join it, and every failure — a refused connection, an
// error status, a JSON body where a stream was expected — returned as a
// classified *provider.Error.
package send

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/lanefleet/lanefleet/provider"
	"github.com/lanefleet/lanefleet/provider/internal/stream"
)

// Pool sizes. A worker runs 1,024 lanes at once by default, each with at most
// one model call in flight (plus a compaction call), mostly against one or
// two origins; the idle limits keep every one of those connections for the
// next turn instead of closing all but two (net/http's default per host).
const (
	// MaxIdleConnsPerOrigin is how many idle connections a pooled client
	// keeps to its origin: a worker's default concurrency (1,024 turns in
	// flight), so a wave of turns ending together does not close and
	// redial most of them for the next (lanebench conc1000: ~4% of CPU).
	MaxIdleConnsPerOrigin = 1024
	// IdleConnTimeout closes a connection that has been idle this long.
	IdleConnTimeout = 90 * time.Second
	// PingAfter sends an HTTP/2 ping on a connection that received nothing
	// for this long; PingTimeout closes it when the ping goes unanswered, so
	// a connection that died silently (a NAT that forgot it) is not handed
	// new requests that would wait out the stream's idle timeout.
	PingAfter   = 30 * time.Second
	PingTimeout = 15 * time.Second
	// ConnBufferSize is the read and the write buffer of an HTTP/1.1
	// connection (net/http's default is 4 KiB each). A connection holds
	// both for as long as its turn waits on the model, and every idle one
	// kept for the next turn holds them too. A request's header fits in
	// it, a larger body goes past it to the socket, and a stream's reads
	// (sse's 4 KiB) go past it as well.
	ConnBufferSize = 1 << 10
)

// UserAgent is the User-Agent of every request (an adapter.Config's
// Headers may replace it).
const UserAgent = "lanefleet"

// ErrBaseURL reports a base URL that is not an absolute http or https URL.
var ErrBaseURL = errors.New("base URL must be an absolute http or https URL")

// JoinURL resolves ref, a relative path (already escaped, with an optional
// query), against base the way the providers' SDKs join them: the base
// keeps its path, as a directory ("https://h/v1" and "https://h/v1/" both
// give "https://h/v1/chat/completions" for "chat/completions"), and its own
// query and fragment are dropped. An error wraps ErrBaseURL; it never
// repeats the base URL, which may carry credentials.
func JoinURL(base, ref string) (*url.URL, error) {
	u, err := url.Parse(base)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrBaseURL, unwrapURL(err))
	}
	if (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("%w: scheme %q, host %q", ErrBaseURL, u.Scheme, u.Host)
	}
	if !strings.HasSuffix(u.Path, "/") {
		u.Path += "/"
		if u.RawPath != "" {
			u.RawPath += "/"
		}
	}
	// "./" keeps a colon in the first segment from reading as a scheme.
	r, err := url.Parse("./" + strings.TrimLeft(ref, "/"))
	if err != nil {
		return nil, fmt.Errorf("send: path %q: %v", ref, unwrapURL(err))
	}
	return u.ResolveReference(r), nil
}

// unwrapURL drops the URL a *url.Error repeats.
func unwrapURL(err error) error {
	var ue *url.Error
	if errors.As(err, &ue) {
		return ue.Err
	}
	return err
}

// Pool hands out one *http.Client per origin (scheme, host and port) of the
// URLs it posts to, or one fixed client for all. Origins come from the
// operator's model configuration, so the pool stays small. It is safe for
// concurrent use.
type Pool struct {
	fixed     *http.Client
	transport func() *http.Transport // NewTransport; tests add a TLS root

	mu      sync.Mutex
	clients map[string]*http.Client
}

// NewPool returns a pool. A non-nil fixed client is used for every request
// as it is (its transport, redirect policy and timeout included).
func NewPool(fixed *http.Client) *Pool {
	return &Pool{fixed: fixed, transport: NewTransport, clients: map[string]*http.Client{}}
}

// NewTransport returns the transport of one pooled client: net/http's
// default (proxy from the environment, dial and TLS handshake timeouts,
// HTTP/2 by ALPN) with idle limits sized by MaxIdleConnsPerOrigin,
// HTTP/2 health pings and ConnBufferSize buffers. It sets no overall or header timeout: a stream is
// bounded by the caller's context and stream.Watch.
func NewTransport() *http.Transport {
	t := http.DefaultTransport.(*http.Transport).Clone()
	t.MaxIdleConns = MaxIdleConnsPerOrigin
	t.MaxIdleConnsPerHost = MaxIdleConnsPerOrigin
	t.IdleConnTimeout = IdleConnTimeout
	t.ReadBufferSize, t.WriteBufferSize = ConnBufferSize, ConnBufferSize
	t.ForceAttemptHTTP2 = true
	t.HTTP2 = &http.HTTP2Config{SendPingTimeout: PingAfter, PingTimeout: PingTimeout}
	return t
}

// Client returns the client for u's origin, creating it on first use.
func (p *Pool) Client(u *url.URL) *http.Client {
	if p.fixed != nil {
		return p.fixed
	}
	key := origin(u)
	p.mu.Lock()
	defer p.mu.Unlock()
	c, ok := p.clients[key]
	if !ok {
		c = &http.Client{Transport: p.transport(), CheckRedirect: sameOrigin}
		p.clients[key] = c
	}
	return c
}

func origin(u *url.URL) string { return strings.ToLower(u.Scheme + "://" + u.Host) }

// sameOrigin follows a redirect only within the origin of the first
// request: net/http would forward custom credential headers (x-api-key,
// x-goog-api-key) to any host. A redirect elsewhere comes back as the
// response, which Post reports as an HTTP error.
func sameOrigin(req *http.Request, via []*http.Request) error {
	if len(via) >= 10 {
		return errors.New("stopped after 10 redirects")
	}
	if origin(req.URL) != origin(via[0].URL) {
		return http.ErrUseLastResponse
	}
	return nil
}

// bodyUse counts what may still read a request body: Post, until the
// client returned (it takes no new reader after), and each reader not
// closed yet; done is called when none is left.
type bodyUse struct {
	b    [][]byte // the body's parts, in order
	refs atomic.Int32
	done func()
}

// open returns a new reader of the body.
func (u *bodyUse) open() *bodyReader {
	u.refs.Add(1)
	return &bodyReader{u: u, parts: u.b}
}

func (u *bodyUse) release() {
	if u.refs.Add(-1) == 0 {
		u.done()
	}
}

// bodyReader reads a request body until it is closed. Read and Close hold
// its lock: a transport closing it from another goroutine during a read
// waits for that read, and nothing is read from the body once Close has
// returned.
type bodyReader struct {
	mu     sync.Mutex
	u      *bodyUse
	parts  [][]byte // what is left to read: parts[0][off:], then the rest
	off    int
	closed bool
}

// errBodyClosed is what a read of a closed request body returns.
var errBodyClosed = errors.New("send: request body read after it was closed")

func (b *bodyReader) Read(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return 0, errBodyClosed
	}
	n := 0
	for n < len(p) && len(b.parts) > 0 {
		c := copy(p[n:], b.parts[0][b.off:])
		n += c
		if b.off += c; b.off == len(b.parts[0]) {
			b.parts, b.off = b.parts[1:], 0
		}
	}
	if n == 0 && len(p) > 0 {
		return 0, io.EOF
	}
	return n, nil
}

func (b *bodyReader) Close() error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if !b.closed {
		b.closed = true
		b.parts = nil
		b.u.release()
	}
	return nil
}

// Request is one streaming POST.
type Request struct {
	// Name prefixes error messages ("anthropic").
	Name string
	// URL is where the request goes (see JoinURL).
	URL *url.URL
	// Header is sent on top of the defaults (Content-Type
	// application/json, Accept text/event-stream, User-Agent UserAgent),
	// replacing any it names.
	Header http.Header
	// Body is the JSON request body, followed by each of More: a body
	// in parts (a long session's messages sent from where they are kept,
	// not copied into one buffer with the rest first) is sent as one, of
	// their summed length. A body with More is read as one with a Done.
	Body []byte
	More [][]byte
	// Done, when set, is called once nothing reads Body any more: Post
	// has returned and the transport closed every reader of it (the
	// request's, and any it took again for a retry or a redirect), each
	// of which reads nothing once closed. Body's buffer may then be
	// reused (bodybuf.Put). A transport that never closes a reader
	// leaves Done uncalled. A body with a Done is not one net/http knows
	// to be in memory: it flushes the headers on their own before it.
	Done func()
	// Key is scrubbed from transport errors, should one echo it.
	Key provider.Secret
	// Now is the clock for Retry-After dates.
	Now func() time.Time
}

// Post sends r in w's context and returns the response whose body is the
// event stream; the caller reads it through w.Body and closes it. Failures
// come back classified, with nothing left open: a transport failure through
// stream.Classify (a refused connection keeps "connection refused" in its
// message; a stall or the caller's cancellation say so instead); a status of
// 300 or more (a redirect not followed ends up here too) through
// stream.HTTPError with the body read; a 2xx JSON body through
// stream.NotAStream. The response's status and headers go to ctx's
// provider.Trace first, when it has one.
func (p *Pool) Post(ctx context.Context, w *stream.Watch, r Request) (*http.Response, *provider.Error) {
	counted := r.Done != nil || len(r.More) > 0
	var body io.Reader // counted, the readers counted below
	if !counted {
		body = bytes.NewReader(r.Body)
	}
	hr, err := http.NewRequestWithContext(w.Context(), http.MethodPost, r.URL.String(), body)
	if err != nil {
		if r.Done != nil {
			r.Done() // nothing read the body
		}
		return nil, &provider.Error{Reason: provider.ReasonFormat, Message: r.Name + ": build request: " + err.Error(), Err: err}
	}
	if counted {
		done := r.Done
		if done == nil {
			done = func() {}
		}
		u := &bodyUse{b: append([][]byte{r.Body}, r.More...), done: done}
		u.refs.Store(1) // Post's own, until the client can take no new reader
		defer u.release()
		size := 0
		for _, p := range u.b {
			size += len(p)
		}
		// What http.NewRequest sets for a bytes.Reader, over counted
		// readers.
		hr.Body, hr.ContentLength = u.open(), int64(size)
		hr.GetBody = func() (io.ReadCloser, error) { return u.open(), nil }
	}
	hr.Header.Set("Content-Type", "application/json")
	hr.Header.Set("Accept", "text/event-stream")
	hr.Header.Set("User-Agent", UserAgent)
	for k, vs := range r.Header {
		hr.Header.Del(k)
		for _, v := range vs {
			hr.Header.Add(k, v)
		}
	}
	resp, err := p.Client(r.URL).Do(hr)
	if err != nil {
		return nil, stream.Scrub(stream.Classify(ctx, w, r.Name+": send request", err), r.Key)
	}
	if t := provider.TraceFrom(ctx); t != nil && t.Response != nil {
		t.Response(resp.StatusCode, resp.Header.Get)
	}
	if resp.StatusCode >= 300 {
		return nil, stream.HTTPError(resp.StatusCode, resp.Header, resp.Body, errors.New(resp.Status), r.Now())
	}
	if pe := stream.NotAStream(resp); pe != nil {
		return nil, pe
	}
	return resp, nil
}
