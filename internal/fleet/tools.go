package fleet

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"github.com/rs/zerolog"

	"github.com/lanefleet/lanefleet/agentprompt"
	"github.com/lanefleet/lanefleet/authprofile"
	"github.com/lanefleet/lanefleet/events"
	"github.com/lanefleet/lanefleet/netguard"
	"github.com/lanefleet/lanefleet/provider"
	"github.com/lanefleet/lanefleet/redact"
	"github.com/lanefleet/lanefleet/runner"
	"github.com/lanefleet/lanefleet/sandbox"
	"github.com/lanefleet/lanefleet/tools"
	"github.com/lanefleet/lanefleet/tools/remote"
	"github.com/lanefleet/lanefleet/tools/sessions"
	"github.com/lanefleet/lanefleet/tools/webfetch"
	"github.com/lanefleet/lanefleet/tools/websearch"
)

// toolSource gives each run the built-in tools in its session's workspace
// (<root>/<events.KeyDirName of the key>: the lane token, or a digest for
// a key whose token is too long for a file name) and the remote tools the fleet offers over NATS.
type toolSource struct {
	root   string           // workspaces root; "" = no built-in tools
	env    []string         // the base environment of exec'd commands
	box    *sandbox.Sandbox // runs exec's commands; nil = no exec tool
	disk   *sandbox.Disk    // the workspaces' filesystem; nil = not bounded
	remote *remote.Registry // nil = no remote tools
	web    tools.List       // web_fetch, web_search when configured: shared by every run
	// procs holds the process tool's background processes (nil = no
	// process tool); set by build once the worker has its id.
	procs *tools.Processes
	// memory caches the memory files' index (nil = no memory tools).
	memory *tools.MemoryCache
	// sessions serves the session tools (nil = none).
	sessions       sessions.Backend
	sessionsPolicy sessions.Policy
	// The system prompt: base text, skills directories (lowest priority
	// first; each workspace's skills/ comes last) and per-skill settings.
	base      string
	skillDirs []string
	skillCfg  agentprompt.SkillConfigs
	log       zerolog.Logger
	now       func() time.Time
	red       *redact.Redactor // masks every tool's results
	// prompt is the last system prompt built: a run whose prompt is the
	// same text holds this one, not its own copy, while its model
	// answers (runs without a workspace of their own, within a minute).
	prompt atomic.Pointer[string]
}

// newToolSource configures the runs' tools and system prompt: the
// workspaces root (unless built-in tools are off), with exec its bounded
// filesystem, exec's sandbox and environment (PATH from the member's
// environment), skills and the remote registry. store is the local
// JetStream store's directory, if any.
func newToolSource(ctx context.Context, cfg Config, reg *remote.Registry, store string) (*toolSource, error) {
	if cfg.ExecUnconfined && !cfg.Exec {
		return nil, errors.New("fleet: ExecUnconfined (--exec-unconfined) without Exec (--exec)")
	}
	ts := &toolSource{env: []string{"PATH=" + cfg.Env("PATH"), "LANG=C.UTF-8"}, base: cfg.SystemPrompt, log: cfg.Logger,
		now: time.Now, skillCfg: cfg.Skills, remote: reg, red: cfg.Redactor}
	if cfg.SkillsDir != "" {
		// A skills directory that is not there can only be a mistake:
		// every session would silently go without its skills.
		if st, err := os.Stat(cfg.SkillsDir); err != nil {
			return nil, fmt.Errorf("fleet: --skills-dir: %w", err)
		} else if !st.IsDir() {
			return nil, fmt.Errorf("fleet: --skills-dir %s is not a directory (it holds <name>/SKILL.md)", cfg.SkillsDir)
		}
		ts.skillDirs = []string{cfg.SkillsDir}
	}
	if cfg.Process && !cfg.Exec {
		return nil, errors.New("fleet: Process (--process) without Exec (--exec): background commands run in exec's sandbox")
	}
	if cfg.NoBuiltinTools {
		if cfg.Process || cfg.MemoryTools {
			return nil, errors.New("fleet: NoBuiltinTools (--no-builtin-tools) with Process or MemoryTools (--process, --memory-tools), which work in the workspaces")
		}
		return ts, nil
	}
	if cfg.MemoryTools {
		ts.memory = tools.NewMemoryCache()
	}
	root := cfg.WorkspaceRoot
	switch {
	case root != "":
	case cfg.DataDir != "":
		root = filepath.Join(cfg.DataDir, "workspaces")
	default:
		root = filepath.Join(os.TempDir(), "lanefleet-workspaces")
		ts.log.Info().Str("workspace_root", root).Msg("workspaces in the temporary directory (no data directory): give --workspace-root to keep them elsewhere")
	}
	abs, err := filepath.Abs(root)
	if err != nil {
		return nil, fmt.Errorf("fleet: workspace root %s: %w", root, err)
	}
	ts.root = abs
	if cfg.Exec {
		if ts.disk, err = workspaceDisk(cfg, abs, store, ts.log); err != nil {
			return nil, err
		}
		if ts.box, err = newSandbox(ctx, cfg, abs); err != nil {
			ts.disk.Close() //nolint:errcheck // the sandbox error says more
			return nil, err
		}
		if p := ts.box.Platform(); p.Confined {
			ts.log.Info().Str("confinement", p.String()).Msg("exec tool on")
		} else {
			ts.log.Warn().Str("confinement", p.String()).
				Msg("EXEC IS UNCONFINED (--exec-unconfined, for tests only): every command a message sends runs with this worker's privileges and sees all it sees: its credentials, the JetStream store, the other sessions")
		}
	}
	return ts, nil
}

