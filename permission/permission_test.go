package permission

import (
	"bytes"
	"errors"
	"flag"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/nats-io/nats-server/v2/server"

	"github.com/lanefleet/lanefleet/agentstore"
	"github.com/lanefleet/lanefleet/authstore"
	"github.com/lanefleet/lanefleet/budgetstore"
	"github.com/lanefleet/lanefleet/events"
	"github.com/lanefleet/lanefleet/hooks"
	"github.com/lanefleet/lanefleet/internal/deptest"
	"github.com/lanefleet/lanefleet/kvstore"
	"github.com/lanefleet/lanefleet/schedstore"
	"github.com/lanefleet/lanefleet/sessionindex"
	"github.com/lanefleet/lanefleet/tools/remote"
)

var update = flag.Bool("update", false, "rewrite testdata/*.golden")

// TestDeps keeps the package pure: it renders text and links no NATS.
func TestDeps(t *testing.T) {
	t.Parallel()
	deptest.NoImports(t,
		deptest.Contains("nats-io"),
		deptest.Exact("github.com/lanefleet/lanefleet/lanes"),
		deptest.Prefix("github.com/lanefleet/lanefleet/kvstore"),
		deptest.Exact("net"),
		deptest.Exact("os/exec"))
}

// TestNamesMatchTheAdapters: the names the permissions are written against
// are the ones the NATS adapters use.
func TestNamesMatchTheAdapters(t *testing.T) {
	t.Parallel()
	for _, c := range []struct{ here, there string }{
		{ToolService, remote.ServiceNameDefault},
		{ToolPrefix, remote.SubjectPrefix},
		{HookService, hooks.ServiceName},
		{HookPrefix, hooks.SubjectPrefix},
		{LanesBucket, kvstore.DefaultBucket},
		{RunsBucket, kvstore.DefaultRunsBucket},
		{AuthBucket, authstore.DefaultBucket},
		{BudgetsBucket, budgetstore.DefaultBucket},
		{SchedulesBucket, schedstore.DefaultBucket},
		{SchedulesStream, schedstore.Stream},
		{SchedulesPrefix, schedstore.SubjectPrefix},
		{AgentsBucket, agentstore.DefaultBucket},
		{AgentFilesBucket, agentstore.DefaultFilesBucket},
		{StepsStream, kvstore.StepsStream},
		{StepsPrefix, kvstore.StepsPrefix},
		{IndexStream, sessionindex.Stream},
		{IndexPrefix, sessionindex.Prefix},
	} {
		if c.here != c.there {
			t.Errorf("%q here, %q in the adapter", c.here, c.there)
		}
	}
	if HookResponseTTL != hooks.MaxTimeout {
		t.Errorf("a hook server may answer for %s, a worker waits up to %s", HookResponseTTL, hooks.MaxTimeout)
	}
}

// goldenUsers is one user per role and shape of grant.
var goldenUsers = []User{
	{Grant: Grant{Role: Worker, User: "worker"}},
	{Grant: Grant{Role: Sender, User: "alice", Sessions: []string{"alice", "agent:main:telegram:dm:42"}}},
	{Grant: Grant{Role: Sender, User: "frontend", AllSessions: true}, PasswordVar: "FRONTEND_PW"},
	{Grant: Grant{Role: Viewer, User: "auditor", Sessions: []string{"alice"}}},
	{Grant: Grant{Role: ToolServer, User: "tools", Tools: []string{"weather", "search"}}, NKey: "UDXU4RCSJNZOIQHZNWXHXORDPRTGNJAHAHFRGZNEEJCPQTT2M7NLCNF4"},
	{Grant: Grant{Role: HookServer, User: "hooks", Hooks: []string{"guard"}}},
	{Grant: Grant{Role: Admin, User: "root"}},
}

// TestRenderGolden pins the printed configuration of every role and
// format (go test -update rewrites testdata/*.golden).
func TestRenderGolden(t *testing.T) {
	t.Parallel()
	cases := map[string]func() (string, error){
		"authorization": func() (string, error) { return render(FormatAuthorization, goldenUsers...) },
		"users":         func() (string, error) { return render(FormatUsers, goldenUsers[1]) },
		"permissions":   func() (string, error) { return render(FormatPermissions, goldenUsers[0]) },
	}
	for name, f := range cases {
		got, err := f()
		if err != nil {
			t.Fatal(err)
		}
		path := filepath.Join("testdata", name+".golden")
		if *update {
			if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
				t.Fatal(err)
			}
			continue
		}
		want, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		if got != string(want) {
			t.Errorf("%s: got\n%s\nwant\n%s", name, got, want)
		}
	}
}

