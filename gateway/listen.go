package gateway

import (
	"context"
	"fmt"
	"net"
	"strings"
)

// Options are what a command line gives a gateway: where it listens and
// how it authenticates. cmd/gateway and `worker --http` share them.
type Options struct {
	// Addr is the host:port to listen on.
	Addr string
	// TokensFile is the token file; "" serves loopback clients only.
	TokensFile string
	// TLSCert and TLSKey serve HTTPS.
	TLSCert, TLSKey string
	// CORSOrigins are comma-separated allowed origins ("" = CORS off).
	CORSOrigins string
}

// Listener is a gateway bound to its address, ready to Serve.
type Listener struct {
	srv  *Server
	ln   net.Listener
	opts Options
}

// Listen checks opts, loads the token file, builds the server from cfg
// (its Tokens and CORSOrigins come from opts) and binds the address: a
// non-loopback address without a token file is refused here, before
// anything listens.
func Listen(opts Options, cfg Config) (*Listener, error) {
	if opts.TokensFile != "" {
		t, err := LoadTokens(opts.TokensFile)
		if err != nil {
			return nil, err
		}
		cfg.Tokens = t
	}
	if err := CheckListen(opts.Addr, cfg.Tokens != nil); err != nil {
		return nil, err
	}
	if (opts.TLSCert == "") != (opts.TLSKey == "") {
		return nil, fmt.Errorf("gateway: give both a TLS certificate and its key, or neither")
	}
	for _, o := range strings.Split(opts.CORSOrigins, ",") {
		if o = strings.TrimSpace(o); o != "" {
			cfg.CORSOrigins = append(cfg.CORSOrigins, o)
		}
	}
	srv, err := New(cfg)
	if err != nil {
		return nil, err
	}
	ln, err := net.Listen("tcp", opts.Addr)
	if err != nil {
		return nil, fmt.Errorf("gateway: listen on %s: %w", opts.Addr, err)
	}
	return &Listener{srv: srv, ln: ln, opts: opts}, nil
}

// Addr is the bound address.
func (l *Listener) Addr() string { return l.ln.Addr().String() }

// URL is the gateway's base URL.
func (l *Listener) URL() string {
	scheme := "http"
	if l.opts.TLSCert != "" {
		scheme = "https"
	}
	return scheme + "://" + l.Addr()
}

// Authenticates reports whether the gateway has a token file.
func (l *Listener) Authenticates() bool { return l.srv.cfg.Tokens != nil }

// Serve serves until ctx is done (see Server.Serve).
func (l *Listener) Serve(ctx context.Context) error {
	return l.srv.Serve(ctx, l.ln, l.opts.TLSCert, l.opts.TLSKey)
}