// webTools builds the web tools the configuration turns on; creds may
// hold web_search's Brave key.
func webTools(cfg Config, creds *authprofile.Store) (tools.List, error) {
	var out tools.List
	if len(cfg.WebAllow) > 0 && !cfg.WebFetch {
		return nil, errors.New("fleet: WebAllow (--web-allow) without WebFetch (--web-fetch)")
	}
	if cfg.WebFetch {
		pol, err := netguard.Parse(cfg.WebAllow)
		if err != nil {
			return nil, fmt.Errorf("fleet: --web-allow: %w", err)
		}
		wf, err := webfetch.New(webfetch.Config{Policy: pol})
		if err != nil {
			return nil, fmt.Errorf("fleet: web_fetch: %w", err)
		}
		out = append(out, wf)
		if len(cfg.WebAllow) > 0 {
			cfg.Logger.Warn().Strs("allow", cfg.WebAllow).Msg("web_fetch on, and may reach these addresses and hosts the SSRF guard refuses")
		} else {
			cfg.Logger.Info().Msg("web_fetch on: public addresses only")
		}
	}
	if cfg.WebSearchURL != "" && cfg.WebSearch == "" {
		return nil, errors.New("fleet: WebSearchURL (--web-search-url) without WebSearch (--web-search)")
	}
	if cfg.WebSearch != "" {
		sc := websearch.Config{Provider: cfg.WebSearch, URL: cfg.WebSearchURL}
		if cfg.WebSearch == websearch.Brave {
			sc.APIKey = braveKey(cfg, creds)
			if sc.APIKey == "" {
				return nil, errors.New("fleet: --web-search brave needs a Brave Search API key: set BRAVE_API_KEY, or add an api_key profile of provider \"brave\" to --auth-profiles")
			}
		}
		ws, err := websearch.New(sc)
		if err != nil {
			return nil, fmt.Errorf("fleet: --web-search: %w", err)
		}
		out = append(out, ws)
		cfg.Logger.Info().Str("provider", cfg.WebSearch).Msg("web_search on")
	}
	return out, nil
}

// BraveKeyEnv is the environment variable of web_search's Brave key.
const BraveKeyEnv = "BRAVE_API_KEY"

// braveKey is the Brave Search API key: BRAVE_API_KEY, else the first
// api_key profile of provider "brave" in the auth profiles.
func braveKey(cfg Config, creds *authprofile.Store) provider.Secret {
	if k := strings.TrimSpace(cfg.Env(BraveKeyEnv)); k != "" {
		return provider.Secret(k)
	}
	if creds != nil {
		for _, p := range creds.Profiles {
			if p.Provider == websearch.Brave && p.Type == authprofile.TypeAPIKey && p.Key != "" {
				return p.Key
			}
		}
	}
	return ""
}

// WorkspaceMaxBytesDefault is the size of the workspaces' filesystem with
// exec when Config.WorkspaceMaxBytes is 0.
const WorkspaceMaxBytesDefault = 4 << 30

