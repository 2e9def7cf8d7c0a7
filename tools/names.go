package tools

// BuiltinNames returns the names of the built-in tools (Builtin). No tool
// from elsewhere (a remote tool server, a client) may take one of them.
func BuiltinNames() []string { return []string{"read", "write", "edit", "exec"} }
