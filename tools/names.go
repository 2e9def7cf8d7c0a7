package tools

// BuiltinNames returns the names of the built-in tools (Builtin's and
// Exec's). No tool from elsewhere (a remote tool server, a client) may take
// one of them, whether or not the worker offers it.
func BuiltinNames() []string { return []string{"read", "write", "edit", "exec"} }
