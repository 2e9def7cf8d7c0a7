package tools

import (
	"strings"
	"testing"
)

// TestReadArgs: a path is required; offset is 1-based (0 and absent mean
// 1, negative is refused); a limit given must be 1 or more.
func TestReadArgs(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name     string
		args     map[string]any
		offset   int64
		limit    int64
		hasLimit bool
		err      string
	}{
		{"path only", map[string]any{"path": "a.txt"}, 1, 0, false, ""},
		{"offset zero is the first line", map[string]any{"path": "a.txt", "offset": 0}, 1, 0, false, ""},
		{"offset and limit", map[string]any{"path": "a.txt", "offset": 5, "limit": 10}, 5, 10, true, ""},
		{"no path", map[string]any{"offset": 2}, 0, 0, false, "path"},
		{"negative offset", map[string]any{"path": "a.txt", "offset": -1}, 0, 0, false, "offset must be a line number of 1 or more, got -1"},
		{"zero limit", map[string]any{"path": "a.txt", "limit": 0}, 0, 0, false, "limit must be 1 or more, got 0"},
		{"limit not a number", map[string]any{"path": "a.txt", "limit": "many"}, 0, 0, false, "limit"},
	} {
		a, err := parseReadArgs(tc.args)
		switch {
		case tc.err != "":
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("%s: error %v, want %q", tc.name, err, tc.err)
			}
		case err != nil || a.path != "a.txt" || a.offset != tc.offset || a.limit != tc.limit || a.hasLimit != tc.hasLimit:
			t.Errorf("%s: %+v, %v; want offset %d limit %d (given %v)", tc.name, a, err, tc.offset, tc.limit, tc.hasLimit)
		}
	}
}

// TestReadPresent: what the model reads for a window, and the details: the
// note after a window cut by lines or bytes says where to go on; a limit
// the caller chose is not a truncation.
func TestReadPresent(t *testing.T) {
	t.Parallel()
	w := &ws{Workspace: Workspace{MaxReadLines: 100, MaxReadBytes: 1000}}
	for _, tc := range []struct {
		name      string
		a         readArgs
		win       window
		text      string
		truncated bool
		by        string
	}{
		{"empty file", readArgs{path: "a", offset: 1}, window{}, "[Empty file]", false, ""},
		{"whole file", readArgs{path: "a", offset: 1}, window{text: "x\ny", lines: 2, total: 2}, "x\ny", false, ""},
		{"cut by lines", readArgs{path: "a", offset: 1}, window{text: "x", lines: 1, total: 5, stop: "lines"},
			"x\n\n[Showing lines 1-1 of 5. Use offset=2 to continue.]", true, "lines"},
		{"caller's limit", readArgs{path: "a", offset: 3, limit: 2, hasLimit: true}, window{text: "c\nd", lines: 2, total: 9, stop: "lines"},
			"c\nd\n\n[5 more lines in file. Use offset=5 to continue.]", false, ""},
		{"cut by bytes", readArgs{path: "a", offset: 1}, window{text: "x", lines: 1, total: 3, stop: "bytes"},
			"x\n\n[Showing lines 1-1 of 3 (1000B limit). Use offset=2 to continue.]", true, "bytes"},
		{"first line too long", readArgs{path: "my file", offset: 4}, window{total: 9, stop: "bytes", firstTooLong: true, firstLen: 5000},
			"[Line 4 is 4.9KB, over the 1000B read limit. Use exec to see part of it, e.g. sed -n '4p' 'my file' | head -c 1000]", true, "bytes"},
	} {
		text, details := w.present(tc.a, "rel/a", tc.win)
		if text != tc.text {
			t.Errorf("%s: text %q, want %q", tc.name, text, tc.text)
		}
		by, _ := details["truncatedBy"].(string)
		if details["truncated"] != tc.truncated || by != tc.by || details["path"] != "rel/a" {
			t.Errorf("%s: details %v, want truncated %v by %q", tc.name, details, tc.truncated, tc.by)
		}
	}
}
