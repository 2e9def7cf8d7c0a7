package mcpbridge

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/nats-io/nats.go"
	"github.com/rs/zerolog"

	"github.com/lanefleet/lanefleet/internal/backoff"
	"github.com/lanefleet/lanefleet/tools"
	"github.com/lanefleet/lanefleet/tools/remote"
)

// Bridge defaults.
const (
	// MaxToolsDefault caps the tools taken from one server; more are
	// refused with a log line.
	MaxToolsDefault = 128
	// MaxSchemaBytesDefault caps one tool's JSON input schema (it travels
	// in the endpoint's metadata, on every discovery).
	MaxSchemaBytesDefault = 32 << 10
	// MaxDescriptionDefault caps one tool's description, in bytes.
	MaxDescriptionDefault = 4 << 10
	// MaxMessageBytesDefault caps one message read from an HTTP or SSE
	// server (a stdio server's lines are capped at the SDK's 16 MiB).
	MaxMessageBytesDefault = 8 << 20
	// MaxResultBytesDefault caps the content taken from one result
	// before it is encoded for NATS (which cuts it further to fit).
	MaxResultBytesDefault = 4 << 20
	// ShutdownGraceDefault is how long calls of a replaced tool list may
	// finish before they are cancelled.
	ShutdownGraceDefault = 30 * time.Second
)

// backoffDefault paces reconnects and restarts: 0.5 s doubling to 30 s,
// jittered so bridges that lost one server do not return in step.
var backoffDefault = backoff.Policy{Base: 500 * time.Millisecond, Max: 30 * time.Second, Jitter: true}

// Config configures a Bridge.
type Config struct {
	// Servers are the MCP servers to bridge (LoadConfig, ParseConfig).
	Servers []Server
	// Conn is the NATS connection the tools are served on.
	Conn *nats.Conn
	// ServiceName is the micro service the tools are served under;
	// remote.ServiceNameDefault (where workers look) when empty.
	ServiceName string
	// Version is the bridge's version in the MCP client's implementation
	// info, and in the service as remote.ServiceVersion makes it (a
	// build's "v1.2.3" or "(devel)" is not a micro service version).
	Version string
	// Backoff paces reconnects to a server and restarts of a stdio
	// server; 0.5 s doubling to 30 s with jitter when zero.
	Backoff backoff.Policy
	// MaxTools, MaxSchemaBytes, MaxDescription, MaxMessageBytes and
	// MaxResultBytes bound what a server may send; the Default constants
	// when 0.
	MaxTools, MaxSchemaBytes, MaxDescription, MaxMessageBytes, MaxResultBytes int
	// ShutdownGrace is how long the calls of a tool list that a list
	// change replaced may finish; ShutdownGraceDefault when 0.
	ShutdownGrace time.Duration
	// Getenv gives stdio servers their base environment (PATH, HOME...);
	// os.Getenv when nil.
	Getenv func(string) string
	// HTTPClient makes the requests of HTTP and SSE servers;
	// http.DefaultClient's transport when nil.
	HTTPClient *http.Client
	// Served, when set, is called each time a server's tools are served
	// (once connected, and again after a list change or a reconnect), on
	// the server's own goroutine: a worker running the bridge in process
	// refreshes its remote tools then, rather than at its next discovery.
	Served func(server string)
	// Logger receives connections, list changes and refused tools; never
	// an env value or header. Silent when zero.
	Logger zerolog.Logger
}

