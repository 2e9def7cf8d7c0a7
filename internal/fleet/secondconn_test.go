package fleet

import (
	"testing"

	"github.com/nats-io/nats-server/v2/server"

	"github.com/lanefleet/lanefleet"
)

// TestSecondConn: a member with the embedded server (no TLS) opens a
// second connection in process (the server sees no socket: port 0), with
// the member's identity, and a client on it reaches the fleet.
func TestSecondConn(t *testing.T) {
	t.Parallel()
	m, _, ctx := runMember(t, Config{DataDir: t.TempDir()})
	nc, err := m.SecondConn("second-conn-test")
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	cl, err := lanefleet.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	run, err := cl.Send(ctx, "second", "hello")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := run.Wait(ctx); err != nil {
		t.Fatal(err)
	}
	cz, err := m.Server.Connz(&server.ConnzOptions{})
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]int{}
	for _, c := range cz.Conns {
		seen[c.Name] = c.Port
	}
	if port, ok := seen["second-conn-test"]; !ok || port != 0 {
		t.Fatalf("second connection: listed %v, port %d; want in process (port 0); conns %v", ok, port, seen)
	}
	if port := seen[m.Conn.Opts.Name]; port == 0 {
		t.Fatalf("the member's own connection has no port: %v", seen)
	}
}
