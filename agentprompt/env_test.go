package agentprompt

import (
	"fmt"
	"slices"
	"strings"
	"testing"
)

func ptr[T any](v T) *T { return &v }

func TestEnviron(t *testing.T) {
	t.Parallel()
	gh := Skill{Name: "github"}
	img := Skill{Name: "images", PrimaryEnv: "GEMINI_API_KEY"}
	off := Skill{Name: "off"}
	tests := []struct {
		name   string
		base   []string
		skills []Skill
		cfg    SkillConfigs
		want   []string
	}{
		{
			name: "no skills: a copy of base",
			base: []string{"HOME=/home/u", "PATH=/bin"},
			want: []string{"HOME=/home/u", "PATH=/bin"},
		},
		{
			name: "nil base and nothing to add stays nil (an empty environment)",
		},
		{
			name:   "overrides are added in skill order, variables by name",
			base:   []string{"HOME=/home/u"},
			skills: []Skill{img, gh},
			cfg: SkillConfigs{
				"github": {Env: map[string]string{"GH_TOKEN": "t", "GH_HOST": "github.com"}},
				"images": {Env: map[string]string{"IMG_DIR": "/tmp"}},
			},
			want: []string{"HOME=/home/u", "IMG_DIR=/tmp", "GH_HOST=github.com", "GH_TOKEN=t"},
		},
		{
			// As in OpenClaw: an override never replaces a value the
			// environment already has.
			name:   "only fills in",
			base:   []string{"GH_TOKEN=from-base"},
			skills: []Skill{gh},
			cfg:    SkillConfigs{"github": {Env: map[string]string{"GH_TOKEN": "from-skill"}}},
			want:   []string{"GH_TOKEN=from-base"},
		},
		{
			name:   "an empty base value is replaced in place",
			base:   []string{"A=1", "GH_TOKEN=", "B=2"},
			skills: []Skill{gh},
			cfg:    SkillConfigs{"github": {Env: map[string]string{"GH_TOKEN": "t"}}},
			want:   []string{"A=1", "GH_TOKEN=t", "B=2"},
		},
		{
			// Duplicate entries: the last one is what exec'd programs see.
			name:   "duplicates in base: the last entry counts",
			base:   []string{"GH_TOKEN=old", "GH_TOKEN="},
			skills: []Skill{gh},
			cfg:    SkillConfigs{"github": {Env: map[string]string{"GH_TOKEN": "t"}}},
			want:   []string{"GH_TOKEN=old", "GH_TOKEN=t"},
		},
		{
			name:   "an earlier skill's override wins over a later one's",
			skills: []Skill{gh, img},
			cfg: SkillConfigs{
				"github": {Env: map[string]string{"SHARED": "github"}},
				"images": {Env: map[string]string{"SHARED": "images"}},
			},
			want: []string{"SHARED=github"},
		},
		{
			name:   "the API key fills the skill's primaryEnv",
			skills: []Skill{img, gh},
			cfg: SkillConfigs{
				"images": {APIKey: "k"},
				"github": {APIKey: "ignored: github declares no primaryEnv"},
			},
			want: []string{"GEMINI_API_KEY=k"},
		},
		{
			name:   "an explicit Env entry comes before the API key",
			skills: []Skill{img},
			cfg:    SkillConfigs{"images": {APIKey: "k", Env: map[string]string{"GEMINI_API_KEY": "env"}}},
			want:   []string{"GEMINI_API_KEY=env"},
		},
		{
			name:   "disabled skills give nothing",
			skills: []Skill{off},
			cfg:    SkillConfigs{"off": {Enabled: ptr(false), Env: map[string]string{"X": "1"}}},
		},
		{
			name:   "explicitly enabled",
			skills: []Skill{off},
			cfg:    SkillConfigs{"off": {Enabled: ptr(true), Env: map[string]string{"X": "1"}}},
			want:   []string{"X=1"},
		},
		{
			name:   "skills without configuration give nothing",
			skills: []Skill{gh},
			cfg:    SkillConfigs{"other": {Env: map[string]string{"X": "1"}}},
		},
		{
			name:   "empty values, bad names and start-up variables are skipped",
			skills: []Skill{gh},
			cfg: SkillConfigs{"github": {Env: map[string]string{
				"EMPTY": "", "1BAD": "x", "BAD-NAME": "x", "A=B": "x", "": "x",
				"PATH": "/evil", "LD_PRELOAD": "/evil.so", "ld_library_path": "/x", "DYLD_INSERT_LIBRARIES": "x",
				"NODE_OPTIONS": "--require /evil.js", "BASH_ENV": "/evil", "BASH_FUNC_ls%%": "x",
				"OK_1": "fine",
			}}},
			want: []string{"OK_1=fine"},
		},
		{
			name:   "entries without = in base are kept",
			base:   []string{"WEIRD", "=C:=C:\\"},
			skills: []Skill{gh},
			cfg:    SkillConfigs{"github": {Env: map[string]string{"WEIRD": "set"}}},
			want:   []string{"WEIRD", "=C:=C:\\", "WEIRD=set"},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			base := slices.Clone(tc.base)
			got := Environ(base, tc.skills, tc.cfg)
			if !slices.Equal(got, tc.want) {
				t.Errorf("Environ =\n %q\nwant\n %q", got, tc.want)
			}
			if !slices.Equal(base, tc.base) {
				t.Errorf("base modified: %q", base)
			}
		})
	}
}