func render(f Format, users ...User) (string, error) {
	var b bytes.Buffer
	err := Render(&b, f, users...)
	return b.String(), err
}

// TestRenderedConfigLoads: the whole authorization block loads in
// nats-server, and each user gets exactly the permissions of its grant.
func TestRenderedConfigLoads(t *testing.T) {
	t.Parallel()
	var conf bytes.Buffer
	for _, u := range goldenUsers {
		if u.NKey != "" {
			continue
		}
		v := u.PasswordVar
		if v == "" {
			v = PasswordVar(u.User)
		}
		conf.WriteString(v + ": \"secret-" + u.User + "\"\n")
	}
	conf.WriteString("jetstream: enabled\n")
	if err := Render(&conf, FormatAuthorization, goldenUsers...); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "nats.conf")
	if err := os.WriteFile(path, conf.Bytes(), 0o600); err != nil {
		t.Fatal(err)
	}
	opts, err := server.ProcessConfigFile(path)
	if err != nil {
		t.Fatalf("%v\n%s", err, conf.String())
	}
	loaded := map[string]*server.Permissions{}
	for _, u := range opts.Users {
		if u.Password != "secret-"+u.Username {
			t.Errorf("user %s has password %q", u.Username, u.Password)
		}
		loaded[u.Username] = u.Permissions
	}
	for _, n := range opts.Nkeys {
		loaded[n.Nkey] = n.Permissions
	}
	for _, u := range goldenUsers {
		key := u.User
		if u.NKey != "" {
			key = u.NKey
		}
		got, ok := loaded[key]
		if !ok {
			t.Errorf("user %s not loaded", u.User)
			continue
		}
		want, _ := u.Permissions()
		if len(want.Publish) == 0 {
			if got.Publish == nil || len(got.Publish.Allow) != 0 || !slices.Equal(got.Publish.Deny, []string{">"}) {
				t.Errorf("%s: publish %+v, want nothing", u.User, got.Publish)
			}
		} else if !slices.Equal(got.Publish.Allow, want.Publish) {
			t.Errorf("%s: publish %v, want %v", u.User, got.Publish.Allow, want.Publish)
		}
		if !slices.Equal(got.Subscribe.Allow, want.Subscribe) {
			t.Errorf("%s: subscribe %v, want %v", u.User, got.Subscribe.Allow, want.Subscribe)
		}
		switch r := want.Responses; {
		case r == nil && got.Response != nil:
			t.Errorf("%s: responses %+v, want none", u.User, got.Response)
		case r != nil && (got.Response == nil || got.Response.MaxMsgs != r.Max ||
			r.Expires != 0 && got.Response.Expires != r.Expires):
			t.Errorf("%s: responses %+v, want %+v", u.User, got.Response, r)
		}
	}
}

// TestGrantSubjects: what each role may do, subject by subject.
func TestGrantSubjects(t *testing.T) {
	t.Parallel()
	enc, _ := events.KeyToken("a.b c")
	for _, c := range []struct {
		name     string
		g        Grant
		pub, sub []string
		resp     bool
	}{
		{"sender", Grant{Role: Sender, User: "alice", Sessions: []string{"alice", "a.b c"}},
			[]string{"agent.in.=" + enc[1:], "agent.in.alice", "agent.svc.=" + enc[1:] + ".>", "agent.svc.alice.>"},
			[]string{"_INBOX_alice.>", "agent.ev.=" + enc[1:] + ".>", "agent.ev.alice.>"}, false},
		{"a front end for every session", Grant{Role: Sender, User: "fe", AllSessions: true},
			[]string{"agent.in.*", "agent.svc.*.>"}, []string{"_INBOX_fe.>", "agent.ev.*.>"}, false},
		{"viewer: read operations only", Grant{Role: Viewer, User: "v", Sessions: []string{"alice"}},
			[]string{"agent.svc.alice.backlog", "agent.svc.alice.events", "agent.svc.alice.history", "agent.svc.alice.runs", "agent.svc.alice.settings"},
			[]string{"_INBOX_v.>", "agent.ev.alice.>"}, false},
		{"tool server", Grant{Role: ToolServer, User: "t", Tools: []string{"weather"}},
			nil, []string{"$SRV.*", "$SRV.*.lanefleet-tools", "$SRV.*.lanefleet-tools.*", "_INBOX_t.>", "agent.tool.weather", "agent.tool.weather.cancel"}, true},
		{"hook server", Grant{Role: HookServer, User: "h", Hooks: []string{"guard", "ctx"}},
			nil, []string{"$SRV.*", "$SRV.*.lanefleet-hooks", "$SRV.*.lanefleet-hooks.*", "_INBOX_h.>", "agent.hook.ctx.*", "agent.hook.guard.*"}, true},
		{"admin", Grant{Role: Admin, User: "root"}, []string{">"}, []string{">"}, false},
	} {
		p, err := c.g.Permissions()
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		if !slices.Equal(p.Publish, c.pub) || !slices.Equal(p.Subscribe, c.sub) || (p.Responses != nil) != c.resp {
			t.Errorf("%s:\n pub %q\nwant %q\n sub %q\nwant %q\nresponses %+v", c.name, p.Publish, c.pub, p.Subscribe, c.sub, p.Responses)
		}
	}
	if enc[0] != '=' {
		t.Fatalf("%q is not an encoded token", enc)
	}
}

