// Package compaction summarises the older part of a session into a pi
// "compaction" entry, so that a conversation that outgrows the model's
// context window can go on.
//
// It reproduces pi-coding-agent's compaction (core/compaction): token
// accounting (EstimateTokens, ContextTokens), the threshold trigger
// (ShouldCompact), the choice of what to keep and what to summarise
// (Prepare: never cut at a tool result, split turns), the conversion of
// pi's extra roles into user messages (ConvertToLLM), the plain-text
// transcript the summariser reads (Serialize) and the summarisation itself
// (Compact), which returns the entry to append. What it writes reads back in
// pi and in sessionfile.Messages: the summary message first, then the kept
// entries.
//
// The package is pure: it takes entries and a provider.Provider and returns
// values. It imports no NATS and does no I/O of its own.
package compaction
