// Package events is Lanefleet's wire schema: the subjects of the fleet, the
// reversible encoding of session keys into subject tokens, the inbound message
// a client publishes to a lane, the events a run publishes, and their codec
// (msgpack by default, JSON when the Content-Type header or the body says so).
//
// Everything here is validated at the edge: Decode functions return a
// *DecodeError that says what was wrong, never a panic. The package is pure: it
// imports no NATS.
package events
