package tools

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/lanefleet/lanefleet/internal/pathless"
	"github.com/lanefleet/lanefleet/message"
	"github.com/lanefleet/lanefleet/provider"
	"github.com/lanefleet/lanefleet/sandbox"
)

const (
	// updateInterval is the least time between two partial results.
	updateInterval = 100 * time.Millisecond
	// drainGrace is how long exec keeps reading output after the shell
	// exited (or was killed) while a background process still holds the
	// output pipe.
	drainGrace = 250 * time.Millisecond
	// drainHungUp bounds the wait for the end of output that no process
	// holds any more (see drain): it is in the pipe already.
	drainHungUp = 10 * time.Second
)

// execTool is the built-in "exec": {command, timeout?}.
//
// It runs Shell -c command in the workspace directory with exactly
// Workspace.Env as environment, plus the Workspace.NamedEnv variables the
// command names, and stdin from /dev/null, through a
// [sandbox.Sandbox]: confined, the command reads only the system
// directories and writes only the workspace (see package sandbox for what
// each platform gives); unconfined (the operator's explicit choice), it is
// a shell with the worker's privileges.
//
// On timeout or when ctx ends, the command and every process it started are
// killed (SIGKILL): its cgroup, its PID namespace and its process group.
// When the shell exits by itself, what it left running is killed the same
// way. Without a PID namespace or a cgroup, a process that left the group
// (setsid) survives; output it writes after the shell exited (beyond a
// short grace) is discarded.
//
// stdout and stderr are merged in one stream; beyond MaxOutputBytes its head
// and tail are kept with a notice in between. The result text ends with the
// exit status; the details carry exitCode, timedOut, aborted, signal,
// durationMs, truncated and outputBytes. A non-zero exit, a timeout or an
// abort is an isError result (with those details), not a Go error. While the
// command runs, Call.Update receives the output so far at most every 100 ms.
type execTool struct {
	w   *ws
	box *sandbox.Sandbox
}

// Exec returns the built-in exec tool working in w, every command run by
// box (see [Builtin] for the other tools). It fails like Builtin on a bad
// Workspace, and without a box: whether commands are confined is the
// operator's decision, never a default.
func Exec(w Workspace, box *sandbox.Sandbox) (Tool, error) {
	if box == nil {
		return nil, errors.New("tools: Exec needs a sandbox (sandbox.Config.Unconfined for none)")
	}
	v, err := w.validate()
	if err != nil {
		return nil, err
	}
	return &execTool{w: v, box: box}, nil
}

func (t *execTool) Spec() provider.Tool {
	desc := fmt.Sprintf("Execute a shell command (sh -c) in the workspace directory. Returns stdout and stderr combined, and the exit code. "+
		"Output beyond %s keeps its beginning and end. Timeout defaults to %s and can be raised to %s with the timeout parameter (seconds). "+
		"Commands run non-interactively: stdin is empty.",
		formatSize(int64(t.w.MaxOutputBytes)), secs(t.w.ExecTimeout), secs(t.w.MaxExecTimeout))
	if p := t.box.Platform(); p.Confined {
		desc += " Commands run in a sandbox: they can write only inside the workspace"
		if p.PrivateTmp {
			desc += " (and a private /tmp)"
		}
		desc += ", read the system directories, and nothing else"
		if !p.Network {
			desc += "; there is no network"
		}
		if p.Seccomp {
			desc += "; UNIX sockets cannot be made"
		}
		desc += ". Processes left running are killed when the command ends."
		if p.Cgroup != "" {
			desc += fmt.Sprintf(" Memory (%s), processes (%d) and CPU (%g) are bounded for the command as a whole.", formatSize(p.Limits.Memory), p.Limits.Processes, p.Limits.CPUs)
		}
	}
	if len(t.w.NamedEnv) > 0 {
		names := make([]string, 0, len(t.w.NamedEnv))
		for _, kv := range t.w.NamedEnv {
			k, _, _ := strings.Cut(kv, "=")
			names = append(names, "$"+k)
		}
		desc += " The variables " + strings.Join(names, ", ") + " are set only for a command that names them ($NAME or ${NAME}); the programs it starts inherit them."
	}
	return provider.Tool{
		Name:        "exec",
		Description: desc,
		Parameters: map[string]any{
			"type": "object",
			"properties": map[string]any{
				"command": map[string]any{"type": "string", "description": "Shell command to execute"},
				"timeout": map[string]any{"type": "number", "description": fmt.Sprintf("Timeout in seconds (default %s, max %s)", secs(t.w.ExecTimeout), secs(t.w.MaxExecTimeout))},
			},
			"required": []any{"command"},
		},
	}
}

