package sessionfile

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/lanefleet/lanefleet/internal/conformance"
)

func TestConformance(t *testing.T) {
	t.Parallel()
	conformance.Run(t, "session-file-repair", func(t *testing.T, c conformance.Case) {
		in := conformance.Decode(t, c.Input).(map[string]any)
		conformance.Keys(t, "input", in, "sessionFile", "fileContent")
		want := conformance.Decode(t, c.Expected).(map[string]any)
		dir := t.TempDir()
		path, _ := in["sessionFile"].(string)
		content, hasContent := in["fileContent"].(string)
		switch path {
		case "<dir>/session.jsonl":
			path = filepath.Join(dir, "session.jsonl")
			if hasContent {
				if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
					t.Fatal(err)
				}
			}
		case "<a directory>":
			path = filepath.Join(dir, "sessions")
			if err := os.Mkdir(path, 0o700); err != nil {
				t.Fatal(err)
			}
		}
		res := Repair(path, RepairOptions{})

		got := map[string]any{
			"repaired":     res.Repaired,
			"droppedLines": res.DroppedLines,
			"warnings":     res.Warnings,
		}
		if res.Reason != "" {
			got["reason"] = res.Reason
		}
		var after any
		if data, err := os.ReadFile(path); err == nil {
			after = string(data)
		}
		got["fileContentAfter"] = after
		backups, _ := filepath.Glob(path + ".bak-*")
		got["backupCreated"] = len(backups) > 0
		if len(backups) > 0 && (len(backups) != 1 || backups[0] != res.BackupPath) {
			t.Errorf("backups %v, result says %q", backups, res.BackupPath)
		}
		if pattern, ok := want["backupNamePattern"].(string); ok {
			re := regexp.QuoteMeta(pattern)
			re = strings.ReplaceAll(re, regexp.QuoteMeta("<sessionFile>"), regexp.QuoteMeta(path))
			re = strings.ReplaceAll(re, regexp.QuoteMeta("<pid>"), `\d+`)
			re = strings.ReplaceAll(re, regexp.QuoteMeta("<epochMs>"), `\d+`)
			if !regexp.MustCompile("^" + re + "$").MatchString(res.BackupPath) {
				t.Errorf("backup %q does not match %q", res.BackupPath, pattern)
			}
			got["backupNamePattern"] = pattern
		}
		if _, ok := want["backupEqualsOriginal"]; ok {
			data, err := os.ReadFile(res.BackupPath)
			got["backupEqualsOriginal"] = err == nil && string(data) == content
		}
		if ws, ok := want["warnings"].([]any); ok {
			for i, w := range ws {
				ws[i] = strings.ReplaceAll(w.(string), "<basename>", filepath.Base(path))
			}
		}
		conformance.Check(t, got, want)
	})
}
