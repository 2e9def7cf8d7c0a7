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
// it is given: results are new slices, and a message that changes is copied
// first. Unchanged messages, argument maps and Extra maps may be shared
// between input and output, so treat both as read-only or Clone them.
//
// The package is pure: it imports no NATS and does no I/O.
package sanitize
