// Package agentstore is the JetStream adapter of named agents (package
// agents): their definitions in a KV bucket (one key per agent id,
// msgpack records), their workspaces' files in an object store (one
// object per file, named "<workspace>/<path>", every put a new version),
// and a worker's view of both: the bucket and the object store watched
// into memory, so resolving a turn's agent is a map lookup and a
// workspace's files are fetched only when their digest changed.
//
// Files:
//
//	bucket.go  Bucket: the definitions (Put, Get, List, Delete) for operators
//	files.go   Files: the workspaces' files (Put, Get, List, Delete) for operators
//	cache.go   Cache: a worker's watched view, Lookup, and the workspace sync:
//	           Seed copies a workspace into a session's directory at a turn's
//	           start, WriteBack puts the memory files the turn changed back
package agentstore
