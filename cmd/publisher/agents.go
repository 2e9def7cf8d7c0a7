package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/lanefleet/lanefleet"
	"github.com/lanefleet/lanefleet/agents"
	"github.com/lanefleet/lanefleet/events"
)

// agentsCommand manages named agents: their definitions live in the agents
// bucket and their workspaces' files in the agent-files object store,
// which the admin role writes.
func agentsCommand(c *common) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "agents",
		Short: "Named agents and their workspaces: list, show, put, rm, files (the admin role)",
		Long: `A named agent is a stored definition: id, display name, system prompt, default model and
fallbacks, thinking level, tool profile and policy (within the workers' own), skills, workspace
and chat-command switch. A session whose key is "agent:<id>:…" runs as agent <id>; any other
session runs as the workers' --default-agent ("main") when it is defined. The agent's workspace
files (AGENTS.md, SOUL.md, USER.md, MEMORY.md, HEARTBEAT.md, skills/<name>/SKILL.md, …) are
shared by its sessions on every worker. Workers apply a change from their next turn on.`,
		Args: noArgs,
	}
	cmd.AddCommand(agentsListCommand(c), agentsShowCommand(c), agentsPutCommand(c), agentsRmCommand(c), agentFilesCommand(c))
	return cmd
}

// agentsListCommand is `agents list`.
func agentsListCommand(c *common) *cobra.Command {
	list := &cobra.Command{
		Use:   "list",
		Short: "List the agents",
		Args:  noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return c.withAgents(cmd, "agents list", func(ctx context.Context, cl *lanefleet.Client) error {
				all, err := cl.Agents(ctx)
				if err != nil {
					return err
				}
				if c.asJSON {
					if all == nil {
						all = []*agents.Agent{}
					}
					return json.NewEncoder(c.stdout).Encode(all)
				}
				if len(all) == 0 {
					fmt.Fprintln(c.stdout, "no agents")
				}
				for _, a := range all {
					fmt.Fprintf(c.stdout, "%s\t%s\t%s\n", a.ID, orDash(a.Name), orDash(a.Model))
				}
				return nil
			})
		},
	}
	c.jsonFlag(list, "print JSON")
	return list
}

// agentsShowCommand is `agents show ID`: the definition as indented JSON.
func agentsShowCommand(c *common) *cobra.Command {
	show := &cobra.Command{
		Use:   "show ID",
		Short: "Show an agent's definition (JSON)",
		Args:  exactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return c.withAgents(cmd, "agents show", func(ctx context.Context, cl *lanefleet.Client) error {
				a, err := cl.Agent(ctx, args[0])
				if err != nil {
					return err
				}
				enc := json.NewEncoder(c.stdout)
				enc.SetIndent("", "  ")
				return enc.Encode(a)
			})
		},
	}
	return show
}

// agentPutFlags are agents put's flags.
type agentPutFlags struct {
	file                         string
	def                          agents.Agent
	promptFile, profile          string
	allow, deny, approve, skills []string
	noCommands                   bool
}

// agentsPutCommand is `agents put`: a definition from a JSON file or from flags.
func agentsPutCommand(c *common) *cobra.Command {
	var f agentPutFlags
	put := &cobra.Command{
		Use:   "put (--file FILE.json|- | --id ID [flags])",
		Short: "Define an agent, or replace its definition",
		Long: `put stores an agent's definition, from a JSON file (--file, "-" for standard input: the fields
of the definition in camelCase, e.g. {"id":"ops","systemPrompt":"…","model":"anthropic/claude-sonnet-4-5",
"tools":{"profile":"coding","deny":["exec"]}}) or from flags. It replaces the whole definition.`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			a, err := f.definition(c, cmd.Flags())
			if err != nil {
				return err
			}
			if err := a.Validate(); err != nil {
				return usagef("agents put: %v", err)
			}
			return c.withAgents(cmd, "agents put", func(ctx context.Context, cl *lanefleet.Client) error {
				rev, err := cl.PutAgent(ctx, &a)
				if err != nil {
					return err
				}
				if c.asJSON {
					return json.NewEncoder(c.stdout).Encode(map[string]any{"id": a.ID, "revision": rev})
				}
				fmt.Fprintf(c.stdout, "agent %s stored (revision %d)\n", a.ID, rev)
				return nil
			})
		},
	}
	f.register(put.Flags())
	c.jsonFlag(put, "print the id and revision as JSON")
	return put
}

