package authstore

import (
	"maps"

	"github.com/lanefleet/lanefleet/authprofile"
	"github.com/lanefleet/lanefleet/fallback"
)

// Snapshot returns the credentials in creds (profiles, explicit orders)
// combined with the fleet's current usage states and last good profiles, for
// authprofile.Order, Select, Status and Pin. creds' own Usage and LastGood
// are not used: state lives in the bucket. A nil creds has no profiles.
//
// Snapshot does not copy the states: the returned Usage map, and the maps
// inside each State, are shared with the Store and with every other
// snapshot, and must not be modified (clone before changing; record changes
// with Apply). LastGood is a copy, so authprofile.Store.MarkGood on the
// snapshot is harmless (and not persisted: use Store.MarkGood). A snapshot
// does not change afterwards; take a new one to see later changes.
func (s *Store) Snapshot(creds *authprofile.Store) authprofile.Store {
	v := s.cache.view.Load()
	out := authprofile.Store{Version: 1, Usage: v.usage}
	if len(v.good) > 0 {
		out.LastGood = maps.Clone(v.good)
	}
	if creds != nil {
		out.Version, out.Profiles, out.Order = creds.Version, creds.Profiles, creds.Order
	}
	return out
}

// Order returns the ids of creds' profiles to try for req.Provider, best
// first: authprofile.Order on a fresh Snapshot at the current time.
func (s *Store) Order(creds *authprofile.Store, req authprofile.OrderRequest) []string {
	return authprofile.Order(s.Snapshot(creds), s.cfg.Auth, req, s.cfg.Now())
}

// Select picks the first of ids that is usable for model now, or due for a
// probe (claim that with ClaimProbe): authprofile.Select on a fresh
// Snapshot, so failures recorded since ids were ordered are taken into
// account.
func (s *Store) Select(creds *authprofile.Store, ids []string, model string) authprofile.Selection {
	return authprofile.Select(s.Snapshot(creds), s.cfg.Auth, ids, model, s.cfg.Now())
}

// Status reports on prov's profiles for model now: authprofile.Status on a
// fresh Snapshot.
func (s *Store) Status(creds *authprofile.Store, prov, model string) authprofile.ProviderStatus {
	return authprofile.Status(s.Snapshot(creds), s.cfg.Auth, prov, model, s.cfg.Now())
}

// Pin resolves a session's profile pin before a run (authprofile.Pin on a
// fresh Snapshot); its ProfileID is the run's preferred profile.
func (s *Store) Pin(creds *authprofile.Store, req authprofile.SessionRequest) authprofile.Override {
	return authprofile.Pin(s.Snapshot(creds), s.cfg.Auth, req, s.cfg.Now())
}

// Availability returns the model-fallback planner's view of creds'
// providers (fallback.Request.Availability), answered from a fresh Snapshot
// at each call.
func (s *Store) Availability(creds *authprofile.Store) fallback.AvailabilityFunc {
	return func(prov, model string) fallback.Availability {
		st := s.Status(creds, prov, model)
		return fallback.Availability{
			Profiles:      st.Profiles,
			AllCooling:    st.AllCooling,
			Reason:        st.Reason,
			SoonestExpiry: st.SoonestExpiry,
		}
	}
}

// State returns a profile's state as stored (windows that have ended are
// still present until the profile's next update clears them; every
// authprofile decision treats them as ended). ok is false when the bucket
// holds no state for the profile.
func (s *Store) State(profileID string) (st authprofile.State, ok bool) {
	st, ok = s.cache.view.Load().usage[profileID]
	return st.Clone(), ok
}

// LastGood returns the last good profile of prov (exact provider string).
func (s *Store) LastGood(prov string) (profileID string, ok bool) {
	profileID, ok = s.cache.view.Load().good[prov]
	return profileID, ok
}

// Config returns the Store's configuration with defaults applied.
func (s *Store) Config() Config { return s.cfg }
