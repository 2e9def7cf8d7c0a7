package gateway

import (
	"testing"

	"github.com/lanefleet/lanefleet/gateway/auth"
	"github.com/lanefleet/lanefleet/governance"
)

// TestCallerTenants: a caller reads the budgets of the tenants whose whole
// prefix its token names, under the fleet's separator; with another
// separator, "acme:" names no tenant (acme's sessions are "acme/…", which
// the caller does not reach).
func TestCallerTenants(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name     string
		prefixes []string
		rule     governance.TenantRule
		want     []string
	}{
		{"default separator", []string{"acme:", "globex:support:"}, governance.TenantRule{}, []string{"acme"}},
		{"other separator, default-looking prefix", []string{"acme:"}, governance.TenantRule{Separator: "/"}, nil},
		{"other separator", []string{"acme/", "acme"}, governance.TenantRule{Separator: "/"}, []string{"acme"}},
		{"tenants off", []string{"acme:"}, governance.TenantRule{Off: true}, nil},
	} {
		t.Run(c.name, func(t *testing.T) {
			got := callerTenants(&auth.Principal{Prefixes: c.prefixes}, c.rule)
			var names []string
			for _, sc := range got {
				names = append(names, sc.Name)
			}
			if len(names) != len(c.want) || (len(names) > 0 && names[0] != c.want[0]) {
				t.Fatalf("tenants %q, want %q", names, c.want)
			}
		})
	}
}