// register declares the flags on fs.
func (f *agentPutFlags) register(fs *pflag.FlagSet) {
	fs.StringVar(&f.file, "file", "", `the definition as JSON ("-" = standard input)`)
	fs.StringVar(&f.def.ID, "id", "", "the agent's id (a-z 0-9 _ -): sessions agent:<id>:… run as it")
	fs.StringVar(&f.def.Name, "name", "", "display name")
	fs.StringVar(&f.promptFile, "system-prompt-file", "", `file holding the system prompt that replaces the workers' base prompt ("-" = standard input)`)
	fs.StringVar(&f.def.Model, "model", "", "default model, provider/model-id (a session's or a message's own model still wins)")
	fs.StringArrayVar(&f.def.Fallbacks, "fallback", nil, "a fallback model, provider/model-id (repeat, in order; replaces the workers' fallbacks)")
	fs.StringVar(&f.def.Thinking, "thinking", "", "default thinking level: off, minimal, low, medium, high, xhigh")
	fs.StringVar(&f.profile, "tool-profile", "", "tool profile: full (default), coding, messaging, minimal")
	fs.StringArrayVar(&f.allow, "tool-allow", nil, "allow only these tools (pattern; repeat): within the workers' policy")
	fs.StringArrayVar(&f.deny, "tool-deny", nil, "deny this tool (pattern; repeat)")
	fs.StringArrayVar(&f.approve, "tool-approve", nil, "ask approval for every call of this tool (pattern; repeat)")
	fs.StringArrayVar(&f.skills, "skill", nil, "offer only these skills (repeat; none given = every skill)")
	fs.StringVar(&f.def.Workspace, "workspace", "", "the workspace whose files the agent's sessions share (default the agent's id)")
	fs.BoolVar(&f.noCommands, "no-chat-commands", false, "send /new, /status, … to the model as text in this agent's sessions")
}

// definition is the definition agents put stores, unvalidated: the --file
// one, which no definition flag may go with, or the flags'.
func (f *agentPutFlags) definition(c *common, flags *pflag.FlagSet) (agents.Agent, error) {
	a := f.def
	if f.file != "" {
		for _, n := range defFlags {
			if flags.Changed(n) {
				return a, usagef("agents put: --file takes the whole definition; --%s cannot go with it", n)
			}
		}
		b, err := readLimited(c, f.file, agents.MaxRecordBytes)
		if err != nil {
			return a, usagef("agents put: %v", err)
		}
		p, err := agents.ParseJSON(b)
		if err != nil {
			return a, usagef("agents put: %s: %v", f.file, err)
		}
		return *p, nil
	}
	if f.promptFile != "" {
		b, err := readLimited(c, f.promptFile, agents.MaxSystemPromptBytes)
		if err != nil {
			return a, usagef("agents put: --system-prompt-file: %v", err)
		}
		a.SystemPrompt = string(b)
	}
	if f.profile != "" || len(f.allow)+len(f.deny)+len(f.approve) > 0 {
		a.Tools = &agents.ToolPolicy{Profile: f.profile, ToolPolicy: events.ToolPolicy{Allow: f.allow, Deny: f.deny, Approve: f.approve}}
	}
	if flags.Changed("skill") {
		a.Skills = append([]string{}, f.skills...)
	}
	if f.noCommands {
		off := false
		a.ChatCommands = &off
	}
	return a, nil
}

// agentsRmCommand is `agents rm ID`.
func agentsRmCommand(c *common) *cobra.Command {
	rm := &cobra.Command{
		Use:   "rm ID",
		Short: "Remove an agent's definition (its sessions' next turns end with an invalid_input error; its workspace's files stay)",
		Args:  exactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return c.withAgents(cmd, "agents rm", func(ctx context.Context, cl *lanefleet.Client) error {
				if err := cl.DeleteAgent(ctx, args[0]); err != nil {
					return err
				}
				fmt.Fprintf(c.stdout, "agent %s removed\n", args[0])
				return nil
			})
		},
	}
	return rm
}

