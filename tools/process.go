package tools

import (
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/lanefleet/lanefleet/internal/pathless"
	"github.com/lanefleet/lanefleet/message"
	"github.com/lanefleet/lanefleet/provider"
	"github.com/lanefleet/lanefleet/sandbox"
)

// Defaults of ProcessConfig, used for every limit left zero.
const (
	// DefaultProcessTimeout is how long a background process may run when
	// the model gives no timeout: the reference's 1800 s.
	DefaultProcessTimeout = 30 * time.Minute
	// DefaultMaxProcessTimeout caps the timeout the model may ask for.
	DefaultMaxProcessTimeout = 2 * time.Hour
	// DefaultProcessOutputBytes is each process's output buffer: the last
	// bytes of its merged stdout and stderr are kept, the rest dropped
	// (and counted).
	DefaultProcessOutputBytes = 256 << 10
	// DefaultProcessesPerSession caps one session's running processes on
	// a worker.
	DefaultProcessesPerSession = 4
	// DefaultProcessesPerWorker caps every session's running processes on
	// a worker together.
	DefaultProcessesPerWorker = 64
	// DefaultFinishedProcesses is how many finished processes a session
	// keeps for poll and log; the oldest goes first.
	DefaultFinishedProcesses = 16
	// DefaultFinishedTTL is how long a finished process stays for poll and
	// log.
	DefaultFinishedTTL = 30 * time.Minute
)

// Bounds of one process call's arguments and answer.
const (
	// maxWriteBytes caps the data of one write.
	maxWriteBytes = 64 << 10
	// writeTimeout bounds a write to a process that does not read.
	writeTimeout = 5 * time.Second
	// maxPollWait caps the time a poll waits for new output.
	maxPollWait = 60 * time.Second
	// maxAnswerBytes caps the output one poll or log returns: its end is
	// kept.
	maxAnswerBytes = 50 << 10
	// defaultLogLines is what log returns without offset and limit.
	defaultLogLines = 200
	// maxProcessIDBytes bounds a sessionId argument.
	maxProcessIDBytes = 256
)

// ProcessConfig configures [NewProcesses]. Zero limits take the Default*
// values.
type ProcessConfig struct {
	// Box starts every command, as for exec (required).
	Box *sandbox.Sandbox
	// Worker names this worker in process ids ("p3@<worker>"), so a call
	// that names a process of another worker is told where it ran.
	Worker string
	// Timeout and MaxTimeout: a process's default and largest lifetime.
	Timeout, MaxTimeout time.Duration
	// OutputBytes caps each process's kept output.
	OutputBytes int
	// PerSession and PerWorker cap the running processes of one session
	// and of the worker.
	PerSession, PerWorker int
	// Finished caps the finished processes a session keeps, FinishedTTL
	// how long it keeps each.
	Finished    int
	FinishedTTL time.Duration
}

// Processes holds a worker's background processes (the process tool), by
// session. State is the worker's, in memory: a process lives on the worker
// that started it until it exits, its timeout passes, it is killed
// (the tool's kill or remove), its session is reset or forgotten on this
// worker ([Processes.EndSession]) or the worker stops ([Processes.Close]).
// A turn of the session on another worker does not see it: the tool says
// where it ran. It is safe for concurrent use.
type Processes struct {
	cfg ProcessConfig

	mu       sync.Mutex
	next     int
	sessions map[string][]*bgProc // by session key, oldest first
	running  int
	closed   bool
	wg       sync.WaitGroup // one per process: its waiter
}

