package natstest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/lanefleet/lanefleet/internal/embedded"
)

var (
	serverOnce sync.Once
	serverBin  string
	serverErr  error
)

// ServerBinary builds the nats-server command of the version in go.mod
// once per test binary (into a temporary directory removed by
// RemoveServerBinary) and returns its path.
func ServerBinary(t testing.TB) string {
	t.Helper()
	serverOnce.Do(func() {
		dir, err := os.MkdirTemp("", "lanefleet-nats-server")
		if err != nil {
			serverErr = err
			return
		}
		serverBin = filepath.Join(dir, "nats-server")
		out, err := exec.Command("go", "build", "-o", serverBin, "github.com/nats-io/nats-server/v2").CombinedOutput()
		if err != nil {
			serverErr = fmt.Errorf("natstest: go build nats-server: %v\n%s", err, out)
		}
	})
	if serverErr != nil {
		t.Fatal(serverErr)
	}
	return serverBin
}

// RemoveServerBinary deletes what ServerBinary built; call it from TestMain.
func RemoveServerBinary() {
	if serverBin != "" {
		_ = os.RemoveAll(filepath.Dir(serverBin))
	}
}

// Node is one nats-server process of a ProcCluster.
type Node struct {
	Name string
	URL  string

	t    testing.TB
	bin  string
	conf string

	mu   sync.Mutex
	cmd  *exec.Cmd
	done chan struct{}
	logs bytes.Buffer
}

// ProcCluster is a JetStream cluster (or a single node) of real nats-server
// processes, each with its own store in t.TempDir(). It is killed when the
// test ends, with the servers' output logged if the test failed.
type ProcCluster struct {
	Nodes []*Node
}

// StartProcCluster starts n nats-server processes (n = 1: a single node
// without clustering) and waits until JetStream answers.
func StartProcCluster(t testing.TB, n int) *ProcCluster {
	t.Helper()
	bin := ServerBinary(t)
	ports, err := embedded.FreePorts(2 * n)
	if err != nil {
		t.Fatal(err)
	}
	var routes []string
	for i := range n {
		routes = append(routes, fmt.Sprintf("%q", fmt.Sprintf("nats-route://127.0.0.1:%d", ports[n+i])))
	}
	c := &ProcCluster{}
	dir := t.TempDir()
	for i := range n {
		name := fmt.Sprintf("p%d", i+1)
		conf := fmt.Sprintf("server_name: %q\nlisten: \"127.0.0.1:%d\"\n"+
			"jetstream {\n  store_dir: %q\n  max_memory_store: 64MB\n  max_file_store: 8GB\n}\n",
			name, ports[i], filepath.Join(dir, name))
		if n > 1 {
			conf += fmt.Sprintf("cluster {\n  name: \"lanefleet-proc\"\n  listen: \"127.0.0.1:%d\"\n  routes: [%s]\n}\n",
				ports[n+i], strings.Join(routes, ", "))
		}
		path := filepath.Join(dir, name+".conf")
		if err := os.WriteFile(path, []byte(conf), 0o600); err != nil {
			t.Fatal(err)
		}
		c.Nodes = append(c.Nodes, &Node{Name: name, URL: fmt.Sprintf("nats://127.0.0.1:%d", ports[i]), t: t, bin: bin, conf: path})
	}
	for _, nd := range c.Nodes {
		nd.Start()
	}
	t.Cleanup(func() {
		for _, nd := range c.Nodes {
			nd.Kill()
			if t.Failed() {
				nd.mu.Lock()
				t.Logf("nats-server %s output:\n%s", nd.Name, nd.logs.String())
				nd.mu.Unlock()
			}
		}
	})
	c.WaitReady(t)
	return c
}

// URL returns every node's client URL, comma-separated.
func (c *ProcCluster) URL() string {
	var urls []string
	for _, nd := range c.Nodes {
		urls = append(urls, nd.URL)
	}
	return strings.Join(urls, ",")
}

// WaitReady waits until JetStream answers an account info request (on a
// cluster: a meta leader was elected).
func (c *ProcCluster) WaitReady(t testing.TB) {
	t.Helper()
	nc, err := nats.Connect(c.URL(), nats.MaxReconnects(-1), nats.RetryOnFailedConnect(true), nats.ReconnectWait(50*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(2 * time.Minute) // detects a hang only: processes start late on a loaded machine
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		_, err := js.AccountInfo(ctx)
		cancel()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("natstest: JetStream of the process cluster not ready: %v", err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// Node returns the node named name, or nil.
func (c *ProcCluster) Node(name string) *Node {
	for _, nd := range c.Nodes {
		if nd.Name == name {
			return nd
		}
	}
	return nil
}

// StreamLeader returns the node leading a stream (nil on a single node).
func (c *ProcCluster) StreamLeader(ctx context.Context, js jetstream.JetStream, stream string) (*Node, error) {
	s, err := js.Stream(ctx, stream)
	if err != nil {
		return nil, err
	}
	info, err := s.Info(ctx)
	if err != nil {
		return nil, err
	}
	if info.Cluster == nil || info.Cluster.Leader == "" {
		return nil, errors.New("natstest: stream " + stream + " has no leader")
	}
	nd := c.Node(info.Cluster.Leader)
	if nd == nil {
		return nil, fmt.Errorf("natstest: leader %q is not a node of the cluster", info.Cluster.Leader)
	}
	return nd, nil
}

// Start starts the node's process (again, after Kill: same store, same
// ports).
func (nd *Node) Start() {
	nd.t.Helper()
	nd.mu.Lock()
	defer nd.mu.Unlock()
	if nd.cmd != nil {
		return
	}
	cmd := exec.Command(nd.bin, "-c", nd.conf)
	w := &lockedWriter{mu: &nd.mu, b: &nd.logs}
	cmd.Stdout, cmd.Stderr = w, w
	if err := cmd.Start(); err != nil {
		nd.t.Fatalf("natstest: start nats-server %s: %v", nd.Name, err)
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	nd.cmd, nd.done = cmd, done
}

// Kill SIGKILLs the node's process and waits for it to exit.
func (nd *Node) Kill() {
	nd.mu.Lock()
	cmd, done := nd.cmd, nd.done
	nd.cmd = nil
	nd.mu.Unlock()
	if cmd == nil {
		return
	}
	_ = cmd.Process.Signal(syscall.SIGKILL)
	<-done
}

type lockedWriter struct {
	mu *sync.Mutex
	b  *bytes.Buffer
}

func (w *lockedWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.b.Write(p)
}
