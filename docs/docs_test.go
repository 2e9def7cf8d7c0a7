// Package docs_test keeps the pages of README.md and docs/*.md true: their
// links lead somewhere, their shell examples run against a real worker,
// their flags are the commands' flags, their Go examples are the root
// package's Example functions, their JSON is accepted by the real decoders,
// and the tables that mirror code (the roles, the package layout) match it.
// docs/development.md, "These pages", says which marker asks for which
// check.
package docs_test

import (
	"bufio"
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/lanefleet/lanefleet/agents"
	"github.com/lanefleet/lanefleet/authprofile"
	"github.com/lanefleet/lanefleet/gateway"
	"github.com/lanefleet/lanefleet/permission"
	"github.com/lanefleet/lanefleet/provider"
	"github.com/lanefleet/lanefleet/provider/catalog"
	"github.com/lanefleet/lanefleet/secretexec"
)

var update = flag.Bool("update", false, "rewrite the pages' example blocks from example_test.go")

// root is the module's directory, relative to this package's.
const root = ".."

// A page is one markdown file, split into what the checks read.
type page struct {
	path     string // relative to root, e.g. "docs/cli.md"
	text     string
	blocks   []block
	headings []string // anchors (GitHub's slugs) of its headings
}

// A block is a fenced code block and the marker comment just before it.
type block struct {
	lang   string // the fence's info string, e.g. "sh"
	marker string // "run", "example: Name", … ("" for none)
	body   string
	line   int // 1-based line of the opening fence
	start  int // byte offsets of the body in the page's text
	end    int
}

var (
	markerRE  = regexp.MustCompile(`^<!--\s*(.*?)\s*-->$`)
	headingRE = regexp.MustCompile(`^(#{1,6})\s+(.*)$`)
)

// loadPages reads README.md and docs/*.md.
func loadPages(t *testing.T) []*page {
	t.Helper()
	paths := []string{"README.md"}
	more, err := filepath.Glob(filepath.Join(root, "docs", "*.md"))
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range more {
		rel, _ := filepath.Rel(root, m)
		paths = append(paths, filepath.ToSlash(rel))
	}
	var pages []*page
	for _, p := range paths {
		b, err := os.ReadFile(filepath.Join(root, p))
		if err != nil {
			t.Fatal(err)
		}
		pages = append(pages, parsePage(p, string(b)))
	}
	return pages
}

// parsePage finds a page's fenced blocks, their markers and its headings.
func parsePage(path, text string) *page {
	p := &page{path: path, text: text}
	lines := strings.SplitAfter(text, "\n")
	off := 0
	marker := ""
	var cur *block
	for i, l := range lines {
		trim := strings.TrimSpace(l)
		switch {
		case cur != nil && strings.HasPrefix(trim, "```"):
			cur.end = off
			cur.body = text[cur.start:cur.end]
			p.blocks = append(p.blocks, *cur)
			cur = nil
		case cur != nil:
		case strings.HasPrefix(trim, "```"):
			cur = &block{lang: strings.TrimSpace(strings.TrimPrefix(trim, "```")), marker: marker, line: i + 1, start: off + len(l)}
			marker = ""
		default:
			if m := markerRE.FindStringSubmatch(trim); m != nil {
				marker = m[1]
			} else if trim != "" {
				marker = ""
			}
			if m := headingRE.FindStringSubmatch(trim); m != nil {
				p.headings = append(p.headings, slug(m[2]))
			}
		}
		off += len(l)
	}
	return p
}

// slug is GitHub's anchor for a heading: lower case, punctuation dropped,
// spaces as hyphens.
func slug(h string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(h) {
		switch {
		case r == ' ':
			b.WriteByte('-')
		case r == '-' || r == '_' || r >= '0' && r <= '9' || r >= 'a' && r <= 'z' || r > 127 && !strings.ContainsRune("—–’“”…→", r):
			b.WriteRune(r)
		}
	}
	return b.String()
}

