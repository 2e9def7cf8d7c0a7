package sessionfile

import (
	"bufio"
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"

	"github.com/lanefleet/lanefleet/message"
)

// Errors Read returns for files it cannot use.
var (
	// ErrEmpty means the file holds no JSON line at all.
	ErrEmpty = errors.New("sessionfile: empty session file")
	// ErrInvalidHeader means the first JSON line is not a session header
	// with a string id.
	ErrInvalidHeader = errors.New("sessionfile: invalid session header")
)

// LineError describes a line Read skipped.
type LineError struct {
	// Line is the 1-based line number.
	Line int
	// Err is why the line was skipped.
	Err error
}

// Error implements error.
func (e *LineError) Error() string { return fmt.Sprintf("sessionfile: line %d: %v", e.Line, e.Err) }

// Unwrap returns the cause.
func (e *LineError) Unwrap() error { return e.Err }

// File is a parsed session file.
type File struct {
	// Header is the first line (Type "session").
	Header message.Entry
	// Entries are the other lines, in file order.
	Entries []message.Entry
	// Skipped lists the lines that were not valid JSON or not a valid
	// entry; they are not in Entries and a Write drops them.
	Skipped []*LineError
	// Migrated is true when Read migrated the file from an older version,
	// so writing it back changes it.
	Migrated bool
}

// maxLine bounds one line (a line may hold inline images).
const maxLine = 256 << 20

// Read parses a session file. Blank lines are ignored; malformed lines are
// skipped and listed in File.Skipped, as pi does. A version 1 or 2 file is
// migrated to version 3 (File.Migrated). It returns ErrEmpty for a file
// without JSON lines, ErrInvalidHeader when the first one is not a session
// header, and read errors of r.
func Read(r io.Reader) (*File, error) {
	f, err := decode(r)
	if err != nil {
		return nil, err
	}
	if f.Migrated = Migrate(f, nil); f.Migrated {
		// Migrated lines are written anew.
		f.Header.Raw = nil
		for i := range f.Entries {
			f.Entries[i].Raw = nil
		}
	}
	return f, nil
}

func decode(r io.Reader) (*File, error) {
	size := 64 << 10
	if l, ok := r.(interface{ Len() int }); ok && l.Len() < size {
		// Small in-memory input: no need for a large buffer.
		size = max(l.Len()+1, 512)
	}
	br := bufio.NewReaderSize(r, size)
	f := &File{}
	haveHeader := false
	var long []byte
	for lineNo := 1; ; lineNo++ {
		line, err := br.ReadSlice('\n')
		if errors.Is(err, bufio.ErrBufferFull) {
			long = append(long[:0], line...)
			for errors.Is(err, bufio.ErrBufferFull) {
				if len(long) > maxLine {
					return nil, fmt.Errorf("sessionfile: line %d longer than %d bytes", lineNo, maxLine)
				}
				line, err = br.ReadSlice('\n')
				long = append(long, line...)
			}
			line = long
		}
		if err != nil && err != io.EOF {
			return nil, fmt.Errorf("sessionfile: read: %w", err)
		}
		if trimmed := bytes.TrimSpace(line); len(trimmed) > 0 {
			e, perr := decodeEntry(trimmed)
			if perr == nil {
				// The line as it was, for Write to give back byte for
				// byte: only its newline is pi's, not the entry's.
				e.Raw = bytes.Clone(bytes.TrimSuffix(line, []byte("\n")))
			}
			if perr != nil {
				f.Skipped = append(f.Skipped, &LineError{Line: lineNo, Err: perr})
			} else if !haveHeader {
				if !e.IsHeader() || e.ID == "" {
					return nil, ErrInvalidHeader
				}
				f.Header, haveHeader = e, true
			} else {
				f.Entries = append(f.Entries, e)
			}
		}
		if err == io.EOF {
			break
		}
	}
	if !haveHeader {
		if len(f.Skipped) > 0 {
			return nil, fmt.Errorf("%w: first line: %w", ErrInvalidHeader, f.Skipped[0])
		}
		return nil, ErrEmpty
	}
	return f, nil
}

func decodeEntry(line []byte) (message.Entry, error) {
	v, err := parseJSON(line)
	if err != nil {
		return message.Entry{}, err
	}
	m, ok := v.(map[string]any)
	if !ok {
		return message.Entry{}, errors.New("not a JSON object")
	}
	return message.EntryFromMap(m)
}

