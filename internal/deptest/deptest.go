// Package deptest checks that packages link nothing forbidden, directly or
// transitively (NATS, the lane runtime, network code, ...). The module's
// rules live in one table, each with its reason, in this package's
// TestModuleRules.
//
// It asks the go command (go list -deps -json), so it sees exactly what the
// build links, test-only imports excluded.
package deptest

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"os/exec"
	"strings"
	"testing"
)

// A Rule says which import paths are forbidden.
type Rule struct {
	desc  string
	match func(importPath string) bool
}

// String describes the rule, as used in failure messages.
func (r Rule) String() string { return r.desc }

// Contains forbids every import path containing sub (e.g. "nats-io").
func Contains(sub string) Rule {
	return Rule{"contains " + sub, func(p string) bool { return strings.Contains(p, sub) }}
}

// Prefix forbids every import path starting with prefix. The match is on
// the string, not on path elements: Prefix("a/lanes") also forbids
// "a/lanesx" and "a/lanes/queue".
func Prefix(prefix string) Rule {
	return Rule{"has prefix " + prefix, func(p string) bool { return strings.HasPrefix(p, prefix) }}
}

// Suffix forbids every import path ending with suffix: Suffix("/lanes")
// forbids ".../lanes" but not ".../lanes/queue".
func Suffix(suffix string) Rule {
	return Rule{"has suffix " + suffix, func(p string) bool { return strings.HasSuffix(p, suffix) }}
}

// Exact forbids exactly the import path path (e.g. "net/http").
func Exact(path string) Rule {
	return Rule{"is " + path, func(p string) bool { return p == path }}
}

// Except narrows r: the import paths allowed match no rule of allowed.
func (r Rule) Except(allowed ...Rule) Rule {
	desc := r.desc + " except"
	for _, a := range allowed {
		desc += " " + a.desc
	}
	return Rule{desc, func(p string) bool {
		for _, a := range allowed {
			if a.match(p) {
				return false
			}
		}
		return r.match(p)
	}}
}

// NoImports fails t if the package in the current directory (the package
// under test) links any import path matched by one of forbidden.
func NoImports(t testing.TB, forbidden ...Rule) {
	t.Helper()
	PackagesNoImports(t, []string{"."}, forbidden...)
}

// PackagesNoImports fails t if any package matched by the go list patterns
// (e.g. "github.com/lanefleet/lanefleet/provider/...") links an import path
// matched by one of forbidden. The matched packages themselves are not
// checked, only what they link (so "nothing of ours" can be said of a
// package of ours). Each offending path is reported once, with a chain of
// imports that leads to it.
//
// It skips t when the go command is not on PATH and fails it when go list
// fails. It neither calls t.Parallel nor skips in -short mode: callers
// decide.
func PackagesNoImports(t testing.TB, patterns []string, forbidden ...Rule) {
	t.Helper()
	gobin, err := exec.LookPath("go")
	if err != nil {
		t.Skip("go command not found")
	}
	args := append([]string{"list", "-deps", "-json=ImportPath,Imports,DepOnly"}, patterns...)
	cmd := exec.CommandContext(t.Context(), gobin, args...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list %s: %v\n%s", strings.Join(patterns, " "), err, stderr.Bytes())
	}
	pkgs, err := decode(out)
	if err != nil {
		t.Fatalf("go list output: %v", err)
	}
	for _, p := range pkgs {
		if !p.DepOnly {
			continue
		}
		for _, r := range forbidden {
			if r.match(p.ImportPath) {
				t.Errorf("forbidden dependency %s (%s): %s", p.ImportPath, r, chain(pkgs, p.ImportPath))
				break
			}
		}
	}
}

// pkg is the part of go list's output deptest reads.
type pkg struct {
	ImportPath string
	Imports    []string
	DepOnly    bool // not matched by the patterns, only a dependency
}

// decode reads go list -json's stream of package objects.
func decode(out []byte) ([]pkg, error) {
	var pkgs []pkg
	dec := json.NewDecoder(bytes.NewReader(out))
	for {
		var p pkg
		if err := dec.Decode(&p); errors.Is(err, io.EOF) {
			return pkgs, nil
		} else if err != nil {
			return nil, err
		}
		pkgs = append(pkgs, p)
	}
}

// chain returns a shortest import chain from a package matched by the
// patterns to target, as "a -> b -> target" (or just target if it is one
// of them).
func chain(pkgs []pkg, target string) string {
	imports := make(map[string][]string, len(pkgs))
	prev := make(map[string]string, len(pkgs))
	var queue []string
	for _, p := range pkgs {
		imports[p.ImportPath] = p.Imports
		if !p.DepOnly {
			prev[p.ImportPath] = ""
			queue = append(queue, p.ImportPath)
		}
	}
	for len(queue) > 0 {
		cur := queue[0]
		queue = queue[1:]
		if cur == target {
			path := []string{cur}
			for p := prev[cur]; p != ""; p = prev[p] {
				path = append(path, p)
			}
			for i, j := 0, len(path)-1; i < j; i, j = i+1, j-1 {
				path[i], path[j] = path[j], path[i]
			}
			return strings.Join(path, " -> ")
		}
		for _, imp := range imports[cur] {
			if _, seen := prev[imp]; !seen {
				prev[imp] = cur
				queue = append(queue, imp)
			}
		}
	}
	return target
}