// NewProcesses returns an empty process table.
func NewProcesses(cfg ProcessConfig) (*Processes, error) {
	if cfg.Box == nil {
		return nil, errors.New("tools: ProcessConfig.Box is required (sandbox.Config.Unconfined for none)")
	}
	if strings.ContainsAny(cfg.Worker, "@ \t\n") {
		return nil, fmt.Errorf("tools: ProcessConfig.Worker %q has a space or '@'", cfg.Worker)
	}
	durs := []struct {
		v   *time.Duration
		def time.Duration
	}{{&cfg.Timeout, DefaultProcessTimeout}, {&cfg.MaxTimeout, DefaultMaxProcessTimeout}, {&cfg.FinishedTTL, DefaultFinishedTTL}}
	for _, d := range durs {
		if *d.v < 0 {
			return nil, errors.New("tools: a ProcessConfig duration is negative")
		}
		if *d.v == 0 {
			*d.v = d.def
		}
	}
	cfg.Timeout = min(cfg.Timeout, cfg.MaxTimeout)
	ints := []struct {
		v   *int
		def int
	}{{&cfg.OutputBytes, DefaultProcessOutputBytes}, {&cfg.PerSession, DefaultProcessesPerSession},
		{&cfg.PerWorker, DefaultProcessesPerWorker}, {&cfg.Finished, DefaultFinishedProcesses}}
	for _, n := range ints {
		if *n.v < 0 {
			return nil, errors.New("tools: a ProcessConfig limit is negative")
		}
		if *n.v == 0 {
			*n.v = n.def
		}
	}
	return &Processes{cfg: cfg, sessions: map[string][]*bgProc{}}, nil
}

// bgProc is one background process.
type bgProc struct {
	id      string
	command string
	cmd     *sandbox.Cmd
	out     *ring
	stdin   *os.File // nil once closed
	started time.Time
	timeout time.Duration
	done    chan struct{} // closed when it ended and its output is in

	// Under Processes.mu.
	polled   int64 // output offset of the last poll's end
	ended    time.Time
	exitCode int
	signal   string
	timedOut bool
	killed   bool
}

func (p *bgProc) running() bool {
	select {
	case <-p.done:
		return false
	default:
		return true
	}
}

// EndSession kills and forgets every process of session (its reset or
// forget), waits for them to end, and returns how many were running.
func (ps *Processes) EndSession(session string) int {
	ps.mu.Lock()
	list := ps.sessions[session]
	delete(ps.sessions, session)
	ps.mu.Unlock()
	n := 0
	for _, p := range list {
		if p.running() {
			n++
			ps.kill(p)
		}
	}
	for _, p := range list {
		<-p.done
	}
	return n
}

// Close kills every process and waits for them; later starts fail.
func (ps *Processes) Close() {
	ps.mu.Lock()
	ps.closed = true
	var all []*bgProc
	for _, list := range ps.sessions {
		all = append(all, list...)
	}
	ps.sessions = map[string][]*bgProc{}
	ps.mu.Unlock()
	for _, p := range all {
		ps.kill(p)
	}
	ps.wg.Wait()
}

// Running returns the number of running processes.
func (ps *Processes) Running() int {
	ps.mu.Lock()
	defer ps.mu.Unlock()
	return ps.running
}

func (ps *Processes) kill(p *bgProc) {
	ps.mu.Lock()
	if p.running() {
		p.killed = true
	}
	ps.mu.Unlock()
	p.cmd.Kill()
}

// Tool returns the process tool of one run of session, in w: its
// commands run in w.Dir with w's environment, as exec's.
func (ps *Processes) Tool(w Workspace, session string) (Tool, error) {
	v, err := w.validate()
	if err != nil {
		return nil, err
	}
	return &processTool{ps: ps, w: v, session: session}, nil
}

// processTool is the built-in "process" of one session.
type processTool struct {
	ps      *Processes
	w       *ws
	session string
}

// Process tool actions.
const (
	actStart  = "start"
	actList   = "list"
	actPoll   = "poll"
	actLog    = "log"
	actWrite  = "write"
	actKill   = "kill"
	actRemove = "remove"
)

var processActions = []string{actStart, actList, actPoll, actLog, actWrite, actKill, actRemove}