func (c Config) withDefaults() Config {
	if c.ServiceName == "" {
		c.ServiceName = remote.ServiceNameDefault
	}
	if c.Version == "" {
		c.Version = remote.VersionDefault
	}
	if c.Backoff == (backoff.Policy{}) {
		c.Backoff = backoffDefault
	}
	if c.MaxTools <= 0 {
		c.MaxTools = MaxToolsDefault
	}
	if c.MaxSchemaBytes <= 0 {
		c.MaxSchemaBytes = MaxSchemaBytesDefault
	}
	if c.MaxDescription <= 0 {
		c.MaxDescription = MaxDescriptionDefault
	}
	if c.MaxMessageBytes <= 0 {
		c.MaxMessageBytes = MaxMessageBytesDefault
	}
	if c.MaxResultBytes <= 0 {
		c.MaxResultBytes = MaxResultBytesDefault
	}
	if c.ShutdownGrace <= 0 {
		c.ShutdownGrace = ShutdownGraceDefault
	}
	if c.Getenv == nil {
		c.Getenv = os.Getenv
	}
	if c.HTTPClient == nil {
		c.HTTPClient = &http.Client{}
	}
	return c
}

// Bridge serves the tools of MCP servers as remote tools.
type Bridge struct {
	cfg     Config
	log     zerolog.Logger
	servers []*server

	mu     sync.Mutex
	claims map[string]string // remote tool name -> server holding it
}

// New returns a Bridge for cfg; Run serves it. It returns an error when
// cfg has no connection or no servers, or two servers share a name.
func New(cfg Config) (*Bridge, error) {
	cfg = cfg.withDefaults()
	if cfg.Conn == nil {
		return nil, errors.New("mcpbridge: no NATS connection")
	}
	if len(cfg.Servers) == 0 {
		return nil, fmt.Errorf("%w: no servers", ErrConfig)
	}
	b := &Bridge{cfg: cfg, log: cfg.Logger, claims: map[string]string{}}
	seen := map[string]bool{}
	for _, s := range cfg.Servers {
		if seen[s.Name] {
			return nil, fmt.Errorf("%w: server %q given twice", ErrConfig, s.Name)
		}
		seen[s.Name] = true
		b.servers = append(b.servers, &server{b: b, cfg: s, log: cfg.Logger.With().Str("mcp_server", s.Name).Logger(),
			changed: make(chan struct{}, 1)})
	}
	return b, nil
}

// Run connects to every server and serves its tools until ctx ends; then
// it stops serving (calls in flight fail with a tool error that says the
// process is shutting down), closes the sessions (a stdio server's stdin,
// then SIGTERM, then SIGKILL) and returns nil. A server that cannot be
// reached, or whose session ends, is retried with backoff for as long as
// Run runs.
func (b *Bridge) Run(ctx context.Context) error {
	var wg sync.WaitGroup
	for _, s := range b.servers {
		wg.Go(func() { s.run(ctx) })
	}
	wg.Wait()
	return nil
}

// claim takes names for server s, releasing those it held and no longer
// lists, and returns the names another server already holds.
func (b *Bridge) claim(s string, names []string) (taken map[string]string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	want := make(map[string]bool, len(names))
	for _, n := range names {
		want[n] = true
	}
	for n, owner := range b.claims {
		if owner == s && !want[n] {
			delete(b.claims, n)
		}
	}
	for _, n := range names {
		if owner, ok := b.claims[n]; ok && owner != s {
			if taken == nil {
				taken = map[string]string{}
			}
			taken[n] = owner
			continue
		}
		b.claims[n] = s
	}
	return taken
}

// server is one MCP server's connection loop.
type server struct {
	b       *Bridge
	cfg     Server
	log     zerolog.Logger
	changed chan struct{} // a tools/list_changed came

	nextToken atomic.Uint64
	progress  sync.Map // progress token (string) -> func(*mcp.ProgressNotificationParams)
}

// run connects, serves and reconnects until ctx ends.
func (s *server) run(ctx context.Context) {
	failures := 0
	for ctx.Err() == nil {
		served, err := s.session(ctx)
		if ctx.Err() != nil {
			break
		}
		if served {
			failures = 0 // a session that worked: start the backoff over
		}
		failures++
		s.log.Warn().Err(err).Int("attempt", failures).Msg("mcp bridge: server session ended; reconnecting")
		if s.b.cfg.Backoff.Wait(ctx, failures) != nil {
			break
		}
	}
	s.b.claim(s.cfg.Name, nil)
}

