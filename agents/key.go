package agents

import "strings"

// keyPrefix opens a session key that names its agent.
const keyPrefix = "agent:"

// Of returns the agent a session key names ("agent:<id>:<rest>", rest not
// empty) and true, or def and false for a key of another form. A key of
// the agent form whose id breaks the id rules names that id all the same:
// the caller refuses it (no agent can have it) rather than running the
// session as the default agent.
func Of(key, def string) (id string, named bool) {
	rest, ok := strings.CutPrefix(key, keyPrefix)
	if !ok {
		return def, false
	}
	id, tail, ok := strings.Cut(rest, ":")
	if !ok || tail == "" {
		return def, false
	}
	return id, true
}
