package authstore

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/lanefleet/lanefleet/authprofile"
	"github.com/lanefleet/lanefleet/internal/natstest"
	"github.com/lanefleet/lanefleet/provider"
)

// BenchmarkPropagation measures how long a cooldown recorded by one worker
// takes to reach another worker's Store (separate connections), from the
// start of Apply to the watcher's delivery. The target is 100 ms.
func BenchmarkPropagation(b *testing.B) {
	bb := setup(b)
	cfg := Config{Auth: authprofile.Config{Fleet: authprofile.FleetDefaults()}}
	a, c := bb.open(b, cfg), bb.open(b, cfg)
	ctx := context.Background()
	const id = "anthropic:default"
	var lat []time.Duration
	for b.Loop() {
		start := time.Now()
		if _, err := a.Apply(ctx, id, failure(provider.ReasonRateLimit, "opus")); err != nil {
			b.Fatal(err)
		}
		key, rev := revisionOf(b, a, id)
		if err := c.waitRevision(ctx, key, rev); err != nil {
			b.Fatal(err)
		}
		lat = append(lat, time.Since(start))
	}
	reportPercentiles(b, lat)
}

func reportPercentiles(b *testing.B, lat []time.Duration) {
	slices.Sort(lat)
	pct := func(p float64) float64 {
		return float64(lat[min(len(lat)-1, int(p*float64(len(lat))))].Microseconds()) / 1000
	}
	b.ReportMetric(pct(0.50), "p50-ms")
	b.ReportMetric(pct(0.99), "p99-ms")
}

// BenchmarkApply measures Apply throughput: one worker updating one
// profile (on a server that fsyncs every write, as the worker's embedded
// server does by default, and on one that does not), and 8 goroutines of
// one worker updating 16 profiles.
func BenchmarkApply(b *testing.B) {
	for _, sync := range []bool{false, true} {
		b.Run(fmt.Sprintf("serial/fsync=%v", sync), func(b *testing.B) {
			s := setup(b, natstest.Options{SyncAlways: sync}).open(b, Config{})
			ctx := context.Background()
			for b.Loop() {
				if _, err := s.Apply(ctx, "anthropic:default", failure(provider.ReasonRateLimit, "")); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
	b.Run("parallel16", func(b *testing.B) {
		s := setup(b).open(b, Config{})
		ctx := context.Background()
		b.SetParallelism(4)
		b.RunParallel(func(pb *testing.PB) {
			i := 0
			for pb.Next() {
				i++
				if _, err := s.Apply(ctx, fmt.Sprintf("anthropic:%d", i%16), failure(provider.ReasonRateLimit, "")); err != nil {
					b.Error(err)
					return
				}
			}
		})
	})
}

// BenchmarkOrder measures what a run does before each attempt: a Snapshot,
// ordering the profiles of one provider (a third of them cooling or
// disabled) and selecting one. The target for 100 profiles is 20 µs.
func BenchmarkOrder(b *testing.B) {
	for _, n := range []int{3, 10, 100} {
		b.Run(fmt.Sprintf("profiles=%d", n), func(b *testing.B) {
			s, creds := withProfiles(b, n)
			cfg := s.Config().Auth
			req := authprofile.OrderRequest{Provider: "anthropic", Model: "opus"}
			for b.Loop() {
				now := time.Now()
				snap := s.Snapshot(creds)
				ids := authprofile.Order(snap, cfg, req, now)
				if sel := authprofile.Select(snap, cfg, ids, "opus", now); sel.ID == "" {
					b.Fatal("nothing selected")
				}
			}
		})
	}
}

// BenchmarkSnapshot measures Snapshot alone: a pointer load, no copying.
func BenchmarkSnapshot(b *testing.B) {
	s, creds := withProfiles(b, 100)
	for b.Loop() {
		if snap := s.Snapshot(creds); len(snap.Usage) == 0 {
			b.Fatal("empty snapshot")
		}
	}
}

// BenchmarkAvailability measures one fallback availability check over 100
// profiles.
func BenchmarkAvailability(b *testing.B) {
	s, creds := withProfiles(b, 100)
	avail := s.Availability(creds)
	for b.Loop() {
		if av := avail("anthropic", "opus"); av.Profiles != 100 {
			b.Fatalf("%+v", av)
		}
	}
}

// withProfiles returns a Store holding states for n api_key profiles: a
// third used, a third rate limited on "opus", a sixth disabled for billing.
func withProfiles(b *testing.B, n int) (*Store, *authprofile.Store) {
	b.Helper()
	s := setup(b).open(b, Config{Auth: authprofile.Config{Fleet: authprofile.FleetDefaults()}})
	creds := apiKeys("anthropic", n)
	ctx := context.Background()
	for i, p := range creds.Profiles {
		ev := authprofile.Event{Kind: authprofile.EventUsed, Provider: "anthropic"}
		switch i % 3 {
		case 1:
			ev = failure(provider.ReasonRateLimit, "opus")
		case 2:
			if i%2 == 0 {
				ev = failure(provider.ReasonBilling, "")
			}
		}
		if _, err := s.Apply(ctx, p.ID, ev); err != nil {
			b.Fatal(err)
		}
	}
	if err := s.MarkGood(ctx, "anthropic", creds.Profiles[0].ID); err != nil {
		b.Fatal(err)
	}
	return s, creds
}