func (t *processTool) Spec() provider.Tool {
	c := t.ps.cfg
	desc := fmt.Sprintf("Run shell commands in the background and manage them. action start {command, timeout?} runs `sh -c command` in the workspace, "+
		"confined like exec, and returns its sessionId at once; list shows this session's processes; poll {sessionId, timeout?} returns the output since the last poll "+
		"(waiting up to timeout ms, at most %d, for some) and whether it exited; log {sessionId, offset?, limit?} returns kept output by lines (the last %d without offset and limit); "+
		"write {sessionId, data, eof?} sends data to its stdin (eof closes it); kill {sessionId} kills it and what it started; remove {sessionId} kills it if running and forgets it. "+
		"A process may run %s (timeout, in seconds, up to %s); at most %d run at once per session; the last %s of its output is kept. "+
		"Processes live on the worker that started them: a later turn that runs on another worker does not see them.",
		maxPollWait.Milliseconds(), defaultLogLines, secs(c.Timeout), secs(c.MaxTimeout), c.PerSession, formatSize(int64(c.OutputBytes)))
	return provider.Tool{
		Name:        "process",
		Description: desc,
		Parameters: map[string]any{
			"type": "object",
			"properties": map[string]any{
				"action":    map[string]any{"type": "string", "enum": toAny(processActions), "description": "What to do"},
				"command":   map[string]any{"type": "string", "description": "start: the shell command"},
				"sessionId": map[string]any{"type": "string", "description": "The process's id, as start and list return it"},
				"timeout":   map[string]any{"type": "number", "description": "start: lifetime in seconds; poll: milliseconds to wait for output"},
				"data":      map[string]any{"type": "string", "description": "write: text for the process's stdin"},
				"eof":       map[string]any{"type": "boolean", "description": "write: close stdin after data"},
				"offset":    map[string]any{"type": "number", "description": "log: first line (0-based) of the kept output"},
				"limit":     map[string]any{"type": "number", "description": "log: most lines"},
			},
			"required": []any{"action"},
		},
	}
}

func toAny(s []string) []any {
	out := make([]any, len(s))
	for i, v := range s {
		out[i] = v
	}
	return out
}

// Call implements Tool.
func (t *processTool) Call(ctx context.Context, call Call) (Result, error) {
	action, _, err := stringArg(call.Args, "action", true)
	if err != nil {
		return Result{}, err
	}
	switch action {
	case actStart:
		return t.start(ctx, call.Args)
	case actList:
		return t.list(), nil
	}
	if !slices.Contains(processActions, action) {
		return Result{}, fmt.Errorf("unknown action %.40q: use one of %s", action, strings.Join(processActions, ", "))
	}
	p, err := t.lookup(call.Args)
	if err != nil {
		return Result{}, err
	}
	switch action {
	case actPoll:
		return t.poll(ctx, p, call.Args)
	case actLog:
		return t.log(p, call.Args)
	case actWrite:
		return t.write(p, call.Args)
	case actKill:
		return t.killOne(p), nil
	default: // actRemove
		return t.remove(p), nil
	}
}

// ErrProcessLimit is returned (wrapped) when a session or the worker runs
// as many processes as allowed.
var ErrProcessLimit = errors.New("too many background processes")

func (t *processTool) start(ctx context.Context, args map[string]any) (Result, error) {
	c := t.ps.cfg
	command, timeout, notes, err := commandArgs(args, c.Timeout, c.MaxTimeout)
	if err != nil {
		return Result{}, err
	}
	ps := t.ps
	id, err := ps.reserve(t.session)
	if err != nil {
		return Result{}, err
	}
	p, err := t.spawn(ctx, id, command, timeout)
	if err != nil {
		ps.mu.Lock()
		ps.running--
		ps.mu.Unlock()
		ps.wg.Done()
		return Result{}, err
	}
	ps.mu.Lock()
	if ps.closed {
		ps.mu.Unlock()
		p.cmd.Kill()
		return Result{}, errors.New("this worker is stopping: the process was killed")
	}
	ps.sessions[t.session] = append(ps.sessions[t.session], p)
	ps.sweep(time.Now())
	ps.mu.Unlock()
	text := fmt.Sprintf("Started %s (sessionId %q): %s\nIt may run %s. Use process poll with this sessionId for its output.", id, id, command, secs(timeout))
	if len(notes) > 0 {
		text += "\n" + strings.Join(notes, "\n")
	}
	return Result{Content: []message.Block{message.Text(text)},
		Details: map[string]any{"status": "running", "sessionId": id, "timeoutMs": timeout.Milliseconds()}}, nil
}

