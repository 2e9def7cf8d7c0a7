package tools

import (
	"reflect"
	"strings"
	"testing"
	"time"
)

// TestExecArgs: a command must be there, not blank and without a NUL; the
// timeout is the default, or the argument in seconds (at least 1 ms),
// capped at the maximum with a note.
func TestExecArgs(t *testing.T) {
	t.Parallel()
	tool := &execTool{w: &ws{Workspace: Workspace{ExecTimeout: 10 * time.Second, MaxExecTimeout: time.Minute}}}
	for _, tc := range []struct {
		name    string
		args    map[string]any
		timeout time.Duration
		notes   []string
		err     string
	}{
		{"default timeout", map[string]any{"command": "ls"}, 10 * time.Second, nil, ""},
		{"timeout in seconds", map[string]any{"command": "ls", "timeout": 2.5}, 2500 * time.Millisecond, nil, ""},
		{"timeout as a string", map[string]any{"command": "ls", "timeout": "3"}, 3 * time.Second, nil, ""},
		{"at least a millisecond", map[string]any{"command": "ls", "timeout": 1e-9}, time.Millisecond, nil, ""},
		{"capped", map[string]any{"command": "ls", "timeout": 3600}, time.Minute, []string{"[timeout 3600s capped at the maximum of 60s]"}, ""},
		{"no command", map[string]any{}, 0, nil, "command"},
		{"blank command", map[string]any{"command": " \n"}, 0, nil, "command is empty"},
		{"NUL byte", map[string]any{"command": "ls\x00"}, 0, nil, "NUL byte"},
		{"zero timeout", map[string]any{"command": "ls", "timeout": 0}, 0, nil, "timeout must be a positive number of seconds (at most 60s), got 0"},
		{"timeout not a number", map[string]any{"command": "ls", "timeout": "soon"}, 0, nil, "timeout"},
	} {
		command, timeout, notes, err := tool.args(tc.args)
		switch {
		case tc.err != "":
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("%s: error %v, want %q", tc.name, err, tc.err)
			}
		case err != nil || command != "ls" || timeout != tc.timeout || !reflect.DeepEqual(notes, tc.notes):
			t.Errorf("%s: %q %v %q %v; want ls %v %q", tc.name, command, timeout, notes, err, tc.timeout, tc.notes)
		}
	}
}

// TestExecOutcomeResult: the output (or "(no output)", one final newline
// dropped), the notes and the status, a blank line apart; the details; a
// non-zero exit, a timeout or an abort is an error, and the timeout or
// abort is the status even when a signal ended the shell.
func TestExecOutcomeResult(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name    string
		o       execOutcome
		want    string
		isError bool
		signal  any
	}{
		{"exit 0", execOutcome{text: "hi\n"}, "hi\n\nCommand exited with code 0.", false, nil},
		{"no output", execOutcome{}, "(no output)\n\nCommand exited with code 0.", false, nil},
		{"only one newline dropped", execOutcome{text: "hi\n\n"}, "hi\n\n\nCommand exited with code 0.", false, nil},
		{"exit code", execOutcome{text: "x", exitCode: 3}, "x\n\nCommand exited with code 3.", true, nil},
		{"signal", execOutcome{exitCode: -1, signal: "SIGKILL"}, "(no output)\n\nCommand was killed by signal SIGKILL.", true, "SIGKILL"},
		{"timed out", execOutcome{text: "x", exitCode: -1, signal: "SIGKILL", timedOut: true, timeout: 1500 * time.Millisecond},
			"x\n\nCommand timed out after 1.5s; it and the processes it started were killed.", true, nil},
		{"aborted", execOutcome{exitCode: -1, aborted: true}, "(no output)\n\nCommand aborted; it and the processes it started were killed.", true, nil},
		{"notes", execOutcome{text: "x", notes: []string{"[a]", "[b]"}}, "x\n\n[a]\n\n[b]\n\nCommand exited with code 0.", false, nil},
	} {
		tc.o.elapsed, tc.o.total, tc.o.truncated = 1234*time.Millisecond, 99, true
		res := tc.o.result()
		if got := text(res); got != tc.want || res.IsError != tc.isError || res.Details["signal"] != tc.signal {
			t.Errorf("%s: %q isError %v signal %v; want %q %v %v", tc.name, got, res.IsError, res.Details["signal"], tc.want, tc.isError, tc.signal)
		}
		want := map[string]any{"exitCode": int64(tc.o.exitCode), "timedOut": tc.o.timedOut, "aborted": tc.o.aborted, "durationMs": int64(1234), "truncated": true, "outputBytes": int64(99)}
		if tc.signal != nil {
			want["signal"] = tc.signal
		}
		if !reflect.DeepEqual(res.Details, want) {
			t.Errorf("%s: details %v, want %v", tc.name, res.Details, want)
		}
	}
}

// TestExecSendUpdates: new output reaches update as a partial result; no
// update comes after stop returns, and without an update function there is
// nothing to stop.
func TestExecSendUpdates(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name   string
		writes []string
	}{
		{"one write", []string{"abc"}},
		{"two writes", []string{"ab", "c"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			r := &execRun{out: newHeadTail(100)}
			got := make(chan Result, 100)
			stopped := false
			stop := r.sendUpdates(func(p Result) {
				if stopped {
					t.Error("update after stop")
				}
				got <- p
			})
			for _, w := range tc.writes {
				_, _ = r.out.Write([]byte(w))
			}
			var p Result
			for p = range got {
				if text(p) == "abc" {
					break
				}
			}
			stop()
			stopped = true
			if p.Details["partial"] != true || p.Details["outputBytes"] != int64(3) {
				t.Errorf("update %q %v", text(p), p.Details)
			}
		})
	}
	(&execRun{}).sendUpdates(nil)()
}
