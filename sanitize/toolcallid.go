package sanitize

import (
	"crypto/sha256"
	"encoding/hex"
	"strconv"

	"github.com/lanefleet/lanefleet/message"
)

const (
	strict9Len   = 9
	strictMaxLen = 40
)

func isAlnum(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9'
}

func alnumOnly(id string) string {
	for i := 0; i < len(id); i++ {
		if !isAlnum(id[i]) {
			b := make([]byte, 0, len(id))
			b = append(b, id[:i]...)
			for j := i + 1; j < len(id); j++ {
				if isAlnum(id[j]) {
					b = append(b, id[j])
				}
			}
			return string(b)
		}
	}
	return id
}

func hashHex(s string, n int) string {
	sum := sha256.Sum256([]byte(s))
	return hex.EncodeToString(sum[:])[:n]
}

// SanitizeID rewrites one tool-call id into the form mode requires.
//
// IDStrict keeps only ASCII letters and digits; an id with none becomes
// "sanitizedtoolid", an empty id "defaulttoolid". IDStrict9 keeps the first
// nine letters and digits; shorter ids become the first nine hex digits of
// the SHA-256 of what is left (of "sanitized" when nothing is), an empty id
// "defaultid". Any other mode returns id unchanged.
func SanitizeID(id string, mode IDMode) string {
	switch mode {
	case IDStrict:
		if id == "" {
			return "defaulttoolid"
		}
		s := alnumOnly(id)
		if s == "" {
			return "sanitizedtoolid"
		}
		return s
	case IDStrict9:
		if id == "" {
			return "defaultid"
		}
		s := alnumOnly(id)
		switch {
		case len(s) >= strict9Len:
			return s[:strict9Len]
		case s != "":
			return hashHex(s, strict9Len)
		default:
			return hashHex("sanitized", strict9Len)
		}
	}
	return id
}

// ValidID reports whether id already has the form mode requires.
func ValidID(id string, mode IDMode) bool {
	if id == "" {
		return false
	}
	if mode == IDStrict9 && len(id) != strict9Len {
		return false
	}
	for i := 0; i < len(id); i++ {
		if !isAlnum(id[i]) {
			return false
		}
	}
	return true
}

// idMapper assigns each original id a unique sanitised id, first come first
// served, the same original always mapping to the same result: an id's
// result depends only on the ids before it (an Appender keeps a mapper
// across turns).
type idMapper struct {
	mode IDMode
	now  int64
	m    map[string]string
	used map[string]struct{}
	// base, when set, holds the ids mapped before m's (read, never
	// written: an Appender's kept mapper under a turn's messages).
	base *idMapper
	// lastResort is set once an id took the time-stamped last resort,
	// whose result depends on now.
	lastResort bool
}

func (im *idMapper) resolve(id string) string {
	if v, ok := im.m[id]; ok {
		return v
	}
	if im.base != nil {
		if v, ok := im.base.m[id]; ok {
			return v
		}
	}
	v := im.unique(id)
	im.m[id] = v
	im.used[v] = struct{}{}
	return v
}

func (im *idMapper) isUsed(s string) bool {
	if _, ok := im.used[s]; ok {
		return true
	}
	return im.base != nil && im.base.isUsed(s)
}

// merge adds what over mapped above im to im.
func (im *idMapper) merge(over *idMapper) {
	for k, v := range over.m {
		im.m[k] = v
	}
	for k := range over.used {
		im.used[k] = struct{}{}
	}
	im.lastResort = im.lastResort || over.lastResort
}

func (im *idMapper) unique(id string) string {
	if im.mode == IDStrict9 {
		if c := SanitizeID(id, IDStrict9); !im.isUsed(c) {
			return c
		}
		for i := 0; i < 1000; i++ {
			if c := hashHex(id+":"+strconv.Itoa(i), strict9Len); !im.isUsed(c) {
				return c
			}
		}
		im.lastResort = true
		return hashHex(id+":"+strconv.FormatInt(im.now, 10), strict9Len)
	}
	base := SanitizeID(id, im.mode)
	if len(base) > strictMaxLen {
		base = base[:strictMaxLen]
	}
	if !im.isUsed(base) {
		return base
	}
	hash := hashHex(id, 8)
	clipped := base
	if len(clipped) > strictMaxLen-len(hash) {
		clipped = clipped[:strictMaxLen-len(hash)]
	}
	cand := clipped + hash
	if !im.isUsed(cand) {
		return cand
	}
	for i := 2; i < 1000; i++ {
		suffix := "x" + strconv.Itoa(i)
		if c := cand[:min(len(cand), strictMaxLen-len(suffix))] + suffix; !im.isUsed(c) {
			return c
		}
	}
	im.lastResort = true
	ts := "t" + strconv.FormatInt(im.now, 10)
	return cand[:min(len(cand), strictMaxLen-len(ts))] + ts
}

// SanitizeToolCallIDs rewrites every tool-call id of a transcript (calls of
// type toolCall, toolUse and functionCall; results' toolCallId and toolUseId)
// through one mapping, so calls and results stay paired and no two original
// ids share a rewritten one. now (Unix ms) only feeds the last-resort suffix.
// It reports whether any id changed; msgs is not modified.
func SanitizeToolCallIDs(msgs []message.Message, mode IDMode, now int64) ([]message.Message, bool) {
	return sanitizeToolCallIDs(msgs, mode, now, false)
}

func sanitizeToolCallIDs(msgs []message.Message, mode IDMode, now int64, inPlace bool) ([]message.Message, bool) {
	return mapToolCallIDs(msgs, newIDMapper(mode, now, nil), inPlace)
}

// newIDMapper returns an empty mapper over base (nil: none).
func newIDMapper(mode IDMode, now int64, base *idMapper) *idMapper {
	return &idMapper{mode: mode, now: now, m: map[string]string{}, used: map[string]struct{}{}, base: base}
}

// mapToolCallIDs is sanitizeToolCallIDs through im.
func mapToolCallIDs(msgs []message.Message, im *idMapper, inPlace bool) ([]message.Message, bool) {
	rw := rewriter{src: msgs, inPlace: inPlace}
	for i := range msgs {
		m := &msgs[i]
		switch m.Role {
		case message.RoleAssistant:
			var blocks []message.Block
			for j := range m.Content.Blocks {
				b := &m.Content.Blocks[j]
				if !IsToolCall(b) {
					continue
				}
				id, ok := callID(b)
				if !ok || id == "" {
					continue
				}
				nid := im.resolve(id)
				if nid == id {
					continue
				}
				if blocks == nil {
					blocks = copyBlocks(m.Content.Blocks)
				}
				setCallID(&blocks[j], nid)
			}
			if blocks != nil {
				nm := *m
				nm.Content.Blocks = blocks
				rw.replace(nm)
				continue
			}
		case message.RoleToolResult:
			nm := *m
			changed := false
			if m.ToolCallID != "" {
				if nid := im.resolve(m.ToolCallID); nid != m.ToolCallID {
					nm.ToolCallID, changed = nid, true
				}
			}
			if id, ok := m.Extra["toolUseId"].(string); ok && id != "" {
				if nid := im.resolve(id); nid != id {
					nm.Extra, changed = withField(nm.Extra, "toolUseId", nid), true
				}
			}
			if changed {
				rw.replace(nm)
				continue
			}
		}
		rw.keep(i)
	}
	return rw.result()
}
