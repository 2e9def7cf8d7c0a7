package sessionindex

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/lanefleet/lanefleet/events"
	"github.com/lanefleet/lanefleet/internal/directget"
)

// Entry is one session's entry.
type Entry struct {
	// Seq is its stream sequence: its place in the listing (a later
	// entry is a later activity).
	Seq   uint64
	Key   string
	Token string
	At    time.Time // when it was written
	Record
}

// Query asks Newest for a page.
type Query struct {
	// Before lists the entries below this sequence (a page's Next); 0
	// from the newest.
	Before uint64
	// Filter is a subject filter (Filter); "" every entry.
	Filter string
	// Limit is how many entries the page holds at most (at least 1).
	Limit int
	// Keep, when set, keeps only the entries it accepts (a scope the
	// filter does not say exactly, a query); then at most MaxScan
	// sequences are read (firstWindow when not set), and a page that
	// did not fill within them is Partial.
	Keep    func(Entry) bool
	MaxScan int
}

// Page is what Newest found.
type Page struct {
	Entries []Entry // newest first
	// Next continues below the page (Query.Before); 0 when nothing older
	// is left.
	Next uint64
	// Partial reports a page cut short by MaxScan: Next goes on from
	// where it stopped.
	Partial bool
	// Read counts the entries read; Malformed those skipped as not an
	// entry of ours (logged).
	Read, Malformed int
	// Indexed is how many entries the whole index held when the page was
	// read (its stream's state, read for the page anyway): an admin's
	// total at no further cost.
	Indexed int
}

// Reads' sizes.
const (
	// firstWindow is the fewest sequences a read looks at below its
	// cursor; each further window doubles.
	firstWindow = 64
	// batchMax is the most messages one direct get request returns.
	batchMax = 1024
	// clientFilterMax is the largest window read whole and filtered here
	// rather than by the server.
	clientFilterMax = 4096
)

// subjectPrefix is what the subject of every entry filter (Filter's: the
// whole index or one group) matches begins with: "" for every entry.
func subjectPrefix(filter string) string {
	group, ok := strings.CutSuffix(strings.TrimPrefix(filter, Prefix), ".*")
	if filter == "" || !ok || group == "*" {
		return ""
	}
	return Prefix + group + "."
}

// Newest returns the newest entries below q.Before, newest first. It reads
// windows of the stream backwards from the cursor, each forwards in
// batched direct gets that the server filters by q.Filter and that skip
// the entries a newer one of the same session replaced: a page costs the
// entries it reads, about q.Limit when the filter says what is kept.
func (x *Index) Newest(ctx context.Context, q Query) (Page, error) {
	var p Page
	if q.Limit < 1 {
		q.Limit = 1
	}
	if q.MaxScan < 1 {
		q.MaxScan = firstWindow // else a page would read nothing and its Next go nowhere
	}
	info, err := x.stream.Info(ctx)
	if err != nil {
		return p, fmt.Errorf("sessionindex: read: %w", err)
	}
	p.Indexed = int(info.State.Msgs)
	first, hi := info.State.FirstSeq, info.State.LastSeq+1
	if q.Before > 0 && q.Before < hi {
		hi = q.Before
	}
	if info.State.Msgs == 0 {
		return p, nil
	}
	window := uint64(max(firstWindow, 2*q.Limit))
	scanned, left := uint64(0), false
	for hi > first && len(p.Entries) < q.Limit {
		w := window
		if q.Keep != nil {
			if scanned >= uint64(q.MaxScan) {
				p.Partial, p.Next = true, hi
				return p, nil
			}
			w = min(w, uint64(q.MaxScan)-scanned)
		}
		lo := first
		if hi-first > w {
			lo = hi - w
		}
		// A small window is read whole and filtered here: the server
		// counts what a filter matches from the window on before every
		// filtered batch (its subject index, each matching session), so
		// a tenant of 100,000 sessions cost 0.2 s a page that way.
		// Here, the entries of other groups are skipped by their
		// subject, before they are decoded.
		filter, prefix := q.Filter, ""
		if hi-lo <= clientFilterMax {
			filter, prefix = "", subjectPrefix(q.Filter)
		}
		got, err := x.readRange(ctx, lo, hi, filter, prefix, &p)
		if err != nil {
			return p, err
		}
		scanned += hi - lo
		for i := len(got) - 1; i >= 0; i-- {
			if len(p.Entries) == q.Limit {
				left = true // older entries of the window are not looked at
				break
			}
			if q.Keep == nil || q.Keep(got[i]) {
				p.Entries = append(p.Entries, got[i])
			}
		}
		hi = lo
		window *= 2
	}
	if len(p.Entries) == q.Limit && (hi > first || left) {
		p.Next = p.Entries[len(p.Entries)-1].Seq
	}
	return p, nil
}

