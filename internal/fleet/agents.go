package fleet

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"

	"github.com/lanefleet/lanefleet/agentprompt"
	"github.com/lanefleet/lanefleet/agents"
	"github.com/lanefleet/lanefleet/agentstore"
	"github.com/lanefleet/lanefleet/events"
	"github.com/lanefleet/lanefleet/lanes"
	"github.com/lanefleet/lanefleet/runner"
	"github.com/lanefleet/lanefleet/tools"
)

// openAgents opens the agents bucket and the workspaces' object store and
// watches both (package agentstore). The local copies of the workspaces
// go to <DataDir>/agent-files, else to a temporary directory removed at
// the end.
func (m *Member) openAgents(ctx context.Context) error {
	cfg := m.cfg
	m.defaultAgent = cfg.DefaultAgent
	if m.defaultAgent == "" {
		m.defaultAgent = agents.DefaultID
	}
	if err := agents.ValidID(m.defaultAgent); err != nil {
		return fmt.Errorf("fleet: --default-agent: %w", err)
	}
	dir := cfg.AgentCacheDir
	if dir == "" && cfg.DataDir != "" {
		dir = filepath.Join(cfg.DataDir, "agent-files")
	}
	if dir == "" {
		tmp, err := os.MkdirTemp("", "lanefleet-agent-files-")
		if err != nil {
			return fmt.Errorf("fleet: agent files: %w", err)
		}
		dir, m.agentTmp = tmp, tmp
	}
	abs, err := filepath.Abs(dir)
	if err != nil {
		return fmt.Errorf("fleet: agent files: %w", err)
	}
	c, err := agentstore.Open(ctx, m.JS, agentstore.Config{BucketConfig: agentstore.BucketConfig{Replicas: cfg.Replicas,
		MaxBytes: cfg.Limits.Agents, FilesMaxBytes: cfg.Limits.AgentFiles}, CacheDir: abs, Logger: cfg.Logger})
	if err != nil {
		return err
	}
	m.agents = c
	// exec's sandbox denies it: a session reads its own agent's files
	// in its directory, never another agent's.
	m.cfg.AgentCacheDir = abs
	return nil
}

// agentOf is the agent a session's turns run as, as this worker's copy
// of the agents bucket has it: the one its key names ("agent:<id>:…"),
// else the default agent. nil with agents off, and when the default agent
// is not defined for a key that names it or none (the worker's own
// configuration applies). A key naming an agent the copy does not hold
// gives the refusal to end its turns with; a turn reads the bucket before
// it is refused (turnAgent), the other callers (commands, budgets, wakes)
// take the copy as it is.
func (m *Member) agentOf(key string) (*agents.Agent, string) {
	if m.agents == nil {
		return nil, ""
	}
	id, named := agents.Of(key, m.defaultAgent)
	if a, ok := m.agents.Lookup(id); ok {
		return a, ""
	}
	if !named || id == m.defaultAgent {
		// The default agent, by name ("agent:main:…", OpenClaw's keys)
		// or not, undefined: the worker as configured.
		return nil, ""
	}
	return nil, fmt.Sprintf("agent %.80q is not defined on this fleet (the session key names it: agent:<id>:…); an operator defines it with `publisher agents put`", id)
}

// turnAgent is agentOf for a turn about to run: before it refuses a
// named agent its copy does not hold, it reads the bucket (bounded by
// settleTimeout and ctx), since an agent defined just before its
// session's first message may not have reached the watcher yet.
func (m *Member) turnAgent(ctx context.Context, key string) (*agents.Agent, string) {
	a, why := m.agentOf(key)
	if why == "" {
		return a, ""
	}
	id, _ := agents.Of(key, m.defaultAgent)
	rctx, cancel := context.WithTimeout(ctx, settleTimeout)
	defer cancel()
	a, ok, err := m.agents.Resolve(rctx, id)
	if ok {
		return a, ""
	}
	if err != nil {
		m.log.Warn().Err(err).Str("agent", id).Msg("agent definition not read; the session's turn is refused as if none")
	}
	return nil, why
}

// commandsOff reports whether a session's agent turned the chat commands
// off (lanes.Config.CommandsOff).
func (m *Member) commandsOff(key string) bool {
	a, _ := m.agentOf(key)
	return a != nil && !a.CommandsOn()
}

