package main

import (
	"bytes"
	"strings"
	"testing"
)

// TestHTTPRefused: worker --http refuses, before it starts anything, a
// non-loopback address without a token file, and a worker with a NATS
// identity (whose worker role may not send to sessions).
func TestHTTPRefused(t *testing.T) {
	t.Parallel()
	cases := []struct {
		args []string
		want string
	}{
		{[]string{"--http", "0.0.0.0:8080"}, "not a loopback address"},
		{[]string{"--http", ":8080"}, "not a loopback address"},
		{[]string{"--http", "127.0.0.1:8080", "--nats-user", "worker"}, "a user of its own"},
		{[]string{"--http", "127.0.0.1:8080", "--server-config", "nats.conf"}, "a user of its own"},
	}
	for _, c := range cases {
		var out, errb bytes.Buffer
		err := run(append(c.args, "--data-dir", t.TempDir()), strings.NewReader(""), &out, &errb)
		if err == nil || !strings.Contains(err.Error(), c.want) || exitCode(err) != exitUsage {
			t.Errorf("%v: %v (exit %d), want %q and exit 2", c.args, err, exitCode(err), c.want)
		}
	}
}