var linkRE = regexp.MustCompile(`\]\(([^)\s]+)\)`)

// TestLinks: every relative link of the pages leads to a file that exists,
// and a #fragment to a heading of its page.
func TestLinks(t *testing.T) {
	t.Parallel()
	pages := loadPages(t)
	byPath := map[string]*page{}
	for _, p := range pages {
		byPath[p.path] = p
	}
	for _, p := range pages {
		for _, m := range linkRE.FindAllStringSubmatch(stripCode(p), -1) {
			target := m[1]
			if strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
				continue
			}
			file, frag, _ := strings.Cut(target, "#")
			dest := p.path
			if file != "" {
				dest = filepath.ToSlash(filepath.Join(filepath.Dir(p.path), file))
				if _, err := os.Stat(filepath.Join(root, dest)); err != nil {
					t.Errorf("%s: link %q: %v", p.path, target, err)
					continue
				}
			}
			if frag == "" {
				continue
			}
			d, ok := byPath[dest]
			if !ok {
				t.Errorf("%s: link %q: a fragment of a file that is not one of the pages", p.path, target)
				continue
			}
			if !slices.Contains(d.headings, frag) {
				t.Errorf("%s: link %q: %s has no heading #%s (it has %v)", p.path, target, dest, frag, d.headings)
			}
		}
	}
}

// stripCode returns a page's text without its fenced blocks.
func stripCode(p *page) string {
	var b strings.Builder
	last := 0
	for _, bl := range p.blocks {
		b.WriteString(p.text[last:bl.start])
		last = bl.end
	}
	b.WriteString(p.text[last:])
	return b.String()
}

// TestMarkedBlocks: every Go block is an example, every JSON block has a
// decoder, and no marker is misspelt.
func TestMarkedBlocks(t *testing.T) {
	t.Parallel()
	for _, p := range loadPages(t) {
		for _, b := range p.blocks {
			kind, _, _ := strings.Cut(b.marker, ":")
			switch {
			case b.marker != "" && !slices.Contains([]string{"run", "output", "example", "json", "file", "layout"}, kind):
				t.Errorf("%s:%d: unknown marker %q", p.path, b.line, b.marker)
			case b.lang == "go" && kind != "example":
				t.Errorf("%s:%d: a Go block that is no example: mark it <!-- example: ExampleName --> and make it one in example_test.go", p.path, b.line)
			case b.lang == "json" && kind != "json" && kind != "file":
				t.Errorf("%s:%d: a JSON block no decoder reads: mark it <!-- json: KIND --> or <!-- file: NAME -->", p.path, b.line)
			case kind == "run" && b.lang != "sh":
				t.Errorf("%s:%d: a run block must be ```sh", p.path, b.line)
			}
		}
	}
}

// TestExamples: a Go block marked <!-- example: Name --> is the body of
// func Name in the root package's example_test.go, which go test runs and
// whose output it checks. -update rewrites the blocks.
func TestExamples(t *testing.T) {
	t.Parallel()
	bodies := exampleBodies(t)
	for _, p := range loadPages(t) {
		var out strings.Builder
		last := 0
		for _, b := range p.blocks {
			name, ok := strings.CutPrefix(b.marker, "example:")
			if !ok {
				continue
			}
			name = strings.TrimSpace(name)
			want, ok := bodies[name]
			if !ok {
				t.Errorf("%s:%d: no func %s in example_test.go", p.path, b.line, name)
				continue
			}
			out.WriteString(p.text[last:b.start])
			out.WriteString(want)
			last = b.end
			if b.body != want && !*update {
				t.Errorf("%s:%d: the block is not %s's body (go test ./docs -update rewrites it); want:\n%s", p.path, b.line, name, want)
			}
		}
		out.WriteString(p.text[last:])
		if *update && out.String() != p.text {
			if err := os.WriteFile(filepath.Join(root, p.path), []byte(out.String()), 0o644); err != nil {
				t.Fatal(err)
			}
		}
	}
}

