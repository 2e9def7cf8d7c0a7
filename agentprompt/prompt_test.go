package agentprompt

import (
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"
)

// builtinTools are the run's built-in tools as the runner would list them,
// with multi-line descriptions of which the prompt shows the first line.
var builtinTools = []Tool{
	{Name: "read", Description: "Read the contents of a file.\n\nText output is truncated to 2000 lines."},
	{Name: "write", Description: "Write content to a file, creating it and its directories."},
	{Name: "edit", Description: "  Edit a file by replacing exact text.  \nThe old text must match exactly."},
	{Name: "exec", Description: "Run a shell command in the workspace."},
}

// fixtureInput loads testdata's skills and workspace files, as a run would.
func fixtureInput(t *testing.T) Input {
	t.Helper()
	skills, _ := LoadSkills(testdata(t, "skills"))
	files, _ := LoadContextFiles(testdata(t, "workspace"), ContextOptions{})
	return Input{
		Tools:        builtinTools,
		Workspace:    testdata(t, "workspace"),
		Now:          time.Date(2026, 3, 2, 14, 5, 0, 0, time.UTC),
		Skills:       EnabledSkills(skills, SkillConfigs{"bad-metadata": {Enabled: ptr(false)}}),
		ContextFiles: files,
	}
}

func TestBuildGolden(t *testing.T) {
	t.Parallel()
	tests := []struct {
		golden string
		input  func(in Input) Input
	}{
		{
			golden: "build_default.golden",
			input:  func(in Input) Input { return in },
		},
		{
			// A custom base replaces identity, tools and guidelines; with
			// no tools listed, skills are still offered.
			golden: "build_custom.golden",
			input: func(in Input) Input {
				in.BasePrompt = "You are Alice's research assistant.\nAnswer in German.\n\n"
				in.Tools = nil
				in.Extra = "## Group Chat Context\nYou are in a group chat with three people."
				in.Now = time.Time{}
				return in
			},
		},
		{
			// Without a read tool the model could not load a skill: skills
			// are left out. No context files, no workspace.
			golden: "build_no_read.golden",
			input: func(in Input) Input {
				in.Tools = []Tool{{Name: "exec", Description: "Run a command."}, {Name: "  ", Description: "nameless: skipped"}, {Name: "web_search"}}
				in.ContextFiles = nil
				in.Workspace = ""
				in.Now = time.Date(2026, 3, 2, 14, 5, 0, 0, time.FixedZone("CET", 3600))
				return in
			},
		},
		{
			golden: "build_empty.golden",
			input:  func(Input) Input { return Input{} },
		},
	}
	for _, tc := range tests {
		t.Run(tc.golden, func(t *testing.T) {
			t.Parallel()
			checkGolden(t, tc.golden, portable(t, Build(tc.input(fixtureInput(t))))+"\n")
		})
	}
}

// TestBuildDeterministic checks that equal inputs give identical prompts,
// also when built concurrently (prompt caches depend on it).
func TestBuildDeterministic(t *testing.T) {
	t.Parallel()
	in := fixtureInput(t)
	want := Build(in)
	var wg sync.WaitGroup
	got := make([]string, 8)
	for i := range got {
		wg.Go(func() { got[i] = Build(in) })
	}
	wg.Wait()
	for i, g := range got {
		if g != want {
			t.Fatalf("build %d differs", i)
		}
	}
	// The date is the only part that changes between runs, and it is last:
	// everything before it is a stable prefix.
	later := in
	later.Now = in.Now.Add(24 * time.Hour)
	prefix, _, _ := strings.Cut(want, "Current date and time:")
	if !strings.HasPrefix(Build(later), prefix) {
		t.Error("a later date changes more than the prompt's end")
	}
}

func TestToolSummary(t *testing.T) {
	t.Parallel()
	long := strings.Repeat("word ", 60)
	for _, tc := range []struct{ in, want string }{
		{"", ""},
		{"\n\n  \n", ""},
		{"One line.", "One line."},
		{"\n  First   line \t here.\nSecond.", "First line here."},
		{long, strings.TrimSpace(long)[:199] + "…"},
	} {
		if got := toolSummary(tc.in); got != tc.want {
			t.Errorf("toolSummary(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}

// benchInput is a run with 20 skills and 3 context files of a few thousand
// characters each.
func benchInput() Input {
	in := Input{
		Tools:     builtinTools,
		Workspace: "/srv/lanefleet/workspaces/agent-1",
		Now:       time.Date(2026, 3, 2, 14, 5, 0, 0, time.UTC),
	}
	for i := range 20 {
		name := fmt.Sprintf("skill-%02d", i)
		in.Skills = append(in.Skills, Skill{
			Name:        name,
			Description: "Use when the user asks about " + name + " & friends; it knows <everything> about it. " + strings.Repeat("More detail. ", 10),
			Path:        "/srv/lanefleet/skills/" + name + "/SKILL.md",
			BaseDir:     "/srv/lanefleet/skills/" + name,
		})
	}
	for _, name := range []string{AgentsFile, SoulFile, ToolsFile} {
		in.ContextFiles = append(in.ContextFiles, ContextFile{
			Name:    name,
			Path:    in.Workspace + "/" + name,
			Content: strings.Repeat("- A rule the agent follows in this workspace.\n", 100),
		})
	}
	return in
}

func BenchmarkBuild(b *testing.B) {
	in := benchInput()
	b.ReportAllocs()
	b.SetBytes(int64(len(Build(in))))
	for b.Loop() {
		Build(in)
	}
}
