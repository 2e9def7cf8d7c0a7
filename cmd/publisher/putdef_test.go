package main

import (
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/spf13/pflag"
)

// TestAgentPutDefinition pins agents put's rule from flags to definition:
// tool flags make a tool policy, --skill (even empty) replaces the skills,
// --no-chat-commands turns them off, and --file goes with no definition
// flag.
func TestAgentPutDefinition(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name    string
		args    []string
		stdin   string
		refused string
		check   func(t *testing.T, tools, skills []string, profile string, chat *bool)
	}{
		{name: "plain", args: []string{"--id", "ops"}, check: func(t *testing.T, tools, skills []string, profile string, chat *bool) {
			if tools != nil || skills != nil || chat != nil {
				t.Errorf("tools %q skills %q chat %v: want none", tools, skills, chat)
			}
		}},
		{name: "tool policy", args: []string{"--id", "ops", "--tool-profile", "coding", "--tool-deny", "exec"}, check: func(t *testing.T, tools, skills []string, profile string, chat *bool) {
			if profile != "coding" || !slices.Equal(tools, []string{"exec"}) {
				t.Errorf("profile %q deny %q", profile, tools)
			}
		}},
		{name: "skills", args: []string{"--id", "ops", "--skill", "a", "--skill", "b"}, check: func(t *testing.T, tools, skills []string, profile string, chat *bool) {
			if !slices.Equal(skills, []string{"a", "b"}) {
				t.Errorf("skills %q", skills)
			}
		}},
		{name: "no chat commands", args: []string{"--id", "ops", "--no-chat-commands"}, check: func(t *testing.T, tools, skills []string, profile string, chat *bool) {
			if chat == nil || *chat {
				t.Errorf("chat commands %v, want off", chat)
			}
		}},
		{name: "file with a flag", args: []string{"--file", "-", "--model", "x/y"}, refused: "--model cannot go with it"},
		{name: "file", args: []string{"--file", "-"}, stdin: `{"id":"ops","model":"anthropic/claude-sonnet-4-5"}`, check: func(t *testing.T, tools, skills []string, profile string, chat *bool) {}},
		{name: "file bad", args: []string{"--file", "-"}, stdin: `{`, refused: "agents put: -:"},
	} {
		t.Run(c.name, func(t *testing.T) {
			var f agentPutFlags
			fs := pflag.NewFlagSet("put", pflag.ContinueOnError)
			f.register(fs)
			if err := fs.Parse(c.args); err != nil {
				t.Fatal(err)
			}
			a, err := f.definition(&common{stdin: strings.NewReader(c.stdin)}, fs)
			if c.refused != "" {
				if !errors.As(err, new(usageError)) || !strings.Contains(err.Error(), c.refused) {
					t.Fatalf("err = %v, want a usage error with %q", err, c.refused)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if a.ID != "ops" {
				t.Errorf("id %q", a.ID)
			}
			var deny []string
			var profile string
			if a.Tools != nil {
				deny, profile = a.Tools.Deny, a.Tools.Profile
			}
			c.check(t, deny, a.Skills, profile, a.ChatCommands)
		})
	}
}
