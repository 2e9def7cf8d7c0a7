package agentprompt

import (
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"syscall"
	"testing"
)

func skillNames(skills []Skill) []string {
	var names []string
	for _, s := range skills {
		names = append(names, s.Name)
	}
	return names
}

// TestLoadSkillsFixtures loads testdata/skills, which holds one skill per
// rule.
func TestLoadSkillsFixtures(t *testing.T) {
	t.Parallel()
	dir := testdata(t, "skills")
	skills, warns := LoadSkills(dir)

	// Sorted by directory name; hidden directories, loose files and
	// directories without SKILL.md are not skills.
	if got, want := skillNames(skills), []string{"bad-metadata", "folded-skill", "manual-only", "valid-skill"}; !slices.Equal(got, want) {
		t.Errorf("skills = %v, want %v", got, want)
	}
	warningsMatch(t, warns, map[string]string{
		"Bad_Name/SKILL.md":         "name may only contain lowercase a-z, 0-9 and hyphens",
		"no-description/SKILL.md":   "description is missing",
		"name-mismatch/SKILL.md":    `name "other-name" does not match its directory "name-mismatch"`,
		"huge-description/SKILL.md": "description is 1119 characters long (limit 1024)",
		"no-frontmatter/SKILL.md":   "no frontmatter",
		// Symbolic links out of the skills directory are refused, for the
		// skill directory itself and for its SKILL.md.
		"skills/escape-dir":     "skill directory refused: path escapes from parent",
		"escape-file/SKILL.md":  "skill skipped: path escapes from parent",
		"bad-metadata/SKILL.md": "metadata ignored: not valid JSON",
	})

	byName := make(map[string]Skill)
	for _, s := range skills {
		byName[s.Name] = s
	}
	if got, want := byName["valid-skill"], (Skill{
		Name:        "valid-skill",
		Description: `Use when the user asks for a valid example; shows <tags> & "quotes".`,
		Path:        filepath.Join(dir, "valid-skill", "SKILL.md"),
		BaseDir:     filepath.Join(dir, "valid-skill"),
	}); got != want {
		t.Errorf("valid-skill:\n got %+v\nwant %+v", got, want)
	}
	folded := byName["folded-skill"]
	if want := "Generate images with Gemini. Use when the user asks for a picture."; folded.Description != want {
		t.Errorf("folded description = %q, want %q", folded.Description, want)
	}
	if folded.PrimaryEnv != "GEMINI_API_KEY" {
		t.Errorf("folded primaryEnv = %q", folded.PrimaryEnv)
	}
	if !byName["manual-only"].DisableModelInvocation {
		t.Error("manual-only: DisableModelInvocation not set")
	}
}

// TestLoadSkillsLaterDirsOverride checks that a later directory's skill
// replaces an earlier one of the same name, in place.
func TestLoadSkillsLaterDirsOverride(t *testing.T) {
	t.Parallel()
	skills, _ := LoadSkills(testdata(t, "skills"), testdata(t, "skills-override"))
	if got, want := skillNames(skills), []string{"bad-metadata", "folded-skill", "manual-only", "valid-skill", "new-skill"}; !slices.Equal(got, want) {
		t.Fatalf("skills = %v, want %v", got, want)
	}
	v := skills[3]
	if v.Path != testdata(t, "skills-override", "valid-skill", "SKILL.md") || !strings.Contains(v.Description, "later directory") {
		t.Errorf("valid-skill not overridden: %+v", v)
	}
	if skills[4].Description != "Only in the later directory." {
		t.Errorf("new-skill description = %q", skills[4].Description)
	}
}

