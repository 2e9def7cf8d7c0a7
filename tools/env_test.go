package tools

import (
	"slices"
	"testing"
)

func TestNamesVar(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		command string
		want    bool
	}{
		{"echo $GH_TOKEN", true},
		{"echo ${GH_TOKEN}", true},
		{"curl -H \"Authorization: $GH_TOKEN\" x", true},
		{"echo ${GH_TOKEN:-none}", true},
		{"echo $GH_TOKEN/path", true},
		{"echo x$GH_TOKEN", true},
		{"echo '$GH_TOKEN'", true}, // passed on to whatever expands it
		{"echo $HOME $GH_TOKEN", true},
		{"env", false},
		{"printenv GH_TOKEN", false}, // no $: the command does not ask for it
		{"echo GH_TOKEN", false},
		{"echo $GH_TOKENS", false},
		{"echo ${GH_TOKEN2}", false},
		{"echo $gh_token", false},
		{"echo $", false},
		{"echo $$GH", false},
		{"", false},
	} {
		if got := namesVar(tc.command, "GH_TOKEN"); got != tc.want {
			t.Errorf("namesVar(%q) = %v, want %v", tc.command, got, tc.want)
		}
	}
	if namesVar("echo $", "") {
		t.Error("an empty key is never named")
	}
}

func TestCommandEnv(t *testing.T) {
	t.Parallel()
	env := make([]string, 2, 8) // spare capacity must not be written
	env[0], env[1] = "PATH=/bin", "HOME=/ws"
	named := []string{"GH_TOKEN=t", "MAIL_KEY=m", "HOME=/evil"}
	for _, tc := range []struct {
		command string
		want    []string
	}{
		{"env", []string{"PATH=/bin", "HOME=/ws"}},
		{"echo $GH_TOKEN", []string{"PATH=/bin", "HOME=/ws", "GH_TOKEN=t"}},
		{"echo $MAIL_KEY ${GH_TOKEN}", []string{"PATH=/bin", "HOME=/ws", "GH_TOKEN=t", "MAIL_KEY=m"}},
		// Env wins over a named variable of the same key.
		{"echo $HOME", []string{"PATH=/bin", "HOME=/ws"}},
	} {
		got := commandEnv(env, named, tc.command)
		if !slices.Equal(got, tc.want) {
			t.Errorf("commandEnv(%q) = %q, want %q", tc.command, got, tc.want)
		}
		if spare := env[:3][2]; spare != "" {
			t.Fatalf("env's spare capacity written: %q", spare)
		}
	}
}