// reserve takes a slot for a new process of session, within the session's
// and the worker's limits, and names it; the caller gives the slot back
// (running and wg) when the start fails.
func (ps *Processes) reserve(session string) (string, error) {
	c := ps.cfg
	ps.mu.Lock()
	if ps.closed {
		ps.mu.Unlock()
		return "", errors.New("this worker is stopping: no process can start")
	}
	mine := 0
	for _, p := range ps.sessions[session] {
		if p.running() {
			mine++
		}
	}
	if mine >= c.PerSession {
		ps.mu.Unlock()
		return "", fmt.Errorf("%w: this session runs %d, the most allowed; kill or wait for one first", ErrProcessLimit, mine)
	}
	if n := ps.running; n >= c.PerWorker {
		ps.mu.Unlock()
		return "", fmt.Errorf("%w: this worker runs %d for all sessions, the most allowed; try again later", ErrProcessLimit, n)
	}
	ps.next++
	id := "p" + strconv.Itoa(ps.next)
	if c.Worker != "" {
		id += "@" + c.Worker
	}
	// Reserved, and given back if the start fails: a slot, and the
	// waiter's place in wg (added under mu before Close can wait).
	ps.running++
	ps.wg.Add(1)
	ps.mu.Unlock()
	return id, nil
}

// spawn starts command and its waiter.
func (t *processTool) spawn(ctx context.Context, id, command string, timeout time.Duration) (*bgProc, error) {
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("process not started: the run was aborted (%v)", err)
	}
	inR, inW, err := os.Pipe()
	if err != nil {
		return nil, fmt.Errorf("cannot start the process: %v", err)
	}
	outR, outW, err := os.Pipe()
	if err != nil {
		inR.Close()
		inW.Close()
		return nil, fmt.Errorf("cannot start the process: %v", err)
	}
	p := &bgProc{id: id, command: command, out: newRing(t.ps.cfg.OutputBytes), stdin: inW, timeout: timeout, done: make(chan struct{})}
	p.cmd = t.ps.cfg.Box.Command(t.w.Dir, commandEnv(t.w.Env, t.w.NamedEnv, command), t.w.Shell, t.w.Shell, "-c", command)
	p.cmd.Stdin, p.cmd.Stdout, p.cmd.Stderr = inR, outW, outW
	p.started = time.Now()
	err = p.cmd.Start(ctx)
	inR.Close() // the process holds its copies
	outW.Close()
	if err != nil {
		inW.Close()
		outR.Close()
		return nil, fmt.Errorf("cannot start the process: %v", pathless.Err(err))
	}
	copied := make(chan struct{})
	go func() {
		defer close(copied)
		buf := make([]byte, 32<<10)
		for {
			n, err := outR.Read(buf)
			if n > 0 {
				p.out.Write(buf[:n]) //nolint:errcheck // never fails
			}
			if err != nil {
				return
			}
		}
	}()
	go t.ps.waitFor(p, outR, copied) // its wg place was added by start
	return p, nil
}

// waitFor waits for p to exit or its timeout, then for its output (at most
// drainGrace after the exit: a process it left holding the pipe is cut
// off), and records how it ended.
func (ps *Processes) waitFor(p *bgProc, outR *os.File, copied <-chan struct{}) {
	defer ps.wg.Done()
	waited := make(chan struct{})
	go func() { p.cmd.Wait(); close(waited) }() //nolint:errcheck // the state says how it ended
	timer := time.NewTimer(p.timeout)
	timedOut := false
	select {
	case <-waited:
	case <-timer.C:
		timedOut = true
		p.cmd.Kill()
		<-waited
	}
	timer.Stop()
	select {
	case <-copied:
	case <-time.After(drainGrace):
	}
	outR.Close()
	<-copied
	state := p.cmd.ProcessState()
	ps.mu.Lock()
	p.ended = time.Now()
	p.timedOut = timedOut
	if state != nil {
		p.exitCode, p.signal = state.ExitCode(), exitSignal(state)
	}
	if p.stdin != nil {
		p.stdin.Close()
		p.stdin = nil
	}
	ps.running--
	close(p.done)
	ps.mu.Unlock()
}

