package tools

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

// procFixture is a process table and one session's process tool in a
// temp workspace, run by the default (confined where possible) box.
type procFixture struct {
	t    *testing.T
	ps   *Processes
	tool Tool
	dir  string
}

func newProcFixture(t *testing.T, cfg ProcessConfig) *procFixture {
	t.Helper()
	if cfg.Box == nil {
		cfg.Box = defaultBox(t)
	}
	if cfg.Worker == "" {
		cfg.Worker = "w1"
	}
	ps, err := NewProcesses(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(ps.Close)
	dir := t.TempDir()
	tool, err := ps.Tool(Workspace{Dir: dir, Env: []string{"PATH=/usr/local/bin:/usr/bin:/bin", "LANG=C"}}, "acme:s1")
	if err != nil {
		t.Fatal(err)
	}
	return &procFixture{t: t, ps: ps, tool: tool, dir: dir}
}

func (f *procFixture) call(tool Tool, args map[string]any) (Result, error) {
	f.t.Helper()
	defer func() {
		if r := recover(); r != nil {
			f.t.Fatalf("process(%v) panicked: %v", args, r)
		}
	}()
	return tool.Call(context.Background(), Call{ID: "c", Name: "process", Args: args})
}

func (f *procFixture) must(args map[string]any) Result {
	f.t.Helper()
	res, err := f.call(f.tool, args)
	if err != nil {
		f.t.Fatalf("process(%v): %v", args, err)
	}
	return res
}

func (f *procFixture) start(command string) string {
	f.t.Helper()
	res := f.must(map[string]any{"action": "start", "command": command})
	return res.Details["sessionId"].(string)
}

// pollUntil polls id (waiting on the process, never sleeping) until its
// accumulated output contains want, or the process ends.
func (f *procFixture) pollUntil(id, want string) (string, Result) {
	f.t.Helper()
	var all strings.Builder
	deadline := time.Now().Add(20 * time.Second)
	for time.Now().Before(deadline) {
		res := f.must(map[string]any{"action": "poll", "sessionId": id, "timeout": 5000})
		text := res.Content[0].Text
		all.WriteString(text)
		if strings.Contains(all.String(), want) || res.Details["status"] != "running" {
			return all.String(), res
		}
	}
	f.t.Fatalf("%s: %q never came: %q", id, want, all.String())
	return "", Result{}
}

// waitEnded waits until every process of the session has ended, without
// looking it up through the tool: with a FinishedTTL of 1 ns a poll that
// comes after the end prunes the process and answers "not found" (a
// loaded machine ran `true` to its end before the first poll).
func (f *procFixture) waitEnded(session string) {
	f.t.Helper()
	f.ps.mu.Lock()
	procs := slices.Clone(f.ps.sessions[session])
	f.ps.mu.Unlock()
	if len(procs) == 0 {
		f.t.Fatalf("%s has no process", session)
	}
	for _, p := range procs {
		select {
		case <-p.done:
		case <-time.After(time.Minute):
			f.t.Fatalf("a process of %s never ended", session)
		}
	}
}

// TestProcessLifecycle: start a real background process, poll only what
// is new, write to its stdin, read its log, kill it; it is listed with
// its state throughout.
func TestProcessLifecycle(t *testing.T) {
	t.Parallel()
	f := newProcFixture(t, ProcessConfig{})
	id := f.start(`echo ready; while read line; do echo "got:$line"; done; echo bye`)
	if id != "p1@w1" {
		t.Fatalf("id %q", id)
	}
	out, _ := f.pollUntil(id, "ready")
	if !strings.Contains(out, "ready") || !strings.Contains(out, "Process p1@w1: running.") {
		t.Fatalf("first poll: %q", out)
	}
	f.must(map[string]any{"action": "write", "sessionId": id, "data": "one\n"})
	out, _ = f.pollUntil(id, "got:one")
	if strings.Contains(out, "ready") {
		t.Errorf("the second poll repeated old output: %q", out)
	}
	res := f.must(map[string]any{"action": "write", "sessionId": id, "data": "two\n", "eof": true})
	if !strings.Contains(res.Content[0].Text, "stdin is closed") {
		t.Errorf("eof: %q", res.Content[0].Text)
	}
	out, res = f.pollUntil(id, "bye")
	for res.Details["status"] == "running" {
		res = f.must(map[string]any{"action": "poll", "sessionId": id, "timeout": 5000})
	}
	if res.Details["status"] != "exited 0" || !strings.Contains(out, "got:two") {
		t.Fatalf("end: %v %q", res.Details, out)
	}
	log := f.must(map[string]any{"action": "log", "sessionId": id}).Content[0].Text
	if !strings.HasPrefix(log, "ready\ngot:one\ngot:two\nbye\n\nLines 0-3 of 4 kept") {
		t.Errorf("log: %q", log)
	}
	log = f.must(map[string]any{"action": "log", "sessionId": id, "offset": 1, "limit": 1}).Content[0].Text
	if !strings.HasPrefix(log, "got:one\n\nLines 1-1 of 4") {
		t.Errorf("log 1,1: %q", log)
	}
	if _, err := f.call(f.tool, map[string]any{"action": "write", "sessionId": id, "data": "x"}); err == nil || !strings.Contains(err.Error(), "stdin is closed") {
		t.Errorf("write after exit: %v", err)
	}

	long := f.start("sleep 600")
	list := f.must(map[string]any{"action": "list"}).Content[0].Text
	if !strings.Contains(list, "p1@w1  exited 0") || !strings.Contains(list, "p2@w1  running") {
		t.Errorf("list: %q", list)
	}
	res = f.must(map[string]any{"action": "kill", "sessionId": long})
	if !strings.Contains(res.Content[0].Text, "Killed p2@w1") {
		t.Errorf("kill: %q", res.Content[0].Text)
	}
	if res := f.must(map[string]any{"action": "poll", "sessionId": long}); res.Details["status"] != "killed" {
		t.Errorf("after kill: %v", res.Details)
	}
	f.must(map[string]any{"action": "remove", "sessionId": long})
	if _, err := f.call(f.tool, map[string]any{"action": "poll", "sessionId": long}); err == nil || !strings.Contains(err.Error(), "not found") {
		t.Errorf("after remove: %v", err)
	}
	if n := f.ps.Running(); n != 0 {
		t.Errorf("%d running", n)
	}
}

// TestProcessOtherWorker: a process id of another worker gets the error
// that says where it ran; one of this worker that is gone says so too.
func TestProcessOtherWorker(t *testing.T) {
	t.Parallel()
	f := newProcFixture(t, ProcessConfig{Worker: "w2"})
	_, err := f.call(f.tool, map[string]any{"action": "poll", "sessionId": "p1@w1"})
	if err == nil || !strings.Contains(err.Error(), `process "p1@w1" not found on this worker (w2): it ran on worker "w1"`) {
		t.Fatalf("%v", err)
	}
	_, err = f.call(f.tool, map[string]any{"action": "kill", "sessionId": "p9@w2"})
	if err == nil || !strings.Contains(err.Error(), "this session has no such process here") {
		t.Fatalf("%v", err)
	}
}

// TestProcessSessionsApart: a session sees only its own processes.
func TestProcessSessionsApart(t *testing.T) {
	t.Parallel()
	f := newProcFixture(t, ProcessConfig{})
	id := f.start("sleep 600")
	other, err := f.ps.Tool(Workspace{Dir: t.TempDir()}, "acme:s2")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.call(other, map[string]any{"action": "kill", "sessionId": id}); err == nil || !strings.Contains(err.Error(), "not found") {
		t.Fatalf("another session killed it: %v", err)
	}
	res, _ := f.call(other, map[string]any{"action": "list"})
	if !strings.Contains(res.Content[0].Text, "No background processes") {
		t.Errorf("another session lists: %q", res.Content[0].Text)
	}
	if n := f.ps.EndSession("acme:s1"); n != 1 {
		t.Errorf("EndSession killed %d", n)
	}
	if _, err := f.call(f.tool, map[string]any{"action": "poll", "sessionId": id}); err == nil {
		t.Error("the ended session's process is still there")
	}
}

// TestProcessSweep: a start prunes every session's finished processes,
// so a session that never calls process again does not keep them.
func TestProcessSweep(t *testing.T) {
	t.Parallel()
	f := newProcFixture(t, ProcessConfig{FinishedTTL: time.Nanosecond})
	f.start("true")
	f.waitEnded("acme:s1")
	other, err := f.ps.Tool(Workspace{Dir: t.TempDir(), Env: []string{"PATH=/usr/local/bin:/usr/bin:/bin"}}, "acme:s2")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.call(other, map[string]any{"action": "start", "command": "sleep 600"}); err != nil {
		t.Fatal(err)
	}
	f.ps.mu.Lock()
	_, kept := f.ps.sessions["acme:s1"]
	n := len(f.ps.sessions)
	f.ps.mu.Unlock()
	if kept || n != 1 {
		t.Errorf("after another session's start: acme:s1 kept %v, %d sessions", kept, n)
	}
}

// TestProcessListThenStart: list prunes a finished process and a start
// after it still counts the session's processes (list once left the
// pruned entries nil in the table and the start's count panicked).
func TestProcessListThenStart(t *testing.T) {
	t.Parallel()
	f := newProcFixture(t, ProcessConfig{FinishedTTL: time.Nanosecond})
	f.start("true")
	f.waitEnded("acme:s1")
	f.must(map[string]any{"action": "list"})
	f.start("true")
}

// TestProcessLimits: the per-session cap refuses a start with
// ErrProcessLimit; the output ring keeps its last bytes and says how much
// it dropped; the timeout kills.
func TestProcessLimits(t *testing.T) {
	t.Parallel()
	f := newProcFixture(t, ProcessConfig{PerSession: 1, OutputBytes: 1000})
	id := f.start("head -c 5000 /dev/zero | tr '\\0' x; echo; echo END")
	_, err := f.call(f.tool, map[string]any{"action": "start", "command": "sleep 1"})
	if id == "" || !errors.Is(err, ErrProcessLimit) {
		// The first may have ended already: then the second started.
		if err == nil {
			t.Log("the first process ended before the second start")
		} else {
			t.Fatalf("second start: %v", err)
		}
	}
	out, _ := f.pollUntil(id, "END")
	if !strings.Contains(out, "of output before this was dropped: the buffer keeps the last 1000B") || strings.Count(out, "x") > 2*1000 {
		t.Errorf("ring: %q", out)
	}

	g := newProcFixture(t, ProcessConfig{})
	id = g.start("sleep 600")
	_ = g.must(map[string]any{"action": "start", "command": "sleep 600", "timeout": 0.2})
	res := g.must(map[string]any{"action": "poll", "sessionId": "p2@w1", "timeout": 10000})
	for res.Details["status"] == "running" {
		res = g.must(map[string]any{"action": "poll", "sessionId": "p2@w1", "timeout": 10000})
	}
	if res.Details["status"] != "timed out" {
		t.Errorf("timeout: %v", res.Details)
	}
	g.ps.Close()
	if _, err := g.call(g.tool, map[string]any{"action": "poll", "sessionId": id}); err == nil || !strings.Contains(err.Error(), "not found") {
		t.Errorf("poll after Close: %v", err)
	}
	if n := g.ps.Running(); n != 0 {
		t.Errorf("%d running after Close", n)
	}
	if _, err := g.call(g.tool, map[string]any{"action": "start", "command": "true"}); err == nil || !strings.Contains(err.Error(), "stopping") {
		t.Errorf("start after Close: %v", err)
	}
}

// TestProcessConfinedToWorkspace: a background command writes its
// workspace and, where the platform confines, cannot write outside it.
func TestProcessConfinedToWorkspace(t *testing.T) {
	t.Parallel()
	confined, _ := boxes(t)
	if confined == nil {
		t.Skip("no confinement on this platform")
	}
	f := newProcFixture(t, ProcessConfig{Box: confined})
	outside := filepath.Join(t.TempDir(), "escaped")
	id := f.start("echo inside > here.txt; echo x > " + outside + " && echo WROTE || echo REFUSED")
	out, _ := f.pollUntil(id, "REFUSED")
	if strings.Contains(out, "WROTE") {
		t.Fatalf("wrote outside: %q", out)
	}
	if b, err := os.ReadFile(filepath.Join(f.dir, "here.txt")); err != nil || string(b) != "inside\n" {
		t.Errorf("workspace file: %q %v", b, err)
	}
}

// TestProcessArgs: hostile and malformed arguments are refused with a
// message, never a panic.
func TestProcessArgs(t *testing.T) {
	t.Parallel()
	f := newProcFixture(t, ProcessConfig{})
	cases := []struct {
		args map[string]any
		want string
	}{
		{nil, `missing required argument "action"`},
		{map[string]any{"action": 7}, `"action" must be a string`},
		{map[string]any{"action": "explode"}, "unknown action"},
		{map[string]any{"action": strings.Repeat("a", 1<<20)}, "unknown action"},
		{map[string]any{"action": "start"}, `missing required argument "command"`},
		{map[string]any{"action": "start", "command": "  "}, "command is empty"},
		{map[string]any{"action": "start", "command": "a\x00b"}, "NUL"},
		{map[string]any{"action": "start", "command": "true", "timeout": -1}, "positive number"},
		{map[string]any{"action": "start", "command": "true", "timeout": "soon"}, "must be a number"},
		{map[string]any{"action": "poll"}, `missing required argument "sessionId"`},
		{map[string]any{"action": "poll", "sessionId": ""}, "sessionId is empty"},
		{map[string]any{"action": "poll", "sessionId": strings.Repeat("p", 300)}, "not a process id"},
		{map[string]any{"action": "poll", "sessionId": []any{"p1"}}, "must be a string"},
		{map[string]any{"action": "log", "sessionId": "p1@w9"}, `it ran on worker "w9"`},
		{map[string]any{"action": "write", "sessionId": "p1@w1@x"}, "not found"},
	}
	for _, c := range cases {
		_, err := f.call(f.tool, c.args)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%.80v: %v, want %q", c.args, err, c.want)
		}
	}
	id := f.start("sleep 600")
	more := []struct {
		args map[string]any
		want string
	}{
		{map[string]any{"action": "poll", "sessionId": id, "timeout": -5}, "milliseconds"},
		{map[string]any{"action": "log", "sessionId": id, "offset": -1}, "offset must be"},
		{map[string]any{"action": "log", "sessionId": id, "limit": 0}, "limit 1 or more"},
		{map[string]any{"action": "log", "sessionId": id, "limit": 1.5}, "whole number"},
		{map[string]any{"action": "write", "sessionId": id}, "nothing to write"},
		{map[string]any{"action": "write", "sessionId": id, "data": strings.Repeat("x", maxWriteBytes+1)}, "send it in parts"},
		{map[string]any{"action": "write", "sessionId": id, "data": "x", "eof": "maybe"}, "must be a boolean"},
	}
	for _, c := range more {
		_, err := f.call(f.tool, c.args)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%.80v: %v, want %q", c.args, err, c.want)
		}
	}
}

