package agentprompt_test

import (
	"context"
	"fmt"
	"time"

	"github.com/lanefleet/lanefleet/agentprompt"
)

// ExampleBuild builds a run's system prompt from values; a run gets the
// skills from LoadSkills and the files from LoadContextFiles.
func ExampleBuild() {
	prompt := agentprompt.Build(agentprompt.Input{
		BasePrompt: "You are a release assistant.",
		Tools:      []agentprompt.Tool{{Name: "read", Description: "Read a file."}},
		Workspace:  "/srv/agents/release",
		Now:        time.Date(2026, 3, 2, 9, 30, 0, 0, time.UTC),
		Skills: []agentprompt.Skill{{
			Name:        "changelog",
			Description: "Use when writing release notes.",
			Path:        "/srv/skills/changelog/SKILL.md",
			BaseDir:     "/srv/skills/changelog",
		}},
		ContextFiles: []agentprompt.ContextFile{{
			Name:    "AGENTS.md",
			Path:    "/srv/agents/release/AGENTS.md",
			Content: "Never tag a release on a Friday.",
		}},
	})
	fmt.Println(prompt)
	// Output:
	// You are a release assistant.
	//
	// ## Workspace
	// Your working directory is: /srv/agents/release
	// Treat this directory as the single workspace for file operations unless explicitly instructed otherwise.
	//
	// The following skills provide specialized instructions for specific tasks.
	// Use the read tool to load a skill's file when the task matches its description.
	// Relative paths inside a skill file are resolved from the skill directory (parent of SKILL.md).
	//
	// <available_skills>
	//   <skill>
	//     <name>changelog</name>
	//     <description>Use when writing release notes.</description>
	//     <location>/srv/skills/changelog/SKILL.md</location>
	//   </skill>
	// </available_skills>
	//
	// # Project Context
	//
	// The following project context files have been loaded:
	//
	// ## /srv/agents/release/AGENTS.md
	//
	// Never tag a release on a Friday.
	//
	// Current date and time: Monday, March 2, 2026, 09:30 UTC
}

// ExampleEnviron gives a skill its API key without touching the process's
// environment.
func ExampleEnviron() {
	skills := []agentprompt.Skill{{Name: "images", PrimaryEnv: "GEMINI_API_KEY"}}
	cfg := agentprompt.SkillConfigs{"images": {APIKey: "k-123", Env: map[string]string{"IMAGE_DIR": "/tmp/img"}}}
	base := []string{"HOME=/home/agent", "IMAGE_DIR=/data/img"}
	for _, kv := range agentprompt.Environ(base, skills, cfg) {
		fmt.Println(kv)
	}
	// Output:
	// HOME=/home/agent
	// IMAGE_DIR=/data/img
	// GEMINI_API_KEY=k-123
}

// ExampleRunHooks merges what before-start hooks contribute.
func ExampleRunHooks() {
	memory := agentprompt.HookFunc(func(ctx context.Context, in agentprompt.HookInput) (agentprompt.HookResult, error) {
		return agentprompt.HookResult{PrependContext: "<memories>The user likes tea.</memories>"}, nil
	})
	prepend, override := agentprompt.RunHooks(context.Background(), []agentprompt.Hook{memory},
		agentprompt.HookInput{Prompt: "What should I drink?"}, nil)
	fmt.Println(agentprompt.JoinPrompt(prepend, "What should I drink?"))
	fmt.Printf("system prompt override: %q\n", override)
	// Output:
	// <memories>The user likes tea.</memories>
	//
	// What should I drink?
	// system prompt override: ""
}
