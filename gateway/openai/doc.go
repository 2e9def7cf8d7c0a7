// Package openai serves the OpenAI-compatible part of the gateway: the
// routes the official OpenAI SDKs call, answered by the fleet through the
// Go client, with nothing stored in the gateway itself.
//
//   - POST /v1/chat/completions: a chat completion, streamed as
//     chat.completion.chunk server-sent events ending with "data: [DONE]"
//     (stream_options.include_usage adds a last chunk with the usage and
//     no choices) or returned whole. The reply's text is delta.content,
//     the model's thinking delta.reasoning_content. Function tools become
//     the run's client tools; a run that stops on calls to them ends with
//     finish_reason "tool_calls" and the calls, and the next request's
//     role "tool" messages become their results.
//   - POST /v1/responses: a response, streamed with the Responses API's
//     events (response.created, response.output_text.delta, …,
//     response.completed; every event has a sequence_number from 0) or
//     returned whole; background: true returns at once with status
//     "queued". GET /v1/responses/{id} returns it as it is now (once
//     its run's events went quiet for Options.PollWait, or the fleet said
//     it waits in the session's queue; a run the fleet does not know is
//     404); with ?stream=true it streams its events again, from the first
//     or after starting_after=N, nothing repeated and the same numbers on
//     every gateway process. POST /v1/responses/{id}/cancel stops the
//     run (the session's running turn, as Client.Stop does) and returns
//     the response, status "cancelled". previous_response_id continues
//     that response's session; function tools and function_call_output
//     items work as in chat completions. A cancelled response's stream
//     ends with response.incomplete.
//   - GET /v1/models: the models the caller may name: the operator's
//     aliases and listed models, filtered by the token's allowlist (and
//     the models the allowlist names). GET /v1/models/{model} returns one
//     of them, else 404 model_not_found.
//
// # Sessions
//
// Every request runs one turn in one fleet session:
//
//   - Lanefleet-Session header: that session key, which the caller's
//     token must reach.
//   - user (chat completions, Responses): the token's first key prefix,
//     then "openai-user:", then user ("acme:openai-user:alice"; a token
//     that reaches every session gets OpenClaw's form,
//     "agent:main:openai-user:alice"). The same user is the same session
//     on every request and every gateway process.
//   - previous_response_id (Responses): the session of that response, as
//     it is now (a session does not branch: continuing an older response
//     continues after the session's latest turn).
//   - none of them: a fresh session, "<prefix>openai:<16 hex digits>".
//
// Every answer that ran a turn names its session in the Lanefleet-Session
// response header, so a client that started a fresh one can continue it.
//
// # What comes from the request, what from the transcript
//
// The fleet keeps the conversation: the session's transcript is what the
// model sees. From a request the gateway takes the model, the function
// tools, the reasoning effort (as the thinking level) and the new input:
// the messages after the last assistant message (user texts, joined by
// blank lines, with their data: URL images; tool results). The messages
// before it are checked, not sent: they must be the end of the session's
// conversation as its client saw it (user messages compared by their
// words, assistant messages by their text and client tool call ids,
// tool results by call id), or the request is refused with 409
// conversation_mismatch. A request may repeat the whole conversation,
// its latest part, or none of it. A session with no transcript (a fresh
// one, or a user's first request) takes the earlier messages as its
// transcript: they are imported (Client.Import) before the new input is
// sent, so a client that sends its whole history without a user works as
// with OpenAI. System and developer messages and instructions are not
// sent (the system prompt is the fleet operator's); nor are sampling
// parameters, tool_choice, response_format or n (n must be 1). Tool
// calls that wait for an approval are not client calls: the native API
// answers them. Messages go in queue mode followup: each request is its
// own turn, after the session's earlier ones.
//
// # Streams
//
// A stream is held until its first output: a run the fleet refuses before
// any (a model it does not run, invalid input) is answered with the
// error's status and OpenAI's error body, as OpenAI answers; once output
// went out, a chat stream ends with a data: {"error": …} line, a
// Responses stream with response.failed. A quiet stream gets an SSE
// comment line every Options.KeepAlive. A client that goes away stops
// being followed; its run goes on (cancel is the Responses API's cancel).
//
// # Ids
//
// A response id is "resp_" and the base64url of the session key, the run
// id, the model as named, the creation time and the background flag:
// any gateway process reads it, and every use checks again that the
// caller reaches its session (a response of another tenant is "not
// found"). Chat completion ids carry the same after "chatcmpl-".
//
// Files: api.go (New, Options, Routes, models, sending a turn), session.go
// (session keys, response ids), conv.go (conversations and the
// transcript check), chat.go, responses.go, stream.go (events to deltas,
// SSE), errors.go (OpenAI's error shape and statuses).
package openai
