// Package sessionfile reads, writes and repairs pi/OpenClaw session files:
// JSON Lines, one header line ({"type":"session","version":3,…}) followed by
// one entry per line, as described by message.Entry.
//
// Read parses a file, keeps every field it does not know and migrates
// version 1 and 2 files to version 3; Write writes one back. Branch and
// Messages rebuild the conversation of the current branch (the model's view
// of the session). Repair fixes a file on disk the way the reference runtime
// does: malformed lines are dropped, the original is backed up beside it and
// the file is replaced atomically.
//
// The package is pure apart from Repair's file system access: it knows
// nothing of NATS or of the transcript store, which converts to and from
// []message.Entry.
package sessionfile
