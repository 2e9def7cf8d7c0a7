package natstest

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// waitFor polls cond every 20 ms for up to two minutes (an in-process
// cluster on a busy box can take many seconds to settle, and CI's is
// slower), failing t with what with the last error when it never holds.
// Each try has 5 s: a request that gets no answer (what is waited out
// here) would otherwise use up the wait on one try.
func waitFor(t testing.TB, what string, cond func(ctx context.Context) (bool, error)) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	for {
		tctx, tcancel := context.WithTimeout(ctx, 5*time.Second)
		ok, err := cond(tctx)
		tcancel()
		if ok {
			return
		}
		select {
		case <-ctx.Done():
			t.Fatalf("%s: %v", what, err)
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// WaitLeader waits until the replicated stream s has a leader.
func WaitLeader(t testing.TB, s jetstream.Stream) {
	t.Helper()
	waitFor(t, "stream without a leader", func(ctx context.Context) (bool, error) {
		info, err := s.Info(ctx)
		return err == nil && info.Cluster != nil && info.Cluster.Leader != "", err
	})
}

// WaitWritable waits until a publish to the stream's subjects through js
// gets the stream's answer: a leader is elected before every node routes
// the stream's subjects to it, and a write caught in between gets no
// response. The probe expects a last sequence the stream cannot have, so
// it is refused and stores nothing.
func WaitWritable(t testing.TB, js jetstream.JetStream, s jetstream.Stream) {
	t.Helper()
	subj := strings.TrimSuffix(s.CachedInfo().Config.Subjects[0], ">") + "probe"
	waitFor(t, "the stream never answered a publish", func(ctx context.Context) (bool, error) {
		_, err := js.Publish(ctx, subj, nil, jetstream.WithExpectLastSequence(1<<62))
		var apiErr *jetstream.APIError
		if err == nil {
			t.Fatal("the probe was stored")
		}
		return errors.As(err, &apiErr), err
	})
}

// WaitCurrent waits until every replica of the stream s is current with
// its leader: a read served by a replica (a consumer placed there) then
// sees everything written before.
func WaitCurrent(t testing.TB, s jetstream.Stream) {
	t.Helper()
	waitFor(t, "replicas never caught up", func(ctx context.Context) (bool, error) {
		info, err := s.Info(ctx)
		if err != nil || info.Cluster == nil || info.Cluster.Leader == "" {
			return false, err
		}
		for _, r := range info.Cluster.Replicas {
			if !r.Current || r.Lag != 0 {
				return false, nil
			}
		}
		return true, nil
	})
}

// Settle runs setup (creating streams or buckets on a fresh cluster) up to
// five times, 20 s each: on a busy box the in-process cluster's meta
// group can still change leaders after StartCluster returned, and a
// request caught in that gets no answer, or "no suitable peers for
// placement, peer offline" at once while a peer's first heartbeat is
// late; a try that failed sooner than that waits a second per try before
// the next. It fails t with the last error.
func Settle(t testing.TB, setup func(ctx context.Context) error) {
	t.Helper()
	var err error
	for try := range 5 {
		ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
		err = setup(ctx)
		cancel()
		if err == nil {
			return
		}
		t.Logf("natstest: set-up, try %d: %v", try+1, err)
		select {
		case <-time.After(time.Duration(try+1) * time.Second):
		case <-t.Context().Done():
			t.Fatal(err)
		}
	}
	t.Fatal(err)
}
