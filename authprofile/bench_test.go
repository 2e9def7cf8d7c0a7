package authprofile

import (
	"fmt"
	"testing"
	"time"

	"github.com/lanefleet/lanefleet/provider"
)

// BenchmarkOrder orders and selects over n API-key profiles of one provider,
// a third of them cooling (issue 4 target: ≤ 20 µs for 100 profiles).
func BenchmarkOrder(b *testing.B) {
	now := time.UnixMilli(1_800_000_000_000)
	for _, n := range []int{10, 100} {
		s := Store{Usage: map[string]State{}}
		for i := range n {
			id := fmt.Sprintf("anthropic:p%03d", i)
			s.Profiles = append(s.Profiles, Profile{ID: id, Type: TypeAPIKey, Provider: "anthropic", Key: provider.Secret("sk-" + id)})
			st := State{LastUsed: now.UnixMilli() - int64(i*1000)}
			if i%3 == 0 {
				st.CooldownUntil = now.Add(time.Duration(i) * time.Minute).UnixMilli()
			}
			s.Usage[id] = st
		}
		c := Config{Fleet: FleetDefaults()}
		req := OrderRequest{Provider: "anthropic", Model: "claude-opus-4-6"}
		b.Run(fmt.Sprintf("profiles=%d", n), func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				ids := Order(s, c, req, now)
				if Select(s, c, ids, req.Model, now).ID == "" {
					b.Fatal("nothing selected")
				}
			}
		})
	}
}