// prune drops the finished processes of list beyond the Finished cap
// (oldest first) and those finished longer than FinishedTTL ago. Under mu.
func (ps *Processes) prune(list []*bgProc, now time.Time) []*bgProc {
	finished := 0
	for _, p := range list {
		if !p.running() {
			finished++
		}
	}
	out := list[:0]
	for _, p := range list {
		if !p.running() && (finished > ps.cfg.Finished || now.Sub(p.ended) > ps.cfg.FinishedTTL) {
			finished--
			continue
		}
		out = append(out, p)
	}
	clear(list[len(out):])
	return out
}

// pruneSession prunes session's list in place, forgetting the session
// when none is left, and returns the list. Under mu.
func (ps *Processes) pruneSession(session string, now time.Time) []*bgProc {
	list := ps.prune(ps.sessions[session], now)
	if len(list) == 0 {
		delete(ps.sessions, session)
	} else {
		ps.sessions[session] = list
	}
	return list
}

// sweep prunes every session, so that one that never calls process again
// (and is never reset here) does not keep its finished processes and their
// output past FinishedTTL. Under mu; start calls it.
func (ps *Processes) sweep(now time.Time) {
	for s := range ps.sessions {
		ps.pruneSession(s, now)
	}
}

// lookup finds the process the sessionId argument names among the
// session's, or says why it cannot be here.
func (t *processTool) lookup(args map[string]any) (*bgProc, error) {
	id, _, err := stringArg(args, "sessionId", true)
	if err != nil {
		return nil, err
	}
	id = strings.TrimSpace(id)
	if id == "" {
		return nil, errors.New("sessionId is empty: give a process's id as start or list returned it")
	}
	if len(id) > maxProcessIDBytes {
		return nil, fmt.Errorf("sessionId is %d bytes, not a process id (at most %d)", len(id), maxProcessIDBytes)
	}
	ps := t.ps
	ps.mu.Lock()
	for _, p := range ps.pruneSession(t.session, time.Now()) {
		if p.id == id {
			ps.mu.Unlock()
			return p, nil
		}
	}
	ps.mu.Unlock()
	return nil, processNotFound(id, ps.cfg.Worker)
}

// processNotFound explains a process id this session does not have here.
func processNotFound(id, worker string) error {
	if _, other, ok := strings.Cut(id, "@"); ok && other != worker {
		return fmt.Errorf("process %q not found on this worker (%s): it ran on worker %q, and a background process stays on the worker that started it, ending with it; "+
			"this turn runs on another worker (that one has stopped, or handed the session over). Start the command again if you still need it", id, worker, other)
	}
	return fmt.Errorf("process %q not found: this session has no such process here (it was removed, expired after it finished, or ended with a session reset); "+
		"use process list to see this session's processes", id)
}

func (t *processTool) list() Result {
	ps := t.ps
	ps.mu.Lock()
	now := time.Now()
	list := ps.pruneSession(t.session, now)
	var lines []string
	var rows []any
	for _, p := range list {
		status := p.status()
		lines = append(lines, fmt.Sprintf("%s  %s  %s  %s", p.id, status, durationText(p.runtime(now)), oneLine(p.command, 80)))
		rows = append(rows, map[string]any{"sessionId": p.id, "status": status, "command": oneLine(p.command, 200), "runtimeMs": p.runtime(now).Milliseconds()})
	}
	ps.mu.Unlock()
	if len(lines) == 0 {
		return Result{Content: []message.Block{message.Text("No background processes in this session on this worker.")}, Details: map[string]any{"processes": []any{}}}
	}
	return Result{Content: []message.Block{message.Text(strings.Join(lines, "\n"))}, Details: map[string]any{"processes": rows}}
}

// status is "running", "exited N", "killed", "timed out" or "signal S".
// Under mu.
func (p *bgProc) status() string {
	switch {
	case p.running():
		return "running"
	case p.timedOut:
		return "timed out"
	case p.killed:
		return "killed"
	case p.signal != "":
		return "signal " + p.signal
	}
	return "exited " + strconv.Itoa(p.exitCode)
}

func (p *bgProc) runtime(now time.Time) time.Duration {
	if p.running() {
		return now.Sub(p.started)
	}
	return p.ended.Sub(p.started)
}

