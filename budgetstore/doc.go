// Package budgetstore is the JetStream KV adapter of tenant governance
// (policy in package governance): one key per budget in the budgets
// bucket, holding its governance.State, changed only by compare-and-set on
// the key's revision (a lost race is retried on a fresh read, with
// internal/backoff's jittered wait), so any number of workers reserve and
// settle against the same budget exactly.
//
// Files:
//
//	bucket.go  the bucket, its keys, the compare-and-set update; Set, Reset and Get for operators
//	store.go   a worker's Store: the bucket watched into memory (which scopes have a budget,
//	           which are paused), Reserve and a Hold's renewal and Settle
//	audit.go   the audit stream of operators' changes
package budgetstore
