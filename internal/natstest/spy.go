package natstest

import (
	"testing"

	"github.com/nats-io/nats.go"
)

// spyMark is the subject Spy's count publishes its mark on.
const spyMark = "natstest.spy.mark"

// Spy subscribes, on a connection of its own to url, to subject (a
// wildcard is fine), and returns a function that lists the subjects of
// the messages seen there since its last call, up to a mark it publishes
// on nc: messages nc sent before the call reach the spy before the mark,
// so none is missed and no sleep is needed (a test counting the requests
// a call of its code sent, say $JS.API.STREAM.UPDATE.>).
func Spy(t testing.TB, url, subject string) func(nc *nats.Conn) []string {
	t.Helper()
	spy := Connect(t, url)
	seen := make(chan *nats.Msg, 256)
	for _, subj := range []string{subject, spyMark} {
		if _, err := spy.ChanSubscribe(subj, seen); err != nil {
			t.Fatalf("natstest: spy on %s: %v", subj, err)
		}
	}
	if err := spy.Flush(); err != nil {
		t.Fatalf("natstest: spy: %v", err)
	}
	return func(nc *nats.Conn) []string {
		t.Helper()
		if err := nc.Publish(spyMark, nil); err != nil {
			t.Fatalf("natstest: spy mark: %v", err)
		}
		var subjects []string
		for {
			select {
			case m := <-seen:
				if m.Subject == spyMark {
					return subjects
				}
				subjects = append(subjects, m.Subject)
			case <-t.Context().Done():
				t.Fatal("natstest: the spy's mark never came")
			}
		}
	}
}