func (t *processTool) poll(ctx context.Context, p *bgProc, args map[string]any) (Result, error) {
	wait := time.Duration(0)
	switch ms, ok, err := numberArg(args, "timeout"); {
	case err != nil:
		return Result{}, err
	case ok && ms < 0:
		return Result{}, fmt.Errorf("timeout must be a number of milliseconds from 0 to %d, got %v", maxPollWait.Milliseconds(), ms)
	case ok:
		wait = min(time.Duration(ms*float64(time.Millisecond)), maxPollWait)
	}
	ps := t.ps
	ps.mu.Lock()
	from := p.polled
	ps.mu.Unlock()
	if wait > 0 && p.out.size() <= from && p.running() {
		timer := time.NewTimer(wait)
		select {
		case <-p.out.wait():
		case <-p.done:
		case <-timer.C:
		case <-ctx.Done():
		}
		timer.Stop()
	}
	text, dropped, end := p.out.since(from)
	ps.mu.Lock()
	p.polled = max(p.polled, end)
	status := p.status()
	exitCode := p.exitCode
	ps.mu.Unlock()
	text, cut := keepEnd(text, maxAnswerBytes)
	var b strings.Builder
	if dropped+int64(cut) > 0 {
		fmt.Fprintf(&b, "[%s of output before this was dropped: the buffer keeps the last %s]\n", formatSize(dropped+int64(cut)), formatSize(int64(ps.cfg.OutputBytes)))
	}
	if text == "" {
		b.WriteString("(no new output)")
	} else {
		b.WriteString(strings.TrimSuffix(text, "\n"))
	}
	b.WriteString("\n\nProcess " + p.id + ": " + status + ".")
	details := map[string]any{"sessionId": p.id, "status": status, "outputBytes": end}
	if status != "running" {
		details["exitCode"] = int64(exitCode)
	}
	return Result{Content: []message.Block{message.Text(b.String())}, Details: details}, nil
}

func (t *processTool) log(p *bgProc, args map[string]any) (Result, error) {
	offset, hasOffset, err := intArg(args, "offset")
	if err != nil {
		return Result{}, err
	}
	limit, hasLimit, err := intArg(args, "limit")
	if err != nil {
		return Result{}, err
	}
	if offset < 0 || limit < 0 || (hasLimit && limit == 0) {
		return Result{}, errors.New("offset must be 0 or more and limit 1 or more")
	}
	text, dropped, _ := p.out.since(0)
	lines := strings.SplitAfter(text, "\n")
	if n := len(lines); n > 0 && lines[n-1] == "" {
		lines = lines[:n-1]
	}
	var from, to int
	switch {
	case !hasOffset && !hasLimit:
		from, to = max(len(lines)-defaultLogLines, 0), len(lines)
	case !hasOffset:
		from, to = max(len(lines)-int(limit), 0), len(lines)
	default:
		from = int(min(offset, int64(len(lines))))
		to = len(lines)
		if hasLimit {
			to = int(min(int64(from)+limit, int64(len(lines))))
		}
	}
	body, cut := keepEnd(strings.Join(lines[from:to], ""), maxAnswerBytes)
	var b strings.Builder
	if dropped > 0 {
		fmt.Fprintf(&b, "[the first %s of output were dropped: the buffer keeps the last %s; line 0 is the first kept]\n", formatSize(dropped), formatSize(int64(t.ps.cfg.OutputBytes)))
	}
	if cut > 0 {
		fmt.Fprintf(&b, "[%s of these lines cut: ask for fewer lines]\n", formatSize(int64(cut)))
	}
	if body == "" {
		b.WriteString("(no output in that range)")
	} else {
		b.WriteString(strings.TrimSuffix(body, "\n"))
	}
	t.ps.mu.Lock()
	status := p.status()
	t.ps.mu.Unlock()
	fmt.Fprintf(&b, "\n\nLines %d-%d of %d kept; process %s: %s.", from, max(to-1, from), len(lines), p.id, status)
	return Result{Content: []message.Block{message.Text(b.String())},
		Details: map[string]any{"sessionId": p.id, "status": status, "from": int64(from), "to": int64(to), "lines": int64(len(lines))}}, nil
}

