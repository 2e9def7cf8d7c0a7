// Package permission is the fleet's NATS permission model: which subjects
// each role (worker, sender, viewer, tool server, admin) may publish to and
// subscribe to, and its rendering as a nats-server configuration block.
//
// A role's grant is written against the fleet's subjects (events package)
// and nothing else, so subject permissions decide who may read or write
// which session:
//
//   - a sender of session S publishes to agent.in.<tok(S)> and requests
//     agent.svc.<tok(S)>.<op>, and subscribes to agent.ev.<tok(S)>.> and
//     its own inbox prefix;
//   - a viewer subscribes to the events and requests the read-only
//     operations of the lane service;
//   - a tool server serves agent.tool.<name> (and the micro control
//     subjects of its service), hears the cancels of its calls on
//     agent.tool.<name>.cancel and answers the requests it receives; an
//     MCP bridge is a tool server whose names are <server>__<tool>;
//   - a hook server serves agent.hook.<name>.<kind> for its hooks (and
//     the micro control subjects of its service) and answers them;
//   - a worker uses JetStream, the fleet's streams and buckets, serves the
//     lane service and the admin service and calls tools and hooks;
//   - an admin may do everything, the admin service's agent.admin.<op>
//     included: no other role may request it.
//
// Every user has its own inbox prefix ([InboxPrefix]), so no user can
// subscribe to the replies meant for another.
//
// The package is pure: it builds text and imports no NATS.
package permission

import (
	"errors"
	"fmt"
	"regexp"
	"slices"
	"time"

	"github.com/lanefleet/lanefleet/events"
)

// Role is what a NATS user does in the fleet.
type Role string

// The roles.
const (
	Worker     Role = "worker"      // runs turns: JetStream, streams, buckets, lane service, tool calls
	Sender     Role = "sender"      // sends to and follows its sessions
	Viewer     Role = "viewer"      // reads its sessions' events and history
	ToolServer Role = "tool-server" // serves remote tools
	HookServer Role = "hook-server" // serves run hooks
	Admin      Role = "admin"       // everything
)

// Roles lists every role, in the order the command line documents them.
func Roles() []Role { return []Role{Worker, Sender, Viewer, ToolServer, HookServer, Admin} }

// ParseRole returns the role named s.
func ParseRole(s string) (Role, error) {
	for _, r := range Roles() {
		if string(r) == s {
			return r, nil
		}
	}
	return "", fmt.Errorf("%w: %q (one of worker, sender, viewer, tool-server, hook-server, admin)", ErrUnknownRole, s)
}

// Subjects and names the permissions are written against. The lane
// service's and the tools' names live with their NATS adapters, which this
// package must not import; tests pin them to those.
const (
	// LaneService is the micro service name of the lane service the
	// workers serve on agent.svc.<tok>.<op>.
	LaneService = "lanefleet-lanes"
	// ServicePrefix opens the lane service's subjects: agent.svc.<tok>.<op>.
	ServicePrefix = "agent.svc."
	// AdminService is the micro service name of the admin service the
	// workers serve on agent.admin.<op> (sessions, dead letters, auth
	// profiles): only the admin role may request it.
	AdminService = "lanefleet-admin"
	// AdminPrefix opens the admin service's subjects: agent.admin.<op>.
	AdminPrefix = "agent.admin."
	// ToolService is the micro service name remote tools are served under.
	ToolService = "lanefleet-tools"
	// ToolPrefix opens the subject of every tool: agent.tool.<name>.
	ToolPrefix = "agent.tool."
	// HookService is the micro service name run hooks are served under.
	HookService = "lanefleet-hooks"
	// HookPrefix opens the subject of every hook endpoint:
	// agent.hook.<name>.<kind>.
	HookPrefix = "agent.hook."

	// The fleet's KV buckets.
	LanesBucket = "lanes"
	AuthBucket  = "auth"
	RunsBucket  = "runs"
	// WorkersBucket holds the workers' lives (kvstore.Liveness): each
	// worker beats there, watches the others' and declares dead one whose
	// connection is gone. Workers only.
	WorkersBucket = "workers"
	// BudgetsBucket holds the budgets (budgetstore.DefaultBucket):
	// workers reserve and settle their calls there; only the admin role
	// sets limits (and writes the AGENT_AUDIT stream that records it),
	// but for the provider rate limits (rate.* keys) a worker's
	// --rate-limit writes at start, unaudited.
	BudgetsBucket = "budgets"
	// SchedulesBucket holds the schedules (schedstore.DefaultBucket):
	// workers record their firings there; only the admin role adds,
	// pauses and removes schedules.
	SchedulesBucket = "schedules"
	// SchedulesStream holds each schedule's server timer and firing
	// message (schedstore.Stream), on SchedulesPrefix at.<id> and
	// fire.<id>: workers arm timers and consume firings.
	SchedulesStream = "AGENT_SCHED"
	SchedulesPrefix = "agent.sched."
	// AgentsBucket holds the named agents' definitions
	// (agentstore.DefaultBucket): workers only read (watch) it; the
	// admin role writes it.
	AgentsBucket = "agents"
	// AgentFilesBucket is the object store of the agents' workspace
	// files (agentstore.DefaultFilesBucket), on the stream OBJ_<name>:
	// workers read it and put back the memory files their turns change;
	// the admin role writes any file.
	AgentFilesBucket = "agent-files"

	// StepsStream is the runs' step journal stream (kvstore.StepsStream),
	// on subjects StepsPrefix<lane>.<inbound seq>.<step>.
	StepsStream = "AGENT_STEPS"
	StepsPrefix = "agent.steps."

	// IndexStream is the session index (sessionindex.Stream): one entry
	// per session on IndexPrefix<group>.<lane>, which workers write as
	// turns start and commit and read for the admin service's listings.
	// Workers only: an entry names a session's key.
	IndexStream = "AGENT_SESSIONS"
	IndexPrefix = "agent.idx."
)