func TestLoadSkillsDirectories(t *testing.T) {
	t.Parallel()
	tmp := t.TempDir()
	writeFiles(t, tmp, map[string]string{"file": "x"})

	skills, warns := LoadSkills(
		"relative/skills",             // not absolute: warned, never resolved against the process's cwd
		filepath.Join(tmp, "missing"), // a directory that does not exist is not an error
		filepath.Join(tmp, "file"),    // a file is
		"",                            // nor is an empty path absolute
	)
	if len(skills) != 0 {
		t.Errorf("skills = %v", skills)
	}
	warningsMatch(t, warns, map[string]string{
		"relative/skills": "not an absolute path",
		"":                "not an absolute path", // the empty path
		"file":            "skills directory unreadable",
	})
	if len(warns) != 3 {
		t.Errorf("warnings = %v, want 3", warns)
	}
	if _, w := LoadSkills(); w != nil {
		t.Errorf("no directories: warnings %v", w)
	}
}

// TestLoadSkillsRules covers the name and description rules one by one, each
// in its own temporary skills directory.
func TestLoadSkillsRules(t *testing.T) {
	t.Parallel()
	name64 := strings.Repeat("a", 64)
	name65 := strings.Repeat("a", 65)
	tests := []struct {
		name     string
		dir      string // the skill's directory name
		skillMD  string
		wantDesc string // the loaded description; "" means not loaded
		wantWarn string // substring of the only warning; "" means none
	}{
		{
			// pi falls back to the directory's name.
			name:     "missing name takes the directory's",
			dir:      "pdf",
			skillMD:  skillMD("description: PDFs."),
			wantDesc: "PDFs.",
		},
		{
			name:     "64-character name",
			dir:      name64,
			skillMD:  skillMD("name: "+name64, "description: ok"),
			wantDesc: "ok",
		},
		{
			name:     "65-character name",
			dir:      name65,
			skillMD:  skillMD("name: "+name65, "description: ok"),
			wantWarn: "name is 65 characters long (limit 64)",
		},
		{
			name:     "leading hyphen",
			dir:      "-pdf",
			skillMD:  skillMD("name: -pdf", "description: ok"),
			wantWarn: "must not start or end with a hyphen",
		},
		{
			name:     "consecutive hyphens",
			dir:      "pdf--tools",
			skillMD:  skillMD("name: pdf--tools", "description: ok"),
			wantWarn: "consecutive hyphens",
		},
		{
			name:     "digits are fine",
			dir:      "k8s-2",
			skillMD:  skillMD("name: k8s-2", "description: ok"),
			wantDesc: "ok",
		},
		{
			name:     "blank description",
			dir:      "blank",
			skillMD:  skillMD("name: blank", "description: '   '"),
			wantWarn: "description is missing",
		},
		{
			name:     "description of exactly 1024 characters",
			dir:      "max",
			skillMD:  skillMD("name: max", "description: "+strings.Repeat("d", 1024)),
			wantDesc: strings.Repeat("d", 1024),
		},
		{
			// Lengths are JavaScript's: an emoji is two UTF-16 code units,
			// so 513 of them are 1026 characters.
			name:     "description counted in UTF-16 code units",
			dir:      "emoji",
			skillMD:  skillMD("name: emoji", "description: "+strings.Repeat("🍌", 513)),
			wantWarn: "description is 1026 characters long (limit 1024)",
		},
		{
			name:     "description is trimmed",
			dir:      "trim",
			skillMD:  skillMD("name: trim", "description: |", "  Two lines", "  of text.", ""),
			wantDesc: "Two lines\nof text.",
		},
		{
			name:     "quoted name",
			dir:      "quoted",
			skillMD:  skillMD(`name: "quoted"`, "description: ok"),
			wantDesc: "ok",
		},
		{
			name:     "broken frontmatter",
			dir:      "broken",
			skillMD:  skillMD("name: broken", `description: "unterminated`),
			wantWarn: "frontmatter: line 3: description: found unexpected end of stream",
		},
		{
			name:     "CRLF file",
			dir:      "crlf",
			skillMD:  "---\r\nname: crlf\r\ndescription: Windows line ends.\r\n---\r\n",
			wantDesc: "Windows line ends.",
		},
		{
			// Metadata as a nested YAML block is accepted but declares no
			// primaryEnv: only the JSON form is read.
			name:     "nested metadata",
			dir:      "nested",
			skillMD:  skillMD("name: nested", "description: ok", "metadata:", "  openclaw:", "    primaryEnv: KEY"),
			wantDesc: "ok",
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			dir := t.TempDir()
			writeFiles(t, dir, map[string]string{filepath.Join(tc.dir, SkillFileName): tc.skillMD})
			skills, warns := LoadSkills(dir)
			switch {
			case tc.wantDesc != "" && (len(skills) != 1 || skills[0].Description != tc.wantDesc || skills[0].Name != tc.dir):
				t.Errorf("skills = %+v, want %q with description %q", skills, tc.dir, tc.wantDesc)
			case tc.wantDesc == "" && len(skills) != 0:
				t.Errorf("skills = %+v, want none", skills)
			}
			switch {
			case tc.wantWarn == "" && len(warns) != 0:
				t.Errorf("warnings = %v, want none", warns)
			case tc.wantWarn != "" && (len(warns) != 1 || !strings.Contains(warns[0].Message, tc.wantWarn)):
				t.Errorf("warnings = %v, want one containing %q", warns, tc.wantWarn)
			}
		})
	}
}

