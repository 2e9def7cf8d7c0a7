package openai

// ResponseIDOf is the response id of run of session, for tests that name
// a response nobody created.
func ResponseIDOf(session, run string) string {
	return respID{Session: session, Run: run, Model: "fast", Created: 1}.encode()
}