// Write writes f as JSON Lines: the header, then every entry, each line
// ending in "\n". An entry read from a file (Entry.Raw) is written as it
// was read while it still decodes to the same entry, so a file read and
// written unchanged keeps its bytes (key order, escapes, number forms,
// spacing); any other entry is encoded as pi encodes it
// (message.Entry.AppendJSON).
func Write(w io.Writer, f *File) error {
	bw := bufio.NewWriterSize(w, 32<<10)
	var buf []byte
	put := func(e *message.Entry) error {
		if e.RawFaithful() {
			bw.Write(e.Raw)
		} else {
			buf = e.AppendJSON(buf[:0])
			bw.Write(buf)
		}
		return bw.WriteByte('\n')
	}
	if err := put(&f.Header); err != nil {
		return err
	}
	for i := range f.Entries {
		if err := put(&f.Entries[i]); err != nil {
			return err
		}
	}
	if err := bw.Flush(); err != nil {
		return fmt.Errorf("sessionfile: write: %w", err)
	}
	return nil
}

// NewEntryID returns a fresh entry id: 8 random hex digits, as pi writes.
func NewEntryID() string {
	var b [4]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// NewSessionID returns a fresh session id: a random (version 4) UUID, as pi
// writes in a session header.
func NewSessionID() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	h := hex.EncodeToString(b[:])
	return h[:8] + "-" + h[8:12] + "-" + h[12:16] + "-" + h[16:20] + "-" + h[20:]
}

// Migrate brings f to message.SessionVersion in place and reports whether it
// changed anything. Version 1 (no version) gives every entry a fresh id from
// newID (NewEntryID when nil) and the previous entry as parent, and turns a
// compaction's firstKeptEntryIndex (an index into the file's lines, the
// header being 0) into firstKeptEntryId; version 2 renames the message role
// hookMessage to custom. Unknown fields are kept.
func Migrate(f *File, newID func() string) bool {
	if f.Header.Version >= message.SessionVersion {
		return false
	}
	if newID == nil {
		newID = NewEntryID
	}
	if f.Header.Version < 2 {
		used := map[string]bool{}
		var prev *string
		for i := range f.Entries {
			e := &f.Entries[i]
			id := newID()
			for used[id] {
				id = newID()
			}
			used[id] = true
			e.ID = id
			if prev == nil {
				e.ParentID = nil
			} else {
				p := *prev
				e.ParentID = &p
			}
			prev = &e.ID
		}
		for i := range f.Entries {
			e := &f.Entries[i]
			v, ok := e.Fields["firstKeptEntryIndex"]
			if e.Type != message.EntryCompaction || !ok {
				continue
			}
			fields := make(map[string]any, len(e.Fields))
			for k, x := range e.Fields {
				if k != "firstKeptEntryIndex" {
					fields[k] = x
				}
			}
			if idx, ok := v.(int64); ok && idx >= 1 && int(idx) <= len(f.Entries) {
				fields["firstKeptEntryId"] = f.Entries[idx-1].ID
			}
			e.Fields = fields
		}
	}
	for i := range f.Entries {
		if m := f.Entries[i].Message; m != nil && m.Role == "hookMessage" {
			m.Role = "custom"
		}
	}
	f.Header.Version = message.SessionVersion
	return true
}

// ReadEntries is Read for callers that keep a session as one list of lines:
// the header first, then the entries. Malformed lines are left out silently;
// use Read to see them.
func ReadEntries(r io.Reader) ([]message.Entry, error) {
	f, err := Read(r)
	if err != nil {
		return nil, err
	}
	out := make([]message.Entry, 0, len(f.Entries)+1)
	out = append(out, f.Header)
	return append(out, f.Entries...), nil
}

// WriteEntries writes lines (the header first) as a session file. It returns
// ErrInvalidHeader when the first line is not a session header with an id.
func WriteEntries(w io.Writer, lines []message.Entry) error {
	if len(lines) == 0 || !lines[0].IsHeader() || lines[0].ID == "" {
		return ErrInvalidHeader
	}
	return Write(w, &File{Header: lines[0], Entries: lines[1:]})
}
