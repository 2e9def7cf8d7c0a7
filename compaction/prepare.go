package compaction

import (
	"errors"
	"fmt"
	"slices"

	"github.com/lanefleet/lanefleet/message"
	"github.com/lanefleet/lanefleet/sessionfile"
)

// Conditions Prepare and Compact report; callers branch on them with
// errors.Is.
var (
	// ErrAlreadyCompacted: the last entry of the branch is a compaction.
	ErrAlreadyCompacted = errors.New("compaction: already compacted")
	// ErrNothingToCompact: everything since the last compaction fits in
	// what a compaction keeps, so a summary would not shrink the context.
	ErrNothingToCompact = errors.New("compaction: nothing to compact")
	// ErrNoEntryID: an entry the compaction must name has no id (a version
	// 1 session that was not migrated).
	ErrNoEntryID = errors.New("compaction: entry without id")
)

// Preparation is what a compaction will do: which entry is the first one
// kept and which messages are summarised. It is pi's CompactionPreparation.
type Preparation struct {
	// FirstKeptEntryID is the id of the first entry kept verbatim.
	FirstKeptEntryID string
	// LeafID is the id of the last entry: the new compaction's parent.
	LeafID string
	// MessagesToSummarize are the messages not yet summarised (those the
	// previous compaction kept, and everything after it) before the kept
	// part, or before the split turn's start when IsSplitTurn.
	MessagesToSummarize []message.Message
	// TurnPrefixMessages are, for a split turn, the messages from the turn's
	// start up to the first kept entry; they get a summary of their own.
	//
	// Both share their content with the entries given to Prepare: treat
	// them as read-only.
	TurnPrefixMessages []message.Message
	// IsSplitTurn reports that the cut falls inside a turn: the first kept
	// entry is not the user message that started it.
	IsSplitTurn bool
	// TokensBefore estimates the context now (ContextTokens of the branch's
	// context).
	TokensBefore int
	// PreviousSummary is the summary of the previous compaction on the
	// branch, which the new one updates; empty when there is none.
	PreviousSummary string
	// ReadFiles are the files read and not modified, ModifiedFiles those
	// written or edited, by the summarised messages and, cumulatively, the
	// previous compaction; both sorted.
	ReadFiles, ModifiedFiles []string
	// Settings are the settings used, with defaults applied.
	Settings Settings

	path      []message.Entry // the branch, root first
	start     int             // index into path: the first entry considered
	firstKept int             // index into path
	turnStart int             // index into path; -1 unless IsSplitTurn
}

