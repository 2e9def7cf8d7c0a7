package main

import (
	"errors"
	"slices"
	"testing"

	"github.com/lanefleet/lanefleet/gateway"
	"github.com/lanefleet/lanefleet/hooks"
	"github.com/lanefleet/lanefleet/internal/fleet"
)

// TestToolRules pins the tool flags' rule: the lists it sets, the values it
// refuses (a usage error, exit 2) and exec approval joining the approvals.
func TestToolRules(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name    string
		f       workerFlags
		cfg     fleet.Config
		refused bool
		approve []string
		sender  bool
	}{
		{name: "defaults", f: workerFlags{hookFailure: "closed", execApproval: "off"}},
		{name: "approve list", f: workerFlags{hookFailure: "closed", execApproval: "off", toolsApprove: "write, ,edit"}, approve: []string{"write", "edit"}},
		{name: "exec approval ask", f: workerFlags{hookFailure: "open", execApproval: "ask", toolsApprove: "write"}, approve: []string{"write", "exec"}},
		{name: "exec approval bad", f: workerFlags{hookFailure: "closed", execApproval: "maybe"}, refused: true},
		{name: "hook failure bad", f: workerFlags{hookFailure: "maybe", execApproval: "off"}, refused: true},
		{name: "session tools tenant", f: workerFlags{hookFailure: "closed", execApproval: "off"}, cfg: fleet.Config{SessionTools: "tenant"}, sender: true},
		{name: "session tools agent", f: workerFlags{hookFailure: "closed", execApproval: "off"}, cfg: fleet.Config{SessionTools: "agent"}, sender: true},
		{name: "session tools bad", f: workerFlags{hookFailure: "closed", execApproval: "off"}, cfg: fleet.Config{SessionTools: "all"}, refused: true},
		{name: "subagent depth negative", f: workerFlags{hookFailure: "closed", execApproval: "off"}, cfg: fleet.Config{SubagentMaxDepth: -1}, refused: true},
		{name: "subagent children negative", f: workerFlags{hookFailure: "closed", execApproval: "off"}, cfg: fleet.Config{SubagentMaxChildren: -1}, refused: true},
		{name: "processes negative", f: workerFlags{hookFailure: "closed", execApproval: "off"}, cfg: fleet.Config{ProcessesPerSession: -1}, refused: true},
	} {
		t.Run(c.name, func(t *testing.T) {
			cfg := c.cfg
			err := c.f.toolRules(&cfg)
			if refusedAsWanted(t, err, c.refused) {
				return
			}
			if !slices.Equal(cfg.ToolPolicy.Approve, c.approve) {
				t.Errorf("approve = %q, want %q", cfg.ToolPolicy.Approve, c.approve)
			}
			if (cfg.SessionSender != nil) != c.sender {
				t.Errorf("session sender set = %v, want %v", cfg.SessionSender != nil, c.sender)
			}
			want, _ := hooks.ParseFailMode(c.f.hookFailure)
			if cfg.Hooks.ToolFailure != want {
				t.Errorf("hook failure mode = %v, want %v", cfg.Hooks.ToolFailure, want)
			}
		})
	}
}

// TestGovernanceFlags pins the governance phase: rate limits and tenant
// weights parsed, aliases parsed, and --http refused where the worker's
// own connection has a NATS identity.
func TestGovernanceFlags(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name    string
		f       workerFlags
		cfg     fleet.Config
		refused bool
		rules   int
		aliases int
	}{
		{name: "none"},
		{name: "rate limits", f: workerFlags{rateLimits: []string{"openai/*=rpm:500", "anthropic/*=tpm:1000"}}, rules: 2},
		{name: "rate limit bad", f: workerFlags{rateLimits: []string{"x"}}, refused: true},
		{name: "tenant weight bad", f: workerFlags{tenantWeights: []string{"x"}}, refused: true},
		{name: "alias", f: workerFlags{httpAliases: []string{"fast=scripted/echo"}}, aliases: 1},
		{name: "alias bad", f: workerFlags{httpAliases: []string{"fast"}}, refused: true},
		{name: "http on loopback", f: workerFlags{httpOpts: gateway.Options{Addr: "127.0.0.1:0"}}},
		{name: "http with a NATS user", f: workerFlags{httpOpts: gateway.Options{Addr: "127.0.0.1:0"}}, cfg: fleet.Config{User: "w"}, refused: true},
		{name: "http public without tokens", f: workerFlags{httpOpts: gateway.Options{Addr: "0.0.0.0:8080"}}, refused: true},
	} {
		t.Run(c.name, func(t *testing.T) {
			cfg := c.cfg
			aliases, err := c.f.governance(&cfg)
			if refusedAsWanted(t, err, c.refused) {
				return
			}
			if len(cfg.RateLimits) != c.rules || len(aliases) != c.aliases {
				t.Errorf("rules %d, aliases %d; want %d, %d", len(cfg.RateLimits), len(aliases), c.rules, c.aliases)
			}
		})
	}
}

// refusedAsWanted fails the test unless err is a usage error where one is
// wanted and nil where none is; it says whether the case ends there.
func refusedAsWanted(t *testing.T, err error, refused bool) bool {
	t.Helper()
	switch {
	case refused && !errors.As(err, new(usageError)):
		t.Fatalf("err = %v, want a usage error", err)
	case !refused && err != nil:
		t.Fatal(err)
	}
	return refused
}
