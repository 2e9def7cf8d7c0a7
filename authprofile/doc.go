// Package authprofile decides which stored credential ("auth profile") a run
// uses for a provider and how failures and successes change each profile's
// state: validity, ordering (explicit order, or round robin by credential
// type then least recently used, cooling profiles last, a preferred profile
// first), the cooldown ladder, billing and permanent-auth disables, the
// failure window, expiry clearing and the unavailable-reason inference of the
// reference runtime (runtime spec §17).
//
// The state of one profile is a plain serialisable [State]; the fleet keeps
// each profile's State under its own KV key and changes it only through
// [Rules.Apply], a pure function of (state, event, now), retried under
// compare-and-swap. Credentials ([Profile]) hold their secrets as
// provider.Secret and never enter a State.
//
// With a zero [Fleet] policy every decision matches the reference. The fleet
// improvements (cooldowns per (profile, model), Retry-After as a floor, a
// capped ladder, probing a cooled profile near expiry, no "failed then used"
// in one run) are switched on by [FleetDefaults].
//
// Times in a State are Unix milliseconds, as in the reference's
// auth-profiles.json; every function takes the current time as an argument.
package authprofile
