package docs_test

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"io"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// Other programs' flags the pages quote: llama.cpp's and vLLM's
// (docs/models.md). Any other --flag written in a page must be one of our
// commands'.
var foreignFlags = []string{"jinja", "port", "max-model-len", "enable-auto-tool-choice", "tool-call-parser", "api-key"}

// A command is one of the binaries' commands or subcommands, as its -h
// describes it.
type command struct {
	flags map[string]bool // long flag names, without "--"
	subs  []string        // its subcommands
}

var (
	helpOnce sync.Once
	helpCmds map[string]*command // by path: "publisher dlq list"
	helpErr  error
)

// commands reads the -h of every command and subcommand of the binaries.
func commands(t *testing.T) map[string]*command {
	t.Helper()
	bin := binaries(t)
	helpOnce.Do(func() {
		helpCmds = map[string]*command{}
		var walk func(path []string) error
		walk = func(path []string) error {
			args := append(slices.Clone(path[1:]), "-h")
			out, err := exec.Command(filepath.Join(bin, path[0]), args...).CombinedOutput()
			if err != nil {
				return errors.New(strings.Join(path, " ") + " -h: " + err.Error() + "\n" + string(out))
			}
			c := parseHelp(string(out))
			helpCmds[strings.Join(path, " ")] = c
			for _, s := range c.subs {
				if err := walk(append(slices.Clone(path), s)); err != nil {
					return err
				}
			}
			return nil
		}
		for _, b := range []string{"worker", "publisher", "gateway"} {
			if helpErr = walk([]string{b}); helpErr != nil {
				return
			}
		}
	})
	if helpErr != nil {
		t.Fatal(helpErr)
	}
	return helpCmds
}

var (
	flagLineRE = regexp.MustCompile(`^\s+(?:-\w, )?--([a-z0-9][a-z0-9-]*)`)
	subLineRE  = regexp.MustCompile(`^  ([a-z][a-z-]*)\s+\S`)
)

// parseHelp reads a cobra help text: the flags of its "Flags:" and
// "Global Flags:" sections, the subcommands of its other sections.
func parseHelp(text string) *command {
	c := &command{flags: map[string]bool{}}
	section := ""
	for l := range strings.SplitSeq(text, "\n") {
		if l != "" && !strings.HasPrefix(l, " ") && strings.HasSuffix(l, ":") {
			section = l
			continue
		}
		if l == "" {
			section = ""
			continue
		}
		switch section {
		case "", "Usage:", "Aliases:", "Examples:":
		case "Flags:", "Global Flags:":
			if m := flagLineRE.FindStringSubmatch(l); m != nil {
				c.flags[m[1]] = true
			}
		default:
			if m := subLineRE.FindStringSubmatch(l); m != nil && m[1] != "help" && m[1] != "completion" {
				c.subs = append(c.subs, m[1])
			}
		}
	}
	return c
}

// shellLines returns a shell block's command lines: continuations joined,
// comments and blank lines dropped.
func shellLines(body string) []string {
	var out []string
	var cur strings.Builder
	for l := range strings.SplitSeq(body, "\n") {
		if s, ok := strings.CutSuffix(strings.TrimRight(l, " "), "\\"); ok {
			cur.WriteString(stripComment(s))
			cur.WriteByte(' ')
			continue
		}
		cur.WriteString(stripComment(l))
		if line := strings.TrimSpace(cur.String()); line != "" {
			out = append(out, line)
		}
		cur.Reset()
	}
	return out
}

// stripComment cuts a shell comment: a # outside quotes at the start or
// after a space.
func stripComment(l string) string {
	var quote rune
	for i, r := range l {
		switch {
		case quote != 0:
			if r == quote {
				quote = 0
			}
		case r == '\'' || r == '"':
			quote = r
		case r == '#' && (i == 0 || l[i-1] == ' ' || l[i-1] == '\t'):
			return l[:i]
		}
	}
	return l
}

// segments splits a command line into its simple commands' words (on
// unquoted |, ; and &), quotes removed.
func segments(line string) [][]string {
	var out [][]string
	var words []string
	var w strings.Builder
	inWord := false
	var quote rune
	flush := func() {
		if inWord {
			words = append(words, w.String())
		}
		w.Reset()
		inWord = false
	}
	for _, r := range line {
		switch {
		case quote != 0:
			if r == quote {
				quote = 0
			} else {
				w.WriteRune(r)
			}
		case r == '\'' || r == '"':
			quote = r
			inWord = true
		case r == ' ' || r == '\t':
			flush()
		case r == '|' || r == ';' || r == '&':
			flush()
			if len(words) > 0 {
				out = append(out, words)
			}
			words = nil
		default:
			w.WriteRune(r)
			inWord = true
		}
	}
	flush()
	if len(words) > 0 {
		out = append(out, words)
	}
	return out
}