// Prepare decides what a compaction of the current branch of entries (the
// parentId chain ending at the last entry, as sessionfile.Branch finds it)
// keeps and summarises, as pi's prepareCompaction does:
//
//   - only the entries from the previous compaction's first kept entry on
//     are considered (newer pi; pi 0.58 started after the compaction and
//     so lost what it had kept);
//   - walking back from the newest message entry, estimates are summed
//     until they reach s.KeepRecentTokens; the cut is at the first valid
//     cut point at or after that entry (a user, assistant, bashExecution,
//     custom or summary message, a custom_message or a branch_summary, never
//     a toolResult, so kept tool results keep their call), and moves back
//     over settings entries (model or thinking-level changes, labels …)
//     directly before it;
//   - when the cut is not at a user message the turn is split: the
//     messages from the turn's start to the cut are summarised apart.
//
// Two choices differ from pi, both to summarise no less than pi would:
// when the budget is reached only inside the trailing tool results (no cut
// point at or after), the cut is at the last cut point instead of keeping
// everything; and a cut at a user message preceded by settings entries is
// not taken for a split turn.
//
// Prepare returns ErrAlreadyCompacted when the last entry is a compaction,
// ErrNothingToCompact when there is nothing before the cut (or no entries)
// and ErrNoEntryID when the first kept entry or the leaf has no id.
// Header entries in entries are ignored.
func Prepare(entries []message.Entry, s Settings) (*Preparation, error) {
	s = s.withDefaults()
	if err := s.validate(); err != nil {
		return nil, err
	}
	entries = withoutHeaders(entries)
	path := sessionfile.Branch(entries)
	if len(path) == 0 {
		return nil, ErrNothingToCompact
	}
	leaf := &path[len(path)-1]
	if leaf.Type == message.EntryCompaction {
		return nil, ErrAlreadyCompacted
	}
	if leaf.ID == "" {
		return nil, fmt.Errorf("%w: the last entry (%s)", ErrNoEntryID, leaf.Type)
	}
	prev := -1
	for i := len(path) - 1; i >= 0; i-- {
		if path[i].Type == message.EntryCompaction {
			prev = i
			break
		}
	}
	start := prev + 1
	if prev >= 0 {
		// The entries the previous compaction kept are summarised now too
		// (newer pi; v0.58 started after the compaction and lost them).
		first := path[prev].Field("firstKeptEntryId")
		if i := slices.IndexFunc(path[:prev], func(e message.Entry) bool { return e.ID == first && first != "" }); i >= 0 {
			start = i
		}
	}
	cut := findCutPoint(path, start, len(path), s.KeepRecentTokens)

	p := &Preparation{
		LeafID:       leaf.ID,
		IsSplitTurn:  cut.turnStart >= 0,
		TokensBefore: ContextTokens(sessionfile.Messages(entries)),
		Settings:     s,
		path:         path,
		start:        start,
		firstKept:    cut.firstKept,
		turnStart:    cut.turnStart,
	}
	historyEnd := cut.firstKept
	if p.IsSplitTurn {
		historyEnd = cut.turnStart
		p.TurnPrefixMessages = entryMessages(path[cut.turnStart:cut.firstKept])
	}
	p.MessagesToSummarize = entryMessages(path[start:historyEnd])
	if len(p.MessagesToSummarize) == 0 && len(p.TurnPrefixMessages) == 0 {
		return nil, ErrNothingToCompact
	}
	p.FirstKeptEntryID = path[cut.firstKept].ID
	if p.FirstKeptEntryID == "" {
		return nil, fmt.Errorf("%w: the first kept entry (%s)", ErrNoEntryID, path[cut.firstKept].Type)
	}

	files := newFileOps()
	if prev >= 0 {
		c := &path[prev]
		p.PreviousSummary = c.Field("summary")
		if fromHook, _ := c.Fields["fromHook"].(bool); !fromHook {
			files.addDetails(c.Fields["details"])
		}
	}
	files.addMessages(p.MessagesToSummarize)
	files.addMessages(p.TurnPrefixMessages)
	p.ReadFiles, p.ModifiedFiles = files.lists()
	return p, nil
}

func withoutHeaders(entries []message.Entry) []message.Entry {
	if !slices.ContainsFunc(entries, isHeader) {
		return entries
	}
	return slices.DeleteFunc(slices.Clone(entries), isHeader)
}

func isHeader(e message.Entry) bool { return e.IsHeader() }

// cutPoint is where a compaction cuts: path[firstKept:] is kept; for a
// split turn, path[turnStart:firstKept] is the turn's prefix.
type cutPoint struct {
	firstKept int
	turnStart int // -1 unless the turn is split
}

// findCutPoint is pi's findCutPoint over path[start:end].
func findCutPoint(path []message.Entry, start, end, keepTokens int) cutPoint {
	var cuts []int
	for i := start; i < end; i++ {
		if isCutPoint(&path[i]) {
			cuts = append(cuts, i)
		}
	}
	if len(cuts) == 0 {
		return cutPoint{firstKept: start, turnStart: -1}
	}
	cut := cuts[0] // the budget is never reached: keep everything
	acc := 0
	for i := end - 1; i >= start; i-- {
		e := &path[i]
		if e.Type != message.EntryMessage || e.Message == nil {
			continue
		}
		acc += EstimateTokens(*e.Message)
		if acc >= keepTokens {
			j, _ := slices.BinarySearch(cuts, i)
			if j == len(cuts) {
				j-- // only tool results after the last cut point
			}
			cut = cuts[j]
			break
		}
	}
	first := cut
	for first > start {
		prev := path[first-1].Type
		if prev == message.EntryMessage || prev == message.EntryCompaction {
			break
		}
		first--
	}
	for i := cut; i >= start; i-- {
		if isTurnStart(&path[i]) {
			if i >= first {
				break // the kept part starts with the turn
			}
			return cutPoint{firstKept: first, turnStart: i}
		}
	}
	return cutPoint{firstKept: first, turnStart: -1}
}

