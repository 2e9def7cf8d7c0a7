package fleet

import (
	"time"

	"github.com/nats-io/nats.go"
	"github.com/rs/zerolog"

	"github.com/lanefleet/lanefleet/agentprompt"
	"github.com/lanefleet/lanefleet/governance"
	"github.com/lanefleet/lanefleet/hooks"
	"github.com/lanefleet/lanefleet/provider/scripted"
	"github.com/lanefleet/lanefleet/redact"
	"github.com/lanefleet/lanefleet/runner"
	"github.com/lanefleet/lanefleet/tools"
	"github.com/lanefleet/lanefleet/tracing"
)

// Config configures a member.
type Config struct {
	// The member's connection: to NATSURL, or to the embedded server.
	NATSURL   string // comma-separated server URLs; empty = start an embedded server
	CredsFile string // NATS credentials file
	NKeyFile  string // NKey seed file
	User      string // user name (with Password)
	Password  string // never logged
	// InboxPrefix is the connection's inbox prefix: the one the user's
	// permissions let it subscribe to. Default permission.InboxPrefix(User)
	// when User is set, else NATS's _INBOX.
	InboxPrefix string
	TLSCert     string // client certificate
	TLSKey      string // client key
	// TLSCA is the CA bundle for the server certificate. Without it, the
	// connection to the embedded server trusts exactly the certificate that
	// server presents.
	TLSCA string

	// The embedded server (NATSURL empty).
	// ServerConfig is a nats-server configuration file (users, nkeys,
	// accounts, permissions, TLS, monitoring, ...); DataDir and Listen fill
	// in what it leaves unset and must agree with what it sets, SyncAlways
	// applies when it sets no jetstream sync_interval.
	ServerConfig string
	DataDir      string // JetStream store; required for the embedded server unless ServerConfig names one
	Listen       string // host:port for clients and other workers; default 127.0.0.1:4222
	SyncAlways   bool   // fsync every write before acknowledging (default in cmd/worker)
	// InsecureListen lets the embedded server listen on a non-loopback
	// address without authentication.
	InsecureListen bool

	// The fleet.
	WorkerID    string
	Replicas    int           // stream and bucket replicas (3 on a cluster)
	Concurrency int           // lanes owned at once by this worker
	AckWait     time.Duration // dispatch AckWait
	LeaseTTL    time.Duration // lane lease TTL
	// LivenessEvery and LivenessTTL: how often the worker beats in the
	// liveness bucket, and how long its life lasts without a beat
	// (lanes.Config.Liveness: fast takeover of a dead worker's lanes);
	// 0 = their defaults, a negative LivenessEvery turns it off.
	LivenessEvery time.Duration
	LivenessTTL   time.Duration
	ShutdownGrace time.Duration
	MaxPayload    int
	// MaxInflightBytes bounds the payload bytes of the lanes running at
	// once (lanes.Config; 0 = the default, negative = none).
	MaxInflightBytes int64
	Limits           Limits // byte limits of the streams and buckets
	// LaneTurnBudget and LaneTimeBudget: how long a lane keeps its slot
	// while other lanes wait for one (lanes.Config; a negative turn
	// budget turns fair scheduling off).
	LaneTurnBudget int
	LaneTimeBudget time.Duration
	// Linger: how long an owner keeps an empty lane after a turn for the
	// session's next message (lanes.Config.Linger; 0 = its default).
	Linger time.Duration
	// SetupConcurrency: how many lanes set up a turn at once
	// (lanes.Config.SetupConcurrency; 0 = its default, negative = no bound).
	SetupConcurrency int
	// Retention (package retention): SessionTTL forgets sessions untouched
	// that long (0 = never); EventMaxAge is how long run events stay
	// replayable (0 = 24 h); RetentionRate is the most sessions the
	// fleet's retention pass forgets a second (0 = retention.DefaultRate).
	// Every worker of a fleet should use the same.
	SessionTTL    time.Duration
	EventMaxAge   time.Duration
	RetentionRate int
	// IdleRelease is how long the member runs no turn before it returns
	// the memory it no longer uses to the operating system, once per idle
	// spell (0 = IdleReleaseDefault, negative = never).
	IdleRelease time.Duration

	// The runner.
	// DefaultModel is "provider/model-id"; default: the OpenAICompatible
	// server's first chat model, else by the API keys present, else
	// scripted/echo (with Scripted).
	DefaultModel string
	ModelsFile   string // user models file adding to or overriding the built-in catalog (and the server's models)
	// OpenAICompatible is the base URL of an OpenAI-compatible server
	// (llama.cpp's llama-server, vLLM, Ollama, LM Studio; a bare origin gets
	// /v1). Start lists its models (GET <url>/models) and serves them as
	// local/<id> over Chat Completions; its first chat model is the default
	// model when DefaultModel is empty. A server that cannot list its
	// models fails Start with the reason.
	OpenAICompatible string
	// OpenAICompatibleKey is sent to that server as a bearer token; most
	// local servers want none.
	OpenAICompatibleKey string
	// OpenAICompatibleWait is how long Start asks again while the server
	// does not answer or answers 5xx (starting, loading a model); 0 = once.
	OpenAICompatibleWait time.Duration
	// Scripted serves the built-in scripted/* test models (make demo, tests,
	// benchmarks). Never in production: scripted/script plays whatever tool
	// calls the sender writes into the message.
	Scripted      bool
	ScriptedDelay time.Duration // pause before each scripted/echo delta
	// registerAfter replaces the registry's registerAfter (tests).
	registerAfter time.Duration
	Scripts       map[string]scripted.Script
	Fallbacks     []string // model fallback chain after the requested model
	// AllowModels are the models a message may ask for: references or
	// glob patterns (catalog.Allowlist). Empty: the default model, the
	// fallbacks, every catalog and models-file entry, and scripted/* when
	// Scripted is set. A message naming another model ends with an
	// invalid_input error saying which are allowed.
	AllowModels []string
	// AuthProfiles is an auth-profiles.json file of API keys and tokens;
	// keys in the environment (ANTHROPIC_API_KEY, ...) are profiles too.
	AuthProfiles string
	// SecretExec runs the exec secret providers AuthProfiles declares
	// for its profiles' exec:PROVIDER:ID references (package
	// secretexec); without it such a reference stops the worker at start.
	SecretExec bool
	// AllowAuthPins are the auth profiles a message or a session's
	// settings may pin its turns to: profile ids or glob patterns
	// (authprofile.Pins). Empty: none. A turn pinned to another, to a
	// profile that does not exist or to one that is disabled ends with an
	// invalid_input error saying which are allowed.
	AllowAuthPins  []string
	AttemptTimeout time.Duration // one attempt of a run; default 10 minutes
	// MaxToolIterations bounds the model calls of one turn's tool loop;
	// default runner.MaxToolIterationsDefault.
	MaxToolIterations int
	// MaxToolRepeats stops a turn whose model makes the same failing
	// call this many times; default guard.ToolRepeatsDefault.
	MaxToolRepeats int
	// NoStepJournal turns the step journal off: a turn re-run after its
	// worker died then repeats every model and tool call it had made
	// (the journal costs a synchronous write per step).
	NoStepJournal bool
	// NoChatCommands turns the chat commands off (/new, /reset, /compact,
	// /model, /think, /verbose, /reasoning, /queue, /stop, /status,
	// /help): such a message then goes to the model as it is.
	NoChatCommands bool
	// ToolPolicy allows, denies and asks approval for tools by name
	// (case-insensitive globs; deny wins; empty Allow = all): refused
	// tools are not offered, and every call of a tool marked Approve ends
	// the run pending until the client answers "approve".
	ToolPolicy tools.Policy
	// Retry is the same-key retry of transient provider failures; zero =
	// runner's defaults (3 tries after 2, 4, 8 s).
	Retry runner.RetryPolicy
	// WorkspaceRoot holds each session's workspace directory for the
	// built-in tools; default <DataDir>/workspaces, else a temp directory.
	WorkspaceRoot  string
	NoBuiltinTools bool // no read/write/edit/apply_patch/exec
	NoRemoteTools  bool // do not discover tools served over NATS
	// RemoteTools lists the tools served over NATS (micro service
	// lanefleet-tools) that runs may use, by name. Nothing discovered is
	// used unless listed; a listed name may not be a built-in tool's.
	RemoteTools []string
	// Hooks configures the run hooks served over NATS (package hooks):
	// the listed names, their timeout and what a before_tool_call hook
	// that cannot decide does. No names: no hooks.
	Hooks        HooksConfig
	NoCompaction bool // no threshold compaction (overflow recovery still compacts)
	// BlockReplies publishes the reply in blocks too (block events, as
	// OpenClaw's block streaming), besides its deltas; off by default, as
	// in the reference (blockStreamingDefault "off").
	BlockReplies bool
	SystemPrompt string // base of every run's system prompt (workspace, skills and context files are added)
	SkillsDir    string // directory of skills (<name>/SKILL.md) every session sees, besides <workspace>/skills
	// Skills configures skills by name (OpenClaw's skills.entries):
	// enabled, and the environment their commands get (exec).
	Skills          agentprompt.SkillConfigs
	RunsRegistryTTL time.Duration // how long a dead run's registry entry lives; default 1 hour
	// Tenant governance (packages governance, budgetstore). A session's
	// tenant is its key's prefix up to TenantSeparator (default ":");
	// NoTenants gives no session a tenant. Budgets on tenants and sessions
	// are set by operators (publisher budget); each model call reserves
	// its worst case before it is made, and a session whose budget has no
	// room pauses. NoBudgets turns governance off (no budgets bucket).
	TenantSeparator string
	NoTenants       bool
	NoBudgets       bool
	// RateLimits are the provider rate limits (requests and tokens a
	// minute) this worker's model calls share with the fleet's: each call
	// a rule matches waits for room in the rule's window, kept in the
	// budgets bucket (governance.RateRule; worker --rate-limit). Every
	// worker of a fleet should have the same rules. They need the budgets
	// bucket: NoBudgets refuses them.
	RateLimits []governance.RateRule
	// TenantWeights are the tenants' weights in the division of this
	// worker's slots while lanes wait for one (worker --tenant-weight;
	// lanes.Config.TenantWeight): a tenant not named weighs 1.
	TenantWeights map[string]int
	// NoSchedules leaves schedules alone: no schedules bucket or stream,
	// no firing (package schedstore). A fleet's schedules fire while any
	// worker runs without it.
	NoSchedules bool
	// Named agents (packages agents, agentstore). A session whose key
	// names an agent ("agent:<id>:…") runs as that agent: its system
	// prompt, model, fallbacks, thinking level, tool policy (within
	// ToolPolicy), skills and chat-command switch, and its workspace's
	// files seeded into the session's directory at every turn; any other
	// session runs as DefaultAgent when it is defined (default
	// agents.DefaultID, "main"), else as the worker is configured.
	// NoAgents turns agents off (no agents bucket, no agent-files object
	// store). AgentCacheDir holds the worker's copies of the workspaces'
	// files; default <DataDir>/agent-files, else a temporary directory.
	DefaultAgent  string
	NoAgents      bool
	AgentCacheDir string
	// Exec offers the exec tool: a shell in the session's workspace,
	// confined by package sandbox. Start fails where the platform cannot
	// confine it, unless ExecUnconfined is also set.
	Exec bool
	// ExecUnconfined runs exec's commands unconfined, with the worker's
	// privileges (only with Exec): for tests only.
	ExecUnconfined bool
	// ExecAllowRoot lets exec's commands run as root (without
	// capabilities, still confined) where the worker runs as root and
	// they cannot run as uid 65534: without user namespaces, or with the
	// workspaces on a filesystem without idmapped mounts. Start fails
	// there otherwise.
	ExecAllowRoot bool
	// ExecCgroup is a cgroup v2 directory delegated to the worker, where
	// each of exec's commands gets a cgroup; empty: package sandbox finds
	// one where it can.
	ExecCgroup string
	// WorkspaceMaxBytes bounds the filesystem of the workspaces with Exec
	// (sandbox.MountDisk): 0 = WorkspaceMaxBytesDefault, -1 = no bound.
	// Unbounded on the JetStream store's filesystem, Start fails unless
	// it is -1.
	WorkspaceMaxBytes int64

	// WebFetch offers the web_fetch tool (package tools/webfetch): an
	// HTTP(S) GET whose page comes back as text. Off by default: it
	// reaches outside the workspace. It reaches public addresses only
	// (package netguard) unless WebAllow names more.
	WebFetch bool
	// WebAllow are address ranges ("10.1.0.0/16", "192.168.1.5") and host
	// names ("wiki.internal", "*.corp.example") web_fetch may reach
	// although the guard refuses them (loopback, private, link-local and
	// cloud metadata, …). Only with WebFetch.
	WebAllow []string
	// WebSearch offers the web_search tool through a search provider:
	// "brave" (the Brave Search API; its key from BRAVE_API_KEY, else an
	// api_key profile of provider "brave" in AuthProfiles) or "searxng"
	// (the instance at WebSearchURL, with its JSON format on). "" = no
	// web_search.
	WebSearch string
	// WebSearchURL is the SearXNG instance's URL, or another Brave
	// endpoint. The operator's: web_fetch's guard does not apply to it.
	WebSearchURL string

	// Process offers the process tool (only with Exec): background
	// commands through exec's sandbox, each session's own, on the worker
	// that started them (tools.Processes). ProcessesPerSession caps one
	// session's running processes (0 = tools.DefaultProcessesPerSession).
	Process             bool
	ProcessesPerSession int
	// MemoryTools offers memory_search and memory_get over each
	// workspace's MEMORY.md and memory/**/*.md (BM25, no embeddings).
	// They read the workspace only; off by default all the same.
	MemoryTools bool
	// NoMemoryFlush turns off the memory flush that, with MemoryTools,
	// runs before each threshold compaction: one silent turn in which the
	// model writes durable memories to the workspace's memory files
	// (runner.Config.MemoryFlush).
	NoMemoryFlush bool
	// SessionTools offers sessions_list, sessions_history and
	// sessions_send, reaching the sessions of the caller's tenant
	// ("tenant") or of its tenant and agent ("agent"), never another
	// tenant's; "" = off.
	SessionTools string
	// SessionSender makes sessions_send's publisher over the member's
	// connection: a message onto the target's lane the way any sender's
	// goes (cmd/worker gives the Go client's Send). Required with
	// SessionTools; a field and not an import because the Go client's own
	// tests start members of this package.
	SessionSender func(nc *nats.Conn) (SendFunc, error)
	// SubagentMaxDepth bounds how deep sessions_spawn's sub-agents nest
	// (0 = subagent.MaxDepthDefault, 2); SubagentMaxChildren how many
	// one run spawns (0 = subagent.MaxChildrenDefault, 5).
	SubagentMaxDepth, SubagentMaxChildren int

	// Operations.
	// MetricsListen is the host:port of the member's /metrics, /healthz
	// and /readyz (package metrics); empty = none. A busy address fails
	// Start.
	MetricsListen string
	// NATSMonitor is the host:port of the embedded server's monitoring
	// endpoints (/varz, /jsz, /healthz, ...); empty = none. They have no
	// authentication: a non-loopback address needs InsecureListen.
	NATSMonitor string
	// TracerProvider records the spans of turns, attempts, model calls
	// and tool calls; nil = none.
	TracerProvider *tracing.Provider

	Logger zerolog.Logger
	// Redactor holds the member's secrets (keys, tokens, NATS
	// credentials): the member masks them in what its runs produce (model
	// output, tool results, provider errors, hook replies), never in what
	// a sender supplied (package redact); Start adds the secrets it finds
	// in the configuration. Give the one whose Writer masks the logger's
	// output too; default a new one.
	Redactor *redact.Redactor
	// Env reads configuration such as API keys; default os.Getenv. Runs never
	// change the process environment.
	Env func(string) string
}

