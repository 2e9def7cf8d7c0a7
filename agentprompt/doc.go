// Package agentprompt assembles what a run tells the model before its first
// turn: the system prompt (a base prompt, the skills the agent may load, the
// workspace's context files), the environment of the commands the run
// executes, and the prompt prefix that before-start hooks contribute.
//
// It follows OpenClaw's embedded runner (src/agents/pi-embedded-runner,
// src/agents/skills, src/agents/workspace.ts, pi-embedded-helpers/bootstrap.ts)
// and pi's coding agent (skills.ts, system-prompt.ts), with one difference
// that shapes every function: nothing here touches process-global state. The
// reference chdirs into the workspace and writes skill environment overrides
// into process.env for the duration of a run; here every function takes the
// workspace directory and the base environment explicitly and returns
// values, so many runs with different workspaces and skills can share one
// process.
//
// A run typically calls, in order:
//
//	skills, warns := agentprompt.LoadSkills(managedDir, workspaceSkillsDir)
//	skills = agentprompt.EnabledSkills(skills, cfg)
//	env := agentprompt.Environ(baseEnv, skills, cfg)
//	files, warns := agentprompt.LoadContextFiles(workspace, agentprompt.ContextOptions{})
//	system := agentprompt.Build(agentprompt.Input{Tools: ..., Workspace: workspace,
//		Now: now, Skills: skills, ContextFiles: files})
//	prepend, override := agentprompt.RunHooks(ctx, hooks, hookInput, warn)
//
// Loading never fails a run: an invalid skill or an unreadable context file is
// skipped and reported as a [Warning].
//
// The package is pure: it reads files, but imports no NATS and no network
// code.
package agentprompt
