// Package events is Lanefleet's wire schema: the subjects of the fleet, the
// reversible encoding of session keys into subject tokens, the inbound message
// a client publishes to a lane, the events a run publishes, and their codec
// (msgpack by default, JSON when the Content-Type header or the body says so).
//
// Everything here is validated at the edge: Decode functions return a
// *DecodeError that says what was wrong, never a panic. Every msgpack decode
// of the module (inbound messages, events, KV records) goes through
// UnmarshalMsgpack, which walks the payload first (CheckMsgpack): declared
// lengths must fit in the bytes that follow and nesting stays within
// MaxDepth, so a hostile header can neither make the decoder allocate what it
// declares nor overflow the stack. JSON needs no walk: encoding/json limits
// nesting itself and allocates only as it reads. The package is pure: it
// imports no NATS and nothing of the lane runtime.
package events
