// Package sanitize turns a stored transcript into exactly what one provider
// accepts, matching the reference runtime (OpenClaw v2026.2.27).
//
// PolicyFor derives the transcript policy of a (provider, api, model id)
// triple. Prepare runs the whole history preparation: inter-session
// annotation, image and content sanitising, thinking-block dropping,
// malformed tool-call removal, tool-call id rewriting, tool-use/result pairing
// repair with synthetic results, stale-usage zeroing, the OpenAI reasoning
// downgrade and Google turn ordering (the "sanitized" stage), then Gemini and
// Anthropic turn validation, the history-turn limit and a second pairing pass
// (the "final" stage, what is handed to the model).
//
// Every stage is also exported on its own. No function modifies the messages
// it is given: a message that changes is copied first, and a stage that
// changes nothing returns its input slice. Prepare always returns new slices,
// but unchanged content blocks, argument maps and Extra maps stay shared with
// the request, so treat both as read-only or Clone the messages.
//
// Where the reference loses data this package does the right thing instead
// (see testdata/conformance/DEVIATIONS): the Anthropic user-turn merge keeps
// plain-string contents, a plain-string tool result becomes a text block
// instead of being emptied, the pairing repair also orders and de-duplicates
// results at the end of a transcript, and a call id reused by a later
// assistant message keeps that message's result (and, for providers whose ids
// are rewritten, gets a fresh id: see UniqueCallIDs).
//
// The package is pure: it imports no NATS and does no I/O.
package sanitize
