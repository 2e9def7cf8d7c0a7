// Package embedded starts an in-process nats-server with JetStream, for the
// worker's single-machine mode and for tests: a single node, or one node of a
// cluster whose routes are given, configured by Config alone or by a
// standard nats-server configuration file that Config completes. A server
// that would accept anonymous connections on a non-loopback address is
// refused unless asked for.
package embedded

import (
	"cmp"
	"errors"
	"fmt"
	"net"
	"net/url"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats-server/v2/server"
)

// Config describes an embedded server.
type Config struct {
	Name string // server name; stable across restarts in a cluster
	// ConfigFile is a nats-server configuration file (users, nkeys,
	// accounts, permissions, TLS, monitoring port, JetStream limits, ...),
	// read with the server's own parser. The fields below fill in only what
	// the file leaves unset; a Host, Port or DataDir the file sets to
	// something else is an error wrapping ErrConflict. SyncAlways applies
	// when the file sets no jetstream sync_interval. JetStream is always on.
	ConfigFile string
	Host       string // default 127.0.0.1 (also with a file that names no host)
	// Port is the client port. Without a file 0 means a random port; with
	// one, 0 means the file's port, else 4222 (-1 is random).
	Port    int
	DataDir string // JetStream store directory (required, here or in the file)
	// SyncAlways fsyncs every write before acknowledging it. Default true:
	// the PubAck of an inbound message is a durability promise.
	SyncAlways *bool
	// MaxPayload is the largest message, in bytes (default 8 MiB).
	MaxPayload int32
	// MaxStore and MaxMemory limit JetStream storage (defaults 8 GiB / 256 MiB).
	MaxStore, MaxMemory int64
	// InsecureListen lets the server listen on a non-loopback address
	// without authentication; otherwise that is refused (ErrInsecureListen).
	InsecureListen bool

	// Cluster, when ClusterName is set.
	ClusterName string
	ClusterPort int      // route port
	Routes      []string // nats-route://host:port of every node, itself included
	Logs        bool     // let the server log to stderr (also when the file configures logging)
}

// DefaultMaxPayload is the embedded server's max_payload: large enough for a
// turn record holding capped tool results.
const DefaultMaxPayload = 8 << 20

// Defaults of the JetStream store limits.
const (
	DefaultMaxStore  = 8 << 30
	DefaultMaxMemory = 256 << 20
)

// Errors callers branch on.
var (
	// ErrConflict means the configuration file and Config set the same
	// thing to different values.
	ErrConflict = errors.New("embedded: the server configuration file sets this differently")
	// ErrInsecureListen means the server would accept unauthenticated
	// connections on a non-loopback address.
	ErrInsecureListen = errors.New("embedded: refusing to listen on a non-loopback address without authentication")
	// ErrNoStoreDir means neither Config nor the file names the JetStream
	// store directory.
	ErrNoStoreDir = errors.New("embedded: no JetStream store directory (DataDir, or jetstream { store_dir } in the configuration file)")
)

// Start starts the server and waits until it accepts connections.
func Start(cfg Config) (*server.Server, error) {
	opts, err := Options(cfg)
	if err != nil {
		return nil, err
	}
	return StartOptions(opts)
}

