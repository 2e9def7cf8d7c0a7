package permission

import (
	"fmt"
	"io"
	"strconv"
	"strings"
)

// Format is the shape of a rendered configuration.
type Format string

// The formats.
const (
	// FormatAuthorization is a whole authorization { users = [...] } block.
	FormatAuthorization Format = "authorization"
	// FormatUsers is the user entries alone, to paste into an existing
	// users list (of the authorization block or of an account).
	FormatUsers Format = "users"
	// FormatPermissions is one user's permissions: { ... } map alone.
	FormatPermissions Format = "permissions"
)

// ParseFormat returns the format named s.
func ParseFormat(s string) (Format, error) {
	switch f := Format(s); f {
	case FormatAuthorization, FormatUsers, FormatPermissions:
		return f, nil
	}
	return "", fmt.Errorf("permission: unknown format %q (authorization, users or permissions)", s)
}

// User is one entry of a nats-server users list: a grant and how the user
// authenticates.
type User struct {
	Grant
	// NKey is the user's public nkey (U...); when set the entry
	// authenticates with it instead of a password.
	NKey string
	// PasswordVar names the configuration or environment variable that
	// holds the user's password or its bcrypt hash (nats server passwd);
	// default PasswordVar(User). The password itself never appears in a
	// rendered configuration.
	PasswordVar string
}

// PasswordVar is the default variable holding a user's password:
// LANEFLEET_PASSWORD_<USER>, upper case, '-' as '_'.
func PasswordVar(user string) string {
	return "LANEFLEET_PASSWORD_" + strings.ToUpper(strings.ReplaceAll(user, "-", "_"))
}

// validVar reports whether s can name a configuration variable: letters,
// digits and '_', not starting with a digit.
func validVar(s string) bool {
	if s == "" || len(s) > 128 || (s[0] >= '0' && s[0] <= '9') {
		return false
	}
	for i := range len(s) {
		c := s[i]
		if !(c == '_' || c >= 'A' && c <= 'Z' || c >= 'a' && c <= 'z' || c >= '0' && c <= '9') {
			return false
		}
	}
	return true
}

// validNKey checks the shape of a public user nkey: 'U' and 55 base32
// characters. The server checks the checksum when it loads the file.
func validNKey(s string) bool {
	if len(s) != 56 || s[0] != 'U' {
		return false
	}
	for i := 1; i < len(s); i++ {
		c := s[i]
		if !(c >= 'A' && c <= 'Z' || c >= '2' && c <= '7') {
			return false
		}
	}
	return true
}

// Render writes users as nats-server configuration in format f. Every
// user's grant is validated first; nothing is written when one is bad.
// FormatPermissions takes exactly one user.
func Render(w io.Writer, f Format, users ...User) error {
	if len(users) == 0 {
		return fmt.Errorf("%w: no users", ErrBadGrant)
	}
	if f == FormatPermissions && len(users) != 1 {
		return fmt.Errorf("%w: the permissions format renders one user, not %d", ErrBadGrant, len(users))
	}
	perms := make([]Permissions, len(users))
	seen := map[string]bool{}
	for i, u := range users {
		p, err := u.Permissions()
		if err != nil {
			return err
		}
		perms[i] = p
		if seen[u.User] {
			return fmt.Errorf("%w: user %q twice", ErrBadGrant, u.User)
		}
		seen[u.User] = true
		if u.NKey != "" && !validNKey(u.NKey) {
			return fmt.Errorf("%w: %q is not a public user nkey (U followed by 55 base32 characters)", ErrBadGrant, u.NKey)
		}
		if u.PasswordVar != "" && !validVar(u.PasswordVar) {
			return fmt.Errorf("%w: password variable %q must be letters, digits and '_'", ErrBadGrant, u.PasswordVar)
		}
	}
	b := &builder{}
	switch f {
	case FormatPermissions:
		b.comment(users[0], 0)
		b.permissions(perms[0], 0)
	case FormatUsers:
		for i, u := range users {
			b.user(u, perms[i], 0)
		}
	case FormatAuthorization:
		b.line(0, "authorization {")
		b.line(1, "users = [")
		for i, u := range users {
			b.user(u, perms[i], 2)
		}
		b.line(1, "]")
		b.line(0, "}")
	default:
		return fmt.Errorf("permission: unknown format %q", f)
	}
	_, err := io.WriteString(w, b.String())
	return err
}

type builder struct{ strings.Builder }

func (b *builder) line(indent int, s string) {
	b.WriteString(strings.Repeat("  ", indent))
	b.WriteString(s)
	b.WriteByte('\n')
}

// comment says what the user may do and how it connects. Session keys are
// quoted, so no key can end the comment and inject configuration.
func (b *builder) comment(u User, indent int) {
	var what string
	switch {
	case u.AllSessions:
		what = "every session"
	case len(u.Sessions) > 0:
		var qs []string
		for _, s := range u.Sessions {
			qs = append(qs, strconv.QuoteToASCII(s))
		}
		what = "sessions " + strings.Join(qs, ", ")
	case len(u.Tools) > 0:
		what = "tools " + strings.Join(u.Tools, ", ")
	case len(u.Hooks) > 0:
		what = "hooks " + strings.Join(u.Hooks, ", ")
	}
	head := fmt.Sprintf("# %s: role %s", u.User, u.Role)
	if what != "" {
		head += "; " + what
	}
	b.line(indent, head)
	if u.Role != Admin {
		b.line(indent, fmt.Sprintf("# connects with inbox prefix %s", InboxPrefix(u.User)))
	}
}

func (b *builder) user(u User, p Permissions, indent int) {
	b.comment(u, indent)
	b.line(indent, "{")
	if u.NKey != "" {
		b.line(indent+1, "nkey: "+strconv.Quote(u.NKey))
	} else {
		v := u.PasswordVar
		if v == "" {
			v = PasswordVar(u.User)
		}
		b.line(indent+1, "user: "+strconv.Quote(u.User))
		b.line(indent+1, "password: $"+v)
	}
	b.permissions(p, indent+1)
	b.line(indent, "}")
}

func (b *builder) permissions(p Permissions, indent int) {
	b.line(indent, "permissions: {")
	b.subjects("publish", p.Publish, indent+1)
	b.subjects("subscribe", p.Subscribe, indent+1)
	if r := p.Responses; r != nil {
		if r.Max == 1 && r.Expires == 0 {
			b.line(indent+1, "allow_responses: true")
		} else {
			s := fmt.Sprintf("allow_responses: { max: %d", r.Max)
			if r.Expires != 0 {
				s += ", expires: " + strconv.Quote(r.Expires.String())
			}
			b.line(indent+1, s+" }")
		}
	}
	b.line(indent, "}")
}

// subjects writes an allow list; an empty one denies everything (an
// absent list would allow everything).
func (b *builder) subjects(kind string, subjects []string, indent int) {
	b.line(indent, kind+": {")
	if len(subjects) == 0 {
		b.line(indent+1, `deny: [">"]`)
	} else {
		b.line(indent+1, "allow: [")
		for _, s := range subjects {
			b.line(indent+2, strconv.Quote(s))
		}
		b.line(indent+1, "]")
	}
	b.line(indent, "}")
}
