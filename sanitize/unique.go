package sanitize

import (
	"strconv"

	"github.com/lanefleet/lanefleet/message"
)

func uniqueCallIDs(msgs []message.Message, mode IDMode, inPlace bool) []message.Message {
	seen := make(map[string]bool, len(msgs)/2)
	var used map[string]bool
	var mine []string // every id in the transcript, built on first need
	rw := rewriter{src: msgs, inPlace: inPlace}
	// renamed maps old id → new id for the results after the current
	// assistant message.
	var renamed map[string]string
	for i := range msgs {
		m := &msgs[i]
		switch m.Role {
		case message.RoleAssistant:
			renamed = nil
			var blocks []message.Block
			mine = mine[:0]
			for j := range m.Content.Blocks {
				b := &m.Content.Blocks[j]
				if !IsToolCall(b) {
					continue
				}
				id, ok := callID(b)
				if !ok || id == "" {
					continue
				}
				if !seen[id] {
					mine = append(mine, id)
					continue
				}
				if used == nil {
					used = allIDs(msgs)
				}
				nid := freshID(id, mode, used)
				used[nid] = true
				if blocks == nil {
					blocks = copyBlocks(m.Content.Blocks)
				}
				setCallID(&blocks[j], nid)
				if renamed == nil {
					renamed = map[string]string{}
				}
				if _, ok := renamed[id]; !ok {
					renamed[id] = nid
				}
			}
			for _, id := range mine {
				seen[id] = true
			}
			if blocks != nil {
				nm := *m
				nm.Content.Blocks = blocks
				rw.replace(nm)
				continue
			}
		case message.RoleToolResult:
			if nid, ok := renamed[resultID(m)]; ok {
				delete(renamed, resultID(m))
				nm := *m
				if nm.ToolCallID != "" {
					nm.ToolCallID = nid
				}
				if _, ok := nm.Extra["toolUseId"].(string); ok {
					nm.Extra = withField(nm.Extra, "toolUseId", nid)
				}
				rw.replace(nm)
				continue
			}
		default:
			renamed = nil
		}
		rw.keep(i)
	}
	out, _ := rw.result()
	return out
}

// allIDs returns every call and result id of msgs.
func allIDs(msgs []message.Message) map[string]bool {
	ids := map[string]bool{}
	for i := range msgs {
		m := &msgs[i]
		switch m.Role {
		case message.RoleAssistant:
			for j := range m.Content.Blocks {
				if b := &m.Content.Blocks[j]; IsToolCall(b) {
					if id, ok := callID(b); ok {
						ids[id] = true
					}
				}
			}
		case message.RoleToolResult:
			ids[resultID(m)] = true
		}
	}
	return ids
}

// freshID derives an unused id from id in the form mode requires.
func freshID(id string, mode IDMode, used map[string]bool) string {
	for n := 2; ; n++ {
		seed := id + ":" + strconv.Itoa(n)
		var c string
		switch mode {
		case IDStrict9:
			c = hashHex(seed, strict9Len)
		case IDStrict:
			base := SanitizeID(id, IDStrict)
			c = base[:min(len(base), strictMaxLen-8)] + hashHex(seed, 8)
		default:
			c = id + "_" + strconv.Itoa(n)
		}
		if !used[c] {
			return c
		}
	}
}
