package tools

import "github.com/lanefleet/lanefleet/tools/internal/toolargs"

// The built-in tools' argument decoders (package toolargs, which the tools
// in tools/webfetch and tools/websearch share).
var (
	stringArg = toolargs.String
	numberArg = toolargs.Number
	intArg    = toolargs.Int
	boolArg   = toolargs.Bool
)
