package guard

import (
	"crypto/sha256"
	"encoding/json"
)

// ToolRepeatsDefault is how many times in one turn the same tool call (same
// tool, same arguments) may fail with the same error before the turn is
// stopped.
const ToolRepeatsDefault = 3

// Repeats is the tool loop's loop detector: it stops a turn whose model
// makes the same call with the same arguments and gets the same error
// again and again (a model that does not take "Tool exec not found" for an
// answer would otherwise spend every model call the turn may make). A call
// that succeeds, or fails otherwise, starts its count over. The zero value
// is not usable: see NewRepeats.
type Repeats struct {
	limit int
	seen  map[[sha256.Size]byte]repeat
}

type repeat struct {
	err string
	n   int
}

// NewRepeats returns a detector that stops at limit identical failures
// (ToolRepeatsDefault when limit < 1).
func NewRepeats(limit int) *Repeats {
	if limit < 1 {
		limit = ToolRepeatsDefault
	}
	return &Repeats{limit: limit, seen: map[[sha256.Size]byte]repeat{}}
}

// Limit is the number of identical failures that stops a turn.
func (r *Repeats) Limit() int { return r.limit }

// Record notes the end of one call of name with args (failed with errText,
// or not failed) and returns how many times in a row this call has now
// failed with this error; stop is set once that reaches the limit.
func (r *Repeats) Record(name string, args map[string]any, failed bool, errText string) (n int, stop bool) {
	k := callKey(name, args)
	if !failed {
		delete(r.seen, k)
		return 0, false
	}
	prev, ok := r.seen[k]
	if !ok || prev.err != errText {
		prev = repeat{err: errText}
	}
	prev.n++
	r.seen[k] = prev
	return prev.n, prev.n >= r.limit
}

// callKey identifies a call by its tool and arguments (their JSON, whose
// object keys are sorted), hashed: arguments can be large.
func callKey(name string, args map[string]any) [sha256.Size]byte {
	raw, err := json.Marshal(args)
	if err != nil {
		raw = nil // unmarshalable arguments: the name alone
	}
	h := sha256.New()
	h.Write([]byte(name))
	h.Write([]byte{0})
	h.Write(raw)
	var k [sha256.Size]byte
	h.Sum(k[:0])
	return k
}