var (
	makeTargetRE = regexp.MustCompile(`(?m)^([a-z][a-z0-9-]*):`)
	proseFlagRE  = regexp.MustCompile(`(?:^|[^\w-])--([a-z][a-z0-9-]*[a-z0-9])`)
)

// TestFlags: in every shell block, a line of bin/worker, bin/publisher or
// bin/gateway names only flags its command's -h lists, and make names a
// target of the Makefile; every --flag written in the pages is one of the
// commands' (or a program's in foreignFlags); and every flag of every
// command is written somewhere in them.
func TestFlags(t *testing.T) {
	t.Parallel()
	cmds := commands(t)
	mk, err := os.ReadFile(filepath.Join(root, "Makefile"))
	if err != nil {
		t.Fatal(err)
	}
	targets := map[string]bool{}
	for _, m := range makeTargetRE.FindAllStringSubmatch(string(mk), -1) {
		targets[m[1]] = true
	}
	ours := map[string]bool{}
	for _, c := range cmds {
		maps.Copy(ours, c.flags)
	}
	written := map[string]bool{}
	for _, p := range loadPages(t) {
		for _, m := range proseFlagRE.FindAllStringSubmatch(p.text, -1) {
			written[m[1]] = true
			if !ours[m[1]] && !slices.Contains(foreignFlags, m[1]) {
				t.Errorf("%s: --%s is no flag of worker, publisher or gateway", p.path, m[1])
			}
		}
		for _, b := range p.blocks {
			if b.lang != "sh" {
				continue
			}
			for _, line := range shellLines(b.body) {
				for _, words := range segments(line) {
					checkWords(t, p.path, b.line, cmds, targets, words)
				}
			}
		}
	}
	for path, c := range cmds {
		for f := range c.flags {
			if !written[f] && f != "help" && f != "version" {
				t.Errorf("%s --%s is written on no page: say what it does where its reader looks", path, f)
			}
		}
	}
}

// checkWords checks one simple command of a shell block.
func checkWords(t *testing.T, page string, line int, cmds map[string]*command, targets map[string]bool, words []string) {
	t.Helper()
	for len(words) > 0 && strings.Contains(words[0], "=") && !strings.HasPrefix(words[0], "-") {
		words = words[1:] // VAR=value before the command
	}
	if len(words) == 0 {
		return
	}
	if words[0] == "make" {
		for _, w := range words[1:] {
			if !strings.Contains(w, "=") && !targets[w] {
				t.Errorf("%s:%d: make %s: no such target in the Makefile", page, line, w)
			}
		}
		return
	}
	name, ok := strings.CutPrefix(words[0], "bin/")
	if !ok {
		return
	}
	path := name
	c, ok := cmds[path]
	if !ok {
		t.Errorf("%s:%d: no command %s", page, line, words[0])
		return
	}
	rest := words[1:]
	for len(rest) > 0 && slices.Contains(c.subs, rest[0]) {
		path += " " + rest[0]
		c = cmds[path]
		rest = rest[1:]
	}
	for _, w := range rest {
		w = strings.Trim(w, "[]")
		f, ok := strings.CutPrefix(w, "--")
		if !ok {
			continue
		}
		f, _, _ = strings.Cut(f, "=")
		if !c.flags[f] {
			t.Errorf("%s:%d: %s has no flag --%s", page, line, path, f)
		}
	}
}

// TestRun: the lines of a block marked <!-- run --> run, in order, each
// exiting 0, against a fresh worker of their page (bin/worker --scripted
// --model scripted/echo with its HTTP gateway); a block marked <!-- output
// --> right after is the last line's exact standard output.
func TestRun(t *testing.T) {
	t.Parallel()
	for _, p := range loadPages(t) {
		if !slices.ContainsFunc(p.blocks, func(b block) bool { return b.marker == "run" }) {
			continue
		}
		t.Run(p.path, func(t *testing.T) {
			t.Parallel()
			runPage(t, binaries(t), p)
		})
	}
}

