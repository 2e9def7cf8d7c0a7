// Package schedule holds the pure rules of schedules: when a schedule
// fires and what each due time becomes. It imports no NATS; package
// schedstore stores schedules and fires them.
//
//   - cron.go: five-field cron expressions in an IANA time zone, with
//     their daylight-saving rules (Cron, ParseCron).
//   - spec.go: a schedule's timing: cron, @every or @at (Spec, Timer).
//   - plan.go: the overlap and catch-up policies, and Plan, which turns
//     the due times since the last one handled into decisions (fired,
//     skipped, missed).
//   - record.go: the stored schedule, its bounded decoder, its history,
//     and the deterministic ids of its firings.
package schedule
