package fleet

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"time"

	"github.com/rs/zerolog"

	"github.com/lanefleet/lanefleet/agentprompt"
	"github.com/lanefleet/lanefleet/events"
	"github.com/lanefleet/lanefleet/provider"
	"github.com/lanefleet/lanefleet/redact"
	"github.com/lanefleet/lanefleet/runner"
	"github.com/lanefleet/lanefleet/sandbox"
	"github.com/lanefleet/lanefleet/tools"
	"github.com/lanefleet/lanefleet/tools/remote"
)

// toolSource gives each run the built-in tools in its session's workspace
// (<root>/<events.KeyDirName of the key>: the lane token, or a digest for
// a key whose token is too long for a file name) and the remote tools the fleet offers over NATS.
type toolSource struct {
	root   string           // workspaces root; "" = no built-in tools
	env    []string         // the base environment of exec'd commands
	box    *sandbox.Sandbox // runs exec's commands; nil = no exec tool
	remote *remote.Registry // nil = no remote tools
	// The system prompt: base text, skills directories (lowest priority
	// first; each workspace's skills/ comes last) and per-skill settings.
	base      string
	skillDirs []string
	skillCfg  agentprompt.SkillConfigs
	log       zerolog.Logger
	now       func() time.Time
	red       *redact.Redactor // masks every tool's results
}

// newToolSource configures the runs' tools and system prompt: the
// workspaces root (unless built-in tools are off), exec's sandbox and
// environment (PATH from the member's environment), skills and the remote
// registry.
func newToolSource(ctx context.Context, cfg Config, reg *remote.Registry) (*toolSource, error) {
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
	if cfg.NoBuiltinTools {
		return ts, nil
	}
	root := cfg.WorkspaceRoot
	switch {
	case root != "":
	case cfg.DataDir != "":
		root = filepath.Join(cfg.DataDir, "workspaces")
	default:
		root = filepath.Join(os.TempDir(), "lanefleet-workspaces")
	}
	abs, err := filepath.Abs(root)
	if err != nil {
		return nil, fmt.Errorf("fleet: workspace root %s: %w", root, err)
	}
	ts.root = abs
	if cfg.Exec {
		if ts.box, err = newSandbox(ctx, cfg, abs); err != nil {
			return nil, err
		}
		if p := ts.box.Platform(); p.Confined {
			ts.log.Info().Str("confinement", p.String()).Msg("exec tool on")
		} else {
			ts.log.Warn().Str("confinement", p.String()).Msg("exec tool on, unconfined")
		}
	}
	return ts, nil
}

// newSandbox prepares the confinement of exec's commands: the system
// directories and the skills directory read-only, never the member's data,
// credentials, configuration files or the other workspaces (each command
// gets its own workspace read-write).
func newSandbox(ctx context.Context, cfg Config, root string) (*sandbox.Sandbox, error) {
	sc := sandbox.Config{Unconfined: cfg.ExecUnconfined}
	for _, p := range []string{cfg.DataDir, cfg.AuthProfiles, cfg.ModelsFile, cfg.CredsFile, cfg.NKeyFile, cfg.TLSKey, cfg.TLSCert, cfg.TLSCA, root} {
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
		return nil, fmt.Errorf("fleet: exec: %w; set ExecUnconfined (worker --exec-unconfined) to run it with the worker's privileges", err)
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

// SystemPrompt implements runner.PromptSource: the base prompt, the tools,
// the workspace, its skills and context files (AGENTS.md, ...), the date.
func (s *toolSource) SystemPrompt(_ context.Context, in runner.Input, set tools.Set, specs []provider.Tool) string {
	pin := agentprompt.Input{BasePrompt: s.base, Now: s.now().UTC().Truncate(time.Minute)}
	if rt, ok := set.(runTools); ok {
		pin.Workspace, pin.Skills = rt.ws, rt.skills // found once for the run by Tools
	} else if s.root != "" {
		pin.Workspace, _ = s.workspace(in.SessionKey)
		pin.Skills = s.skills(pin.Workspace)
	}
	for _, t := range specs {
		pin.Tools = append(pin.Tools, agentprompt.Tool{Name: t.Name, Description: t.Description})
	}
	if pin.Workspace != "" {
		files, warns := agentprompt.LoadContextFiles(pin.Workspace, agentprompt.ContextOptions{})
		for _, w := range warns {
			s.log.Warn().Str("path", w.Path).Msg(w.Message)
		}
		pin.ContextFiles = files
	}
	return agentprompt.Build(pin)
}

// runTools is one run's tool set with the workspace and skills it was
// built for, so the run's system prompt reads them from here.
type runTools struct {
	tools.List
	ws     string
	skills []agentprompt.Skill
}

// Tools implements runner.ToolSource.
func (s *toolSource) Tools(_ context.Context, in runner.Input) (tools.Set, error) {
	var rt runTools
	if s.remote != nil {
		for _, t := range s.remote.Tools() {
			rt.List = append(rt.List, withRun{t, remote.RunInfo{SessionKey: in.SessionKey, RunID: in.RunID}})
		}
	}
	if s.root == "" {
		rt.skills = s.skills("") // the fleet's skills, for the prompt
	} else {
		dir, err := s.workspace(in.SessionKey)
		if err != nil {
			return nil, err
		}
		rt.ws, rt.skills = dir, s.skills(dir)
		env := append([]string{"HOME=" + dir, "PWD=" + dir}, s.env...)
		env = agentprompt.Environ(env, rt.skills, s.skillCfg)
		w := tools.Workspace{Dir: dir, Env: env}
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
		// Built-in tools win over remote tools of the same name.
		rt.List = append(rt.List, builtin...)
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