// applyAgent puts a turn's agent into its run: the agent's model and
// thinking level where neither the message nor the session's settings
// name one, its fallbacks and tool policies. It returns the inbound to
// run (t's is left alone) and the refusal of a model of the agent's the
// fleet does not run.
func (m *Member) applyAgent(a *agents.Agent, inbound *events.Inbound, s *runner.Settings, from *string) (*events.Inbound, string) {
	if (inbound.Model == "" && a.Model != "") || (inbound.Thinking == "" && a.Thinking != "") {
		c := *inbound
		if c.Model == "" && a.Model != "" {
			c.Model, *from = a.Model, fmt.Sprintf(" (agent %s's model)", a.ID)
		}
		if c.Thinking == "" {
			c.Thinking = a.Thinking
		}
		inbound = &c
	}
	s.Model = a.Model
	for _, f := range a.Fallbacks {
		if why := m.models.Refuse(f, fmt.Sprintf(" (a fallback of agent %s)", a.ID)); why != "" {
			return inbound, why
		}
	}
	s.Fallbacks = a.Fallbacks
	for _, p := range a.Policies() {
		s.AgentTools = append(s.AgentTools, tools.Policy{Allow: p.Allow, Deny: p.Deny, Approve: p.Approve})
	}
	return inbound, ""
}

// turnAgent is a run's agent and its workspace as the run's tool source
// and prompt see them (through the run's context).
type turnAgent struct {
	a *agents.Agent
	// files is the worker's copy of the agent's workspace, for the
	// prompt of a run without a session directory ("" = the session's).
	files string
	// putBack puts the memory files the run changed in the session's
	// directory back into the workspace (nil without a directory).
	putBack func(ctx context.Context) error
}

type agentKey struct{}

func withAgent(ctx context.Context, ta *turnAgent) context.Context {
	return context.WithValue(ctx, agentKey{}, ta)
}

func agentFrom(ctx context.Context) *turnAgent {
	ta, _ := ctx.Value(agentKey{}).(*turnAgent)
	return ta
}

// seedAgent brings the session's directory up to its agent's workspace
// before the run (identity, instructions, skills and memory, as stored);
// the returned function puts the memory files the run changed back and
// logs what it could not. Without a session directory (no built-in tools)
// the run's prompt reads the worker's copy of the workspace.
func (m *Member) seedAgent(ctx context.Context, t *lanes.Turn, a *agents.Agent) (*turnAgent, func(), error) {
	ta := &turnAgent{a: a}
	ws := a.WorkspaceName()
	if m.toolSrc == nil || m.toolSrc.root == "" {
		dir, err := m.agents.Dir(ctx, ws)
		if err != nil {
			return nil, nil, err
		}
		ta.files = dir
		return ta, func() {}, nil
	}
	dir, err := m.toolSrc.workspace(t.SessionKey)
	if err != nil {
		return nil, nil, err
	}
	seeded, err := m.agents.Seed(ctx, ws, dir)
	if err != nil {
		return nil, nil, err
	}
	ta.putBack = func(ctx context.Context) error {
		put, err := m.agents.WriteBack(ctx, seeded, dir)
		if len(put) > 0 {
			m.log.Debug().Strs("files", put).Str("agent", a.ID).Str("workspace", ws).Msg("agent workspace: memory files put back")
		}
		return err
	}
	return ta, func() {
		// The run's context may be over (an interrupt): what it wrote
		// still goes back.
		wctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), settleTimeout)
		defer cancel()
		if err := ta.putBack(wctx); err != nil {
			m.log.Warn().Err(err).Str("agent", a.ID).Str("session", t.SessionKey).Msg("agent workspace: memory files not put back")
		}
	}, nil
}

// SyncMemory implements runner.MemorySyncer: what a run's memory flush
// wrote goes back to its agent's workspace before the flush's results
// are journaled, so a re-run of the turn on another worker, which
// replays the flush, reads it there.
func (s *toolSource) SyncMemory(ctx context.Context, _ runner.Input) error {
	ta := agentFrom(ctx)
	if ta == nil || ta.putBack == nil {
		return nil
	}
	return ta.putBack(ctx)
}

// agentSkills keeps the skills a run's agent is offered.
func agentSkills(ctx context.Context, skills []agentprompt.Skill) []agentprompt.Skill {
	ta := agentFrom(ctx)
	if ta == nil || ta.a.Skills == nil {
		return skills
	}
	return slices.DeleteFunc(slices.Clone(skills), func(s agentprompt.Skill) bool { return !slices.Contains(ta.a.Skills, s.Name) })
}