// workspaceDisk bounds the workspaces' filesystem for exec, whose commands
// could otherwise fill it: root becomes a filesystem of
// WorkspaceMaxBytes. Where that cannot be (not root, no loop devices,
// files already in root) or is turned off (-1), it warns; on the local
// JetStream store's filesystem it refuses unless turned off, since a
// command filling it would stop the store for every session.
func workspaceDisk(cfg Config, root, store string, log zerolog.Logger) (*sandbox.Disk, error) {
	limit := cfg.WorkspaceMaxBytes
	if limit == 0 {
		limit = WorkspaceMaxBytesDefault
	}
	var why error
	if limit > 0 {
		d, err := sandbox.MountDisk(sandbox.DiskConfig{Root: root, MaxBytes: limit})
		if err == nil {
			log.Info().Str("workspaces", d.String()).Msg("workspace filesystem bounded")
			return d, nil
		}
		if !errors.Is(err, sandbox.ErrDiskUnavailable) && !errors.Is(err, sandbox.ErrDiskNotEmpty) {
			return nil, fmt.Errorf("fleet: workspace filesystem (--workspace-max-bytes): %w", err)
		}
		why = err
	} else {
		why = errors.New("turned off (--workspace-max-bytes -1)")
	}
	if err := os.MkdirAll(root, 0o750); err != nil {
		return nil, fmt.Errorf("fleet: workspace root %s: %w", root, err)
	}
	shared := false
	if store != "" {
		same, err := sandbox.SameFilesystem(root, store)
		shared = err == nil && same
	}
	if shared && limit > 0 {
		return nil, fmt.Errorf("fleet: exec: the workspace root %s is on the JetStream store's filesystem (%s) and cannot be bounded: %w. A command could fill it and stop the store. "+
			"Put --workspace-root on another filesystem (a size-limited tmpfs or volume), run the worker as root with loop devices and mkfs.ext4 to have it mount an image of --workspace-max-bytes there (on an empty root), "+
			"or accept an unbounded workspace with --workspace-max-bytes -1", root, store, why)
	}
	msg := "WORKSPACE DISK UNBOUNDED: exec's commands can fill the filesystem of the workspaces"
	ev := log.Warn().Str("workspaces", root).Str("why", why.Error())
	if shared {
		msg += ", the JetStream store's"
		ev = ev.Str("store", store)
	}
	ev.Msg(msg)
	return nil, nil
}

// newSandbox prepares the confinement of exec's commands: the system
// directories and the skills directory read-only, never the member's data,
// credentials, configuration files or the other workspaces (each command
// gets its own workspace read-write).
func newSandbox(ctx context.Context, cfg Config, root string) (*sandbox.Sandbox, error) {
	sc := sandbox.Config{Unconfined: cfg.ExecUnconfined, AllowRoot: cfg.ExecAllowRoot, Cgroup: cfg.ExecCgroup, Workspaces: root}
	for _, p := range []string{cfg.DataDir, cfg.AuthProfiles, cfg.ModelsFile, cfg.CredsFile, cfg.NKeyFile, cfg.TLSKey, cfg.TLSCert, cfg.TLSCA, cfg.AgentCacheDir, root} {
		if p == "" {
			continue
		}
		abs, err := filepath.Abs(p)
		if err != nil {
			return nil, fmt.Errorf("fleet: exec sandbox: %w", err)
		}
		sc.Deny = append(sc.Deny, abs)
	}
	if cfg.SkillsDir != "" {
		abs, err := filepath.Abs(cfg.SkillsDir)
		if err != nil {
			return nil, fmt.Errorf("fleet: exec sandbox: %w", err)
		}
		sc.ReadOnly = append(sc.ReadOnly, abs)
	}
	box, err := sandbox.New(ctx, sc)
	if errors.Is(err, sandbox.ErrUnavailable) {
		return nil, fmt.Errorf("fleet: exec: %w; set ExecUnconfined (worker --exec-unconfined, for tests only) to run it with the worker's privileges", err)
	}
	if errors.Is(err, sandbox.ErrRoot) {
		return nil, fmt.Errorf("fleet: exec: %w (worker --exec-allow-root)", err)
	}
	if err != nil {
		return nil, fmt.Errorf("fleet: exec: %w", err)
	}
	return box, nil
}

// workspace returns (and creates) the session's workspace directory.
func (s *toolSource) workspace(session string) (string, error) {
	name, err := events.KeyDirName(session)
	if err != nil {
		return "", err
	}
	dir := filepath.Join(s.root, name)
	if err := os.MkdirAll(dir, 0o750); err != nil {
		return "", fmt.Errorf("fleet: workspace %s: %w", dir, err)
	}
	return dir, nil
}

// skills loads the skills a session's runs see.
func (s *toolSource) skills(ws string) []agentprompt.Skill {
	dirs := s.skillDirs
	if ws != "" {
		dirs = append(slices.Clone(dirs), filepath.Join(ws, "skills"))
	}
	if len(dirs) == 0 {
		return nil
	}
	sk, warns := agentprompt.LoadSkills(dirs...)
	for _, w := range warns {
		s.log.Warn().Str("path", w.Path).Msg(w.Message)
	}
	return agentprompt.EnabledSkills(sk, s.skillCfg)
}

// ownSkills returns the skills of skills (a session's) that come from the
// fleet's skills directory: only those get their configured environment
// and API key. A session's workspace is written by its runs, so a skill
// there named like a configured one (or replacing the fleet's copy) would
// otherwise hand any sender that skill's key.
func (s *toolSource) ownSkills(skills []agentprompt.Skill) []agentprompt.Skill {
	var own []agentprompt.Skill
	for _, sk := range skills {
		for _, d := range s.skillDirs {
			if filepath.Dir(sk.BaseDir) == filepath.Clean(d) {
				own = append(own, sk)
				break
			}
		}
	}
	return own
}