// Call runs the command of call (see execTool): its arguments checked,
// the command started, its partial output sent while it runs, its end
// awaited (or forced by the timeout or ctx), its output drained, and how it
// ended rendered as the result.
func (t *execTool) Call(ctx context.Context, call Call) (Result, error) {
	command, timeout, notes, err := t.args(call.Args)
	if err != nil {
		return Result{}, err
	}
	if err := ctx.Err(); err != nil {
		return Result{}, fmt.Errorf("command not started: the run was aborted (%v)", err)
	}
	r, err := t.start(ctx, command)
	if err != nil {
		return Result{}, err
	}
	stopUpdates := r.sendUpdates(call.Update)
	o := execOutcome{timeout: timeout, notes: notes}
	o.timedOut, o.aborted, o.elapsed = r.wait(ctx, timeout)
	if !r.drain() {
		o.notes = append(o.notes, "[output after the shell exited was discarded: a background process still holds it]")
	}
	stopUpdates()
	o.text, o.truncated, o.total = r.out.snapshot()
	state := r.cmd.ProcessState()
	o.exitCode, o.signal = state.ExitCode(), exitSignal(state)
	return o.result(), nil
}

// args checks a call's arguments and returns its command, its timeout (the
// workspace's default, or the timeout argument in seconds, capped at the
// maximum with a note saying so) and the notes for the result.
func (t *execTool) args(args map[string]any) (command string, timeout time.Duration, notes []string, err error) {
	return commandArgs(args, t.w.ExecTimeout, t.w.MaxExecTimeout)
}

// commandArgs reads a shell command call's arguments (exec's, process
// start's): the command, not blank and without a NUL, and its timeout,
// def without the argument, else the argument in seconds (at least 1 ms),
// capped at maxTimeout with a note saying so.
func commandArgs(args map[string]any, def, maxTimeout time.Duration) (command string, timeout time.Duration, notes []string, err error) {
	command, _, err = stringArg(args, "command", true)
	if err != nil {
		return "", 0, nil, err
	}
	if strings.TrimSpace(command) == "" {
		return "", 0, nil, errors.New("command is empty")
	}
	if strings.IndexByte(command, 0) >= 0 {
		return "", 0, nil, errors.New("command contains a NUL byte, which a shell command cannot hold")
	}
	timeout = def
	secsArg, ok, err := numberArg(args, "timeout")
	switch {
	case err != nil:
		return "", 0, nil, err
	case !ok:
	case secsArg <= 0:
		return "", 0, nil, fmt.Errorf("timeout must be a positive number of seconds (at most %s), got %v", secs(maxTimeout), secsArg)
	case secsArg > maxTimeout.Seconds():
		notes = append(notes, fmt.Sprintf("[timeout %vs capped at the maximum of %s]", secsArg, secs(maxTimeout)))
		timeout = maxTimeout
	default:
		timeout = time.Duration(math.Round(secsArg * float64(time.Second)))
		timeout = max(timeout, time.Millisecond)
	}
	return command, timeout, notes, nil
}

// execRun is one started command: its process and its merged output,
// copied into out until the pipe's end.
type execRun struct {
	cmd     *sandbox.Cmd
	out     *headTail
	pr      *os.File
	eof     chan struct{} // closed when the copy into out ended
	started time.Time
}

// start starts command through the box, with stdout and stderr on one
// pipe whose output is copied into a headTail of MaxOutputBytes.
func (t *execTool) start(ctx context.Context, command string) (*execRun, error) {
	r := &execRun{out: newHeadTail(t.w.MaxOutputBytes), eof: make(chan struct{})}
	pr, pw, err := os.Pipe()
	if err != nil {
		return nil, fmt.Errorf("cannot start the command: %v", err)
	}
	// Env is never nil: an empty Env must not mean the process's.
	r.cmd = t.box.Command(t.w.Dir, commandEnv(t.w.Env, t.w.NamedEnv, command), t.w.Shell, t.w.Shell, "-c", command)
	r.cmd.Stdout, r.cmd.Stderr = pw, pw
	r.started = time.Now()
	err = r.cmd.Start(ctx)
	pw.Close() // the children hold their copies
	if err != nil {
		pr.Close()
		if ctx.Err() != nil {
			return nil, fmt.Errorf("command not started: the run was aborted (%v)", ctx.Err())
		}
		return nil, fmt.Errorf("cannot start the command: %v", pathless.Err(err))
	}
	r.pr = pr
	go func() {
		defer close(r.eof)
		io.Copy(r.out, pr) //nolint:errcheck // ends at EOF or when pr is closed
	}()
	return r, nil
}