// session runs one connection: it connects, serves the tools listed, and
// follows list changes until the connection ends (the error) or ctx does.
// served reports whether tools were listed.
func (s *server) session(ctx context.Context) (served bool, err error) {
	client := mcp.NewClient(&mcp.Implementation{Name: "lanefleet-mcp-bridge", Version: s.b.cfg.Version}, &mcp.ClientOptions{
		ToolListChangedHandler: func(context.Context, *mcp.ToolListChangedRequest) {
			select {
			case s.changed <- struct{}{}:
			default:
			}
		},
		ProgressNotificationHandler: s.onProgress,
	})
	// Drop a change noted before this session: its list is read below.
	select {
	case <-s.changed:
	default:
	}
	cs, err := client.Connect(ctx, s.transport(), nil)
	if err != nil {
		return false, fmt.Errorf("connect: %w", err)
	}
	defer cs.Close()
	ended := make(chan error, 1)
	go func() { ended <- cs.Wait() }() // returns once cs is closed, at the latest by the defer

	var svc *remote.Service
	var old sync.WaitGroup // shutdowns of replaced lists
	defer func() {
		if svc != nil {
			if err := svc.Stop(); err != nil {
				s.log.Warn().Err(err).Msg("mcp bridge: stop serving")
			}
		}
		old.Wait()
		s.b.claim(s.cfg.Name, nil)
	}()
	for {
		list, err := s.listTools(ctx, cs)
		if err != nil {
			return served, fmt.Errorf("list tools: %w", err)
		}
		next, err := s.serve(cs, list)
		if err != nil {
			return served, err
		}
		served = true
		if next != nil && s.b.cfg.Served != nil {
			s.b.cfg.Served(s.cfg.Name)
		}
		if prev := svc; prev != nil {
			// The new list is served: let the old one's calls finish.
			old.Go(func() {
				sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), s.b.cfg.ShutdownGrace)
				defer cancel()
				if err := prev.Shutdown(sctx); err != nil {
					s.log.Warn().Err(err).Msg("mcp bridge: stop serving the replaced tool list")
				}
			})
		}
		svc = next
		select {
		case <-s.changed:
			s.log.Info().Msg("mcp bridge: tool list changed")
		case err := <-ended:
			if err == nil {
				err = errors.New("the server closed the connection")
			}
			return served, err
		case <-ctx.Done():
			return served, ctx.Err()
		}
	}
}

// transport returns a new transport to the server.
func (s *server) transport() mcp.Transport {
	c := s.cfg
	switch c.Transport {
	case TransportStdio:
		cmd := exec.Command(c.Command, c.Args...)
		cmd.Env = s.env()
		cmd.Stderr = &stderrLog{log: s.log}
		return &mcp.CommandTransport{Command: cmd, TerminateDuration: 2 * time.Second}
	case TransportSSE:
		return &mcp.SSEClientTransport{Endpoint: c.URL, HTTPClient: s.httpClient(), MaxEventSize: s.b.cfg.MaxMessageBytes}
	default:
		return &mcp.StreamableClientTransport{Endpoint: c.URL, HTTPClient: s.httpClient(), MaxEventSize: s.b.cfg.MaxMessageBytes}
	}
}

// baseEnv are the variables a stdio server gets from the bridge's
// environment; the config's env adds to them.
var baseEnv = []string{"PATH", "HOME", "USER", "LOGNAME", "SHELL", "TERM", "LANG", "TMPDIR"}

func (s *server) env() []string {
	var env []string
	for _, k := range baseEnv {
		if _, set := s.cfg.Env[k]; set {
			continue
		}
		if v := s.b.cfg.Getenv(k); v != "" {
			env = append(env, k+"="+v)
		}
	}
	keys := make([]string, 0, len(s.cfg.Env))
	for k := range s.cfg.Env {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		env = append(env, k+"="+s.cfg.Env[k])
	}
	return env
}

