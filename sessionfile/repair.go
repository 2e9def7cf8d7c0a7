package sessionfile

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"
	"unicode/utf8"

	"github.com/lanefleet/lanefleet/ecmatext"
)

// RepairResult is the outcome of Repair. Repair never fails: what went wrong
// is in Reason and Warnings.
type RepairResult struct {
	// Repaired is true when the file was rewritten.
	Repaired bool `json:"repaired"`
	// DroppedLines counts the lines that were not JSON.
	DroppedLines int `json:"droppedLines"`
	// Reason says why nothing was repaired ("missing session file", "empty
	// session file", "invalid session header", "failed to read session
	// file: …", "repair failed: …"); empty otherwise.
	Reason string `json:"reason,omitempty"`
	// BackupPath is the copy of the original file ("<file>.bak-<pid>-<ms>").
	BackupPath string `json:"backupPath,omitempty"`
	// Warnings are the messages the reference logs as warnings.
	Warnings []string `json:"warnings"`
}

// RepairOptions tunes Repair; the zero value is the reference's behaviour.
type RepairOptions struct {
	// Now returns the clock for the backup and temporary file names
	// (time.Now when nil).
	Now func() time.Time
}

// Repair checks a session file on disk and, when some lines are not JSON,
// rewrites it without them: the original is copied to
// "<file>.bak-<pid>-<epochMs>" (same mode), the surviving lines are written
// compactly to a temporary file beside it, which then replaces the file.
// Blank lines are ignored. Nothing is written when the file is missing or
// empty, when its first JSON line is not a session header with an id, or when
// every line is valid.
func Repair(path string, opts RepairOptions) RepairResult {
	res := RepairResult{Warnings: []string{}}
	now := time.Now
	if opts.Now != nil {
		now = opts.Now
	}
	if strings.TrimSpace(path) == "" {
		res.Reason = "missing session file"
		return res
	}
	base := filepath.Base(path)
	orig, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		res.Reason = "missing session file"
		return res
	}
	if err != nil {
		res.Reason = "failed to read session file: " + nodeError(err, path)
		res.Warnings = append(res.Warnings, fmt.Sprintf("session file repair skipped: %s (%s)", res.Reason, base))
		return res
	}
	out, dropped, reason := repairContent(orig)
	res.DroppedLines = dropped
	if reason != "" {
		res.Reason = reason
		if reason == reasonInvalidHeader {
			res.Warnings = append(res.Warnings, fmt.Sprintf("session file repair skipped: %s (%s)", reason, base))
		}
		return res
	}
	if dropped == 0 {
		return res
	}
	info, err := os.Stat(path)
	if err != nil {
		return repairFailed(res, err)
	}
	stamp := fmt.Sprintf("%d-%d", os.Getpid(), now().UnixMilli())
	backup := path + ".bak-" + stamp
	if err := os.WriteFile(backup, orig, info.Mode().Perm()); err != nil {
		return repairFailed(res, err)
	}
	tmp := path + ".repair-" + stamp + ".tmp"
	if err := writeSync(tmp, out, info.Mode().Perm()); err != nil {
		os.Remove(tmp)
		return repairFailed(res, err)
	}
	if err := os.Rename(tmp, path); err != nil {
		os.Remove(tmp)
		return repairFailed(res, err)
	}
	res.Repaired = true
	res.BackupPath = backup
	res.Warnings = append(res.Warnings, fmt.Sprintf("session file repaired: dropped %d malformed line(s) (%s)", dropped, base))
	return res
}

const reasonInvalidHeader = "invalid session header"

// repairFailed reports a failed rewrite; the reference logs no warning for it.
func repairFailed(res RepairResult, err error) RepairResult {
	res.Reason = "repair failed: " + err.Error()
	return res
}

func writeSync(path string, data []byte, mode fs.FileMode) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, mode)
	if err != nil {
		return err
	}
	if _, err := f.Write(data); err != nil {
		f.Close()
		return err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// nodeError words common read errors as Node.js does, since the reference's
// reasons carry them.
func nodeError(err error, path string) string {
	switch {
	case errors.Is(err, syscall.EISDIR):
		return "EISDIR: illegal operation on a directory, read"
	case errors.Is(err, fs.ErrPermission):
		return fmt.Sprintf("EACCES: permission denied, open '%s'", path)
	}
	return err.Error()
}

// RepairContent returns the content of a session file with its non-JSON lines
// removed (surviving lines re-serialised compactly, in key order, one per line
// with a trailing newline) and the number of lines dropped. It returns an
// error wrapping ErrEmpty or ErrInvalidHeader when the content has no JSON
// line or does not start with a session header.
func RepairContent(data []byte) ([]byte, int, error) {
	out, dropped, reason := repairContent(data)
	switch reason {
	case "empty session file":
		return nil, dropped, ErrEmpty
	case reasonInvalidHeader:
		return nil, dropped, ErrInvalidHeader
	}
	return out, dropped, nil
}

func repairContent(data []byte) (out []byte, dropped int, reason string) {
	var buf bytes.Buffer
	parsed := 0
	header := false
	for len(data) > 0 {
		var line []byte
		if i := bytes.IndexByte(data, '\n'); i >= 0 {
			line, data = data[:i], data[i+1:]
		} else {
			line, data = data, nil
		}
		line = bytes.TrimSuffix(line, []byte("\r"))
		if isBlank(line) {
			continue
		}
		start := buf.Len()
		if err := stringify(&buf, line); err != nil {
			buf.Truncate(start)
			dropped++
			continue
		}
		if parsed == 0 {
			header = isHeader(line)
		}
		parsed++
		buf.WriteByte('\n')
	}
	switch {
	case parsed == 0:
		return nil, dropped, "empty session file"
	case !header:
		// Every line is still counted, as the reference does.
		return nil, dropped, reasonInvalidHeader
	}
	return buf.Bytes(), dropped, ""
}

// isBlank reports whether a line is empty after JavaScript's trim.
func isBlank(line []byte) bool {
	for len(line) > 0 {
		r, n := utf8.DecodeRune(line)
		if !ecmatext.IsSpace(r) {
			return false
		}
		line = line[n:]
	}
	return true
}

func isHeader(line []byte) bool {
	var h struct {
		Type any `json:"type"`
		ID   any `json:"id"`
	}
	if json.Unmarshal(line, &h) != nil {
		return false
	}
	id, _ := h.ID.(string)
	return h.Type == "session" && id != ""
}

// stringify writes the JSON value of line as JavaScript's
// JSON.stringify(JSON.parse(line)) would (ecmatext.AppendJSON of the value
// read in key order, numbers as literals). It fails on anything JSON.parse
// rejects.
func stringify(w *bytes.Buffer, line []byte) error {
	p := parser{data: line, ordered: true}
	v, err := p.value(0)
	if err != nil {
		return err
	}
	p.space()
	if p.pos != len(p.data) {
		return errors.New("trailing data after JSON value")
	}
	w.Write(ecmatext.AppendJSON(w.AvailableBuffer(), v))
	return nil
}
