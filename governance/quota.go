package governance

import (
	"fmt"
	"slices"
	"time"
)

// MaxQuotaTurns bounds a quota's turns at once (the holds one record keeps).
const MaxQuotaTurns = 4096

// Quota is a tenant's share of the fleet: Turns is how many of its turns
// may run at once across every worker (0 = no quota).
type Quota struct {
	Turns int `json:"turns,omitempty"`
}

// Validate reports what is wrong with q.
func (q Quota) Validate() error {
	if q.Turns < 0 || q.Turns > MaxQuotaTurns {
		return fmt.Errorf("%w: turns at once %d (0 to %d, 0 = no quota)", ErrBadLimits, q.Turns, MaxQuotaTurns)
	}
	return nil
}

// TurnHold is one running turn counted against a quota, held by its
// worker until the turn ends; it stops counting at Expires (unix ms)
// unless its worker renews it, so a dead worker's turns are released.
type TurnHold struct {
	ID      string `json:"id"`
	Worker  string `json:"worker"`
	Expires int64  `json:"expires"`
}

// QuotaState is a tenant's quota and the turns holding it.
type QuotaState struct {
	Quota Quota      `json:"quota"`
	Holds []TurnHold `json:"holds,omitempty"`
}

// Roll drops the holds expired at now (never changing s's slice in place).
func (s *QuotaState) Roll(now time.Time) {
	ms := now.UnixMilli()
	if slices.ContainsFunc(s.Holds, func(h TurnHold) bool { return h.Expires <= ms }) {
		s.Holds = slices.DeleteFunc(slices.Clone(s.Holds), func(h TurnHold) bool { return h.Expires <= ms })
	}
}

// Running is how many turns hold the quota at now.
func (s QuotaState) Running(now time.Time) int {
	s.Roll(now)
	return len(s.Holds)
}

// Full reports whether no more turns may start at now.
func (s QuotaState) Full(now time.Time) bool {
	return s.Quota.Turns > 0 && s.Running(now) >= s.Quota.Turns
}

// Take adds h when the quota has room at now, and reports whether it did.
// A hold with h's ID already held is renewed.
func (s *QuotaState) Take(h TurnHold, now time.Time) bool {
	s.Roll(now)
	if s.Renew(h.ID, h.Expires) {
		return true
	}
	if s.Quota.Turns > 0 && len(s.Holds) >= s.Quota.Turns || len(s.Holds) >= MaxQuotaTurns {
		return false
	}
	s.Holds = append(slices.Clip(s.Holds), h)
	return true
}

// Renew moves hold id's expiry; false when s holds no such hold.
func (s *QuotaState) Renew(id string, expires int64) bool {
	i := slices.IndexFunc(s.Holds, func(h TurnHold) bool { return h.ID == id })
	if i < 0 {
		return false
	}
	s.Holds = slices.Clone(s.Holds)
	s.Holds[i].Expires = expires
	return true
}

// Drop removes hold id.
func (s *QuotaState) Drop(id string) {
	s.Holds = slices.DeleteFunc(slices.Clone(s.Holds), func(h TurnHold) bool { return h.ID == id })
}
