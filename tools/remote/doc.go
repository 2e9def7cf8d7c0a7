// Package remote offers tools over NATS as micro services and calls them
// from any process: a tool served by one process can be called by agent
// runs on every worker.
//
// # Serving
//
// A process serves tools with [Serve]. Each tool becomes one endpoint of the
// micro service "lanefleet-tools" (or [ServiceConfig.Name]) on subject
// agent.tool.<name>, in the micro default queue group, so every process
// serving a tool shares its calls:
//
//	svc, err := remote.Serve(nc, remote.ServiceConfig{Version: "1.2.0"}, weatherTool, searchTool)
//	if err != nil { ... }
//	defer svc.Stop() // stop taking calls, cancel those in flight, wait for them
//
// A served tool's context carries the run it was called for ([RunInfoFrom])
// and ends when the caller's timeout passes (cause: the caller stopped
// waiting) or the service stops (cause [ErrStopped]). Calls run
// concurrently and answer on the connection themselves, so micro's own
// error and time counts stay at zero; each endpoint's $SRV.STATS data is a
// [ToolStats] with the real ones.
//
// # Calling
//
// A worker finds the tools with [Discover] (one look) or a [Registry] (a
// tools.Set refreshed in the background by [Registry.Run]):
//
//	reg, err := remote.NewRegistry(nc, remote.DiscoverConfig{})
//	if err != nil { ... }
//	g.Go(func() error { return reg.Run(ctx) }) // refresh now and every 30 s
//	...
//	res, err := tool.Call(remote.WithRunInfo(ctx, remote.RunInfo{SessionKey: key, RunID: run}), call)
//
// A call with an Update callback receives the tool's partial results; a
// Registry keeps one wildcard subscription for them, made on first use.
//
// The process running a call sends heartbeats while it runs
// ([DiscoverConfig.Heartbeat], every 5 s by default); a caller that had one
// and then hears nothing for [HeartbeatMisses] intervals (the process was
// killed or cut off from NATS) fails the call then, not at its timeout.
//
// Every failure of a remote Call is an [*Error] whose message the model can
// act on ("tool weather is not available: no process serves it", "tool
// weather timed out after 1m0s", "tool weather's server stopped answering
// (no heartbeat for 15s); the call may have taken effect in part", or the
// tool's own error text) and that wraps [ErrUnavailable], [ErrTimeout],
// [ErrLost], [ErrToolFailed] or [ErrBadReply].
//
// # Wire format
//
// Discovery sends one request to $SRV.INFO.<service> and collects replies
// for [DiscoverConfig.Window]. An endpoint is a tool when its metadata has
// [MetaParameters] (the JSON schema, JSON-encoded) and optionally
// [MetaDescription]; instances offering the same name count once.
//
// A call is a request to the endpoint's subject with the JSON body
//
//	{"id": "call_1", "name": "weather", "args": {...}, "sessionKey": "...", "runId": "..."}
//
// and headers [HeaderTimeout] (milliseconds the caller waits) and
// [HeaderHeartbeat] (milliseconds between heartbeats: messages with header
// [HeaderBeat]: 1 and no body on the reply subject, the first as the call
// starts, none after the reply). The reply is
//
//	{"content": [{"type": "text", "text": "..."}, ...], "details": {...}, "isError": false}
//
// with content blocks in the message package's JSON encoding (text and image
// blocks only), the text capped at 400 000 UTF-16 units and cut further to
// fit the NATS max payload. The caller keeps at most [MaxResultImages]
// images of [MaxResultImageBytes] in all and notes the others in text. A failure is a micro error reply: headers
// Nats-Service-Error (one line) and Nats-Service-Error-Code (see the Code
// constants), body {"error": "the whole message"}. Request header
// [HeaderUpdates]: 1 asks for partial results, sent to the reply subject as
// reply-shaped messages with header [HeaderUpdate]: 1 before the reply.
package remote
