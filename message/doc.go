// Package message is the conversation model shared by every part of Lanefleet:
// the three roles of a pi/OpenClaw transcript (user, assistant, toolResult),
// their content blocks (text, thinking, image, toolCall), usage and stop
// reasons, and the entries of a pi session file.
//
// Field names are exactly those of the pi session JSONL format (version 3), so
// a message decoded from a pi or OpenClaw session file and encoded again is the
// same JSON object. Fields this package does not know are kept in Extra maps and
// survive a decode/encode round trip through JSON and msgpack alike.
//
// The package is pure: it imports no NATS and no provider code.
package message
