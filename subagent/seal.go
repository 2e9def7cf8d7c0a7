package subagent

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"hash"
	"math"

	"github.com/lanefleet/lanefleet/events"
)

// Seals. A spawn's lineage and a completion are facts only the fleet may
// state: a sender who could publish a completion onto its own session's
// lane would otherwise hand the model words framed as a sub-agent's
// result, add any cost, and, by taking the completion's message id first,
// have the stream drop the real one; one who could name a parent in a
// message to a child's lane before the spawn would have the child adopt
// it and deliver what the sender asked for. So the worker that makes
// either seals it with the fleet's key (an HMAC-SHA256 over every field
// the receiving lane acts on, and the lane it is addressed to), which
// only workers can read (kvstore.Lanes.SealKey), and a lane acts on
// neither without a valid seal. The completion's message id is keyed
// too, so knowing a spawn's nonce (a reader can see a child's state)
// does not give it away.

// KeyBytes is the length of a fleet's seal key.
const KeyBytes = 32

// sealer writes length-prefixed fields into an HMAC, so no two field
// lists hash alike.
type sealer struct{ h hash.Hash }

func newSealer(key []byte, kind string) *sealer {
	s := &sealer{h: hmac.New(sha256.New, key)}
	s.str("lanefleet-" + kind + "-v1")
	return s
}

func (s *sealer) str(v string) {
	var n [8]byte
	binary.BigEndian.PutUint64(n[:], uint64(len(v)))
	s.h.Write(n[:])
	s.h.Write([]byte(v))
}

func (s *sealer) u64(v uint64) {
	var n [8]byte
	binary.BigEndian.PutUint64(n[:], v)
	s.h.Write(n[:])
}

func (s *sealer) usage(u *events.UsageMeta) {
	if u == nil {
		s.u64(0)
		return
	}
	s.u64(1)
	for _, v := range []int64{u.Input, u.Output, u.CacheRead, u.CacheWrite, u.Total} {
		s.u64(uint64(v))
	}
	if u.Cost == nil {
		s.u64(0)
		return
	}
	s.u64(1)
	for _, v := range []float64{u.Cost.Input, u.Cost.Output, u.Cost.CacheRead, u.Cost.CacheWrite, u.Cost.Total} {
		s.u64(math.Float64bits(v))
	}
}

func (s *sealer) sum() string { return hex.EncodeToString(s.h.Sum(nil)) }

// SealSpawn returns the seal of the lineage p a spawn message to session
// child carries (its ancestors included).
func SealSpawn(key []byte, child string, p *events.Parent) string {
	s := newSealer(key, "spawn")
	for _, v := range []string{child, p.Session, p.Run, p.Label, p.Nonce} {
		s.str(v)
	}
	if len(p.Ancestors) > 0 {
		// Only when there are any: a spawn by a session nobody spawned
		// seals as it did before ancestors were sealed.
		s.str("ancestors")
		s.u64(uint64(len(p.Ancestors)))
		for _, a := range p.Ancestors {
			s.str(a)
		}
	}
	return s.sum()
}

// SpawnSealed reports whether p, in a message on session child's lane,
// carries the fleet's seal.
func SpawnSealed(key []byte, child string, p *events.Parent) bool {
	return p != nil && len(key) > 0 && hmac.Equal([]byte(p.Seal), []byte(SealSpawn(key, child, p)))
}

// seal returns the seal of completion in addressed to session parent.
func seal(key []byte, parent string, in *events.Inbound) string {
	r := in.Subagent
	s := newSealer(key, "completion")
	for _, v := range []string{parent, in.ID, in.Text, in.Mode, r.Session, r.Run, r.Label, r.Status} {
		s.str(v)
	}
	s.usage(r.Usage)
	return s.sum()
}

// CompletionSealed reports whether completion in, on session parent's
// lane, carries the fleet's seal.
func CompletionSealed(key []byte, parent string, in *events.Inbound) bool {
	return in != nil && in.Subagent != nil && len(key) > 0 &&
		hmac.Equal([]byte(in.Subagent.Seal), []byte(seal(key, parent, in)))
}
