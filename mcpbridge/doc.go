// Package mcpbridge serves the tools of MCP servers as the fleet's remote
// tools: every worker can call them, and several bridges serving the same
// MCP server share its calls, with no sticky session.
//
// A Bridge connects to each server of its config (the mcpServers format MCP
// clients use, LoadConfig) over stdio, streamable HTTP or SSE with the
// official Go SDK, lists its tools and serves each with tools/remote as
// <server>__<tool> on agent.tool.<server>__<tool> in the micro service
// lanefleet-tools. A name that is not a valid tool name, or that another
// server's tool took, is refused with a log line. The bridge follows
// notifications/tools/list_changed (the new list is served before the old
// one is let go), reconnects with backoff when a session ends and so
// restarts a stdio server that died.
//
// A call passes its idempotency key and run in the request's _meta
// (MetaIdempotencyKey, MetaSessionKey, MetaRunID); progress notifications
// become partial results; the call's context ending (the run was stopped,
// the caller's timeout passed, the bridge is stopping) cancels the MCP
// request. Text, image, resource and structured content become the
// result's blocks; an isError result stays an error result, and an MCP
// error or a broken connection is a tool error that says what happened.
// While a call runs the bridge sends the caller heartbeats (tools/remote
// does, for every tool it serves): a bridge killed outright fails its
// calls within seconds on the caller's side, not at their timeout.
// Config.Served tells a worker running the bridge in process when a
// server's tools are served, so it can discover them at once.
//
// What a server may send is bounded: the tools it lists, each schema and
// description, each message read and each result.
//
// Files: config.go reads the config; bridge.go holds the Bridge and each
// server's connection loop; tool.go calls a tool and maps its result.
package mcpbridge
