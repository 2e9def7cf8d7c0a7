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

func (t *execTool) Call(ctx context.Context, call Call) (Result, error) {
	command, _, err := stringArg(call.Args, "command", true)
	if err != nil {
		return Result{}, err
	}
	if strings.TrimSpace(command) == "" {
		return Result{}, errors.New("command is empty")
	}
	if strings.IndexByte(command, 0) >= 0 {
		return Result{}, errors.New("command contains a NUL byte, which a shell command cannot hold")
	}
	timeout := t.w.ExecTimeout
	var notes []string
	if secsArg, ok, err := numberArg(call.Args, "timeout"); err != nil {
		return Result{}, err
	} else if ok {
		if secsArg <= 0 {
			return Result{}, fmt.Errorf("timeout must be a positive number of seconds (at most %s), got %v", secs(t.w.MaxExecTimeout), secsArg)
		}
		if secsArg > t.w.MaxExecTimeout.Seconds() {
			notes = append(notes, fmt.Sprintf("[timeout %vs capped at the maximum of %s]", secsArg, secs(t.w.MaxExecTimeout)))
			timeout = t.w.MaxExecTimeout
		} else {
			timeout = time.Duration(math.Round(secsArg * float64(time.Second)))
			timeout = max(timeout, time.Millisecond)
		}
	}
	if err := ctx.Err(); err != nil {
		return Result{}, fmt.Errorf("command not started: the run was aborted (%v)", err)
	}

	out := newHeadTail(t.w.MaxOutputBytes)
	pr, pw, err := os.Pipe()
	if err != nil {
		return Result{}, fmt.Errorf("cannot start the command: %v", err)
	}
	// Env is never nil: an empty Env must not mean the process's.
	cmd := t.box.Command(t.w.Dir, commandEnv(t.w.Env, t.w.NamedEnv, command), t.w.Shell, t.w.Shell, "-c", command)
	cmd.Stdout, cmd.Stderr = pw, pw
	started := time.Now()
	err = cmd.Start(ctx)
	pw.Close() // the children hold their copies
	if err != nil {
		pr.Close()
		if ctx.Err() != nil {
			return Result{}, fmt.Errorf("command not started: the run was aborted (%v)", ctx.Err())
		}
		return Result{}, fmt.Errorf("cannot start the command: %v", unwrapPathErr(err))
	}

	eof := make(chan struct{})
	go func() {
		defer close(eof)
		io.Copy(out, pr) //nolint:errcheck // ends at EOF or when pr is closed
	}()

	// Partial results, from a single goroutine that is gone before Call
	// returns, so Update is never called concurrently or late.
	stopUpdates := make(chan struct{})
	var updates sync.WaitGroup
	if call.Update != nil {
		updates.Go(func() {
			// The timer restarts after each update, so updates are at
			// least updateInterval apart however late one was.
			timer := time.NewTimer(updateInterval)
			defer timer.Stop()
			for {
				select {
				case <-stopUpdates:
					return
				case <-timer.C:
					if out.takeDirty() {
						text, truncated, total := out.snapshot()
						call.Update(Result{
							Content: []message.Block{message.Text(text)},
							Details: map[string]any{"partial": true, "truncated": truncated, "outputBytes": total},
						})
					}
					timer.Reset(updateInterval)
				}
			}
		})
	}

	waited := make(chan error, 1)
	go func() { waited <- cmd.Wait() }()
	timer := time.NewTimer(timeout)
	defer timer.Stop()
	var timedOut, aborted bool
	select {
	case <-waited:
	case <-timer.C:
		timedOut = kill(cmd, waited)
	case <-ctx.Done():
		aborted = kill(cmd, waited)
	}
	elapsed := time.Since(started)
	select {
	case <-eof:
	case <-time.After(drainGrace):
		notes = append(notes, "[output after the shell exited was discarded: a background process still holds it]")
	}
	pr.Close()
	<-eof
	close(stopUpdates)
	updates.Wait()

	text, truncated, total := out.snapshot()
	state := cmd.ProcessState()
	exitCode := state.ExitCode()
	details := map[string]any{
		"exitCode":    int64(exitCode),
		"timedOut":    timedOut,
		"aborted":     aborted,
		"durationMs":  elapsed.Milliseconds(),
		"truncated":   truncated,
		"outputBytes": total,
	}
	var status string
	switch sig := exitSignal(state); {
	case timedOut:
		status = fmt.Sprintf("Command timed out after %s; it and the processes it started were killed.", secs(timeout))
	case aborted:
		status = "Command aborted; it and the processes it started were killed."
	case sig != "":
		details["signal"] = sig
		status = fmt.Sprintf("Command was killed by signal %s.", sig)
	default:
		status = fmt.Sprintf("Command exited with code %d.", exitCode)
	}
	// One final newline is dropped: the status follows a blank line.
	text = strings.TrimSuffix(text, "\n")
	if text == "" {
		text = "(no output)"
	}
	parts := append([]string{text}, notes...)
	parts = append(parts, status)
	return Result{
		Content: []message.Block{message.Text(strings.Join(parts, "\n\n"))},
		Details: details,
		IsError: timedOut || aborted || exitCode != 0,
	}, nil
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
