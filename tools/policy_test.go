package tools

import "testing"

func TestPolicy(t *testing.T) {
	for _, tc := range []struct {
		name     string
		p        Policy
		tool     string
		allowed  bool
		approval bool
	}{
		{"zero policy allows all", Policy{}, "exec", true, false},
		{"deny wins over allow", Policy{Allow: []string{"*"}, Deny: []string{"exec"}}, "exec", false, false},
		{"allow list", Policy{Allow: []string{"read", "web_*"}}, "web_fetch", true, false},
		{"outside the allow list", Policy{Allow: []string{"read"}}, "write", false, false},
		{"case-insensitive", Policy{Deny: []string{"EXEC"}}, "Exec", false, false},
		{"approval", Policy{Approve: []string{"exec"}}, "exec", true, true},
	} {
		if got := tc.p.Allows(tc.tool); got != tc.allowed {
			t.Errorf("%s: Allows(%q) = %v", tc.name, tc.tool, got)
		}
		if got := tc.p.NeedsApproval(tc.tool); got != tc.approval {
			t.Errorf("%s: NeedsApproval(%q) = %v", tc.name, tc.tool, got)
		}
	}
	// A session narrows the worker's policy, never widens it.
	ps := Policies{{Allow: []string{"read", "write"}}, {Allow: []string{"write", "exec"}, Approve: []string{"write"}}}
	for tool, want := range map[string]bool{"read": false, "write": true, "exec": false} {
		if ps.Allows(tool) != want {
			t.Errorf("Policies.Allows(%q) = %v, want %v", tool, !want, want)
		}
	}
	if !ps.NeedsApproval("write") {
		t.Error("the session's approval request is lost")
	}
	if err := (Policy{Deny: []string{"["}}).Validate(); err == nil {
		t.Error("a malformed pattern was accepted")
	}
	if err := (Policy{Allow: []string{" "}}).Validate(); err == nil {
		t.Error("an empty pattern was accepted")
	}
}