// TestLoadSkillsFileTypes checks SKILL.md entries that are not regular files,
// and links that stay inside the skills directory.
func TestLoadSkillsFileTypes(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	writeFiles(t, dir, map[string]string{
		"real/SKILL.md":            skillMD("name: real", "description: ok"),
		"dir-skill/SKILL.md/inner": "a directory named SKILL.md",
		"shared/other.md":          skillMD("name: linked-file", "description: ok"),
		"linked-file/README.md":    "",
	})
	// A link to a skill directory inside the root loads (under the link's
	// name, which must then be the skill's name).
	if err := os.Symlink("real", filepath.Join(dir, "alias")); err != nil {
		t.Fatal(err)
	}
	// A SKILL.md linking inside the root loads too.
	if err := os.Symlink("../shared/other.md", filepath.Join(dir, "linked-file", SkillFileName)); err != nil {
		t.Fatal(err)
	}
	// A dangling link is ignored.
	if err := os.Symlink("nowhere", filepath.Join(dir, "dangling")); err != nil {
		t.Fatal(err)
	}
	want := map[string]string{
		"dir-skill/SKILL.md": "not a regular file",
		"alias/SKILL.md":     `name "real" does not match its directory "alias"`,
	}
	if runtime.GOOS != "windows" {
		// A FIFO must neither hang the loader nor load.
		if err := os.MkdirAll(filepath.Join(dir, "fifo"), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := syscall.Mkfifo(filepath.Join(dir, "fifo", SkillFileName), 0o644); err != nil {
			t.Fatal(err)
		}
		want["fifo/SKILL.md"] = "not a regular file"
	}
	skills, warns := LoadSkills(dir)
	if got, wantNames := skillNames(skills), []string{"linked-file", "real"}; !slices.Equal(got, wantNames) {
		t.Errorf("skills = %v, want %v", got, wantNames)
	}
	warningsMatch(t, warns, want)
}

func TestSkillsPrompt(t *testing.T) {
	t.Parallel()
	// manual-only is left out; valid-skill's description shows the XML
	// escaping.
	skills, _ := LoadSkills(testdata(t, "skills"))
	checkGolden(t, "skills_prompt.golden", portable(t, SkillsPrompt(skills)))

	if got := SkillsPrompt(nil); got != "" {
		t.Errorf("no skills: %q", got)
	}
	if got := SkillsPrompt([]Skill{{Name: "m", Description: "d", DisableModelInvocation: true}}); got != "" {
		t.Errorf("only hidden skills: %q", got)
	}
}

func TestWarningString(t *testing.T) {
	t.Parallel()
	w := Warning{Path: "/s/x/SKILL.md", Message: "skill skipped: description is missing"}
	if got, want := w.String(), "agentprompt: /s/x/SKILL.md: skill skipped: description is missing"; got != want {
		t.Errorf("String() = %q, want %q", got, want)
	}
}
