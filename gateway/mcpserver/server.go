// Package mcpserver serves the fleet as an MCP server (Model Context
// Protocol, with the official Go SDK): tools an MCP client (a desktop
// assistant, an IDE, another agent) calls to send a message to a session
// and await its reply, follow a run, read a session's history and list the
// sessions its caller may see. Every tool goes through the Go client
// (package lanefleet), so each operation has one implementation, and asks
// the caller's auth.Principal first, as the gateway's routes do.
//
// The gateway mounts Handler at /mcp (streamable HTTP, stateless: any
// gateway replica answers any request, no session to stick to), behind
// its bearer tokens; `publisher mcp` serves the same tools over stdio
// (ServeIO) as a principal that reaches everything, so what it may do is
// what its NATS user may do.
//
// Files: server.go (Config, Server, the HTTP and stdio transports),
// tools.go (the tools: their arguments, results and bounds), errors.go
// (what a caller is told when the fleet refuses or fails).
package mcpserver

import (
	"context"
	"errors"
	"io"
	"net/http"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/rs/zerolog"

	"github.com/lanefleet/lanefleet"
	"github.com/lanefleet/lanefleet/gateway/auth"
	"github.com/lanefleet/lanefleet/internal/version"
)

// Name is the server's name in the MCP handshake.
const Name = "lanefleet"

// MaxRequestBytes bounds one HTTP request's body: a message of
// events.MaxTextBytes with every byte escaped, and its envelope.
const MaxRequestBytes = 8 << 20

// Config configures a Server.
type Config struct {
	// Client reaches the fleet. Required.
	Client *lanefleet.Client
	// Logger logs what a caller is not told (a fleet error's cause);
	// zerolog.Nop() by default.
	Logger *zerolog.Logger
}

// Server holds the MCP servers of the two kinds of callers: one with
// every tool, and one without send_message for a caller that may read
// sessions only (a viewer's tools/list shows what it may call).
type Server struct {
	client *lanefleet.Client
	log    zerolog.Logger
	full   *mcp.Server
	reader *mcp.Server
}

// New returns a server for cfg.
func New(cfg Config) (*Server, error) {
	if cfg.Client == nil {
		return nil, errors.New("mcpserver: no client")
	}
	s := &Server{client: cfg.Client, log: zerolog.Nop()}
	if cfg.Logger != nil {
		s.log = *cfg.Logger
	}
	s.full = s.newMCP(true)
	s.reader = s.newMCP(false)
	return s, nil
}

// newMCP builds an MCP server with the tools; send adds send_message.
func (s *Server) newMCP(send bool) *mcp.Server {
	m := mcp.NewServer(&mcp.Implementation{Name: Name, Title: "Lanefleet", Version: version.Get().Version}, &mcp.ServerOptions{
		Instructions: "Lanefleet runs conversations (sessions, named by a key) on a fleet of agent workers. " +
			"send_message sends a message to a session and waits for the reply; get_run waits for a run that was still running; " +
			"read_history reads a session's conversation; list_sessions lists the sessions this caller may see.",
	})
	s.addTools(m, send)
	return m
}

// HTTPOptions say how Handler serves.
type HTTPOptions struct {
	// CheckHost refuses a request that came to a loopback address naming
	// another host (DNS rebinding): for a server whose loopback callers
	// are not authenticated (a gateway without a token file). Behind
	// bearer tokens a local reverse proxy's Host is normal, and the token
	// is what admits a caller.
	CheckHost bool
}

// Handler serves MCP's streamable HTTP transport, stateless: each POST
// is answered on its own (a tool call's progress notifications and result
// as server-sent events on the POST's response), no Mcp-Session-Id is
// issued or needed, and GET and DELETE answer 405. The caller is the
// auth.Principal in the request's context (the gateway put it there);
// a request without one is refused with 401.
func (s *Server) Handler(o HTTPOptions) http.Handler {
	h := mcp.NewStreamableHTTPHandler(func(r *http.Request) *mcp.Server {
		if auth.FromContext(r.Context()).CanSend() {
			return s.full
		}
		return s.reader
	}, &mcp.StreamableHTTPOptions{
		Stateless:                  true,
		DisableLocalhostProtection: !o.CheckHost,
		MaxRequestBodyBytes:        MaxRequestBytes,
	})
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch p := auth.FromContext(r.Context()); {
		case p == nil:
			w.Header().Set("WWW-Authenticate", `Bearer realm="lanefleet"`)
			http.Error(w, "this route needs a bearer token", http.StatusUnauthorized)
			return
		case !p.CanRead():
			http.Error(w, "this token may not read sessions", http.StatusForbidden)
			return
		}
		h.ServeHTTP(w, r)
	})
}

// ServeIO serves one MCP client on r and w (newline-delimited JSON-RPC,
// MCP's stdio transport) as p until the client closes r or ctx is done.
func (s *Server) ServeIO(ctx context.Context, p *auth.Principal, r io.ReadCloser, w io.WriteCloser) error {
	m := s.reader
	if p.CanSend() {
		m = s.full
	}
	// The principal rides in the context the SDK derives every request's
	// from, as the gateway's does over HTTP.
	err := m.Run(auth.NewContext(ctx, p), &mcp.IOTransport{Reader: r, Writer: w, MaxLineLength: MaxRequestBytes})
	if err != nil && !errors.Is(err, io.EOF) && ctx.Err() == nil {
		return err
	}
	return nil
}
