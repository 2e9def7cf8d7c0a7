package lanefleet

import (
	"context"
	"fmt"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/lanefleet/lanefleet/agents"
	"github.com/lanefleet/lanefleet/agentstore"
)

// Agent operations act on the fleet's agents bucket and its agent-files
// object store directly (package agentstore): they need the permissions
// of the admin role. A session whose key is "agent:<id>:…" runs as agent
// id; workers see a change from their next turn on (they watch the
// bucket). Errors are agents.ErrInvalid (wrapped, naming the field) for a
// definition or file that breaks a rule, agentstore.ErrNotFound, or the
// store's.

// PutAgent stores an agent's definition (replacing the one of that id)
// and returns its revision.
func (c *Client) PutAgent(ctx context.Context, a *agents.Agent) (uint64, error) {
	b, err := c.agentBucket(ctx)
	if err != nil {
		return 0, err
	}
	return b.Put(ctx, a)
}

// Agent reads an agent's definition.
func (c *Client) Agent(ctx context.Context, id string) (*agents.Agent, error) {
	b, err := c.agentBucket(ctx)
	if err != nil {
		return nil, err
	}
	a, _, err := b.Get(ctx, id)
	return a, err
}

// Agents lists the agents, sorted by id; a stored definition that does
// not decode is left out (Agent names its error).
func (c *Client) Agents(ctx context.Context) ([]*agents.Agent, error) {
	b, err := c.agentBucket(ctx)
	if err != nil {
		return nil, err
	}
	list, _, err := b.List(ctx)
	return list, err
}

// DeleteAgent removes an agent's definition; its sessions' next turns end
// with an invalid_input error. Its workspace's files stay.
func (c *Client) DeleteAgent(ctx context.Context, id string) error {
	b, err := c.agentBucket(ctx)
	if err != nil {
		return err
	}
	return b.Delete(ctx, id)
}

// PutAgentFile stores a file of an agent workspace (AGENTS.md, SOUL.md,
// USER.md, MEMORY.md, HEARTBEAT.md, skills/<name>/SKILL.md, …): a new
// version of it, which every session of the workspace's agents reads from
// its next turn on.
func (c *Client) PutAgentFile(ctx context.Context, workspace, path string, data []byte) (agentstore.FileInfo, error) {
	f, err := c.agentFiles(ctx)
	if err != nil {
		return agentstore.FileInfo{}, err
	}
	return f.Put(ctx, workspace, path, data)
}

// AgentFile reads a file of an agent workspace.
func (c *Client) AgentFile(ctx context.Context, workspace, path string) ([]byte, error) {
	f, err := c.agentFiles(ctx)
	if err != nil {
		return nil, err
	}
	return f.Get(ctx, workspace, path)
}

// AgentFiles lists the files of an agent workspace.
func (c *Client) AgentFiles(ctx context.Context, workspace string) ([]agentstore.FileInfo, error) {
	f, err := c.agentFiles(ctx)
	if err != nil {
		return nil, err
	}
	return f.List(ctx, workspace)
}

// DeleteAgentFile removes a file of an agent workspace.
func (c *Client) DeleteAgentFile(ctx context.Context, workspace, path string) error {
	f, err := c.agentFiles(ctx)
	if err != nil {
		return err
	}
	return f.Delete(ctx, workspace, path)
}

func (c *Client) agentBucket(ctx context.Context) (*agentstore.Bucket, error) {
	js, err := jetstream.New(c.nc)
	if err != nil {
		return nil, fmt.Errorf("lanefleet: agents: %w", err)
	}
	return agentstore.OpenBucket(ctx, js, agentstore.BucketConfig{})
}

func (c *Client) agentFiles(ctx context.Context) (*agentstore.Files, error) {
	js, err := jetstream.New(c.nc)
	if err != nil {
		return nil, fmt.Errorf("lanefleet: agent files: %w", err)
	}
	return agentstore.OpenFiles(ctx, js, agentstore.BucketConfig{})
}