// HooksConfig configures the run hooks a member calls.
type HooksConfig struct {
	// Names are the hooks runs use, in call order; nothing discovered is
	// used unless listed.
	Names []string
	// Timeout bounds each hook call; default hooks.TimeoutDefault.
	Timeout time.Duration
	// ToolFailure is "closed" (default: a before_tool_call hook that
	// cannot decide blocks the call) or "open" (the call runs unchecked).
	ToolFailure hooks.FailMode
}

// Limits are the byte limits of the fleet's streams and buckets, in bytes:
// 0 is the default (sized for a single node's default 8 GiB store and 256
// MiB of memory), -1 no limit. Every worker of a fleet must use the same.
type Limits struct {
	Inbound int64 // AGENT_IN: unprocessed messages; full = new ones refused (default 1 GiB)
	Events  int64 // AGENT_EV: run events; full = oldest dropped (default 1 GiB)
	Dead    int64 // AGENT_DLQ: dead letters; full = new ones refused (default 256 MiB)
	Lanes   int64 // lanes bucket: transcripts, leases, cursors (default 4 GiB)
	Steps   int64 // AGENT_STEPS: the runs' step journals; full = oldest dropped (default 512 MiB)
	Auth    int64 // auth bucket: auth-profile state (default 64 MiB)
	Runs    int64 // runs bucket (memory): the active-run registry (default 64 MiB)
	Budgets int64 // budgets bucket: budgets, their use and reservations (default 64 MiB)
	// Schedules bounds the schedules bucket (default 64 MiB); their
	// stream AGENT_SCHED is sized by the most schedules a fleet holds.
	Schedules int64
	// Agents and AgentFiles: the agents bucket (default 16 MiB) and the
	// agent-files object store of their workspaces (default 64 MiB).
	Agents     int64
	AgentFiles int64
	// Sessions bounds the session index AGENT_SESSIONS (package
	// sessionindex; full = the entries of the sessions idle the longest
	// dropped): default a sixteenth of Lanes (256 MiB), -1 = none.
	Sessions int64
	// One session's share of AGENT_IN (lanes.StreamConfig): the messages
	// and bytes its lane may hold; at the limit the session's sender is
	// refused and nobody else.
	LaneMessages int64 // default 1,000
	LaneBytes    int64 // default an eighth of Inbound (128 MiB)
}
