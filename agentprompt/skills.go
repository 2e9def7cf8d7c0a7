package agentprompt

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/lanefleet/lanefleet/ecmatext"
	"github.com/lanefleet/lanefleet/internal/pathless"
)

// Limits of the Agent Skills specification (agentskills.io), as pi checks
// them. Lengths count UTF-16 code units, as JavaScript's String.length does.
const (
	// MaxSkillNameLen caps a skill's name.
	MaxSkillNameLen = 64
	// MaxSkillDescriptionLen caps a skill's description.
	MaxSkillDescriptionLen = 1024
)

// SkillFileName is the file that makes a directory a skill.
const SkillFileName = "SKILL.md"

// maxSkillFileBytes is how much of a SKILL.md is read: only the frontmatter
// at its start matters here (the model reads the rest with its read tool).
const maxSkillFileBytes = 256 << 10

// Skill is a loaded skill: a directory holding a SKILL.md whose frontmatter
// names and describes it. The model sees the name, description and Path in
// the system prompt and reads the file itself when a task matches.
type Skill struct {
	// Name is the skill's name: lowercase a-z, 0-9 and single hyphens, at
	// most MaxSkillNameLen long, equal to its directory's name.
	Name string
	// Description says when to use the skill; never empty, at most
	// MaxSkillDescriptionLen long.
	Description string
	// Path is the absolute path of the skill's SKILL.md.
	Path string
	// BaseDir is the absolute path of the skill's directory (Path's
	// parent), against which the skill's relative paths resolve.
	BaseDir string
	// DisableModelInvocation hides the skill from the system prompt
	// (frontmatter "disable-model-invocation: true"): it can only be
	// invoked explicitly.
	DisableModelInvocation bool
	// PrimaryEnv is the environment variable that a configured API key
	// fills for this skill (OpenClaw's metadata.openclaw.primaryEnv, from
	// frontmatter metadata written as JSON); empty if none.
	PrimaryEnv string
}

// Warning reports something skipped while loading skills or context files.
// Warnings never fail a run; the caller logs them.
type Warning struct {
	// Path is the file or directory concerned.
	Path string
	// Message says what was wrong and what was done about it.
	Message string
}

// String formats the warning as "agentprompt: path: message".
func (w Warning) String() string { return "agentprompt: " + w.Path + ": " + w.Message }

// LoadSkills loads the skills of each directory in dirs, in order: every
// subdirectory (hidden ones and node_modules excepted) that holds a valid
// SKILL.md is a skill. A skill of a later directory replaces an earlier one
// of the same name, keeping its place in the list; otherwise skills come in
// directory order, then by name.
//
// Each directory must be an absolute path; one that does not exist is
// skipped without a warning. A directory is read through an [os.Root], so a
// skill directory or SKILL.md that is a symbolic link leading out of it is
// refused. Skill directories nested deeper than one level are not searched.
//
// A skill is skipped with a warning when its SKILL.md cannot be read, its
// frontmatter does not parse, its name is invalid or differs from its
// directory's (a missing name defaults to the directory's), or its
// description is missing or too long. Unlike pi, which loads a skill with a
// bad name and only warns, every rule here is enforced.
func LoadSkills(dirs ...string) ([]Skill, []Warning) {
	var (
		skills []Skill
		warns  []Warning
		index  = make(map[string]int)
	)
	for _, dir := range dirs {
		found, w := loadSkillDir(dir)
		warns = append(warns, w...)
		for _, s := range found {
			if i, ok := index[s.Name]; ok {
				skills[i] = s
				continue
			}
			index[s.Name] = len(skills)
			skills = append(skills, s)
		}
	}
	return skills, warns
}

