// Package gateway is Lanefleet's HTTP front door: a stateless server that
// speaks to the fleet through the Go client (package lanefleet) and holds
// nothing only it knows, so any number of gateway processes can serve the
// same sessions. It serves the native session API (JSON, and server-sent
// events that resume by event seq), health, Prometheus metrics, its OpenAPI
// document, the web console (gateway/console), the fleet as an MCP server
// at /mcp (gateway/mcpserver), and mounts the routes of other packages
// (gateway/openai).
//
// Every route is a route.Route; the server authenticates each request
// (a bearer token from the token file, or, without a token file, a
// loopback client), checks the route's Reach against the caller's
// auth.Principal, applies the token's limits and puts the principal in the
// request's context before the handler runs.
//
// Files: gateway.go (Config, Server, the middleware every route passes),
// listen.go (Options and Listen, shared by cmd/gateway and worker --http),
// tokens.go (the token file), limit.go (per-token rate and concurrency),
// problem.go (RFC 9457 problem details and the error codes), metrics.go,
// sessions.go (the native API), sse.go (event streams), openapi.go and
// openapi.json (the API's description).
package gateway

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/http"
	"runtime/debug"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rs/zerolog"

	"github.com/lanefleet/lanefleet"
	"github.com/lanefleet/lanefleet/gateway/auth"
	"github.com/lanefleet/lanefleet/gateway/console"
	"github.com/lanefleet/lanefleet/gateway/mcpserver"
	"github.com/lanefleet/lanefleet/gateway/route"
	"github.com/lanefleet/lanefleet/governance"
	"github.com/lanefleet/lanefleet/tracing"
)

// Defaults of Config.
const (
	MaxBodyBytesDefault      = 16 << 20 // a 4 MiB message's images in base64, and then some
	MaxHeaderBytesDefault    = 64 << 10
	ReadHeaderTimeoutDefault = 10 * time.Second
	ReadBodyTimeoutDefault   = time.Minute
	WriteTimeoutDefault      = 30 * time.Second // one write of a stream to a client reading slowly
	IdleTimeoutDefault       = 2 * time.Minute
	StreamIdleDefault        = 10 * time.Minute // a stream without an event this long ends (the client resumes)
	KeepAliveDefault         = 15 * time.Second // a comment line on a quiet stream
	MaxStreamsDefault        = 20000
	ShutdownGraceDefault     = 10 * time.Second
)

// Config configures a Server.
type Config struct {
	// Client reaches the fleet. Required.
	Client *lanefleet.Client
	// Tenants is the fleet's tenant rule (its workers'
	// --tenant-separator): a caller whose prefix is a tenant's whole
	// prefix reads that tenant's budgets.
	Tenants governance.TenantRule
	// Tokens authenticate callers; nil serves loopback clients only, each
	// as an unauthenticated admin (auth.Principal.Local).
	Tokens *Tokens
	// Routes are mounted besides the native ones (gateway/openai's).
	Routes []route.Route
	// CORSOrigins are the origins browsers may call from ("*" any); none
	// turns CORS off.
	CORSOrigins []string
	// Limits; zero takes the default.
	MaxBodyBytes      int64
	MaxHeaderBytes    int
	ReadHeaderTimeout time.Duration
	ReadBodyTimeout   time.Duration
	WriteTimeout      time.Duration
	IdleTimeout       time.Duration
	StreamIdle        time.Duration
	KeepAlive         time.Duration
	MaxStreams        int
	ShutdownGrace     time.Duration
	// FleetEvery is how often GET /api/fleet/events sends the fleet's
	// state; zero takes FleetEveryDefault.
	FleetEvery time.Duration
	// Ready reports whether the gateway may take traffic (/readyz); nil
	// asks the fleet for a session's settings (any worker answering).
	Ready func(ctx context.Context) error
	// TracerProvider records a span per request, child of the caller's
	// traceparent; nil records none but still continues the caller's
	// trace into the fleet.
	TracerProvider *tracing.Provider
	// Logger logs what the caller is not told; zerolog.Nop() by default.
	Logger *zerolog.Logger
}