// TestEnvironDoesNotAlias checks that the result never shares base's array.
func TestEnvironDoesNotAlias(t *testing.T) {
	t.Parallel()
	base := make([]string, 1, 10)
	base[0] = "A="
	got := Environ(base, []Skill{{Name: "s"}}, SkillConfigs{"s": {Env: map[string]string{"A": "1", "B": "2"}}})
	got[0] = "changed"
	if base[0] != "A=" {
		t.Errorf("base[0] = %q", base[0])
	}
	if base[:2][1] != "" {
		t.Errorf("base's spare capacity written: %q", base[:2][1])
	}
}

func TestEnabledSkills(t *testing.T) {
	t.Parallel()
	skills := []Skill{{Name: "a"}, {Name: "b"}, {Name: "c"}}
	got := EnabledSkills(skills, SkillConfigs{"b": {Enabled: ptr(false)}, "c": {Enabled: ptr(true)}})
	if names := skillNames(got); !slices.Equal(names, []string{"a", "c"}) {
		t.Errorf("EnabledSkills = %v", names)
	}
	if names := skillNames(EnabledSkills(skills, nil)); !slices.Equal(names, []string{"a", "b", "c"}) {
		t.Errorf("nil config = %v", names)
	}
	if len(skills) != 3 || skills[1].Name != "b" {
		t.Errorf("input modified: %v", skills)
	}
}

func TestSkillConfigsValidate(t *testing.T) {
	t.Parallel()
	if err := (SkillConfigs{"a": {Env: map[string]string{"OK": "1"}}}).Validate(); err != nil {
		t.Errorf("valid config: %v", err)
	}
	err := SkillConfigs{
		"b": {Env: map[string]string{"LD_PRELOAD": "x", "OK": "1"}},
		"a": {Env: map[string]string{"BAD-NAME": "x", "EMPTY": ""}},
	}.Validate()
	if err == nil {
		t.Fatal("no error")
	}
	want := `agentprompt: skill "a": env "BAD-NAME": not a portable variable name` + "\n" +
		`agentprompt: skill "a": env "EMPTY": empty value` + "\n" +
		`agentprompt: skill "b": env "LD_PRELOAD": variable changes how programs start; refused`
	if err.Error() != want {
		t.Errorf("Validate() =\n%v\nwant\n%s", err, want)
	}
}

// TestSkillConfigRedacts checks that printing a configuration never shows
// secret values.
func TestSkillConfigRedacts(t *testing.T) {
	t.Parallel()
	c := SkillConfig{Enabled: ptr(true), Env: map[string]string{"TOKEN": "s3cret", "A": "s3cret"}, APIKey: "s3cret"}
	for _, format := range []string{"%v", "%+v", "%#v", "%s"} {
		got := fmt.Sprintf(format, c)
		if strings.Contains(got, "s3cret") {
			t.Errorf("%s prints the secret: %s", format, got)
		}
		if !strings.Contains(got, "[A TOKEN]") {
			t.Errorf("%s does not name the variables: %s", format, got)
		}
	}
	if got := fmt.Sprint(SkillConfigs{"x": c}); strings.Contains(got, "s3cret") {
		t.Errorf("map prints the secret: %s", got)
	}
}
