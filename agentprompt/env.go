package agentprompt

import (
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
)

// SkillConfig is the configuration of one skill for an agent (OpenClaw's
// skills.entries.<name>). Env values and APIKey are usually secrets: String
// and GoString print the variable names only.
type SkillConfig struct {
	// Enabled set to false disables the skill: EnabledSkills drops it, so
	// it is neither offered to the model nor given its Env. Nil means
	// enabled.
	Enabled *bool
	// Env holds environment variables for the commands that runs with this
	// skill execute. They only fill in: see Environ.
	Env map[string]string
	// APIKey, when set, fills the skill's PrimaryEnv variable (declared in
	// the skill's metadata) the same way.
	APIKey string
}

// String describes the configuration without its values.
func (c SkillConfig) String() string {
	enabled := "default"
	if c.Enabled != nil {
		enabled = fmt.Sprint(*c.Enabled)
	}
	return fmt.Sprintf("SkillConfig{Enabled: %s, Env: %v, APIKey set: %t}",
		enabled, slices.Sorted(maps.Keys(c.Env)), c.APIKey != "")
}

// GoString is String, so that %#v does not print secrets either.
func (c SkillConfig) GoString() string { return c.String() }

// SkillConfigs maps skill names to their configuration. Skills without an
// entry are enabled and get no environment.
type SkillConfigs map[string]SkillConfig

// Enabled reports whether the skill called name is enabled.
func (c SkillConfigs) Enabled(name string) bool {
	e := c[name].Enabled
	return e == nil || *e
}

// Validate reports every environment variable of the configuration that
// Environ would not set: names that are not portable ([A-Za-z_][A-Za-z0-9_]*),
// names it refuses (see Environ), and empty values. It returns nil when all
// are usable; call it where the configuration is loaded, since Environ
// skips such variables silently.
func (c SkillConfigs) Validate() error {
	var errs []error
	for _, name := range slices.Sorted(maps.Keys(c)) {
		sc := c[name]
		for _, k := range slices.Sorted(maps.Keys(sc.Env)) {
			if err := checkEnv(k, sc.Env[k]); err != nil {
				errs = append(errs, fmt.Errorf("agentprompt: skill %q: env %q: %w", name, k, err))
			}
		}
	}
	return errors.Join(errs...)
}

// EnabledSkills returns the skills that cfg does not disable, in their
// order. The input is not modified.
func EnabledSkills(skills []Skill, cfg SkillConfigs) []Skill {
	out := make([]Skill, 0, len(skills))
	for _, s := range skills {
		if cfg.Enabled(s.Name) {
			out = append(out, s)
		}
	}
	return out
}

// Environ returns the environment ("KEY=value" entries) for the commands a
// run executes: a copy of base with the Env of each enabled skill in skills
// (in skill order, variables by name) and the APIKey of each skill that
// declares a PrimaryEnv added. It neither reads nor changes the process's
// environment: the caller passes base (os.Environ(), a filtered copy, or a
// fixed list).
//
// As in OpenClaw, overrides only fill in: a variable that base (or an
// earlier skill) already sets to a non-empty value keeps it, and an empty
// override is ignored. A variable set to "" in base is replaced in place.
// Besides non-portable names, Environ refuses variables that change how
// programs load or start rather than what they do: PATH, the dynamic
// loader's LD_* and DYLD_*, shell start-up (BASH_ENV, ENV, BASH_FUNC_*,
// SHELLOPTS, BASHOPTS, IFS, PS4) and interpreter start-up (NODE_OPTIONS,
// PYTHONSTARTUP, PERL5OPT, RUBYOPT, GCONV_PATH). [SkillConfigs.Validate]
// reports them.
func Environ(base []string, skills []Skill, cfg SkillConfigs) []string {
	env := slices.Clone(base)
	var pos map[string]int // index of each key's last entry, built on first use
	set := func(k, v string) {
		if checkEnv(k, v) != nil {
			return
		}
		if pos == nil {
			pos = make(map[string]int, len(env))
			for i, kv := range env {
				if key, _, ok := strings.Cut(kv, "="); ok {
					pos[key] = i
				}
			}
		}
		if i, ok := pos[k]; ok {
			if _, cur, _ := strings.Cut(env[i], "="); cur != "" {
				return
			}
			env[i] = k + "=" + v
			return
		}
		pos[k] = len(env)
		env = append(env, k+"="+v)
	}
	for _, s := range skills {
		c, ok := cfg[s.Name]
		if !ok || !cfg.Enabled(s.Name) {
			continue
		}
		for _, k := range slices.Sorted(maps.Keys(c.Env)) {
			set(k, c.Env[k])
		}
		if s.PrimaryEnv != "" && c.APIKey != "" {
			set(s.PrimaryEnv, c.APIKey)
		}
	}
	return env
}

// checkEnv says why Environ would not set k=v, or returns nil.
func checkEnv(k, v string) error {
	switch {
	case v == "":
		return errors.New("empty value")
	case !portableEnvKey(k):
		return errors.New("not a portable variable name")
	case refusedEnvKey(k):
		return errors.New("variable changes how programs start; refused")
	}
	return nil
}

// portableEnvKey reports whether k matches [A-Za-z_][A-Za-z0-9_]*.
func portableEnvKey(k string) bool {
	if k == "" || (k[0] >= '0' && k[0] <= '9') {
		return false
	}
	for i := 0; i < len(k); i++ {
		c := k[i]
		if c != '_' && (c < 'A' || c > 'Z') && (c < 'a' || c > 'z') && (c < '0' || c > '9') {
			return false
		}
	}
	return true
}

// refusedEnvKey reports whether skill configuration may not set k.
func refusedEnvKey(k string) bool {
	k = strings.ToUpper(k)
	switch k {
	case "PATH", "BASH_ENV", "ENV", "SHELLOPTS", "BASHOPTS", "IFS", "PS4",
		"NODE_OPTIONS", "PYTHONSTARTUP", "PERL5OPT", "RUBYOPT", "GCONV_PATH":
		return true
	}
	return strings.HasPrefix(k, "LD_") || strings.HasPrefix(k, "DYLD_") || strings.HasPrefix(k, "BASH_FUNC_")
}
