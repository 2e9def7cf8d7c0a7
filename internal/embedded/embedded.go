// Package embedded starts an in-process nats-server with JetStream, for the
// worker's single-machine mode and for tests: a single node, or one node of a
// cluster whose routes are given.
package embedded

import (
	"errors"
	"fmt"
	"net"
	"net/url"
	"strconv"
	"time"

	"github.com/nats-io/nats-server/v2/server"
)

// Config describes an embedded server.
type Config struct {
	Name    string // server name; stable across restarts in a cluster
	Host    string // default 127.0.0.1
	Port    int    // client port; 0 = random
	DataDir string // JetStream store directory (required)
	// SyncAlways fsyncs every write before acknowledging it. Default true:
	// the PubAck of an inbound message is a durability promise.
	SyncAlways *bool
	// MaxPayload is the largest message, in bytes (default 8 MiB).
	MaxPayload int32
	// MaxStore and MaxMemory limit JetStream storage (defaults 8 GiB / 256 MiB).
	MaxStore, MaxMemory int64

	// Cluster, when ClusterName is set.
	ClusterName string
	ClusterPort int      // route port
	Routes      []string // nats-route://host:port of every node, itself included
	Logs        bool     // let the server log to stderr
}

// DefaultMaxPayload is the embedded server's max_payload: large enough for a
// turn record holding capped tool results.
const DefaultMaxPayload = 8 << 20

// Start starts the server and waits until it accepts connections.
func Start(cfg Config) (*server.Server, error) {
	if cfg.DataDir == "" {
		return nil, errors.New("embedded: DataDir is required")
	}
	if cfg.Host == "" {
		cfg.Host = "127.0.0.1"
	}
	port := cfg.Port
	if port == 0 {
		port = server.RANDOM_PORT
	}
	sync := true
	if cfg.SyncAlways != nil {
		sync = *cfg.SyncAlways
	}
	if cfg.MaxPayload == 0 {
		cfg.MaxPayload = DefaultMaxPayload
	}
	if cfg.MaxStore == 0 {
		cfg.MaxStore = 8 << 30
	}
	if cfg.MaxMemory == 0 {
		cfg.MaxMemory = 256 << 20
	}
	opts := &server.Options{
		ServerName:         cfg.Name,
		Host:               cfg.Host,
		Port:               port,
		NoLog:              !cfg.Logs,
		NoSigs:             true,
		JetStream:          true,
		StoreDir:           cfg.DataDir,
		JetStreamMaxStore:  cfg.MaxStore,
		JetStreamMaxMemory: cfg.MaxMemory,
		MaxPayload:         cfg.MaxPayload,
		SyncAlways:         sync,
	}
	if sync {
		opts.SyncInterval = 2 * time.Minute // as the config parser sets it for "always"
	}
	if cfg.ClusterName != "" {
		opts.Cluster = server.ClusterOpts{Name: cfg.ClusterName, Host: cfg.Host, Port: cfg.ClusterPort}
		for _, r := range cfg.Routes {
			u, err := url.Parse(r)
			if err != nil {
				return nil, fmt.Errorf("embedded: route %q: %w", r, err)
			}
			opts.Routes = append(opts.Routes, u)
		}
	}
	s, err := server.NewServer(opts)
	if err != nil {
		return nil, fmt.Errorf("embedded: %w", err)
	}
	if cfg.Logs {
		s.ConfigureLogger()
	}
	s.Start()
	if !s.ReadyForConnections(15 * time.Second) {
		s.Shutdown()
		return nil, fmt.Errorf("embedded: server %q not ready after 15s", cfg.Name)
	}
	return s, nil
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
