// Package replytext turns a model's streamed text into what a user sees,
// as the reference runtime's subscriber does (spec §22, §23):
//
//   - Stripper removes <think>, <thinking>, <thought> and <antthinking>
//     blocks and <final> tags, statefully across chunks, ignoring tags
//     inside inline code and fenced code blocks; with EnforceFinal only the
//     text inside <final> is kept;
//   - Accumulator extracts each event's new text from text_start,
//     text_delta and text_end events (the suffix logic for providers that
//     resend the whole content), and Stream turns it into monotonically
//     growing assistant updates;
//   - BlockFilter cleans and de-duplicates block replies;
//   - IsSilent recognises the NO_REPLY token;
//   - SanitizeToolResult, TruncateToolText and ToolErrorMessage cap tool
//     results and errors for events;
//   - ToolErrors remembers the failing tool a reply warns about: a
//     read-only tool's failure until any tool succeeds, a failure of a
//     call that changes state (IsMutatingToolCall) until the same action
//     (ActionFingerprint) succeeds;
//   - BuildPayloads assembles the final reply payloads of a run.
//
// Lengths are UTF-16 code units, as in the reference. The package is pure:
// values in, values out, no NATS, no clocks.
package replytext