// ReadOps are the lane service operations that only read a session: what
// a viewer may request. Every other operation (import, stop, ...) writes.
var ReadOps = []string{"history", "events", "settings", "backlog", "runs"}

// ToolResponseTTL is how long a tool server may answer a call it received
// (its partial results and reply): the longest a worker's attempt may
// take by default, which bounds every tool call of the attempt.
const ToolResponseTTL = 10 * time.Minute

// HookResponseTTL is how long a hook server may answer a request: the
// longest a worker waits for a hook.
const HookResponseTTL = time.Minute

// Errors callers branch on.
var (
	ErrUnknownRole = errors.New("permission: unknown role")
	ErrBadGrant    = errors.New("permission: bad grant")
)

// Grant is what one NATS user is allowed: a role and what the role applies
// to.
type Grant struct {
	Role Role
	// User is the NATS user name (letters, digits, '_' and '-', at most
	// 64): its inbox prefix is InboxPrefix(User).
	User string
	// Sessions are the session keys a sender or viewer may use.
	Sessions []string
	// AllSessions lets a sender or viewer use every session: a trusted
	// front end that sends on behalf of many users, or a dashboard.
	AllSessions bool
	// Tools are the tool names a tool server serves.
	Tools []string
	// Hooks are the hook names a hook server serves.
	Hooks []string
}

// Permissions are a user's nats-server permissions: the subjects it may
// publish to and subscribe to (everything else is denied), and whether it
// may answer the requests it receives.
type Permissions struct {
	Publish   []string
	Subscribe []string
	// Responses, when set, lets the user publish to the reply subject of a
	// message it received (nats-server allow_responses).
	Responses *Responses
}

// Responses bounds the answers to one received request.
type Responses struct {
	Max     int           // answers per request; -1 = unlimited
	Expires time.Duration // how long after the request; 0 = the server's default (2 minutes)
}

// userRE is the shape of a user name: a subject token, so that the inbox
// prefix is one.
var userRE = regexp.MustCompile(`^[A-Za-z0-9_-]{1,64}$`)

// toolRE is the shape of a tool name (as the remote tools package
// requires).
var toolRE = regexp.MustCompile(`^[A-Za-z0-9_-]{1,64}$`)

// InboxPrefix is the inbox prefix of a user's connections: _INBOX_<user>.
// Each user may subscribe to its own prefix only, so replies to one user's
// requests never reach another.
func InboxPrefix(user string) string { return "_INBOX_" + user }