// loadSkillDir loads the skills directly under dir.
func loadSkillDir(dir string) ([]Skill, []Warning) {
	if !filepath.IsAbs(dir) {
		return nil, []Warning{{dir, "skills directory is not an absolute path; skipped"}}
	}
	dir = filepath.Clean(dir)
	root, err := os.OpenRoot(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, []Warning{{dir, fmt.Sprintf("skills directory unreadable: %v", pathless.Err(err))}}
	}
	defer root.Close()
	entries, err := readRootDir(root)
	if err != nil {
		return nil, []Warning{{dir, fmt.Sprintf("skills directory unreadable: %v", pathless.Err(err))}}
	}
	var (
		skills []Skill
		warns  []Warning
	)
	for _, e := range entries {
		name := e.Name()
		if strings.HasPrefix(name, ".") || name == "node_modules" {
			continue
		}
		isDir := e.IsDir()
		if e.Type()&fs.ModeSymlink != 0 {
			fi, err := root.Stat(name)
			if errors.Is(err, fs.ErrNotExist) {
				continue // a dangling link
			}
			if err != nil {
				warns = append(warns, Warning{filepath.Join(dir, name), fmt.Sprintf("skill directory refused: %v", pathless.Err(err))})
				continue
			}
			isDir = fi.IsDir()
		}
		if !isDir {
			continue
		}
		s, w, ok := loadSkill(root, dir, name)
		warns = append(warns, w...)
		if ok {
			skills = append(skills, s)
		}
	}
	return skills, warns
}

// readRootDir lists the root's top directory, sorted by name.
func readRootDir(root *os.Root) ([]fs.DirEntry, error) {
	f, err := root.Open(".")
	if err != nil {
		return nil, err
	}
	defer f.Close()
	entries, err := f.ReadDir(-1)
	slices.SortFunc(entries, func(a, b fs.DirEntry) int { return strings.Compare(a.Name(), b.Name()) })
	return entries, err
}

// loadSkill loads dir/name/SKILL.md. A directory without one is not a skill
// and gives no warning.
func loadSkill(root *os.Root, dir, name string) (Skill, []Warning, bool) {
	path := filepath.Join(dir, name, SkillFileName)
	src, _, err := readRootFile(root, filepath.Join(name, SkillFileName), maxSkillFileBytes, false)
	if errors.Is(err, fs.ErrNotExist) {
		return Skill{}, nil, false
	}
	if err != nil {
		return Skill{}, []Warning{{path, fmt.Sprintf("skill skipped: %v", err)}}, false
	}
	fields, err := parseFrontmatter(src)
	if err != nil {
		return Skill{}, []Warning{{path, fmt.Sprintf("skill skipped: frontmatter: %v", err)}}, false
	}
	s := Skill{
		Name:                   fields["name"],
		Description:            ecmatext.Trim(fields["description"]),
		Path:                   path,
		BaseDir:                filepath.Join(dir, name),
		DisableModelInvocation: isTrue(fields["disable-model-invocation"]),
	}
	if s.Name == "" {
		s.Name = name
	}
	var warns []Warning
	for _, problem := range validateSkill(s.Name, name, s.Description) {
		warns = append(warns, Warning{path, "skill skipped: " + problem})
	}
	if len(warns) > 0 {
		return Skill{}, warns, false
	}
	env, err := primaryEnv(fields["metadata"])
	if err != nil {
		warns = append(warns, Warning{path, fmt.Sprintf("metadata ignored: %v", err)})
	}
	s.PrimaryEnv = env
	return s, warns, true
}

// validateSkill lists what is wrong with a skill's name and description.
func validateSkill(name, dirName, description string) []string {
	var problems []string
	if name != dirName {
		problems = append(problems, fmt.Sprintf("name %q does not match its directory %q", name, dirName))
	}
	if n := ecmatext.Len(name); n > MaxSkillNameLen {
		problems = append(problems, fmt.Sprintf("name is %d characters long (limit %d)", n, MaxSkillNameLen))
	}
	if strings.ContainsFunc(name, func(r rune) bool { return (r < 'a' || r > 'z') && (r < '0' || r > '9') && r != '-' }) {
		problems = append(problems, "name may only contain lowercase a-z, 0-9 and hyphens")
	}
	if strings.HasPrefix(name, "-") || strings.HasSuffix(name, "-") {
		problems = append(problems, "name must not start or end with a hyphen")
	}
	if strings.Contains(name, "--") {
		problems = append(problems, "name must not contain consecutive hyphens")
	}
	if description == "" {
		problems = append(problems, "description is missing")
	} else if n := ecmatext.Len(description); n > MaxSkillDescriptionLen {
		problems = append(problems, fmt.Sprintf("description is %d characters long (limit %d)", n, MaxSkillDescriptionLen))
	}
	return problems
}

// isTrue reports whether a YAML value is the boolean true.
func isTrue(v string) bool { return v == "true" || v == "True" || v == "TRUE" }