// sendUpdates sends update the output so far, when there is new output, at
// most every updateInterval, until stop is called. The updates come from a
// single goroutine that is gone when stop returns, so update is never
// called concurrently or late. A nil update gets none.
func (r *execRun) sendUpdates(update func(Result)) (stop func()) {
	if update == nil {
		return func() {}
	}
	done := make(chan struct{})
	var updates sync.WaitGroup
	updates.Go(func() {
		// The timer restarts after each update, so updates are at
		// least updateInterval apart however late one was.
		timer := time.NewTimer(updateInterval)
		defer timer.Stop()
		for {
			select {
			case <-done:
				return
			case <-timer.C:
				if r.out.takeDirty() {
					text, truncated, total := r.out.snapshot()
					update(Result{
						Content: []message.Block{message.Text(text)},
						Details: map[string]any{"partial": true, "truncated": truncated, "outputBytes": total},
					})
				}
				timer.Reset(updateInterval)
			}
		}
	})
	return func() {
		close(done)
		updates.Wait()
	}
}

// wait waits for the shell to exit, or kills the command and its processes
// when timeout passes (timedOut) or ctx ends (aborted) first, and returns
// how long the command ran.
func (r *execRun) wait(ctx context.Context, timeout time.Duration) (timedOut, aborted bool, elapsed time.Duration) {
	waited := make(chan error, 1)
	go func() { waited <- r.cmd.Wait() }()
	timer := time.NewTimer(timeout)
	defer timer.Stop()
	select {
	case <-waited:
	case <-timer.C:
		timedOut = kill(r.cmd, waited)
	case <-ctx.Done():
		aborted = kill(r.cmd, waited)
	}
	return timedOut, aborted, time.Since(r.started)
}

// drain waits, for at most drainGrace, for the end of the output, then
// closes the pipe and waits for the copy to stop. It reports false when
// the output did not end: a background process still holds the pipe, and
// what it writes later is discarded.
func (r *execRun) drain() bool {
	ended := true
	select {
	case <-r.eof:
	case <-time.After(drainGrace):
		// A loaded machine may not have run the copy to the pipe's end
		// yet (a loaded run of the suite reported "cat; echo done" as
		// held): if no process holds the pipe any more, its end is at
		// hand.
		ended = false
		if writersGone(r.pr) {
			select {
			case <-r.eof:
				ended = true
			case <-time.After(drainHungUp):
			}
		}
	}
	r.pr.Close()
	<-r.eof
	return ended
}

// execOutcome is how a command ended: what its result is made of.
type execOutcome struct {
	text      string // the output (see headTail.snapshot)
	truncated bool
	total     int64 // bytes of output
	exitCode  int
	signal    string // the signal that killed the shell, if one did
	timedOut  bool
	aborted   bool
	elapsed   time.Duration
	timeout   time.Duration
	notes     []string // between the output and the status
}

// result renders the outcome as the tool's result: the output ("(no
// output)" for none), the notes and the exit status, a blank line apart,
// with the details; a non-zero exit, a timeout or an abort is an error.
func (o execOutcome) result() Result {
	details := map[string]any{
		"exitCode":    int64(o.exitCode),
		"timedOut":    o.timedOut,
		"aborted":     o.aborted,
		"durationMs":  o.elapsed.Milliseconds(),
		"truncated":   o.truncated,
		"outputBytes": o.total,
	}
	var status string
	switch {
	case o.timedOut:
		status = fmt.Sprintf("Command timed out after %s; it and the processes it started were killed.", secs(o.timeout))
	case o.aborted:
		status = "Command aborted; it and the processes it started were killed."
	case o.signal != "":
		details["signal"] = o.signal
		status = fmt.Sprintf("Command was killed by signal %s.", o.signal)
	default:
		status = fmt.Sprintf("Command exited with code %d.", o.exitCode)
	}
	// One final newline is dropped: the status follows a blank line.
	text := strings.TrimSuffix(o.text, "\n")
	if text == "" {
		text = "(no output)"
	}
	parts := append([]string{text}, o.notes...)
	parts = append(parts, status)
	return Result{
		Content: []message.Block{message.Text(strings.Join(parts, "\n\n"))},
		Details: details,
		IsError: o.timedOut || o.aborted || o.exitCode != 0,
	}
}

// kill kills the command and its processes and waits for the shell, unless
// the shell already exited (a command that ends as its timer fires is not
// reported as killed). It reports whether it killed.
func kill(cmd *sandbox.Cmd, waited <-chan error) bool {
	select {
	case <-waited:
		return false
	default:
	}
	cmd.Kill()
	<-waited
	return true
}

// secs renders a duration in seconds for the model.
func secs(d time.Duration) string {
	return fmt.Sprintf("%vs", d.Seconds())
}