// exampleBodies returns the bodies of example_test.go's functions, one tab
// of indentation less, by name.
func exampleBodies(t *testing.T) map[string]string {
	t.Helper()
	path := filepath.Join(root, "example_test.go")
	src, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, path, src, parser.ParseComments)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for _, d := range f.Decls {
		fn, ok := d.(*ast.FuncDecl)
		if !ok || fn.Body == nil {
			continue
		}
		body := string(src[fset.Position(fn.Body.Lbrace).Offset+1 : fset.Position(fn.Body.Rbrace).Offset])
		var b strings.Builder
		for l := range strings.SplitSeq(strings.Trim(body, "\n"), "\n") {
			b.WriteString(strings.TrimPrefix(l, "\t"))
			b.WriteByte('\n')
		}
		out[fn.Name.Name] = b.String()
	}
	return out
}

// TestJSON: a JSON block marked <!-- json: KIND --> is accepted by the
// decoder the fleet reads that kind with; one marked <!-- file: NAME --> is
// at least JSON.
func TestJSON(t *testing.T) {
	t.Parallel()
	decoders := map[string]func([]byte) error{
		"models-file": func(b []byte) error {
			if _, err := catalog.Parse(b); err != nil {
				return err
			}
			return strictModels(b)
		},
		"agent": func(b []byte) error {
			_, err := agents.ParseJSON(b)
			return err
		},
		"auth-profiles": func(b []byte) error {
			s, err := authprofile.DecodeStore(b)
			if err != nil {
				return err
			}
			for _, pr := range s.Profiles {
				for _, ref := range pr.Refs() {
					if _, err := authprofile.ParseSecretRef(ref); err != nil {
						return err
					}
				}
			}
			_, err = secretexec.Decode(b)
			return err
		},
		"gateway-tokens": func(b []byte) error {
			_, err := gateway.ParseTokens(bytes.NewReader(b))
			return err
		},
	}
	for _, p := range loadPages(t) {
		for _, b := range p.blocks {
			kind, arg, _ := strings.Cut(b.marker, ":")
			arg = strings.TrimSpace(arg)
			switch {
			case kind == "json":
				dec, ok := decoders[arg]
				if !ok {
					t.Errorf("%s:%d: no decoder for %q", p.path, b.line, arg)
					continue
				}
				if err := dec([]byte(b.body)); err != nil {
					t.Errorf("%s:%d: %s: %v", p.path, b.line, arg, err)
				}
			case kind == "file" && b.lang == "json":
				if !json.Valid([]byte(b.body)) {
					t.Errorf("%s:%d: %s is not JSON", p.path, b.line, arg)
				}
			}
		}
	}
}

// strictModels decodes every model of a models file refusing fields
// provider.Model does not have (catalog.Parse ignores them, so a misspelt
// field in a page would go unnoticed).
func strictModels(b []byte) error {
	var models []json.RawMessage
	if bytes.HasPrefix(bytes.TrimSpace(b), []byte("[")) {
		if err := json.Unmarshal(b, &models); err != nil {
			return err
		}
	} else {
		var f struct {
			Models    []json.RawMessage `json:"models"`
			Providers map[string]struct {
				BaseURL string            `json:"baseUrl"`
				API     string            `json:"api"`
				Models  []json.RawMessage `json:"models"`
			} `json:"providers"`
		}
		dec := json.NewDecoder(bytes.NewReader(b))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&f); err != nil {
			return err
		}
		models = f.Models
		for _, p := range f.Providers {
			models = append(models, p.Models...)
		}
	}
	for _, m := range models {
		dec := json.NewDecoder(bytes.NewReader(m))
		dec.DisallowUnknownFields()
		var pm provider.Model
		if err := dec.Decode(&pm); err != nil {
			return fmt.Errorf("model %s: %w", m, err)
		}
	}
	return nil
}