// readRange reads the entries with sequences in [lo, hi) that match
// filter (the server's) and whose subject begins with prefix, in stream
// order.
func (x *Index) readRange(ctx context.Context, lo, hi uint64, filter, prefix string, p *Page) ([]Entry, error) {
	var out []Entry
	for seq := lo; seq < hi; {
		batch := int(min(hi-seq, batchMax))
		rep, err := x.batch(ctx, seq, batch, filter)
		if err != nil {
			return nil, err
		}
		msgs := rep.Msgs
		if len(msgs) == 0 {
			return out, nil
		}
		for _, m := range msgs {
			if m.Seq >= hi {
				return out, nil
			}
			p.Read++
			if !strings.HasPrefix(m.Subject, prefix) {
				continue
			}
			e, err := decode(m)
			if err != nil {
				p.Malformed++
				x.log.Warn().Err(err).Uint64("seq", m.Seq).Msg("sessionindex: an entry that is not one of ours is skipped")
				continue
			}
			out = append(out, e)
		}
		if rep.Pending == 0 {
			return out, nil // the end of the stream (of filter's entries)
		}
		// Else the batch was full, or the server cut it short at its
		// bytes' limit: the rest follows the last message read.
		seq = msgs[len(msgs)-1].Seq + 1
	}
	return out, nil
}

// batch asks the server for up to n messages from seq on that match
// filter ("" any): a Direct Get batch.
func (x *Index) batch(ctx context.Context, seq uint64, n int, filter string) (directget.Reply, error) {
	req := directget.Request{Seq: seq, Batch: n, NextFor: filter}
	if filter == Prefix+"*.*" {
		req.NextFor = ""
	}
	rep, err := directget.Get(ctx, x.nc, x.api, req, n)
	if err != nil {
		return rep, fmt.Errorf("sessionindex: read: %w", err)
	}
	return rep, nil
}

// errMalformed is what decode says of a message that is no entry of ours.
var errMalformed = errors.New("sessionindex: malformed entry")

// decode reads a stored message as an entry: its subject names a session
// in its own group, its data is a record of at most maxRecordBytes whose
// run, if any, is a sequence.
func decode(m directget.Msg) (Entry, error) {
	rest, ok := strings.CutPrefix(m.Subject, Prefix)
	group, tok, ok2 := strings.Cut(rest, ".")
	if !ok || !ok2 {
		return Entry{}, fmt.Errorf("%w: subject %.80q", errMalformed, m.Subject)
	}
	key, err := events.TokenKey(tok)
	if err != nil || Group(key) != group {
		return Entry{}, fmt.Errorf("%w: subject %.80q", errMalformed, m.Subject)
	}
	var rec Record
	if len(m.Data) > maxRecordBytes {
		return Entry{}, fmt.Errorf("%w: %d bytes", errMalformed, len(m.Data))
	}
	if err := json.Unmarshal(m.Data, &rec); err != nil {
		return Entry{}, fmt.Errorf("%w: %v", errMalformed, err)
	}
	if rec.Run != "" {
		if _, err := strconv.ParseUint(rec.Run, 10, 64); err != nil {
			return Entry{}, fmt.Errorf("%w: run %.40q", errMalformed, rec.Run)
		}
	}
	return Entry{Seq: m.Seq, Key: key, Token: tok, At: m.Time, Record: rec}, nil
}

// Lookup returns the entries of the sessions keys names (those it has),
// newest first: a scope of single keys reads them, not the index.
func (x *Index) Lookup(ctx context.Context, keys []string) ([]Entry, error) {
	var out []Entry
	for _, key := range keys {
		subj, err := Subject(key)
		if err != nil {
			continue
		}
		raw, err := x.stream.GetLastMsgForSubject(ctx, subj)
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("sessionindex: lookup: %w", err)
		}
		e, err := decode(directget.Msg{Seq: raw.Sequence, Subject: raw.Subject, Time: raw.Time, Data: raw.Data})
		if err != nil {
			x.log.Warn().Err(err).Uint64("seq", raw.Sequence).Msg("sessionindex: an entry that is not one of ours is skipped")
			continue
		}
		out = append(out, e)
	}
	sortNewest(out)
	return out, nil
}

// sortNewest orders entries newest first.
func sortNewest(es []Entry) {
	slices.SortFunc(es, func(a, b Entry) int { return cmp.Compare(b.Seq, a.Seq) })
}
