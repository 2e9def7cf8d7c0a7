// Package agents is the definition of a named agent: its id, display name,
// system prompt, default model and fallbacks, thinking level, tool profile
// and policy, skills, workspace and chat-command switch, with the rules
// every stored or submitted definition must pass, and the session-key form
// that names an agent ("agent:<id>:…", as OpenClaw's keys do).
//
// Definitions travel as msgpack (the bucket's records, Encode and Decode)
// and are accepted from people as JSON (ParseJSON); both paths end in
// Validate, so a hostile record is refused with an error that names the
// offending field. Every length is bounded before anything is allocated
// for it.
//
// Files:
//
//	agent.go   Agent, Validate, the id and workspace-path rules, tool profiles
//	key.go     the agent a session key names (Of)
//	codec.go   Encode, Decode (msgpack), ParseJSON
//
// The package is pure: no NATS, no files, no clock. The store (bucket,
// watch cache and the workspace files' object store) is package
// agentstore.
package agents