// TestRoles: the role table lists the permission package's roles, in its
// order.
func TestRoles(t *testing.T) {
	t.Parallel()
	var want []string
	for _, r := range permission.Roles() {
		want = append(want, string(r))
	}
	found := false
	for _, p := range loadPages(t) {
		i := strings.Index(p.text, "\n<!-- roles -->\n")
		if i < 0 {
			continue
		}
		found = true
		var got []string
		sc := bufio.NewScanner(strings.NewReader(p.text[i:]))
		sc.Scan()
		for sc.Scan() {
			l := strings.TrimSpace(sc.Text())
			if l == "" && len(got) > 0 {
				break
			}
			cells := strings.Split(l, "|")
			if len(cells) < 3 || strings.HasPrefix(strings.TrimSpace(cells[1]), "---") || strings.TrimSpace(cells[1]) == "role" {
				continue
			}
			got = append(got, strings.Trim(strings.TrimSpace(cells[1]), "`"))
		}
		if !slices.Equal(got, want) {
			t.Errorf("%s: the role table lists %v; package permission has %v", p.path, got, want)
		}
	}
	if !found {
		t.Error("no page has the role table (<!-- roles -->)")
	}
}

// TestLayout: the layout block names every package directory of the tree,
// and every path it names exists.
func TestLayout(t *testing.T) {
	t.Parallel()
	var layout string
	for _, p := range loadPages(t) {
		for _, b := range p.blocks {
			if b.marker == "layout" {
				layout = b.body
			}
		}
	}
	if layout == "" {
		t.Fatal("no page has the layout (<!-- layout -->)")
	}
	named := map[string]bool{}
	pathRE := regexp.MustCompile(`^[a-z][a-z0-9_]*(/[a-z0-9_]+)*/?$`)
	for w := range strings.FieldsFuncSeq(layout, func(r rune) bool { return r == ' ' || r == ',' || r == '\n' || r == ';' }) {
		if !pathRE.MatchString(w) || !strings.Contains(w, "/") {
			continue
		}
		w = strings.TrimSuffix(w, "/")
		named[w] = true
		if fi, err := os.Stat(filepath.Join(root, w)); err != nil || !fi.IsDir() {
			t.Errorf("the layout names %s/, which is not a directory of the tree", w)
		}
	}
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		name := d.Name()
		if d.IsDir() && path != root && (strings.HasPrefix(name, ".") || name == "testdata" || name == "bin" || name == "node_modules") {
			return filepath.SkipDir
		}
		if d.IsDir() || !strings.HasSuffix(name, ".go") {
			return nil
		}
		dir, _ := filepath.Rel(root, filepath.Dir(path))
		dir = filepath.ToSlash(dir)
		if dir == "." || named[dir] {
			return nil
		}
		named[dir] = true // once per package
		t.Errorf("package %s is not in the layout (docs/how-it-works.md): add it where it belongs", dir)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// The commands, built once for the tests that run them.
var (
	buildOnce sync.Once
	binDir    string
	buildErr  error
)

// binaries builds worker, publisher and gateway into a directory of their
// own, once.
func binaries(t *testing.T) string {
	t.Helper()
	if testing.Short() {
		t.Skip("builds and runs the commands")
	}
	buildOnce.Do(func() {
		binDir, buildErr = os.MkdirTemp("", "lanefleet-docs-bin")
		if buildErr != nil {
			return
		}
		cmd := exec.Command("go", "build", "-o", binDir+string(filepath.Separator), "./cmd/worker", "./cmd/publisher", "./cmd/gateway")
		cmd.Dir = root
		if out, err := cmd.CombinedOutput(); err != nil {
			buildErr = fmt.Errorf("go build: %v\n%s", err, out)
		}
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return binDir
}

func TestMain(m *testing.M) {
	flag.Parse()
	code := m.Run()
	if binDir != "" {
		os.RemoveAll(binDir)
	}
	os.Exit(code)
}
