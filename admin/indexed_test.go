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

// TestSummarized: an index entry stands for the lane's cursor only when it
// was written at a commit that no later run's commit can have passed: a
// run with stored events past the entry's cursor (its commit's entry on
// its way, or never written) other than the running run sends the
// listing to the cursor; so does an entry written before any commit.
func TestSummarized(t *testing.T) {
	committed := &sessionindex.Record{Run: "7", Committed: true, Through: 8}
	for _, c := range []struct {
		name    string
		entry   *sessionindex.Record
		runs    []uint64
		running string
		want    bool
	}{
		{"no entry", nil, nil, "", false},
		{"listed while queued", &sessionindex.Record{Run: "7"}, []uint64{7}, "", false},
		{"committed, idle", committed, []uint64{3, 7}, "", true},
		{"committed, its steered backlog's events", committed, []uint64{7, 8}, "", true},
		{"committed, events expired", committed, nil, "", true},
		{"committed, the next run running", committed, []uint64{7, 9}, "9", true},
		{"a later run's commit not indexed yet", committed, []uint64{7, 9}, "", false},
		{"a later run, and another running", committed, []uint64{7, 9, 10}, "10", false},
	} {
		l := &lane{entry: c.entry, running: c.running}
		for _, r := range c.runs {
			l.addRun(r)
		}
		if got := l.summarized(); got != c.want {
			t.Errorf("%s: summarized %v, want %v", c.name, got, c.want)
		}
	}
}