// runPage runs a page's run blocks in a directory of their own, with the
// page's file blocks written into it.
func runPage(t *testing.T, bin string, p *page) {
	dir := t.TempDir()
	if err := os.Symlink(bin, filepath.Join(dir, "bin")); err != nil {
		t.Fatal(err)
	}
	for _, b := range p.blocks {
		if name, ok := strings.CutPrefix(b.marker, "file:"); ok {
			if err := os.WriteFile(filepath.Join(dir, strings.TrimSpace(name)), []byte(b.body), 0o644); err != nil {
				t.Fatal(err)
			}
		}
	}
	var w *worker
	for i, b := range p.blocks {
		if b.marker != "run" {
			continue
		}
		var last string
		for _, line := range shellLines(b.body) {
			if strings.HasPrefix(line, "make ") {
				continue // TestFlags checks the target; the page's worker stands in for it
			}
			env := []string{"PATH=" + os.Getenv("PATH"), "HOME=" + dir, "LC_ALL=C.UTF-8"}
			if strings.Contains(line, "bin/publisher") || strings.Contains(line, "curl ") {
				if w == nil {
					w = startWorker(t, bin, filepath.Join(dir, "data"))
				}
				env = append(env, "NATS_URL="+w.nats)
				line = strings.NewReplacer("localhost:8080", w.http, "127.0.0.1:8080", w.http).Replace(line)
				if rest, ok := strings.CutPrefix(line, "curl "); ok {
					line = "curl -f " + rest // an HTTP error fails the line
				}
			}
			ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
			cmd := exec.CommandContext(ctx, "bash", "-c", line)
			cmd.Dir, cmd.Env = dir, env
			var stderr strings.Builder
			cmd.Stderr = &stderr
			out, err := cmd.Output()
			cancel()
			if err != nil {
				t.Errorf("%s:%d: %s: %v\nstdout:\n%s\nstderr:\n%s", p.path, b.line, line, err, out, stderr.String())
			}
			last = string(out)
		}
		if i+1 < len(p.blocks) && p.blocks[i+1].marker == "output" {
			if want := p.blocks[i+1].body; last != want {
				t.Errorf("%s:%d: the output block is not what the last line printed:\n%s", p.path, p.blocks[i+1].line, last)
			}
		}
	}
}

// A worker is a running bin/worker with its embedded server and gateway.
type worker struct {
	nats, http string // nats://host:port; host:port
}

// startWorker starts bin/worker on random ports with the scripted models,
// as make demo-http does, waits for its "ready" line and stops it when the
// test ends.
func startWorker(t *testing.T, bin, dataDir string) *worker {
	t.Helper()
	cmd := exec.Command(filepath.Join(bin, "worker"), "--scripted", "--model", "scripted/echo",
		"--data-dir", dataDir, "--listen", "127.0.0.1:0", "--http", "127.0.0.1:0", "--log-format", "json")
	cmd.Env = []string{"PATH=" + os.Getenv("PATH")}
	pr, pw := io.Pipe()
	cmd.Stdout, cmd.Stderr = pw, pw
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); pw.Close(); close(exited) }()
	w := &worker{}
	ready := make(chan struct{})
	var logMu sync.Mutex
	var log strings.Builder
	go func() {
		sc := bufio.NewScanner(pr)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		signalled := false
		for sc.Scan() {
			logMu.Lock()
			log.WriteString(sc.Text() + "\n")
			logMu.Unlock()
			var l struct{ Message, URL string }
			if json.Unmarshal(sc.Bytes(), &l) != nil || signalled {
				continue
			}
			switch l.Message {
			case "embedded NATS server started":
				w.nats = l.URL
			case "serving the HTTP gateway":
				w.http = strings.TrimPrefix(l.URL, "http://")
			case "ready":
				signalled = true
				close(ready)
			}
		}
		_, _ = io.Copy(io.Discard, pr)
	}()
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		<-exited
	})
	select {
	case <-ready:
	case <-exited:
		logMu.Lock()
		defer logMu.Unlock()
		t.Fatalf("worker exited before it was ready:\n%s", log.String())
	case <-time.After(2 * time.Minute): // only detects a hang
		logMu.Lock()
		defer logMu.Unlock()
		t.Fatalf("worker not ready after 2 minutes:\n%s", log.String())
	}
	if w.nats == "" || w.http == "" {
		t.Fatalf("the worker did not log its NATS and HTTP addresses:\n%s", log.String())
	}
	return w
}