func (t *processTool) write(p *bgProc, args map[string]any) (Result, error) {
	data, _, err := stringArg(args, "data", false)
	if err != nil {
		return Result{}, err
	}
	if len(data) > maxWriteBytes {
		return Result{}, fmt.Errorf("data is %s, more than one write takes (%s): send it in parts", formatSize(int64(len(data))), formatSize(maxWriteBytes))
	}
	eof, err := boolArg(args, "eof")
	if err != nil {
		return Result{}, err
	}
	if data == "" && !eof {
		return Result{}, errors.New("nothing to write: give data, or eof: true to close stdin")
	}
	ps := t.ps
	ps.mu.Lock()
	in := p.stdin
	if eof {
		p.stdin = nil
	}
	ps.mu.Unlock()
	if in == nil {
		return Result{}, fmt.Errorf("process %s: its stdin is closed (it exited, or eof was sent)", p.id)
	}
	if data != "" {
		in.SetWriteDeadline(time.Now().Add(writeTimeout)) //nolint:errcheck // a pipe supports deadlines
		if _, err := in.WriteString(data); err != nil {
			if eof {
				in.Close()
			}
			if errors.Is(err, os.ErrDeadlineExceeded) {
				return Result{}, fmt.Errorf("process %s does not read its stdin: part of the data was not written within %s", p.id, writeTimeout)
			}
			return Result{}, fmt.Errorf("process %s: write to stdin: %v", p.id, pathless.Err(err))
		}
	}
	text := fmt.Sprintf("Wrote %d bytes to %s.", len(data), p.id)
	if eof {
		in.Close()
		text += " Its stdin is closed."
	}
	return Result{Content: []message.Block{message.Text(text)}, Details: map[string]any{"sessionId": p.id, "bytes": int64(len(data)), "eof": eof}}, nil
}

func (t *processTool) killOne(p *bgProc) Result {
	if !p.running() {
		t.ps.mu.Lock()
		status := p.status()
		t.ps.mu.Unlock()
		return Result{Content: []message.Block{message.Text(fmt.Sprintf("Process %s had already ended: %s.", p.id, status))}, Details: map[string]any{"sessionId": p.id, "status": status}}
	}
	t.ps.kill(p)
	<-p.done
	return Result{Content: []message.Block{message.Text(fmt.Sprintf("Killed %s and the processes it started.", p.id))}, Details: map[string]any{"sessionId": p.id, "status": "killed"}}
}

func (t *processTool) remove(p *bgProc) Result {
	wasRunning := p.running()
	if wasRunning {
		t.ps.kill(p)
		<-p.done
	}
	ps := t.ps
	ps.mu.Lock()
	list := ps.sessions[t.session]
	if i := slices.Index(list, p); i >= 0 {
		list = slices.Delete(list, i, i+1)
	}
	if len(list) == 0 {
		delete(ps.sessions, t.session)
	} else {
		ps.sessions[t.session] = list
	}
	ps.mu.Unlock()
	text := fmt.Sprintf("Removed %s.", p.id)
	if wasRunning {
		text = fmt.Sprintf("Killed and removed %s.", p.id)
	}
	return Result{Content: []message.Block{message.Text(text)}, Details: map[string]any{"sessionId": p.id, "removed": true}}
}

// keepEnd returns the last max bytes of s (from a character's start) and
// how many bytes it cut.
func keepEnd(s string, limit int) (string, int) {
	if len(s) <= limit {
		return s, 0
	}
	i := len(s) - limit
	for i < len(s) && i < len(s)-limit+4 && !isRuneStart(s[i]) {
		i++
	}
	return s[i:], i
}

func isRuneStart(b byte) bool { return b&0xC0 != 0x80 }

// oneLine renders a command on one line of at most n characters.
func oneLine(s string, n int) string {
	s = strings.Join(strings.Fields(s), " ")
	if r := []rune(s); len(r) > n {
		return string(r[:n-1]) + "…"
	}
	return s
}

func durationText(d time.Duration) string {
	return d.Round(time.Second).String()
}