// TestRing: since returns what came after an offset and counts what the
// cap dropped.
func TestRing(t *testing.T) {
	t.Parallel()
	r := newRing(4)
	r.Write([]byte("ab"))
	if s, d, e := r.since(0); s != "ab" || d != 0 || e != 2 {
		t.Fatalf("%q %d %d", s, d, e)
	}
	r.Write([]byte("cdef"))
	if s, d, e := r.since(2); s != "cdef" || d != 0 || e != 6 {
		t.Fatalf("%q %d %d", s, d, e)
	}
	if s, d, _ := r.since(0); s != "cdef" || d != 2 {
		t.Fatalf("%q %d", s, d)
	}
	r.Write([]byte("0123456789"))
	if s, d, e := r.since(6); s != "6789" || d != 6 || e != 16 {
		t.Fatalf("%q %d %d", s, d, e)
	}
	if s, d, _ := r.since(99); s != "" || d != 0 {
		t.Fatalf("%q %d", s, d)
	}
}

// TestProcessCloseWhileStarting: starts racing the worker's stop either
// run and are killed by it or are refused; none outlives Close, and the
// per-worker cap holds throughout.
func TestProcessCloseWhileStarting(t *testing.T) {
	t.Parallel()
	_, unconfined := boxes(t)
	ps, err := NewProcesses(ProcessConfig{Box: unconfined, Worker: "w1", PerWorker: 6})
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	done := make(chan error, 12)
	for i := range 12 {
		go func() {
			tool, _ := ps.Tool(Workspace{Dir: dir}, fmt.Sprintf("s%d", i%3))
			_, err := tool.Call(context.Background(), Call{Args: map[string]any{"action": "start", "command": "sleep 600"}})
			done <- err
		}()
	}
	for range 6 {
		<-done
	}
	ps.Close()
	for range 6 {
		<-done
	}
	if n := ps.Running(); n != 0 {
		t.Errorf("%d running after Close", n)
	}
}