// SystemPrompt implements runner.PromptSource: the base prompt, the tools,
// the workspace, its skills and context files (AGENTS.md, ...), the date.
func (s *toolSource) SystemPrompt(ctx context.Context, in runner.Input, set tools.Set, specs []provider.Tool) string {
	pin := agentprompt.Input{BasePrompt: s.base, Now: s.now().UTC().Truncate(time.Minute)}
	if rt, ok := set.(runTools); ok {
		pin.Workspace, pin.Skills = rt.ws, rt.skills // found once for the run by Tools
	} else if s.root != "" {
		pin.Workspace, _ = s.workspace(in.SessionKey)
		pin.Skills = agentSkills(ctx, s.skills(pin.Workspace))
	}
	for _, t := range specs {
		pin.Tools = append(pin.Tools, agentprompt.Tool{Name: t.Name, Description: t.Description})
	}
	// A named agent's prompt replaces the worker's base; its workspace's
	// files are in the session's directory (seeded for the turn), or in
	// the worker's copy when the run has none.
	files := pin.Workspace
	if ta := agentFrom(ctx); ta != nil {
		if ta.a.SystemPrompt != "" {
			pin.BasePrompt = ta.a.SystemPrompt
		}
		if files == "" {
			files = ta.files
		}
	}
	if files != "" {
		files, warns := agentprompt.LoadContextFiles(files, agentprompt.ContextOptions{})
		for _, w := range warns {
			s.log.Warn().Str("path", w.Path).Msg(w.Message)
		}
		pin.ContextFiles = files
	}
	return s.shared(agentprompt.Build(pin))
}

// shared returns the last system prompt built when p is the same text,
// else p, which it keeps as the last.
func (s *toolSource) shared(p string) string {
	if last := s.prompt.Load(); last != nil && *last == p {
		return *last
	}
	s.prompt.Store(&p)
	return p
}

// runTools is one run's tool set with the workspace and skills it was
// built for, so the run's system prompt reads them from here.
type runTools struct {
	tools.List
	ws     string
	skills []agentprompt.Skill
}

// Tools implements runner.ToolSource.
func (s *toolSource) Tools(ctx context.Context, in runner.Input) (tools.Set, error) {
	var rt runTools
	if s.remote != nil {
		for _, t := range s.remote.Tools() {
			rt.List = append(rt.List, withRun{t, remote.RunInfo{SessionKey: in.SessionKey, RunID: in.RunID}})
		}
	}
	if s.root == "" {
		rt.skills = agentSkills(ctx, s.skills("")) // the fleet's skills, for the prompt
	} else {
		dir, err := s.workspace(in.SessionKey)
		if err != nil {
			return nil, err
		}
		rt.ws, rt.skills = dir, agentSkills(ctx, s.skills(dir))
		env := append([]string{"HOME=" + dir, "PWD=" + dir}, s.env...)
		// Skill variables go only to a command that names them.
		named := agentprompt.Environ(nil, s.ownSkills(rt.skills), s.skillCfg)
		w := tools.Workspace{Dir: dir, Env: env, NamedEnv: named}
		builtin, err := tools.Builtin(w)
		if err != nil {
			return nil, err
		}
		if s.box != nil {
			ex, err := tools.Exec(w, s.box)
			if err != nil {
				return nil, err
			}
			builtin = append(builtin, ex)
		}
		if s.procs != nil {
			p, err := s.procs.Tool(w, in.SessionKey)
			if err != nil {
				return nil, err
			}
			builtin = append(builtin, p)
		}
		if s.memory != nil {
			mem, err := tools.Memory(w, s.memory)
			if err != nil {
				return nil, err
			}
			builtin = append(builtin, mem...)
		}
		// Built-in tools win over remote tools of the same name.
		rt.List = append(rt.List, builtin...)
	}
	rt.List = append(rt.List, s.web...)
	if s.sessions != nil {
		st, err := sessions.Tools(s.sessions, s.sessionsPolicy, in.SessionKey, in.RunID, in.Lineage)
		if err != nil {
			return nil, err
		}
		rt.List = append(rt.List, st...)
	}
	rt.List = maskTools(rt.List, s.red)
	return rt, nil
}

// withRun tells a remote tool which run calls it.
type withRun struct {
	tools.Tool
	ri remote.RunInfo
}

func (w withRun) Spec() provider.Tool { return w.Tool.Spec() }

func (w withRun) Call(ctx context.Context, c tools.Call) (tools.Result, error) {
	return w.Tool.Call(remote.WithRunInfo(ctx, w.ri), c)
}
