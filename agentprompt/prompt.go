package agentprompt

import (
	"strings"
	"time"
)

// maxToolSummaryChars caps the one-line description of a tool in the
// default base prompt; the full description travels with the tool's
// definition anyway.
const maxToolSummaryChars = 200

// DateTimeLayout is how Build writes Input.Now.
const DateTimeLayout = "Monday, January 2, 2006, 15:04 MST"

// Tool names a tool the model can call, for the system prompt's tool list.
type Tool struct {
	// Name is the exact name the model calls the tool by.
	Name string
	// Description is the tool's description; the prompt shows its first
	// line.
	Description string
}

// Input is everything the system prompt of a run depends on. Build reads
// nothing else: no clock, no file, no environment.
type Input struct {
	// BasePrompt, when not empty, replaces the default base prompt (the
	// agent's identity, its tool list and the guidelines). Everything after
	// it (workspace, skills, context files, Extra, date) is still added.
	BasePrompt string
	// Tools are the run's tools, in a stable order, for the default base
	// prompt's list. Skills are only offered when Tools is empty or has a
	// tool named "read", which the model loads them with.
	Tools []Tool
	// Workspace is the absolute path of the run's workspace directory;
	// empty leaves the workspace section out.
	Workspace string
	// Now is the current date and time, written last in the prompt in
	// DateTimeLayout (and the location of Now); the zero time leaves it
	// out. Round it (to the minute, hour or day) as precisely as the agent
	// needs: the date is the only part of the prompt that changes between
	// runs of one agent, and it is last so that everything before it stays
	// a cacheable prefix.
	Now time.Time
	// Skills are the skills to offer, as from EnabledSkills(LoadSkills(...)).
	Skills []Skill
	// ContextFiles are the workspace files to inject, as from
	// LoadContextFiles.
	ContextFiles []ContextFile
	// Extra is appended after the context files (OpenClaw's
	// extraSystemPrompt, pi's --append-system-prompt); empty adds nothing.
	Extra string
}

// Build returns the system prompt of a run, made of these sections
// separated by blank lines, each left out when it would be empty:
//
//  1. the base prompt: Input.BasePrompt, or the default one, which says what
//     the agent is, lists its tools by name with one-line descriptions and
//     gives guidelines that depend on which tools exist;
//  2. "## Workspace" with the workspace path;
//  3. the skills prompt (see SkillsPrompt);
//  4. "# Project Context": each context file under a "## <path>" heading, as
//     OpenClaw injects them;
//  5. Input.Extra;
//  6. the current date and time.
//
// Build is deterministic: equal inputs give byte-identical prompts, so that
// providers' prompt caches hit.
func Build(in Input) string {
	sections := make([]string, 0, 6)
	add := func(s string) {
		if s = strings.TrimRight(s, "\n"); strings.TrimSpace(s) != "" {
			sections = append(sections, s)
		}
	}
	if in.BasePrompt != "" {
		add(in.BasePrompt)
	} else {
		add(defaultBase(in.Tools))
	}
	if in.Workspace != "" {
		add("## Workspace\nYour working directory is: " + in.Workspace + "\n" +
			"Treat this directory as the single workspace for file operations unless explicitly instructed otherwise.")
	}
	if len(in.Tools) == 0 || hasTool(in.Tools, "read") {
		add(SkillsPrompt(in.Skills))
	}
	add(projectContext(in.ContextFiles))
	add(in.Extra)
	if !in.Now.IsZero() {
		add("Current date and time: " + in.Now.Format(DateTimeLayout))
	}
	return strings.Join(sections, "\n\n")
}

// defaultBase is the default base prompt for a run with the given tools.
func defaultBase(tools []Tool) string {
	var b strings.Builder
	b.WriteString("You are an AI agent running inside Lanefleet. You help the user by reading files, " +
		"running commands, editing code and writing new files with the tools below.\n" +
		"\n" +
		"## Tooling\n" +
		"Tool names are case-sensitive. Call tools exactly as listed.\n")
	n := 0
	for _, t := range tools {
		name := strings.TrimSpace(t.Name)
		if name == "" {
			continue
		}
		n++
		b.WriteString("- ")
		b.WriteString(name)
		if d := toolSummary(t.Description); d != "" {
			b.WriteString(": ")
			b.WriteString(d)
		}
		b.WriteByte('\n')
	}
	if n == 0 {
		b.WriteString("(no tools are available)\n")
	}
	b.WriteString("\n## Guidelines\n")
	if hasTool(tools, "read") && hasTool(tools, "edit") {
		b.WriteString("- Use read to examine files before editing them.\n")
	}
	if hasTool(tools, "edit") {
		b.WriteString("- Use edit for precise changes (the old text must match exactly).\n")
	}
	if hasTool(tools, "write") {
		b.WriteString("- Use write only for new files or complete rewrites.\n")
	}
	if hasTool(tools, "edit") || hasTool(tools, "write") {
		b.WriteString("- When summarizing your actions, write plain text; do not use commands to display what you did.\n")
	}
	b.WriteString("- Be concise in your responses.\n" +
		"- Show file paths clearly when working with files.")
	return b.String()
}

// toolSummary is the first non-empty line of a tool description, with runs
// of white space collapsed, cut to maxToolSummaryChars.
func toolSummary(desc string) string {
	for line := range strings.SplitSeq(desc, "\n") {
		if line = strings.Join(strings.Fields(line), " "); line != "" {
			return clampToBudget(line, maxToolSummaryChars)
		}
	}
	return ""
}

// hasTool reports whether tools has one called name.
func hasTool(tools []Tool, name string) bool {
	for _, t := range tools {
		if strings.TrimSpace(t.Name) == name {
			return true
		}
	}
	return false
}