// Validate reports what is wrong with g.
func (g Grant) Validate() error {
	if _, err := ParseRole(string(g.Role)); err != nil {
		return err
	}
	if !userRE.MatchString(g.User) {
		return fmt.Errorf("%w: user %q must be 1-64 letters, digits, '_' or '-'", ErrBadGrant, g.User)
	}
	switch g.Role {
	case Sender, Viewer:
		if len(g.Sessions) == 0 && !g.AllSessions {
			return fmt.Errorf("%w: a %s needs its sessions (or every session, for a trusted front end)", ErrBadGrant, g.Role)
		}
		if len(g.Sessions) > 0 && g.AllSessions {
			return fmt.Errorf("%w: a %s gets either some sessions or all of them", ErrBadGrant, g.Role)
		}
		for _, s := range g.Sessions {
			if _, err := events.KeyToken(s); err != nil {
				return fmt.Errorf("%w: session %q: %w", ErrBadGrant, s, err)
			}
		}
	case ToolServer:
		if len(g.Tools) == 0 {
			return fmt.Errorf("%w: a tool server needs the names of its tools", ErrBadGrant)
		}
		for _, name := range g.Tools {
			if !toolRE.MatchString(name) {
				return fmt.Errorf("%w: tool name %q must be 1-64 letters, digits, '_' or '-'", ErrBadGrant, name)
			}
		}
	}
	if g.Role == HookServer {
		if len(g.Hooks) == 0 {
			return fmt.Errorf("%w: a hook server needs the names of its hooks", ErrBadGrant)
		}
		for _, name := range g.Hooks {
			if !toolRE.MatchString(name) {
				return fmt.Errorf("%w: hook name %q must be 1-64 letters, digits, '_' or '-'", ErrBadGrant, name)
			}
		}
	}
	if g.Role != HookServer && len(g.Hooks) > 0 {
		return fmt.Errorf("%w: hooks apply to hook servers, not a %s", ErrBadGrant, g.Role)
	}
	if g.Role != Sender && g.Role != Viewer && (len(g.Sessions) > 0 || g.AllSessions) {
		return fmt.Errorf("%w: sessions apply to senders and viewers, not a %s", ErrBadGrant, g.Role)
	}
	if g.Role != ToolServer && len(g.Tools) > 0 {
		return fmt.Errorf("%w: tools apply to tool servers, not a %s", ErrBadGrant, g.Role)
	}
	return nil
}

// Permissions returns the permissions of g's role for what g names. The
// subject lists are sorted and without duplicates.
func (g Grant) Permissions() (Permissions, error) {
	if err := g.Validate(); err != nil {
		return Permissions{}, err
	}
	inbox := InboxPrefix(g.User) + ".>"
	var p Permissions
	switch g.Role {
	case Admin:
		p.Publish = []string{">"}
		p.Subscribe = []string{">"}
	case Worker:
		p = workerPermissions(inbox)
	case Sender:
		p.Subscribe = []string{inbox}
		for _, tok := range g.tokens() {
			p.Publish = append(p.Publish, events.InboundPrefix+tok, ServicePrefix+tok+".>")
			p.Subscribe = append(p.Subscribe, events.EventPrefix+tok+".>")
		}
	case Viewer:
		p.Subscribe = []string{inbox}
		for _, tok := range g.tokens() {
			for _, op := range ReadOps {
				p.Publish = append(p.Publish, ServicePrefix+tok+"."+op)
			}
			p.Subscribe = append(p.Subscribe, events.EventPrefix+tok+".>")
		}
	case ToolServer:
		p.Subscribe = append([]string{inbox}, microControl(ToolService)...)
		for _, name := range g.Tools {
			// The tool's calls and their callers' cancels.
			p.Subscribe = append(p.Subscribe, ToolPrefix+name, ToolPrefix+name+".cancel")
		}
		// A call's partial results and its reply all go to the caller's
		// reply subject, for as long as the call may run.
		p.Responses = &Responses{Max: -1, Expires: ToolResponseTTL}
	case HookServer:
		p.Subscribe = append([]string{inbox}, microControl(HookService)...)
		for _, name := range g.Hooks {
			p.Subscribe = append(p.Subscribe, HookPrefix+name+".*")
		}
		// One reply per discovery ($SRV.INFO: a process serves all its
		// hooks as one micro service) and per before_agent_start or
		// before_tool_call request.
		p.Responses = &Responses{Max: 1, Expires: HookResponseTTL}
	}
	p.Publish = sortedSet(p.Publish)
	p.Subscribe = sortedSet(p.Subscribe)
	return p, nil
}

// tokens returns the lane tokens of the grant's sessions, or "*" for every
// session. Validate has checked the keys.
func (g Grant) tokens() []string {
	if g.AllSessions {
		return []string{"*"}
	}
	toks := make([]string, 0, len(g.Sessions))
	for _, s := range g.Sessions {
		tok, _ := events.KeyToken(s)
		toks = append(toks, tok)
	}
	return toks
}

