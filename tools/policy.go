package tools

import (
	"fmt"
	"path"
	"strings"

	"github.com/lanefleet/lanefleet/provider"
)

// Policy is the operator's (or a session's) rule for which tools a run may
// use and which need the user's approval for every call. Entries are
// case-insensitive globs in path.Match syntax ("exec", "web_*"), as the
// reference's tool allow and deny lists: deny wins, an empty Allow allows
// every tool. The zero Policy allows everything and asks for nothing.
type Policy struct {
	Allow   []string
	Deny    []string
	Approve []string // tools whose every call waits for the client's "approve"
}

// Validate reports a malformed pattern.
func (p Policy) Validate() error {
	for _, list := range [][]string{p.Allow, p.Deny, p.Approve} {
		for _, pat := range list {
			if strings.TrimSpace(pat) == "" {
				return fmt.Errorf("tools: empty tool pattern")
			}
			if _, err := path.Match(strings.ToLower(pat), ""); err != nil {
				return fmt.Errorf("tools: tool pattern %q: %w", pat, err)
			}
		}
	}
	return nil
}

// Allows reports whether a tool may be offered to the model.
func (p Policy) Allows(name string) bool {
	if matchAny(p.Deny, name) {
		return false
	}
	return len(p.Allow) == 0 || matchAny(p.Allow, name)
}

// NeedsApproval reports whether each call of the tool waits for the
// client's approval.
func (p Policy) NeedsApproval(name string) bool { return matchAny(p.Approve, name) }

// Policies are the policies a run is under (the fleet's, then its
// session's), all of which apply: a tool is allowed when every one allows
// it and needs approval when any asks for it, so a session can narrow the
// fleet's policy, never widen it.
type Policies []Policy

// Allows reports whether every policy allows the tool.
func (ps Policies) Allows(name string) bool {
	for _, p := range ps {
		if !p.Allows(name) {
			return false
		}
	}
	return true
}

// NeedsApproval reports whether any policy asks for approval of the tool.
func (ps Policies) NeedsApproval(name string) bool {
	for _, p := range ps {
		if p.NeedsApproval(name) {
			return true
		}
	}
	return false
}

// Filter returns the tools of set the policies allow.
func (ps Policies) Filter(set Set) Set {
	if set == nil || len(ps) == 0 {
		return set
	}
	return filtered{set: set, ps: ps}
}

// filtered is a Set with the tools its policies refuse left out.
type filtered struct {
	set Set
	ps  Policies
}

func (f filtered) Specs() []provider.Tool {
	var out []provider.Tool
	for _, s := range f.set.Specs() {
		if f.ps.Allows(s.Name) {
			out = append(out, s)
		}
	}
	return out
}

func (f filtered) Lookup(name string) (Tool, bool) {
	if !f.ps.Allows(name) {
		return nil, false
	}
	return f.set.Lookup(name)
}

func matchAny(patterns []string, name string) bool {
	name = strings.ToLower(strings.TrimSpace(name))
	for _, pat := range patterns {
		if ok, _ := path.Match(strings.ToLower(strings.TrimSpace(pat)), name); ok {
			return true
		}
	}
	return false
}
