package reply_test

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestOneHome: no production code outside this package can answer a NATS
// request by itself, so a new service cannot forget the inbox check. It
// fails on any non-test Go file of the module that
//   - names micro.Request or micro.HandlerFunc (an endpoint handler that
//     would see the raw reply subject: use Guard.Handler),
//   - calls a Respond, RespondMsg or RespondJSON method (core NATS or micro
//     replies), or
//   - reads the Reply field of a *nats.Msg it was handed (a subscription
//     callback answering a message's reply subject).
func TestOneHome(t *testing.T) {
	t.Parallel()
	root := moduleRoot(t)
	self := filepath.Join(root, "internal", "reply")
	fset := token.NewFileSet()
	var found []string
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			name := d.Name()
			if path == self || name == "testdata" || (strings.HasPrefix(name, ".") && path != root) {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		f, err := parser.ParseFile(fset, path, nil, parser.SkipObjectResolution)
		if err != nil {
			return err
		}
		for _, v := range violations(f) {
			found = append(found, fset.Position(v.pos).String()+": "+v.what)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(found) > 0 {
		t.Errorf("requests must be answered through internal/reply (Guard.Handler, Guard.Send):\n%s", strings.Join(found, "\n"))
	}
}

// TestOneHomeSees: the scan finds each way around the guard.
func TestOneHomeSees(t *testing.T) {
	t.Parallel()
	src := `package p
func a(req micro.Request) {}
var b = micro.HandlerFunc(nil)
func c(m *nats.Msg) { m.Respond(nil) }
func d(nc *nats.Conn) { nc.Subscribe("x", func(m *nats.Msg) { nc.Publish(m.Reply, nil) }) }
func e(m *nats.Msg) { m.Reply = "ok" }
func g(m *nats.Msg) *nats.Msg { return &nats.Msg{Reply: m.Reply} }
`
	f, err := parser.ParseFile(token.NewFileSet(), "p.go", src, parser.SkipObjectResolution)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, v := range violations(f) {
		got = append(got, v.what)
	}
	want := []string{"micro.Request", "micro.HandlerFunc", "a Respond call", "reads m.Reply"}
	if strings.Join(got, "|") != strings.Join(want, "|") {
		t.Errorf("violations = %q, want %q", got, want)
	}
}

type violation struct {
	pos  token.Pos
	what string
}

func violations(f *ast.File) []violation {
	var out []violation
	// Assignments' left sides: setting a message's Reply is how a request
	// is made, not answered.
	// Copying a message (Reply: m.Reply in a new message) answers nobody
	// either.
	lhs := map[ast.Expr]bool{}
	ast.Inspect(f, func(n ast.Node) bool {
		switch n := n.(type) {
		case *ast.AssignStmt:
			for _, e := range n.Lhs {
				lhs[e] = true
			}
		case *ast.KeyValueExpr:
			if k, ok := n.Key.(*ast.Ident); ok && k.Name == "Reply" {
				lhs[n.Value] = true
			}
		}
		return true
	})
	msgParams := map[string]bool{}
	ast.Inspect(f, func(n ast.Node) bool {
		switch n := n.(type) {
		case *ast.FuncType:
			if n.Params != nil {
				for _, p := range n.Params.List {
					if isNatsMsg(p.Type) {
						for _, id := range p.Names {
							msgParams[id.Name] = true
						}
					}
				}
			}
		case *ast.SelectorExpr:
			if x, ok := n.X.(*ast.Ident); ok {
				switch {
				case x.Name == "micro" && (n.Sel.Name == "Request" || n.Sel.Name == "HandlerFunc"):
					out = append(out, violation{n.Pos(), "micro." + n.Sel.Name})
				case n.Sel.Name == "Reply" && msgParams[x.Name] && !lhs[n]:
					out = append(out, violation{n.Pos(), "reads " + x.Name + ".Reply"})
				}
			}
		case *ast.CallExpr:
			if sel, ok := n.Fun.(*ast.SelectorExpr); ok {
				switch sel.Sel.Name {
				case "Respond", "RespondMsg", "RespondJSON":
					out = append(out, violation{n.Pos(), "a Respond call"})
				}
			}
		}
		return true
	})
	return out
}

// isNatsMsg reports whether e is *nats.Msg.
func isNatsMsg(e ast.Expr) bool {
	st, ok := e.(*ast.StarExpr)
	if !ok {
		return false
	}
	sel, ok := st.X.(*ast.SelectorExpr)
	if !ok {
		return false
	}
	x, ok := sel.X.(*ast.Ident)
	return ok && x.Name == "nats" && sel.Sel.Name == "Msg"
}

func moduleRoot(t *testing.T) string {
	t.Helper()
	dir, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			t.Fatal("no go.mod above the test's directory")
		}
		dir = parent
	}
}