// agentFilesCommand manages a workspace's files.
func agentFilesCommand(c *common) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "files",
		Short: "An agent workspace's files: ls, get, put, rm",
		Args:  noArgs,
	}
	ls := &cobra.Command{
		Use:   "ls WORKSPACE",
		Short: "List a workspace's files",
		Args:  exactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return c.withAgents(cmd, "agents files ls", func(ctx context.Context, cl *lanefleet.Client) error {
				list, err := cl.AgentFiles(ctx, args[0])
				if err != nil {
					return err
				}
				if c.asJSON {
					return json.NewEncoder(c.stdout).Encode(list)
				}
				for _, f := range list {
					fmt.Fprintf(c.stdout, "%s\t%d\t%s\n", f.Path, f.Size, f.Digest)
				}
				return nil
			})
		},
	}
	c.jsonFlag(ls, "print JSON")
	get := &cobra.Command{
		Use:   "get WORKSPACE PATH",
		Short: "Print a workspace file",
		Args:  exactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			return c.withAgents(cmd, "agents files get", func(ctx context.Context, cl *lanefleet.Client) error {
				b, err := cl.AgentFile(ctx, args[0], args[1])
				if err != nil {
					return err
				}
				_, err = c.stdout.Write(b)
				return err
			})
		},
	}
	put := &cobra.Command{
		Use:   "put WORKSPACE PATH FILE|-",
		Short: "Store a workspace file (a new version; sessions read it from their next turn on)",
		Args:  exactArgs(3),
		RunE: func(cmd *cobra.Command, args []string) error {
			b, err := readLimited(c, args[2], agents.MaxFileBytes)
			if err != nil {
				return usagef("agents files put: %v", err)
			}
			return c.withAgents(cmd, "agents files put", func(ctx context.Context, cl *lanefleet.Client) error {
				fi, err := cl.PutAgentFile(ctx, args[0], args[1], b)
				if err != nil {
					return err
				}
				fmt.Fprintf(c.stdout, "%s/%s stored (%d bytes, %s)\n", args[0], fi.Path, fi.Size, fi.Digest)
				return nil
			})
		},
	}
	rm := &cobra.Command{
		Use:   "rm WORKSPACE PATH",
		Short: "Remove a workspace file",
		Args:  exactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			return c.withAgents(cmd, "agents files rm", func(ctx context.Context, cl *lanefleet.Client) error {
				if err := cl.DeleteAgentFile(ctx, args[0], args[1]); err != nil {
					return err
				}
				fmt.Fprintf(c.stdout, "%s/%s removed\n", args[0], args[1])
				return nil
			})
		},
	}
	cmd.AddCommand(ls, get, put, rm)
	return cmd
}

// withAgents opens the client for one agents command and runs fn; an
// invalid definition is a usage error, a permission error says what the
// command needs.
func (c *common) withAgents(cmd *cobra.Command, op string, fn func(context.Context, *lanefleet.Client) error) error {
	cl, ctx, done, err := c.open(cmd.Context())
	if err != nil {
		return err
	}
	defer done()
	err = fn(ctx, cl)
	switch {
	case err == nil:
		return nil
	case errors.Is(err, agents.ErrInvalid):
		return usagef("%s: %v", op, err)
	case errors.Is(err, lanefleet.ErrPermission):
		return fmt.Errorf("%s: this NATS user may not manage agents (that takes the admin role): %w", op, err)
	}
	return fmt.Errorf("%s: %w", op, err)
}

// readLimited reads a file ("-" = standard input) of at most limit bytes.
func readLimited(c *common, name string, limit int) ([]byte, error) {
	var r io.Reader = c.stdin
	if name != "-" {
		f, err := os.Open(name)
		if err != nil {
			return nil, err
		}
		defer f.Close()
		r = f
	}
	b, err := io.ReadAll(io.LimitReader(r, int64(limit)+1))
	if err != nil {
		return nil, err
	}
	if len(b) > limit {
		return nil, fmt.Errorf("%s is larger than %d bytes", name, limit)
	}
	return b, nil
}

// defFlags are agents put's definition flags, which --file replaces.
var defFlags = []string{"id", "name", "system-prompt-file", "model", "fallback", "thinking", "tool-profile", "tool-allow", "tool-deny", "tool-approve", "skill", "workspace", "no-chat-commands"}

func orDash(s string) string {
	if s = strings.TrimSpace(s); s == "" {
		return "-"
	}
	return s
}

// exactArgs refuses, as a usage error, a command given other than n
// arguments.
func exactArgs(n int) cobra.PositionalArgs {
	return func(cmd *cobra.Command, args []string) error {
		if len(args) != n {
			return usagef("%s takes %d argument(s), got %d (see %s -h)", cmd.CommandPath(), n, len(args), cmd.CommandPath())
		}
		return nil
	}
}