func (c Config) withDefaults() Config {
	set := func(d *time.Duration, v time.Duration) {
		if *d == 0 {
			*d = v
		}
	}
	if c.MaxBodyBytes == 0 {
		c.MaxBodyBytes = MaxBodyBytesDefault
	}
	if c.MaxHeaderBytes == 0 {
		c.MaxHeaderBytes = MaxHeaderBytesDefault
	}
	if c.MaxStreams == 0 {
		c.MaxStreams = MaxStreamsDefault
	}
	set(&c.ReadHeaderTimeout, ReadHeaderTimeoutDefault)
	set(&c.ReadBodyTimeout, ReadBodyTimeoutDefault)
	set(&c.WriteTimeout, WriteTimeoutDefault)
	set(&c.IdleTimeout, IdleTimeoutDefault)
	set(&c.StreamIdle, StreamIdleDefault)
	set(&c.KeepAlive, KeepAliveDefault)
	set(&c.ShutdownGrace, ShutdownGraceDefault)
	set(&c.FleetEvery, FleetEveryDefault)
	if c.Logger == nil {
		nop := zerolog.Nop()
		c.Logger = &nop
	}
	return c
}

// Server is the gateway's HTTP handler and its listener's settings.
type Server struct {
	cfg      Config
	log      zerolog.Logger
	metrics  *gatewayMetrics
	limiters map[string]*limiter // by token name
	routes   []route.Route
	handler  http.Handler
	tracer   *tracing.Tracer // nil = no spans
	mcp      http.Handler    // /mcp: the fleet as an MCP server (gateway/mcpserver)

	headHold time.Duration // how long a stream's head waits for its first events (headHold)
	// lifeHold is how long a run's lifecycle start waits for its first
	// output, and its end for its final (lifecycleHold).
	lifeHold time.Duration
	streams  atomic.Int64
	streamWG sync.WaitGroup // the goroutines of hijacked streams
	hub      hub
	stopping chan struct{} // closed when the server shuts down: streams end
	stopOnce sync.Once
}

// New returns a server for cfg.
func New(cfg Config) (*Server, error) {
	if cfg.Client == nil {
		return nil, errors.New("gateway: no client")
	}
	cfg = cfg.withDefaults()
	s := &Server{cfg: cfg, log: *cfg.Logger, metrics: newMetrics(), limiters: map[string]*limiter{}, stopping: make(chan struct{}), headHold: headHold, lifeHold: lifecycleHold}
	s.hub.s = s
	if cfg.Tokens != nil {
		for _, e := range cfg.Tokens.entries {
			if e.Rate > 0 || e.Concurrency > 0 {
				s.limiters[e.Name] = newLimiter(e.TokenEntry)
			}
		}
	}
	s.tracer = cfg.TracerProvider.Tracer("github.com/lanefleet/lanefleet/gateway", "")
	ms, err := mcpserver.New(mcpserver.Config{Client: cfg.Client, Logger: cfg.Logger})
	if err != nil {
		return nil, fmt.Errorf("gateway: %w", err)
	}
	s.mcp = ms.Handler(mcpserver.HTTPOptions{CheckHost: cfg.Tokens == nil})
	s.routes = append(append(append(s.nativeRoutes(), s.budgetRoutes()...), console.Routes()...), cfg.Routes...)
	mux := http.NewServeMux()
	seen := map[string]bool{}
	for _, rt := range s.routes {
		pat := rt.Method + " " + rt.Pattern
		if seen[pat] {
			return nil, fmt.Errorf("gateway: route %s declared twice", pat)
		}
		seen[pat] = true
		mux.Handle(pat, s.wrap(rt))
	}
	mux.Handle("/", s.wrap(route.Route{Pattern: "/", Reach: route.Public, Handler: http.HandlerFunc(s.notFound)}))
	s.handler = mux
	return s, nil
}

// Routes returns every route the server serves, its own and the mounted
// ones.
func (s *Server) Routes() []route.Route { return slices.Clone(s.routes) }