func isRole(e *message.Entry, r message.Role) bool {
	return e.Type == message.EntryMessage && e.Message != nil && e.Message.Role == r
}

// isCutPoint reports whether the kept part may start at e: anything that
// becomes a message other than a tool result. (pi also cuts at a
// branch_summary without summary, which sessionfile.Messages leaves out.)
func isCutPoint(e *message.Entry) bool {
	switch e.Type {
	case message.EntryCustomMessage:
		return true
	case message.EntryBranchSummary:
		return e.Field("summary") != "" // an empty one gives no message
	case message.EntryMessage:
		if e.Message == nil {
			return false
		}
		switch e.Message.Role {
		case message.RoleUser, message.RoleAssistant, RoleBashExecution, sessionfile.RoleCustom,
			sessionfile.RoleBranchSummary, sessionfile.RoleCompactionSummary:
			return true
		}
	}
	return false
}

// isTurnStart reports whether e starts a turn: a user message, a
// bashExecution, a custom_message or a branch_summary.
func isTurnStart(e *message.Entry) bool {
	switch e.Type {
	case message.EntryCustomMessage:
		return true
	case message.EntryBranchSummary:
		return e.Field("summary") != ""
	}
	return isRole(e, message.RoleUser) || isRole(e, RoleBashExecution)
}

// entryMessages returns the messages entries give in a context, as
// sessionfile.Messages builds them. The messages of "message" entries are
// not copied: they share their content with entries.
func entryMessages(entries []message.Entry) []message.Message {
	out := make([]message.Message, 0, len(entries))
	for _, e := range entries {
		switch e.Type {
		case message.EntryMessage:
			if e.Message != nil {
				out = append(out, *e.Message)
			}
		case message.EntryCustomMessage, message.EntryBranchSummary:
			e.ParentID = nil // a one-entry branch
			out = append(out, sessionfile.Messages([]message.Entry{e})...)
		}
	}
	return out
}

// fileOps collects the files tool calls touched, as pi's FileOperations.
type fileOps struct {
	read, written, edited map[string]bool
}

func newFileOps() *fileOps {
	return &fileOps{read: map[string]bool{}, written: map[string]bool{}, edited: map[string]bool{}}
}

// addDetails adds a previous compaction's details: its read files as read,
// its modified files as edited.
func (f *fileOps) addDetails(v any) {
	d, _ := v.(map[string]any)
	for _, p := range stringList(d["readFiles"]) {
		f.read[p] = true
	}
	for _, p := range stringList(d["modifiedFiles"]) {
		f.edited[p] = true
	}
}

func stringList(v any) []string {
	switch l := v.(type) {
	case []string:
		return l
	case []any:
		out := make([]string, 0, len(l))
		for _, e := range l {
			if s, ok := e.(string); ok {
				out = append(out, s)
			}
		}
		return out
	}
	return nil
}

// addMessages adds the path arguments of read, write and edit tool calls.
func (f *fileOps) addMessages(msgs []message.Message) {
	for i := range msgs {
		if msgs[i].Role != message.RoleAssistant {
			continue
		}
		for _, b := range msgs[i].Content.Blocks {
			if b.Type != message.BlockToolCall {
				continue
			}
			path, _ := b.Arguments["path"].(string)
			if path == "" {
				continue
			}
			switch b.Name {
			case "read":
				f.read[path] = true
			case "write":
				f.written[path] = true
			case "edit":
				f.edited[path] = true
			}
		}
	}
}

// lists returns the files only read and the files modified, sorted.
func (f *fileOps) lists() (readOnly, modified []string) {
	mod := map[string]bool{}
	for p := range f.edited {
		mod[p] = true
	}
	for p := range f.written {
		mod[p] = true
	}
	readOnly, modified = []string{}, []string{}
	for p := range f.read {
		if !mod[p] {
			readOnly = append(readOnly, p)
		}
	}
	for p := range mod {
		modified = append(modified, p)
	}
	slices.Sort(readOnly)
	slices.Sort(modified)
	return readOnly, modified
}
