// Package hooks serves agent-run hooks over NATS and calls them from the
// workers: OpenClaw's plugin hooks, served by any process, the way package
// tools/remote serves tools.
//
// # Kinds
//
//   - before_agent_start: before a run's prompt goes to the model, a hook
//     may prepend context to it or replace the system prompt (several
//     hooks: contexts joined with blank lines, the last system prompt
//     wins).
//   - before_tool_call: before each call of a worker tool (not a client
//     tool), a hook allows it, blocks it with a reason the model sees, or
//     rewrites its arguments; listed hooks decide in order, each seeing
//     the arguments the previous one rewrote.
//   - agent_end: after a run, a hook is told its result; nobody waits. A
//     run redone after its worker died ends again with the same run id
//     (at least once).
//
// # Serving
//
// A process serves one hook by name with [Serve]; each kind it handles is
// an endpoint of the micro service "lanefleet-hooks" on
// agent.hook.<name>.<kind>, in the micro default queue group:
//
//	svc, err := hooks.Serve(nc, hooks.ServeConfig{Name: "guard"}, hooks.Handlers{BeforeToolCall: check})
//	defer svc.Stop()
//
// # Calling
//
// A worker lists the hooks it uses (--hooks guard,context): a [Registry]
// discovers which kinds each listed hook serves ($SRV.INFO, at start and
// every 30 s) and remembers them; nothing discovered is used unless
// listed, and an endpoint not on its own subject is ignored. The worker's
// wiring (internal/fleet) plugs it into the runner: [Registry.StartHooks]
// as runner.Config.Hooks, [Registry.BeforeToolCall] and
// [Registry.AgentEnd] behind the runner's ToolHook and EndHook.
//
// Each call is bounded by [Config.Timeout] (default 10 s). A
// before_agent_start hook that fails, times out or replies malformed only
// warns and contributes nothing, as in the reference. A before_tool_call
// hook that cannot decide (unreachable, timed out, failed, malformed)
// blocks the call by default ([FailClosed]: the model is told the hook
// could not check it; the run goes on) — an operator lists such a hook to
// guard tools, and a guard that is down must not wave every call through.
// [FailOpen] (--hooks-tool-failure open) lets the call run unchecked with
// a warning instead, the reference's behaviour.
//
// # Wire format
//
// Requests are JSON: [StartEvent], [ToolCallEvent], [EndEvent] (agent_end is
// a plain publish, without a reply subject), with header [HeaderTimeout]
// (milliseconds the worker waits). Replies are [StartResult] and
// [ToolCallResult]; a failure is a micro error reply (headers
// Nats-Service-Error and Nats-Service-Error-Code, body {"error": "..."}).
// A reply is hostile input: over [MaxReplyBytes], nested deeper than
// [MaxDepth], or with a text over [MaxTextBytes] it is malformed; a block
// reason is cut at [MaxReasonBytes].
package hooks