// ServeHTTP serves r.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) { s.handler.ServeHTTP(w, r) }

// notFound answers a path no route serves, or a method no route of the
// path takes.
func (s *Server) notFound(w http.ResponseWriter, r *http.Request) {
	for _, rt := range s.routes {
		if rt.Method != r.Method && matchesPattern(rt.Pattern, r.URL.Path) {
			writeProblem(w, r, problemf(http.StatusMethodNotAllowed, CodeMethodAllowed, "%s is not served on this path", r.Method))
			return
		}
	}
	writeProblem(w, r, newProblem(http.StatusNotFound, CodeNotFound, "no such route"))
}

// matchesPattern reports whether path matches a ServeMux path pattern
// segment by segment ({name} matches one segment, {name...} the rest).
func matchesPattern(pattern, path string) bool {
	ps, qs := strings.Split(strings.Trim(pattern, "/"), "/"), strings.Split(strings.Trim(path, "/"), "/")
	for i, p := range ps {
		if strings.HasSuffix(p, "...}") {
			return true
		}
		if i >= len(qs) {
			return false
		}
		if !strings.HasPrefix(p, "{") && p != qs[i] {
			return false
		}
	}
	return len(ps) == len(qs)
}

// HTTPServer returns an http.Server serving s with the configured limits.
// Its Shutdown ends the open event streams (their clients resume with
// Last-Event-ID, on this gateway or another).
func (s *Server) HTTPServer() *http.Server {
	hs := &http.Server{
		Handler:           s,
		ReadHeaderTimeout: s.cfg.ReadHeaderTimeout,
		MaxHeaderBytes:    s.cfg.MaxHeaderBytes,
		IdleTimeout:       s.cfg.IdleTimeout,
	}
	hs.RegisterOnShutdown(s.shutdownStreams)
	return hs
}

// shutdownStreams ends the open event streams.
func (s *Server) shutdownStreams() { s.stopOnce.Do(func() { close(s.stopping) }) }

// Close ends the open event streams and waits for them: after an
// http.Server serving s has shut down.
func (s *Server) Close() {
	s.shutdownStreams()
	s.streamWG.Wait()
}

// CheckListen refuses an address the gateway must not listen on: a
// non-loopback one without a token file (every caller would be an
// unauthenticated admin).
func CheckListen(addr string, haveTokens bool) error {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("gateway: address %q: %w", addr, err)
	}
	if haveTokens || isLoopbackHost(host) {
		return nil
	}
	return fmt.Errorf("gateway: %s is not a loopback address, and without a token file every caller would be an unauthenticated admin: listen on 127.0.0.1, or give a token file", addr)
}

// isLoopbackHost reports whether host names only loopback addresses.
func isLoopbackHost(host string) bool {
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// Serve serves on ln until ctx is done, then shuts down: new requests are
// refused, open streams end, and requests in flight get the shutdown
// grace. With certFile and keyFile it serves TLS.
func (s *Server) Serve(ctx context.Context, ln net.Listener, certFile, keyFile string) error {
	hs := s.HTTPServer()
	if certFile != "" || keyFile != "" {
		cert, err := tls.LoadX509KeyPair(certFile, keyFile)
		if err != nil {
			return fmt.Errorf("gateway: TLS: %w", err)
		}
		hs.TLSConfig = &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}
		ln = tls.NewListener(ln, hs.TLSConfig)
	}
	done := make(chan error, 1)
	go func() { done <- hs.Serve(ln) }()
	select {
	case err := <-done:
		return fmt.Errorf("gateway: %w", err)
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.Background(), s.cfg.ShutdownGrace)
	defer cancel()
	err := hs.Shutdown(sctx)
	if errors.Is(err, context.DeadlineExceeded) {
		err = hs.Close()
	}
	if serr := <-done; serr != nil && !errors.Is(serr, http.ErrServerClosed) && err == nil {
		err = serr
	}
	s.Close()
	if err != nil {
		return fmt.Errorf("gateway: shutdown: %w", err)
	}
	return nil
}

