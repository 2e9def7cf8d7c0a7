// Package natstest runs real embedded nats-servers for tests: one JetStream
// node on a random port with its store in t.TempDir(), or a 3-node cluster.
package natstest

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/lanefleet/lanefleet/internal/embedded"
)

// Server is a running embedded server.
type Server struct {
	*server.Server
	URL string
}

// Options tune Start.
type Options struct {
	// SyncAlways fsyncs every write (the worker's default). Tests default to
	// false: they run many short-lived servers, and durability across power
	// loss is not what they check.
	SyncAlways bool
}

// Start starts a single JetStream node that is shut down when the test ends.
func Start(t testing.TB, o ...Options) *Server {
	t.Helper()
	var opt Options
	if len(o) > 0 {
		opt = o[0]
	}
	s, err := embedded.Start(embedded.Config{Name: "test", DataDir: t.TempDir(), SyncAlways: &opt.SyncAlways})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Shutdown(); s.WaitForShutdown() })
	return &Server{Server: s, URL: s.ClientURL()}
}

// Connect opens a connection closed when the test ends.
func Connect(t testing.TB, url string, opts ...nats.Option) *nats.Conn {
	t.Helper()
	opts = append([]nats.Option{nats.MaxReconnects(-1), nats.ReconnectWait(100 * time.Millisecond)}, opts...)
	nc, err := nats.Connect(url, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	return nc
}

// Cluster is a set of in-process JetStream nodes forming one cluster.
type Cluster struct {
	Servers []*server.Server
	cfgs    []embedded.Config
	URLs    []string
}

// URL returns a comma-separated list of every node's client URL.
func (c *Cluster) URL() string { return strings.Join(c.URLs, ",") }

// StartCluster starts n nodes and waits for a JetStream meta leader with
// every peer current.
func StartCluster(t testing.TB, n int) *Cluster {
	t.Helper()
	ports, err := embedded.FreePorts(2 * n)
	if err != nil {
		t.Fatal(err)
	}
	var routes []string
	for i := range n {
		routes = append(routes, fmt.Sprintf("nats-route://127.0.0.1:%d", ports[n+i]))
	}
	c := &Cluster{}
	no := false
	for i := range n {
		cfg := embedded.Config{
			Name: fmt.Sprintf("n%d", i+1), Port: ports[i], DataDir: t.TempDir(), SyncAlways: &no,
			ClusterName: "lanefleet-test", ClusterPort: ports[n+i], Routes: routes,
			// The default store limits: the fleet's streams and buckets
			// reserve their byte limits on every node.
		}
		c.cfgs = append(c.cfgs, cfg)
		c.URLs = append(c.URLs, fmt.Sprintf("nats://127.0.0.1:%d", ports[i]))
	}
	c.Servers = make([]*server.Server, n)
	errs := make(chan error, n)
	for i := range n {
		go func() {
			s, err := embedded.Start(c.cfgs[i])
			c.Servers[i] = s
			errs <- err
		}()
	}
	for range n {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(func() {
		for _, s := range c.Servers {
			if s != nil && s.Running() {
				s.Shutdown()
				s.WaitForShutdown()
			}
		}
	})
	// The bound only detects a hang: a slow or loaded machine (CI's)
	// elects a meta leader later.
	const readyWithin = 2 * time.Minute
	deadline := time.Now().Add(readyWithin)
	for time.Now().Before(deadline) {
		if c.ready(n) {
			return c
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatalf("natstest: cluster of %d not ready after %v", n, readyWithin)
	return nil
}

func (c *Cluster) ready(n int) bool {
	leader := false
	for _, s := range c.Servers {
		if s == nil || !s.Running() {
			continue
		}
		if s.JetStreamIsLeader() {
			leader = true
			if len(s.JetStreamClusterPeers()) != n {
				return false
			}
		}
		if !s.JetStreamIsCurrent() {
			return false
		}
	}
	return leader
}

// Stop shuts node i down (a graceful stop: leadership is handed over).
func (c *Cluster) Stop(i int) {
	c.Servers[i].Shutdown()
	c.Servers[i].WaitForShutdown()
}

// JetStream connects to url (Connect: closed when the test ends) and
// returns a JetStream client of the connection (js.Conn()) made with
// opts.
func JetStream(t testing.TB, url string, opts ...jetstream.JetStreamOpt) jetstream.JetStream {
	t.Helper()
	js, err := jetstream.New(Connect(t, url), opts...)
	if err != nil {
		t.Fatal(err)
	}
	return js
}
