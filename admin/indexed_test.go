package admin

import (
	"testing"

	"github.com/lanefleet/lanefleet/sessionindex"
)

// TestPlanIndexScope: every plan of a scoped listing reads only what the
// scope reaches: a scope of no keys and no prefixes reads nothing (not
// the whole index), a prefix that is not one group's is kept entry by
// entry, and only nil (every session) or one whole group is exact.
func TestPlanIndexScope(t *testing.T) {
	// Not parallel: TestRequestsBounded counts the package's goroutines,
	// and a parallel test waiting to run is one.
	all := sessionindex.Prefix + "*.*"
	acme, _ := sessionindex.Filter("acme:")
	for _, c := range []struct {
		name   string
		scope  *Scope
		lookup bool
		filter string
		exact  bool
	}{
		{"every session", nil, false, all, true},
		{"nothing", &Scope{}, true, "", true},
		{"nothing, empty slices", &Scope{Prefixes: []string{}, Keys: []string{}}, true, "", true},
		{"keys", &Scope{Keys: []string{"acme:a", "-"}}, true, "", true},
		{"one group", &Scope{Prefixes: []string{"acme:"}}, false, acme, true},
		{"in a group", &Scope{Prefixes: []string{"acme:sup"}}, false, acme, false},
		{"no group", &Scope{Prefixes: []string{"acme"}}, false, all, false},
		{"two groups", &Scope{Prefixes: []string{"acme:", "beta:"}}, false, all, false},
		{"prefixes and keys", &Scope{Prefixes: []string{"acme:"}, Keys: []string{"beta:x"}}, false, all, false},
	} {
		p := planIndex(c.scope, "")
		if p.lookup != c.lookup || (!p.lookup && (p.filter != c.filter || p.exact != c.exact)) {
			t.Errorf("%s: plan lookup %v filter %q exact %v, want %v %q %v", c.name, p.lookup, p.filter, p.exact, c.lookup, c.filter, c.exact)
		}
		if !p.exact && p.keep == nil {
			t.Errorf("%s: a plan that is not exact keeps every entry", c.name)
		}
		if p.keep != nil {
			for _, key := range []string{"acme:x", "beta:x", "acmex", "-", "zeta"} {
				if got := p.keep(sessionindex.Entry{Key: key}); got != c.scope.Allows(key) {
					t.Errorf("%s: keep(%q) = %v, the scope allows it: %v", c.name, key, got, !got)
				}
			}
		}
	}
}
