package failover

import (
	"regexp"
	"strings"

	"github.com/lanefleet/lanefleet/provider"
)

var (
	supportedValuesRe = regexp.MustCompile(`(?i)supported values(?: are)?:\s*([^\n.]*)`)
	quotedItemRe      = regexp.MustCompile(`['"]([^'"]+)['"]`)
	andSplitRe        = regexp.MustCompile(`(?i),|\band\b`)
	nonLetterEdgesRe  = regexp.MustCompile(`^[^a-zA-Z]+|[^a-zA-Z]+$`)
	squashRe          = regexp.MustCompile(`[\s_-]`)
)

// NormalizeThinkingLevel maps a user or provider spelling of a thinking level
// to a level: xhigh/extrahigh (ignoring spaces, "_" and "-") → xhigh; off;
// on/enable/enabled → low; min/minimal → minimal; low/think-hard → low;
// mid/med/medium/think-harder/harder → medium; high/ultra/ultrathink/
// think-hardest/highest/max → high; think → minimal. ok is false for anything
// else.
func NormalizeThinkingLevel(s string) (level provider.ThinkingLevel, ok bool) {
	k := strings.ToLower(strings.TrimSpace(s))
	if k == "" {
		return "", false
	}
	if sq := squashRe.ReplaceAllString(k, ""); sq == "xhigh" || sq == "extrahigh" {
		return provider.ThinkingXHigh, true
	}
	switch k {
	case "off":
		return provider.ThinkingOff, true
	case "on", "enable", "enabled":
		return provider.ThinkingLow, true
	case "min", "minimal":
		return provider.ThinkingMinimal, true
	case "low", "thinkhard", "think-hard", "think_hard":
		return provider.ThinkingLow, true
	case "mid", "med", "medium", "thinkharder", "think-harder", "harder":
		return provider.ThinkingMedium, true
	case "high", "ultra", "ultrathink", "thinkhardest", "highest", "max":
		return provider.ThinkingHigh, true
	case "think":
		return provider.ThinkingMinimal, true
	}
	return "", false
}

// ThinkingFallback picks a lower thinking level from a provider error that
// lists the supported values ("Supported values are: 'low', 'medium'."): the
// first listed value that normalises to a level not in attempted. The list
// runs from "supported values:" or "supported values are:" to the end of the
// line or the first period; quoted items are used when present, else the
// list is split on commas and the word "and". ok is false when the message
// has no list or every listed level was attempted. The caller resets
// attempted whenever a new auth profile becomes active.
func ThinkingFallback(message string, attempted []provider.ThinkingLevel) (level provider.ThinkingLevel, ok bool) {
	m := supportedValuesRe.FindStringSubmatch(message)
	if m == nil {
		return "", false
	}
	list := m[1]
	var items []string
	if q := quotedItemRe.FindAllStringSubmatch(list, -1); len(q) > 0 {
		for _, x := range q {
			items = append(items, x[1])
		}
	} else {
		for _, p := range andSplitRe.Split(list, -1) {
			items = append(items, nonLetterEdgesRe.ReplaceAllString(strings.TrimSpace(p), ""))
		}
	}
	tried := make(map[provider.ThinkingLevel]bool, len(attempted))
	for _, a := range attempted {
		tried[a] = true
	}
	for _, it := range items {
		lv, ok := NormalizeThinkingLevel(it)
		if ok && !tried[lv] {
			return lv, true
		}
	}
	return "", false
}
