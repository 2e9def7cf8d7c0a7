package governance

import (
	"errors"
	"fmt"
	"strings"
)

// TenantSeparatorDefault ends a session key's tenant prefix by default:
// "acme:support:42" belongs to tenant "acme".
const TenantSeparatorDefault = ":"

// MaxNameLen bounds a tenant's name.
const MaxNameLen = 64

// ErrBadName is returned for a tenant name that is not 1-64 letters,
// digits, '_' or '-'.
var ErrBadName = errors.New("governance: bad tenant name")

// TenantRule derives a session's tenant from its key: the key's prefix up
// to the first Separator. A key without the separator, or whose prefix is
// not a valid tenant name, belongs to no tenant ("").
type TenantRule struct {
	// Separator ends the tenant prefix; "" = TenantSeparatorDefault.
	Separator string
	// Off turns tenants off: every key belongs to no tenant.
	Off bool
}

// Tenant is the tenant of a session key, "" when it has none.
func (r TenantRule) Tenant(key string) string {
	if r.Off {
		return ""
	}
	sep := r.Separator
	if sep == "" {
		sep = TenantSeparatorDefault
	}
	// Bound the scan before anything is allocated: a name is at most
	// MaxNameLen bytes.
	head := key[:min(len(key), MaxNameLen+len(sep))]
	i := strings.Index(head, sep)
	if i <= 0 {
		return ""
	}
	name := key[:i]
	if ValidName(name) != nil {
		return ""
	}
	return name
}

// ValidName reports whether name can be a tenant's (or any budget scope
// name that is not a session key): 1-64 letters, digits, '_' or '-'. It
// returns ErrBadName, wrapped with the name, when it cannot.
func ValidName(name string) error {
	if len(name) == 0 || len(name) > MaxNameLen {
		return fmt.Errorf("%w: %.80q must be 1-%d letters, digits, '_' or '-'", ErrBadName, name, MaxNameLen)
	}
	for i := 0; i < len(name); i++ {
		c := name[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '-') {
			return fmt.Errorf("%w: %.80q must be 1-%d letters, digits, '_' or '-'", ErrBadName, name, MaxNameLen)
		}
	}
	return nil
}
