// Package authstore keeps the fleet's auth-profile state in a JetStream KV
// bucket, so that a cooldown one worker records is seen by every worker.
//
// The decisions are package authprofile's; this package stores their
// results. The bucket ("auth") holds
//
//	p.<token>     one profile's authprofile.State as JSON
//	good.<token>  the last good profile id of one provider, as a JSON string
//	oauth.<token> one OAuth profile's tokens, the fleet's copy (oauth.go:
//	              LoadOAuth and SwapOAuth, for anthropic.OAuth, whose
//	              record it is)
//
// where <token> is events.KeyToken of the profile id or provider name
// (profile ids such as "anthropic:default" contain ':', which KV keys
// forbid). Credentials come from an auth-profiles.json file and the
// environment ([LoadCredentials]) and are combined with the bucket's
// states only in memory ([Store.Snapshot]); the one exception is an
// Anthropic OAuth profile's tokens, which rotate at each refresh and so
// are fleet state: seeded from the file, then kept under oauth.<token>.
//
// Every [Store] watches the bucket and keeps all states in memory, so
// ordering and availability checks never wait on the network. A change goes
// through [Store.Apply]: the event is applied to the latest state with
// authprofile.Config.Apply and written with compare-and-swap on the key's
// revision, retried on a fresh value when another worker wrote first. Expired
// windows are cleared (authprofile.ClearExpired) before each event, so a
// failure after a cooldown ended starts the ladder again; readers treat
// ended windows as ended without rewriting them.
//
// A run loop uses a Store like this (creds from LoadCredentials, loaded once):
//
//	ids := auth.Order(creds, authprofile.OrderRequest{Provider: prov, Model: model, Preferred: pin})
//	sel := auth.Select(creds, ids, model)
//	if sel.Probe {
//		won, err := auth.ClaimProbe(ctx, sel.ID, prov, model) // one worker per probe
//		...
//	}
//	p, _ := creds.Profile(sel.ID) // p.Key.Reveal() goes into the request
//	// failure (never for timeouts): record it, then rotate to the next candidate
//	auth.Apply(ctx, sel.ID, authprofile.Event{Kind: authprofile.EventFailure, Provider: prov,
//		Model: model, Reason: reason, RetryAfter: retryAfter, RunID: runID})
//	ids = slices.DeleteFunc(ids, func(id string) bool { return id == sel.ID })
//	sel = auth.Select(creds, ids, model)
//	// success
//	auth.Apply(ctx, sel.ID, authprofile.Event{Kind: authprofile.EventUsed, Provider: prov, Model: model, RunID: runID})
//	auth.MarkGood(ctx, prov, sel.ID)
//
// and gives the model-fallback planner auth.Availability(creds).
package authstore
