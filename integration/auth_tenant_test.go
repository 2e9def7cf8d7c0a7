package integration

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/rs/zerolog"

	"github.com/lanefleet/lanefleet/events"
	"github.com/lanefleet/lanefleet/internal/embedded"
	"github.com/lanefleet/lanefleet/internal/fleet"
	"github.com/lanefleet/lanefleet/permission"
)

// TestAccountPerTenant: the multi-tenant layout docs/security.md recommends.
// Two tenants are two JetStream accounts on one server, each with its own
// worker and sender users (the same permission blocks, pasted into the
// account) and byte limits that together fit the server's store. The same
// session key in both tenants is two sessions: each sender gets its own
// tenant's answer, and neither sees the other's events.
func TestAccountPerTenant(t *testing.T) {
	if testing.Short() {
		t.Skip("fleet test")
	}
	t.Parallel()
	ports, err := embedded.FreePorts(1)
	if err != nil {
		t.Fatal(err)
	}
	a := &authFleet{passwords: map[string]string{}, port: ports[0]}
	dir := t.TempDir()
	var conf bytes.Buffer
	tenants := map[string][]permission.User{}
	for _, tenant := range []string{"acme", "globex"} {
		tenants[tenant] = []permission.User{
			{Grant: permission.Grant{Role: permission.Worker, User: tenant + "-worker"}},
			{Grant: permission.Grant{Role: permission.Sender, User: tenant + "-alice", Sessions: []string{"alice"}}},
		}
		for _, u := range tenants[tenant] {
			a.passwords[u.User] = "pw-" + u.User
			fmt.Fprintf(&conf, "%s: %q\n", permission.PasswordVar(u.User), a.passwords[u.User])
		}
	}
	fmt.Fprintf(&conf, "port: %d\njetstream { store_dir: %q, max_file_store: 1G }\naccounts {\n", a.port, filepath.Join(dir, "js"))
	for _, tenant := range []string{"acme", "globex"} {
		fmt.Fprintf(&conf, "%s {\njetstream { max_file: 256M, max_mem: 64M }\nusers = [\n", tenant)
		if err := permission.Render(&conf, permission.FormatUsers, tenants[tenant]...); err != nil {
			t.Fatal(err)
		}
		conf.WriteString("]\n}\n")
	}
	conf.WriteString("}\n")
	a.file = filepath.Join(dir, "nats.conf")
	if err := os.WriteFile(a.file, conf.Bytes(), 0o600); err != nil {
		t.Fatal(err)
	}
	_, v := a.start(t)

	// The default limits do not fit a 256 MiB account: the worker says so.
	_, err = fleet.Start(t.Context(), fleet.Config{NATSURL: a.url(), User: "acme-worker", Password: a.passwords["acme-worker"],
		Scripted: true, NoRemoteTools: true, Logger: zerolog.New(zerolog.NewTestWriter(t)).Level(zerolog.WarnLevel)})
	if err == nil || !strings.Contains(err.Error(), "--max-*-bytes") {
		t.Fatalf("default limits in a 256 MiB account: %v", err)
	}
	t.Logf("default limits: %v", err)
	// Limits that fit the account's 256 MiB of file store and 64 MiB of
	// memory: 192 MiB here and AGENT_SCHED's fixed 20 MiB.
	limits := fleet.Limits{Inbound: 32 << 20, Events: 48 << 20, Dead: 16 << 20, Lanes: 64 << 20, Steps: 8 << 20, Auth: 4 << 20, Runs: 16 << 20,
		Budgets: 4 << 20, Schedules: 4 << 20, Agents: 4 << 20, AgentFiles: 8 << 20}
	subs := map[string]*eventSub{}
	for _, tenant := range []string{"acme", "globex"} {
		startMember(t, a.url(), fleet.Config{WorkerID: tenant, User: tenant + "-worker", Password: a.passwords[tenant+"-worker"],
			NoBuiltinTools: true, NoRemoteTools: true, Limits: limits})
		subs[tenant] = subscribeEvents(t, a.connectAs(t, tenant+"-alice"), "alice")
	}
	for _, tenant := range []string{"acme", "globex"} {
		run := sendRaw(t, a.connectAs(t, tenant+"-alice"), "alice", events.Inbound{Text: "hello from " + tenant})
		evs := subs[tenant].run(t, run)
		if f := evs[len(evs)-1].Data.Result; f == nil || f.Payloads[0].Text != "echo: hello from "+tenant {
			t.Fatalf("%s: %+v", tenant, evs[len(evs)-1].Data)
		}
	}
	// Both runs are run 1 of their own account's AGENT_IN; each sender saw
	// only its own (another tenant's event would be a second final).
	for tenant, s := range subs {
		select {
		case m := <-s.ch:
			t.Fatalf("%s saw another event on %s", tenant, m.Subject)
		default:
		}
	}
	if vs := v.list(); len(vs) > 0 {
		t.Fatalf("permission violations: %v", vs)
	}
}