// workerPermissions is what a worker needs: found by running workers
// under exactly these permissions (integration tests fail on any
// permission violation the server logs).
func workerPermissions(inbox string) Permissions {
	pub := []string{"$JS.API.INFO"}
	// The JetStream API for the fleet's streams and buckets only: every
	// request names its stream as the fifth or sixth token
	// ($JS.API.STREAM.INFO.<s>, $JS.API.STREAM.MSG.GET.<s>,
	// $JS.API.CONSUMER.CREATE.<s>.<name>.<filter>,
	// $JS.API.CONSUMER.MSG.NEXT.<s>.<consumer>, $JS.API.DIRECT.GET.<s>...).
	// (A consumer of another stream named like one of these matches too:
	// the fleet is best alone in its account.)
	for _, stream := range FleetStreams() {
		pub = append(pub, "$JS.API.*.*."+stream, "$JS.API.*.*."+stream+".>", "$JS.API.*.*.*."+stream, "$JS.API.*.*.*."+stream+".>")
	}
	pub = append(pub,
		// Acks and progress of the dispatch consumer's deliveries, and
		// flow control of the bucket watchers.
		"$JS.ACK."+events.InboundStream+".>",
		// Acks of the schedules' firing consumer.
		"$JS.ACK."+SchedulesStream+".>",
		"$JS.FC.>",
		// KV writes: leases, transcript records, cursors, settings and
		// the retention pass's position (key "retention") and lease (the
		// lane token "=retention", which no session key encodes to), the
		// fleet's seal key (key "seal", create-only); auth-profile
		// state; the active-run registry (entries and their TTL'd purge
		// markers); the budgets' reservations and use.
		"$KV."+LanesBucket+".>",
		"$KV."+AuthBucket+".>",
		"$KV."+RunsBucket+".>",
		"$KV."+BudgetsBucket+".>",
		// The workers' lives: its own beats, and the end of another's
		// found dead.
		"$KV."+WorkersBucket+".>",
		// Whether a late worker is still connected (no responder: it is
		// not).
		events.AlivePrefix+"*",
		// Schedules: their records (firings and history), their server
		// timers (message schedules on AGENT_SCHED).
		"$KV."+SchedulesBucket+".>",
		SchedulesPrefix+">",
		// The agents' workspace files: the memory files turns change go
		// back (chunks and meta). The agents bucket gets no KV write: a
		// worker never changes a definition.
		"$O."+AgentFilesBucket+".>",
		// The runs' step journals (steps and re-runs' barriers).
		StepsPrefix+">",
		// The session index's entries (a turn's start and commit).
		IndexPrefix+">",
		// Run events and dead letters.
		events.EventPrefix+">",
		events.DeadPrefix+">",
		// Dead letters an operator replays go back on their lane.
		events.InboundPrefix+"*",
		// Remote tools: discovery, calls and the cancels of calls a
		// stopped run no longer awaits.
		"$SRV.INFO."+ToolService,
		ToolPrefix+"*",
		ToolPrefix+"*.cancel",
		// Run hooks: discovery, requests and agent_end publishes.
		"$SRV.INFO."+HookService,
		HookPrefix+"*.*",
	)
	sub := append([]string{
		inbox,
		// A lane's owner watches its inbound subject for messages that
		// interrupt or steer the running turn.
		events.InboundPrefix + "*",
		// The lane service and the admin service.
		ServicePrefix + "*.*",
		// Its own alive subject (agent.alive.<life>), answered while it
		// is connected.
		events.AlivePrefix + "*",
		AdminPrefix + ">",
	}, microControl(LaneService)...)
	sub = append(sub, microControl(AdminService)...)
	// The lane and admin services answer their requests, micro its $SRV
	// requests.
	return Permissions{Publish: pub, Subscribe: sub, Responses: &Responses{Max: 1}}
}

// FleetStreams are the JetStream streams of a fleet: its six streams and
// the streams of its seven buckets and its object store.
func FleetStreams() []string {
	return []string{events.InboundStream, events.EventStream, events.DeadStream, StepsStream, SchedulesStream, IndexStream,
		"KV_" + LanesBucket, "KV_" + AuthBucket, "KV_" + RunsBucket, "KV_" + WorkersBucket, "KV_" + BudgetsBucket, "KV_" + SchedulesBucket, "KV_" + AgentsBucket, "OBJ_" + AgentFilesBucket}
}

// microControl returns the control subjects a NATS micro service named
// name subscribes to: $SRV.<verb>, $SRV.<verb>.<name>, $SRV.<verb>.<name>.<id>.
func microControl(name string) []string {
	return []string{"$SRV.*", "$SRV.*." + name, "$SRV.*." + name + ".*"}
}

func sortedSet(s []string) []string {
	slices.Sort(s)
	return slices.Compact(s)
}
