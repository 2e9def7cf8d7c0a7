// Package fallback decides the cross-model fallback of a run (runtime spec
// §18): which provider/model candidates to try in which order, which to skip
// because every auth profile of their provider is cooling, when a cooling
// primary is probed anyway, which errors stop the loop at once (a user abort,
// a context overflow) and how a failed chain is summarised ("All models
// failed (n): …").
//
// The package is pure. Error classification and auth-profile availability
// are injected ([Classifier], [AvailabilityFunc]), the probe throttle is an
// interface ([ProbeThrottle]) and the current time is an argument. [Run]
// is the whole loop over a callback that runs one candidate.
package fallback