// Options returns the options Start would run a server with: the
// configuration file's merged with cfg, checked.
func Options(cfg Config) (*server.Options, error) {
	opts := &server.Options{}
	if cfg.ConfigFile != "" {
		var err error
		if opts, err = server.ProcessConfigFile(cfg.ConfigFile); err != nil {
			return nil, fmt.Errorf("embedded: server configuration: %w", err)
		}
		if err := fromFile(opts, cfg); err != nil {
			return nil, err
		}
	} else {
		opts.Host, opts.Port, opts.StoreDir = cfg.Host, cfg.Port, cfg.DataDir
		if opts.Port == 0 {
			opts.Port = server.RANDOM_PORT
		}
	}
	if opts.StoreDir == "" {
		return nil, ErrNoStoreDir
	}
	if opts.Host == "" {
		opts.Host = "127.0.0.1"
	}
	if opts.ServerName == "" {
		opts.ServerName = cfg.Name
	}
	opts.JetStream = true
	opts.NoSigs = true
	opts.NoLog = !cfg.Logs && opts.LogFile == "" && !opts.Syslog && opts.RemoteSyslog == "" && !opts.Debug && !opts.Trace
	if !opts.SyncAlways && opts.SyncInterval == 0 {
		sync := cfg.SyncAlways == nil || *cfg.SyncAlways
		opts.SyncAlways = sync
		if sync {
			opts.SyncInterval = 2 * time.Minute // as the config parser sets it for "always"
		}
	}
	if opts.MaxPayload == 0 {
		opts.MaxPayload = cmp.Or(cfg.MaxPayload, DefaultMaxPayload)
	}
	if opts.JetStreamMaxStore == 0 {
		opts.JetStreamMaxStore = cmp.Or(cfg.MaxStore, DefaultMaxStore)
	}
	if opts.JetStreamMaxMemory == 0 {
		opts.JetStreamMaxMemory = cmp.Or(cfg.MaxMemory, DefaultMaxMemory)
	}
	if cfg.ClusterName != "" {
		if opts.Cluster.Name != "" || opts.Cluster.Port != 0 {
			return nil, fmt.Errorf("%w: cluster (configure it in one place)", ErrConflict)
		}
		opts.Cluster = server.ClusterOpts{Name: cfg.ClusterName, Host: opts.Host, Port: cfg.ClusterPort}
		for _, r := range cfg.Routes {
			u, err := url.Parse(r)
			if err != nil {
				return nil, fmt.Errorf("embedded: route %q: %w", r, err)
			}
			opts.Routes = append(opts.Routes, u)
		}
	}
	if !IsLoopback(opts.Host) && !Authenticates(opts) && !cfg.InsecureListen {
		return nil, fmt.Errorf("%w: %s accepts anyone who can reach it", ErrInsecureListen, net.JoinHostPort(opts.Host, strconv.Itoa(opts.Port)))
	}
	if err := monitorHost(opts, cfg.InsecureListen); err != nil {
		return nil, err
	}
	return opts, nil
}

// monitorHost checks the monitoring listener a configuration file asks for
// (http, https, http_port...): it has no authentication at all and shows
// every connection, account and stream, so a file that names no host for
// it gets loopback (nats-server would listen on every interface), and a
// non-loopback host needs insecure, as an unauthenticated client port does.
func monitorHost(opts *server.Options, insecure bool) error {
	if opts.HTTPPort == 0 && opts.HTTPSPort == 0 {
		return nil
	}
	if opts.HTTPHost == "" {
		opts.HTTPHost = "127.0.0.1"
	}
	if !IsLoopback(opts.HTTPHost) && !insecure {
		return fmt.Errorf("%w: the monitoring listener on %s (the configuration file's http/https line) has no authentication and shows every connection and stream; "+
			"give it a loopback host (http: \"127.0.0.1:8222\") or accept that with --insecure-listen", ErrInsecureListen, opts.HTTPHost)
	}
	return nil
}

// fromFile fills in what the file leaves unset from cfg, refusing values
// both set differently.
func fromFile(opts *server.Options, cfg Config) error {
	if cfg.Host != "" {
		if opts.Host != "" && opts.Host != cfg.Host {
			return fmt.Errorf("%w: host %q, not %q", ErrConflict, opts.Host, cfg.Host)
		}
		opts.Host = cfg.Host
	}
	switch {
	case cfg.Port != 0 && opts.Port != 0 && opts.Port != cfg.Port:
		return fmt.Errorf("%w: port %d, not %d", ErrConflict, opts.Port, cfg.Port)
	case opts.Port == 0 && cfg.Port != 0:
		opts.Port = cfg.Port
	case opts.Port == 0:
		opts.Port = server.DEFAULT_PORT
	}
	if cfg.DataDir != "" {
		if opts.StoreDir != "" && filepath.Clean(opts.StoreDir) != filepath.Clean(cfg.DataDir) {
			return fmt.Errorf("%w: JetStream store_dir %q, not %q", ErrConflict, opts.StoreDir, cfg.DataDir)
		}
		opts.StoreDir = cfg.DataDir
	}
	return nil
}