// TestGrantValidation: a grant that is not what its role takes is refused.
func TestGrantValidation(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name string
		g    Grant
	}{
		{"unknown role", Grant{Role: "operator", User: "u"}},
		{"no user", Grant{Role: Worker}},
		{"user with a dot (inbox prefix)", Grant{Role: Worker, User: "a.b"}},
		{"user with a wildcard", Grant{Role: Worker, User: "a*"}},
		{"sender without sessions", Grant{Role: Sender, User: "u"}},
		{"sender with sessions and all", Grant{Role: Sender, User: "u", Sessions: []string{"a"}, AllSessions: true}},
		{"bad session key", Grant{Role: Sender, User: "u", Sessions: []string{""}}},
		{"viewer without sessions", Grant{Role: Viewer, User: "u"}},
		{"tool server without tools", Grant{Role: ToolServer, User: "u"}},
		{"tool name with a wildcard", Grant{Role: ToolServer, User: "u", Tools: []string{">"}}},
		{"tool name with a dot", Grant{Role: ToolServer, User: "u", Tools: []string{"a.b"}}},
		{"worker with sessions", Grant{Role: Worker, User: "u", Sessions: []string{"a"}}},
		{"hook server without hooks", Grant{Role: HookServer, User: "u"}},
		{"hook name with a wildcard", Grant{Role: HookServer, User: "u", Hooks: []string{"*"}}},
		{"tool server with hooks", Grant{Role: ToolServer, User: "u", Tools: []string{"t"}, Hooks: []string{"h"}}},
		{"sender with tools", Grant{Role: Sender, User: "u", Sessions: []string{"a"}, Tools: []string{"t"}}},
	} {
		err := c.g.Validate()
		if err == nil {
			t.Errorf("%s: accepted", c.name)
			continue
		}
		if !errors.Is(err, ErrBadGrant) && !errors.Is(err, ErrUnknownRole) {
			t.Errorf("%s: %v is neither ErrBadGrant nor ErrUnknownRole", c.name, err)
		}
	}
	for _, c := range []struct {
		name string
		f    Format
		u    []User
	}{
		{"no users", FormatAuthorization, nil},
		{"a user twice", FormatUsers, []User{goldenUsers[0], goldenUsers[0]}},
		{"permissions of two users", FormatPermissions, goldenUsers[:2]},
		{"bad nkey", FormatUsers, []User{{Grant: goldenUsers[0].Grant, NKey: "SUAB"}}},
		{"bad password variable", FormatUsers, []User{{Grant: goldenUsers[0].Grant, PasswordVar: "A B"}}},
	} {
		if out, err := render(c.f, c.u...); err == nil || out != "" {
			t.Errorf("%s: %q, %v", c.name, out, err)
		}
	}
}

