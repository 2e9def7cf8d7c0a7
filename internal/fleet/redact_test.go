package fleet

import "testing"

// TestRedactURL: passwords and tokens never reach a logged URL; user
// names and hosts stay.
func TestRedactURL(t *testing.T) {
	t.Parallel()
	for _, c := range []struct{ in, want string }{
		{"nats://127.0.0.1:4222", "nats://127.0.0.1:4222"},
		{"nats://worker:s3cret@10.0.0.1:4222", "nats://worker:xxxxx@10.0.0.1:4222"},
		{"nats://tok3n@10.0.0.1:4222", "nats://xxxxx@10.0.0.1:4222"},
		{"nats://a:p1@h1:4222, nats://a:p2@h2:4222", "nats://a:xxxxx@h1:4222,nats://a:xxxxx@h2:4222"},
		{"nats://a:p%zz@h1:4222", "<unparsable URL with credentials>"},
	} {
		if got := RedactURL(c.in); got != c.want {
			t.Errorf("RedactURL(%q) = %q, want %q", c.in, got, c.want)
		}
	}
}