// primaryEnv reads metadata.openclaw.primaryEnv (or the legacy manifest keys
// clawdbot and clawdis) from frontmatter metadata written as JSON. Metadata
// that is not a JSON object (a nested YAML block, say) has no primaryEnv.
func primaryEnv(metadata string) (string, error) {
	if !strings.HasPrefix(metadata, "{") {
		return "", nil
	}
	var m map[string]json.RawMessage
	if err := json.Unmarshal([]byte(metadata), &m); err != nil {
		return "", fmt.Errorf("not valid JSON: %v", err)
	}
	for _, key := range []string{"openclaw", "clawdbot", "clawdis"} {
		raw, ok := m[key]
		if !ok {
			continue
		}
		var manifest struct {
			PrimaryEnv string `json:"primaryEnv"`
		}
		if err := json.Unmarshal(raw, &manifest); err != nil {
			return "", fmt.Errorf("%s: %v", key, err)
		}
		return strings.TrimSpace(manifest.PrimaryEnv), nil
	}
	return "", nil
}

// SkillsPrompt returns the system prompt section that lists skills for the
// model, in pi's format: an instruction to read a skill's file when the task
// matches its description, then an <available_skills> block giving each
// skill's name, description and location (XML-escaped), in the order given.
// Skills with DisableModelInvocation are left out; with none left it returns
// "".
func SkillsPrompt(skills []Skill) string {
	var b strings.Builder
	for _, s := range skills {
		if s.DisableModelInvocation {
			continue
		}
		if b.Len() == 0 {
			b.WriteString("The following skills provide specialized instructions for specific tasks.\n" +
				"Use the read tool to load a skill's file when the task matches its description.\n" +
				"Relative paths inside a skill file are resolved from the skill directory (parent of SKILL.md).\n" +
				"\n" +
				"<available_skills>\n")
		}
		b.WriteString("  <skill>\n    <name>")
		xmlEscape(&b, s.Name)
		b.WriteString("</name>\n    <description>")
		xmlEscape(&b, s.Description)
		b.WriteString("</description>\n    <location>")
		xmlEscape(&b, s.Path)
		b.WriteString("</location>\n  </skill>\n")
	}
	if b.Len() == 0 {
		return ""
	}
	b.WriteString("</available_skills>")
	return b.String()
}

// xmlEscape writes s with &, <, >, " and ' escaped, as pi's escapeXml does.
func xmlEscape(b *strings.Builder, s string) {
	last := 0
	for i := 0; i < len(s); i++ {
		var esc string
		switch s[i] {
		case '&':
			esc = "&amp;"
		case '<':
			esc = "&lt;"
		case '>':
			esc = "&gt;"
		case '"':
			esc = "&quot;"
		case '\'':
			esc = "&apos;"
		default:
			continue
		}
		b.WriteString(s[last:i])
		b.WriteString(esc)
		last = i + 1
	}
	b.WriteString(s[last:])
}

// readRootFile reads the regular file rel of root, at most limit bytes of
// it, and returns its text and information. With whole set, a longer file is
// an error; otherwise its first limit bytes are returned. Invalid UTF-8
// becomes U+FFFD, as it would when the reference decodes the file. The open
// does not block on a FIFO.
func readRootFile(root *os.Root, rel string, limit int64, whole bool) (string, fs.FileInfo, error) {
	f, err := root.OpenFile(rel, os.O_RDONLY|oNonblock, 0)
	if err != nil {
		return "", nil, pathless.Err(err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return "", nil, pathless.Err(err)
	}
	if !fi.Mode().IsRegular() {
		return "", nil, fmt.Errorf("not a regular file (%s)", fi.Mode().Type())
	}
	if whole && fi.Size() > limit {
		return "", nil, fmt.Errorf("file is %d bytes (limit %d)", fi.Size(), limit)
	}
	data, err := io.ReadAll(io.LimitReader(f, limit+1))
	if err != nil {
		return "", nil, pathless.Err(err)
	}
	if int64(len(data)) > limit {
		if whole {
			return "", nil, fmt.Errorf("file grew past the limit of %d bytes while read", limit)
		}
		data = data[:limit]
	}
	return strings.ToValidUTF8(string(data), "\uFFFD"), fi, nil
}
