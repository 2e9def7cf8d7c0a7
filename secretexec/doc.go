// Package secretexec runs the exec secret providers an operator declares
// in a worker's auth-profiles file and keeps what they return in memory,
// for the profiles' exec:PROVIDER:ID references (authprofile.RefExec).
//
// A provider is declared only in the profiles file the worker was started
// with, under "secrets": {"providers": {NAME: {"source": "exec",
// "command": "/abs/path", …}}}, and runs only when the worker was started
// with --secret-exec; a reference names a provider and an id, never a
// command, so nothing a sender or a bucket writer supplies chooses a
// program. A command is run as OpenClaw's exec provider runs it: the
// program itself (absolute path, symlinks resolved once at start; a
// regular, executable file no other user may write), no shell, its
// declared arguments, an environment of only the variables it lists
// (passEnv, from the worker's) and sets (env), a request on stdin
// ({"protocolVersion": 1, "provider": NAME, "ids": [...]}) and a response
// on stdout ({"protocolVersion": 1, "values": {ID: VALUE}}), or, with
// "jsonOnly": false, the value itself (run once per id). The run is bounded
// in time (timeoutMs, 10 s by default) and output (maxOutputBytes, 64 KiB:
// the process is killed past it); stderr is counted, never kept. What a
// failure says names the provider, the exit status and sizes, never what
// the command printed.
//
// The values are read at start (a provider that fails stops the worker)
// and again every refreshMs (5 minutes by default) in the background; a
// failed refresh keeps the last values and is reported. The request path
// reads memory only.
//
// Files: provider.go (the declaration: decode, check), run.go (one run of a
// command and its protocol), values.go (the values: load, read, refresh).
package secretexec
