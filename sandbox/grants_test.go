//go:build unix

package sandbox

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// tree makes files (mode 0644, or the mode after a colon: "a/b:600") and
// directories (a trailing slash, "d/:700") under a temp dir, and the
// symbolic links given as "link->target".
func tree(t *testing.T, entries ...string) string {
	t.Helper()
	root := t.TempDir()
	for _, e := range entries {
		if link, target, ok := strings.Cut(e, "->"); ok {
			if err := os.Symlink(target, filepath.Join(root, link)); err != nil {
				t.Fatal(err)
			}
			continue
		}
		name, mode := e, os.FileMode(0)
		if n, m, ok := strings.Cut(e, ":"); ok {
			name = n
			for _, c := range m {
				mode = mode<<3 | os.FileMode(c-'0')
			}
		}
		p := filepath.Join(root, name)
		if strings.HasSuffix(name, "/") {
			if err := os.MkdirAll(p, 0o755); err != nil {
				t.Fatal(err)
			}
		} else {
			if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(p, nil, 0o644); err != nil {
				t.Fatal(err)
			}
		}
		if mode != 0 {
			if err := os.Chmod(p, mode); err != nil {
				t.Fatal(err)
			}
		}
	}
	real, err := filepath.EvalSymlinks(root)
	if err != nil {
		t.Fatal(err)
	}
	return real
}

// render lists grants relative to root: "path/" for directories, "+w" for
// write access.
func render(root string, gs []grant) string {
	var out []string
	for _, g := range gs {
		rel, _ := filepath.Rel(root, g.Path)
		if g.Dir {
			rel += "/"
		}
		if g.Write {
			rel += "+w"
		}
		out = append(out, rel)
	}
	slices.Sort(out)
	return strings.Join(out, " ")
}

func TestReadOnlyGrants(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		entries []string
		roots   []string // relative to the tree; "!" prefix: private
		extra   []string
		deny    []string
		want    string
	}{
		{"whole root", []string{"usr/bin/sh", "usr/lib/x"}, []string{"usr"}, nil, nil, "usr/"},
		{"missing roots are skipped", []string{"usr/bin/sh"}, []string{"usr", "lib64", "nix/store"}, nil, nil, "usr/"},
		{"a root given twice, once through a link", []string{"usr/bin/sh", "bin->usr/bin"}, []string{"usr/bin", "bin"}, nil, nil, "usr/bin/"},
		{"denied file: its siblings one by one, down its path",
			[]string{"opt/app/bin/tool", "opt/app/data/auth.json", "opt/app/data/cache/", "opt/other/"},
			[]string{"opt"}, nil, []string{"opt/app/data/auth.json"},
			"opt/app/bin/ opt/app/data/cache/ opt/other/"},
		{"denied directory", []string{"opt/a/x", "opt/data/js/store"}, []string{"opt"}, nil, []string{"opt/data"}, "opt/a/"},
		{"denied root", []string{"opt/a/x"}, []string{"opt"}, nil, []string{"opt"}, ""},
		{"denied ancestor of a root", []string{"opt/a/x"}, []string{"opt/a"}, nil, []string{"opt"}, ""},
		{"denied path that does not exist yet", []string{"opt/a/x", "opt/b"}, []string{"opt"}, nil, []string{"opt/a/later"}, "opt/a/x opt/b"},
		{"links below a root are not granted", []string{"opt/a", "opt/l->/root"}, []string{"opt"}, nil, []string{"opt/nothing"}, "opt/a"},
		{"private: only what everyone may read",
			[]string{"etc/passwd", "etc/shadow:640", "etc/ssl/certs/ca", "etc/ssl/private/:700", "etc/ssl/private/key:600", "etc/app/conf", "etc/app/token:600"},
			[]string{"!etc"}, nil, nil,
			"etc/app/conf etc/passwd etc/ssl/certs/"},
		{"private: names never granted", []string{"etc/gshadow", "etc/sudoers.d/x", "etc/hosts"}, []string{"!etc"}, nil, nil, "etc/hosts"},
		{"extra paths, files too", []string{"skills/a/SKILL.md", "one.txt", "secret/x"}, nil, []string{"skills", "one.txt"}, nil, "one.txt skills/"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			root := tree(t, tt.entries...)
			abs := func(ps []string) []string {
				var out []string
				for _, p := range ps {
					out = append(out, filepath.Join(root, strings.TrimPrefix(p, "!")))
				}
				return out
			}
			var private []string
			for _, r := range tt.roots {
				if strings.HasPrefix(r, "!") {
					private = append(private, r)
				}
			}
			gs, _, err := readOnlyGrants(abs(tt.roots), abs(private), abs(tt.extra), abs(tt.deny))
			if err != nil {
				t.Fatal(err)
			}
			if got := render(root, gs); got != tt.want {
				t.Fatalf("grants %q, want %q", got, tt.want)
			}
		})
	}
}

// TestSystemGrants: on this machine, the grants cover the shell and leave
// out /etc/shadow; the private root binds /etc whole (Landlock leaves
// shadow out) and nothing twice.
func TestSystemGrants(t *testing.T) {
	t.Parallel()
	gs, binds, err := readOnlyGrants(systemDirs, privateDirs, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	sh, _ := filepath.EvalSymlinks("/bin/sh")
	var shell, shadow bool
	for _, g := range gs {
		if g.Write {
			t.Errorf("write grant %v", g)
		}
		shell = shell || sh == g.Path || strings.HasPrefix(sh, g.Path+"/")
		shadow = shadow || g.Path == "/etc/shadow" || g.Path == "/etc"
	}
	if !shell || shadow {
		t.Fatalf("shell granted %v, shadow granted %v: %v", shell, shadow, gs)
	}
	if !slices.Contains(binds, grant{Path: "/etc", Dir: true}) || !slices.Equal(binds, outermost(slices.Clone(binds))) {
		t.Fatalf("binds %v", binds)
	}
}

func TestOutermost(t *testing.T) {
	t.Parallel()
	d := func(ps ...string) []grant {
		var out []grant
		for _, p := range ps {
			out = append(out, grant{Path: p, Dir: true})
		}
		return out
	}
	tests := []struct{ in, want []grant }{
		{d("/usr/bin", "/usr", "/etc"), d("/etc", "/usr")},
		// "/usr-x" sorts between "/usr" and "/usr/bin".
		{d("/usr", "/usr-x", "/usr/bin"), d("/usr", "/usr-x")},
		{d("/nix/store", "/nix/store"), d("/nix/store")},
		{nil, nil},
	}
	for _, tt := range tests {
		if got := outermost(tt.in); !slices.Equal(got, tt.want) {
			t.Errorf("outermost: %v, want %v", got, tt.want)
		}
	}
}