// FuzzSessionGrant: any session key a sender is granted renders to
// configuration that loads and allows exactly that session's subjects:
// no key can add a wildcard, a subject or a line to the file.
func FuzzSessionGrant(f *testing.F) {
	for _, s := range []string{"alice", "a.b", "*", ">", "x\n}\nauthorization {", `"quoted"`, "# comment", "日本", "$VAR", "a b\tc"} {
		f.Add(s)
	}
	dir := f.TempDir()
	f.Fuzz(func(t *testing.T, session string) {
		tok, err := events.KeyToken(session)
		if err != nil {
			return
		}
		u := User{Grant: Grant{Role: Sender, User: "s", Sessions: []string{session}}, PasswordVar: "PW"}
		out, err := render(FormatAuthorization, u)
		if err != nil {
			t.Fatal(err)
		}
		path := filepath.Join(dir, "fuzz.conf")
		if err := os.WriteFile(path, []byte("PW: \"x\"\n"+out), 0o600); err != nil {
			t.Fatal(err)
		}
		opts, err := server.ProcessConfigFile(path)
		if err != nil {
			t.Fatalf("%v\n%s", err, out)
		}
		if len(opts.Users) != 1 {
			t.Fatalf("%d users from\n%s", len(opts.Users), out)
		}
		p := opts.Users[0].Permissions
		wantPub := []string{"agent.in." + tok, "agent.svc." + tok + ".>"}
		wantSub := []string{"_INBOX_s.>", "agent.ev." + tok + ".>"}
		slices.Sort(wantPub)
		slices.Sort(wantSub)
		if !slices.Equal(p.Publish.Allow, wantPub) || !slices.Equal(p.Subscribe.Allow, wantSub) {
			t.Fatalf("session %q: pub %q sub %q", session, p.Publish.Allow, p.Subscribe.Allow)
		}
		if strings.ContainsAny(tok, ".*> \t\n") {
			t.Fatalf("token %q", tok)
		}
	})
}

// TestAdminServiceIsAdminOnly: the admin service's subjects are requested
// by the admin role alone (a sender of every session, a viewer, a tool
// server cannot publish to them), served by workers, and a worker may put
// a replayed dead letter back on a lane.
func TestAdminServiceIsAdminOnly(t *testing.T) {
	t.Parallel()
	// Every worker's stats come in micro's STATS of the admin service
	// (Client.Workers): admin only as well.
	subjects := []string{AdminPrefix + "sessions", AdminPrefix + "dlq.replay", AdminPrefix + "auth.reset", AdminPrefix + "approvals",
		AdminPrefix + "fleet", "$SRV.STATS." + AdminService}
	for _, g := range []Grant{
		{Role: Sender, User: "fe", AllSessions: true},
		{Role: Viewer, User: "v", AllSessions: true},
		{Role: ToolServer, User: "t", Tools: []string{"x"}},
		{Role: Worker, User: "w"},
	} {
		p, err := g.Permissions()
		if err != nil {
			t.Fatal(err)
		}
		for _, subj := range subjects {
			if matchesAny(p.Publish, subj) {
				t.Errorf("%s may publish to %s", g.Role, subj)
			}
		}
	}
	w, _ := Grant{Role: Worker, User: "w"}.Permissions()
	a, _ := Grant{Role: Admin, User: "root"}.Permissions()
	for _, subj := range subjects {
		if !matchesAny(w.Subscribe, subj) || !matchesAny(a.Publish, subj) {
			t.Errorf("%s: the worker does not serve it or the admin cannot ask", subj)
		}
	}
	for _, subj := range []string{"$SRV.PING." + AdminService, "$SRV.INFO." + AdminService + ".id1", "$SRV.STATS." + AdminService} {
		if !matchesAny(w.Subscribe, subj) {
			t.Errorf("the worker's admin service cannot answer %s", subj)
		}
	}
	if !matchesAny(w.Publish, "agent.in.alice") || matchesAny(w.Publish, "agent.in.a.b") {
		t.Errorf("worker publish %q: a replay goes to a lane, and only to one", w.Publish)
	}
}

// matchesAny reports whether a NATS subject pattern of patterns matches
// subject ('*' one token, '>' the rest).
func matchesAny(patterns []string, subject string) bool {
	for _, p := range patterns {
		pt, st := strings.Split(p, "."), strings.Split(subject, ".")
		ok := true
		for i, tok := range pt {
			if tok == ">" {
				ok = len(st) > i
				break
			}
			if i >= len(st) || tok != "*" && tok != st[i] {
				ok = false
				break
			}
			if i == len(pt)-1 && len(st) != len(pt) {
				ok = false
			}
		}
		if ok {
			return true
		}
	}
	return false
}