// localPrincipal is the caller of a gateway without a token file.
var localPrincipal = &auth.Principal{Name: "local", Role: auth.Admin, Prefixes: []string{""}, Local: true}

// statusWriter records a response's status and when its header went out.
type statusWriter struct {
	http.ResponseWriter
	status  int
	written time.Time
}

func (w *statusWriter) WriteHeader(code int) {
	if w.status == 0 {
		w.status, w.written = code, time.Now()
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *statusWriter) Write(b []byte) (int, error) {
	if w.status == 0 {
		w.status, w.written = http.StatusOK, time.Now()
	}
	return w.ResponseWriter.Write(b)
}

// Flush flushes when the underlying writer can.
func (w *statusWriter) Flush() {
	if f, ok := w.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

// Unwrap lets http.ResponseController reach the connection's deadlines.
func (w *statusWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// wrap is the middleware every route passes: metrics, panics, CORS, the
// caller's trace, authentication, the route's reach, the token's limits
// and the body's bounds.
func (s *Server) wrap(rt route.Route) http.Handler {
	label := rt.Pattern
	return http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		start := time.Now()
		w := &statusWriter{ResponseWriter: rw}
		defer func() {
			if v := recover(); v != nil {
				if v == http.ErrAbortHandler {
					panic(v)
				}
				s.log.Error().Str("route", label).Interface("panic", v).Bytes("stack", debug.Stack()).Msg("gateway: handler panicked")
				if w.status == 0 {
					writeProblem(w, r, newProblem(http.StatusInternalServerError, CodeFleetError, "internal error"))
				}
			}
			took := time.Since(start)
			if !w.written.IsZero() {
				took = w.written.Sub(start)
			}
			s.metrics.observe(label, r.Method, cmpStatus(w.status), took)
		}()
		if s.cors(w, r) {
			return
		}
		ctx := tracing.ContextWithTraceparent(r.Context(), r.Header.Get(tracing.HeaderTraceparent), r.Header.Get(tracing.HeaderTracestate))
		if s.tracer != nil {
			var span *tracing.Span
			ctx, span = s.tracer.Start(ctx, "gateway "+r.Method+" "+label, tracing.WithSpanKind(tracing.SpanKindServer))
			defer span.End()
		}
		p, prob := s.authenticate(r)
		if prob != nil {
			writeProblem(w, r, prob)
			return
		}
		if prob := checkReach(rt.Reach, p); prob != nil {
			writeProblem(w, r, prob)
			return
		}
		if p != nil {
			if l := s.limiters[p.Name]; l != nil && !p.Local {
				ok, after := l.acquire(time.Now())
				if !ok {
					s.metrics.limited.WithLabelValues(p.Name).Inc()
					pr := newProblem(http.StatusTooManyRequests, CodeRateLimited, "this token's rate or concurrency limit is reached")
					pr.RetryAfter = max(1, int((after+time.Second-1)/time.Second))
					writeProblem(w, r, pr)
					return
				}
				held := &hold{release: l.release}
				ctx = context.WithValue(ctx, holdKey{}, held)
				defer held.end()
			}
			ctx = auth.NewContext(ctx, p)
		}
		if r.ContentLength > s.cfg.MaxBodyBytes {
			writeProblem(w, r, problemf(http.StatusRequestEntityTooLarge, CodeBodyTooLarge, "the body exceeds %d bytes", s.cfg.MaxBodyBytes))
			return
		}
		if r.Body != nil && r.Body != http.NoBody {
			r.Body = http.MaxBytesReader(w, r.Body, s.cfg.MaxBodyBytes)
			// A body trickled in slowly holds a connection: bound it.
			_ = http.NewResponseController(w).SetReadDeadline(time.Now().Add(s.cfg.ReadBodyTimeout))
		}
		rt.Handler.ServeHTTP(w, r.WithContext(ctx))
	})
}

func cmpStatus(s int) int {
	if s == 0 {
		return http.StatusOK
	}
	return s
}

// authenticate returns the request's caller: the token's principal, or
// the local one on a gateway without tokens. A public route's caller may
// be nil.
func (s *Server) authenticate(r *http.Request) (*auth.Principal, *Problem) {
	if s.cfg.Tokens == nil {
		host, _, _ := net.SplitHostPort(r.RemoteAddr)
		if !isLoopbackHost(host) {
			return nil, newProblem(http.StatusForbidden, CodeForbidden, "this gateway has no token file and serves loopback clients only")
		}
		return localPrincipal, nil
	}
	h := r.Header.Get("Authorization")
	if h == "" {
		return nil, nil
	}
	scheme, tok, ok := strings.Cut(h, " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") {
		return nil, newProblem(http.StatusUnauthorized, CodeUnauthorized, "send the token as Authorization: Bearer <token>")
	}
	e := s.cfg.Tokens.lookup(strings.TrimSpace(tok))
	if e == nil {
		return nil, newProblem(http.StatusUnauthorized, CodeUnauthorized, "unknown token")
	}
	return e.principal, nil
}

// checkReach refuses a caller the route's reach does not admit. Session
// routes check the session itself (the handler knows where it is named).
func checkReach(reach route.Reach, p *auth.Principal) *Problem {
	if reach == route.Public {
		return nil
	}
	if p == nil {
		return newProblem(http.StatusUnauthorized, CodeUnauthorized, "this route needs a bearer token")
	}
	switch reach {
	case route.Fleet:
		if !p.IsAdmin() {
			return newProblem(http.StatusForbidden, CodeForbidden, "this route is for the admin role")
		}
	case route.SessionWrite:
		if !p.CanSend() {
			return newProblem(http.StatusForbidden, CodeForbidden, "this token may read sessions, not send to them")
		}
	default:
		if !p.CanRead() {
			return newProblem(http.StatusForbidden, CodeForbidden, "this token may not read sessions")
		}
	}
	return nil
}

// corsHeaders are the request headers a browser may send.
const corsHeaders = "Authorization, Content-Type, Idempotency-Key, Last-Event-ID, Lanefleet-Session, Mcp-Protocol-Version, traceparent, tracestate"

// cors sets the CORS headers for an allowed origin and answers a
// preflight; it reports whether the request was answered.
func (s *Server) cors(w http.ResponseWriter, r *http.Request) bool {
	origin := r.Header.Get("Origin")
	if origin == "" || len(s.cfg.CORSOrigins) == 0 {
		return false
	}
	if !slices.Contains(s.cfg.CORSOrigins, origin) && !slices.Contains(s.cfg.CORSOrigins, "*") {
		return false
	}
	h := w.Header()
	h.Set("Access-Control-Allow-Origin", origin)
	h.Add("Vary", "Origin")
	h.Set("Access-Control-Expose-Headers", "Retry-After, Location")
	if r.Method == http.MethodOptions && r.Header.Get("Access-Control-Request-Method") != "" {
		h.Set("Access-Control-Allow-Methods", "GET, POST, PUT, PATCH, DELETE")
		h.Set("Access-Control-Allow-Headers", corsHeaders)
		h.Set("Access-Control-Max-Age", "600")
		w.WriteHeader(http.StatusNoContent)
		return true
	}
	return false
}

// hold is a request's place in its token's concurrency limit: released
// when the handler returns, or by a stream that outlives its handler
// (takeRelease).
type hold struct {
	mu      sync.Mutex
	release func()
}

type holdKey struct{}

// end releases the hold unless a stream took it.
func (h *hold) end() {
	h.mu.Lock()
	f := h.release
	h.release = nil
	h.mu.Unlock()
	if f != nil {
		f()
	}
}

// takeRelease takes the request's hold over: the caller releases it.
func takeRelease(ctx context.Context) func() {
	h, _ := ctx.Value(holdKey{}).(*hold)
	if h == nil {
		return func() {}
	}
	h.mu.Lock()
	f := h.release
	h.release = nil
	h.mu.Unlock()
	if f == nil {
		return func() {}
	}
	return f
}
