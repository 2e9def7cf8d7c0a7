package failover

import "strings"

// Differs reports whether ClassifyMessage gives text another reason than
// the reference on purpose, and why (the conformance harness logs it).
func Differs(text string) (why string, ok bool) {
	_, why, ok = deliberate(strings.TrimSpace(text))
	return why, ok
}