// IsLoopback reports whether host (a name or an address) is reachable from
// this machine only.
func IsLoopback(host string) bool {
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// Authenticates reports whether a server with opts refuses anonymous
// client connections: it has users, nkeys, a token, trusted operators, an
// auth callout or TLS certificate mapping, and no no_auth_user.
func Authenticates(opts *server.Options) bool {
	if opts.NoAuthUser != "" {
		return false
	}
	return len(opts.Users) > 0 || len(opts.Nkeys) > 0 || opts.Username != "" || opts.Authorization != "" ||
		len(opts.TrustedOperators) > 0 || len(opts.TrustedKeys) > 0 || opts.AuthCallout != nil ||
		(opts.TLSVerify && opts.TLSMap)
}

// StartOptions starts a server with opts (from Options) and waits until it
// accepts connections. A client address another process listens on is an
// error wrapping the listener's (errors.Is(err, syscall.EADDRINUSE)); a
// server that cannot start (JetStream's store, another listener) is an
// error carrying the server's reason as soon as it gives up, not after the
// readiness timeout. A server that logs (opts.NoLog false) reports such
// reasons itself, through its own logger.
func StartOptions(opts *server.Options) (*server.Server, error) {
	if err := checkListen(opts.Host, opts.Port); err != nil {
		return nil, err
	}
	s, err := server.NewServer(opts)
	if err != nil {
		return nil, fmt.Errorf("embedded: %w", err)
	}
	fatal := &fatalLog{}
	if opts.NoLog {
		s.SetLogger(fatal, false, false)
	} else {
		s.ConfigureLogger()
	}
	s.Start() // returns after the listeners and JetStream are set up or failed
	deadline := time.Now().Add(readyTimeout)
	for !s.ReadyForConnections(100 * time.Millisecond) {
		if reason := fatal.reason(); reason != "" || time.Now().After(deadline) {
			s.Shutdown()
			if reason != "" {
				return nil, fmt.Errorf("embedded: server %q did not start: %s", opts.ServerName, reason)
			}
			return nil, fmt.Errorf("embedded: server %q not ready after %s", opts.ServerName, readyTimeout)
		}
	}
	return s, nil
}

// readyTimeout bounds how long StartOptions waits for a server that has not
// said why it is not ready.
const readyTimeout = 15 * time.Second

// checkListen reports a client address another process listens on, with
// the listener's error, before the server tries it (a server that cannot
// listen only logs why).
func checkListen(host string, port int) error {
	if port <= 0 {
		return nil // random port
	}
	hp := net.JoinHostPort(host, strconv.Itoa(port))
	l, err := net.Listen("tcp", hp)
	if err != nil {
		return fmt.Errorf("embedded: %w", err) // "listen tcp host:port: bind: address already in use"
	}
	return l.Close()
}

// fatalLog is the logger of a server that does not log: it keeps the first
// fatal error (the server stops starting after one) and drops the rest.
type fatalLog struct {
	mu    sync.Mutex
	first string
}

func (l *fatalLog) reason() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.first
}

func (l *fatalLog) Fatalf(format string, v ...any) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.first == "" {
		l.first = fmt.Sprintf(format, v...)
	}
}

func (*fatalLog) Noticef(string, ...any) {}
func (*fatalLog) Warnf(string, ...any)   {}
func (*fatalLog) Errorf(string, ...any)  {}
func (*fatalLog) Debugf(string, ...any)  {}
func (*fatalLog) Tracef(string, ...any)  {}

// ConnectURL is the URL a process connects to its own embedded server
// with: the client URL, on the loopback address when the server listens on
// every interface.
func ConnectURL(s *server.Server) string {
	u, err := url.Parse(s.ClientURL())
	if err != nil {
		return s.ClientURL()
	}
	host, port, err := net.SplitHostPort(u.Host)
	if err != nil {
		return s.ClientURL()
	}
	if ip := net.ParseIP(host); host == "" || ip != nil && ip.IsUnspecified() {
		loop := "127.0.0.1"
		if ip != nil && ip.To4() == nil {
			loop = "::1"
		}
		u.Host = net.JoinHostPort(loop, port)
	}
	return u.String()
}

// FreePorts reserves n free loopback TCP ports (listen, record, close). The
// ports may be taken by someone else before they are used; cluster tests need
// them up front because routes are configured before the servers start.
func FreePorts(n int) ([]int, error) {
	ports := make([]int, 0, n)
	var ls []net.Listener
	defer func() {
		for _, l := range ls {
			l.Close()
		}
	}()
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, fmt.Errorf("embedded: free port: %w", err)
		}
		ls = append(ls, l)
		_, p, _ := net.SplitHostPort(l.Addr().String())
		n, _ := strconv.Atoi(p)
		ports = append(ports, n)
	}
	return ports, nil
}