// httpClient adds the server's headers to every request.
func (s *server) httpClient() *http.Client {
	base := s.b.cfg.HTTPClient
	if len(s.cfg.Headers) == 0 {
		return base
	}
	rt := base.Transport
	if rt == nil {
		rt = http.DefaultTransport
	}
	c := *base
	c.Transport = headerTransport{base: rt, headers: s.cfg.Headers}
	return &c
}

type headerTransport struct {
	base    http.RoundTripper
	headers map[string]string
}

func (h headerTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	for k, v := range h.headers {
		r.Header.Set(k, v)
	}
	return h.base.RoundTrip(r)
}

// stderrLog logs what a stdio server writes to stderr, a line at a time
// and bounded.
type stderrLog struct {
	log zerolog.Logger
	mu  sync.Mutex
}

func (w *stderrLog) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	text := strings.TrimRight(string(p[:min(len(p), 2048)]), "\n")
	if text != "" {
		w.log.Debug().Str("stderr", text).Msg("mcp bridge: server stderr")
	}
	return len(p), nil
}

// listTools lists the server's tools, at most MaxTools of them (more are
// refused with a log line).
func (s *server) listTools(ctx context.Context, cs *mcp.ClientSession) ([]*mcp.Tool, error) {
	var list []*mcp.Tool
	for t, err := range cs.Tools(ctx, nil) {
		if err != nil {
			return nil, err
		}
		if len(list) == s.b.cfg.MaxTools {
			s.log.Warn().Int("max_tools", s.b.cfg.MaxTools).Msg("mcp bridge: the server lists too many tools; the rest are refused")
			break
		}
		list = append(list, t)
	}
	return list, nil
}

// serve serves list as remote tools: a tool whose name is invalid, taken
// by another server or repeated, or whose schema is too large, is refused
// with a log line. It returns nil when no tool is left.
func (s *server) serve(cs *mcp.ClientSession, list []*mcp.Tool) (*remote.Service, error) {
	var ts []tools.Tool
	var names []string
	seen := map[string]bool{}
	for _, t := range list {
		tl, err := s.newTool(cs, t)
		if err != nil {
			s.log.Warn().Str("tool", truncate(t.Name, 100)).Err(err).Msg("mcp bridge: tool refused")
			continue
		}
		name := tl.spec.Name
		if seen[name] {
			s.log.Warn().Str("tool", name).Msg("mcp bridge: tool refused: listed twice")
			continue
		}
		seen[name] = true
		ts = append(ts, tl)
		names = append(names, name)
	}
	taken := s.b.claim(s.cfg.Name, names)
	kept := ts[:0]
	for _, t := range ts {
		name := t.Spec().Name
		if owner, ok := taken[name]; ok {
			s.log.Warn().Str("tool", name).Str("taken_by", owner).Msg("mcp bridge: tool refused: another server's tool has this name")
			continue
		}
		kept = append(kept, t)
	}
	s.log.Info().Int("tools", len(kept)).Msg("mcp bridge: serving tools")
	if len(kept) == 0 {
		return nil, nil
	}
	svc, err := remote.Serve(s.b.cfg.Conn, remote.ServiceConfig{
		Name:        s.b.cfg.ServiceName,
		Version:     remote.ServiceVersion(s.b.cfg.Version),
		Description: "MCP server " + s.cfg.Name + " (lanefleet MCP bridge)",
		Metadata:    map[string]string{"mcp_server": s.cfg.Name},
		Logger:      s.log,
	}, kept...)
	if err != nil {
		return nil, fmt.Errorf("serve: %w", err)
	}
	return svc, nil
}

// onProgress hands a progress notification to the call that asked for it.
func (s *server) onProgress(_ context.Context, req *mcp.ProgressNotificationClientRequest) {
	if req == nil || req.Params == nil {
		return
	}
	tok, ok := req.Params.ProgressToken.(string)
	if !ok {
		return
	}
	if f, ok := s.progress.Load(tok); ok {
		f.(func(*mcp.ProgressNotificationParams))(req.Params)
	}
}

// truncate cuts s to n bytes for a log line.
func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}
