package embedded

import (
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/nats-io/nats.go"
)

func writeConf(t *testing.T, text string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "nats.conf")
	if err := os.WriteFile(path, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// TestOptionsFromFile: Config fills in what the file leaves unset, agrees
// with what it sets or is refused, and the fleet's defaults hold for a
// file that says nothing.
func TestOptionsFromFile(t *testing.T) {
	t.Parallel()
	no, yes := false, true
	users := `authorization { users = [ { user: "w", password: "p" } ] }` + "\n"
	for _, c := range []struct {
		name string
		conf string
		cfg  Config
		err  error
		host string
		port int
		dir  string
		sync bool
	}{
		{name: "file says nothing: our defaults", conf: "", cfg: Config{DataDir: "/d"},
			host: "127.0.0.1", port: 4222, dir: "/d", sync: true},
		{name: "file's listen, store and sync win over unset fields",
			conf: "listen: 127.0.0.2:4333\njetstream { store_dir: /s, sync_interval: 10s }\n", cfg: Config{SyncAlways: &yes},
			host: "127.0.0.2", port: 4333, dir: "/s", sync: false},
		{name: "fields fill in what the file leaves unset", conf: "port: 4333\n", cfg: Config{Host: "localhost", DataDir: "/d", SyncAlways: &no},
			host: "localhost", port: 4333, dir: "/d", sync: false},
		{name: "the same value twice is no conflict", conf: "listen: 127.0.0.1:4333\njetstream { store_dir: /d/ }\n",
			cfg: Config{Host: "127.0.0.1", Port: 4333, DataDir: "/d"}, host: "127.0.0.1", port: 4333, dir: "/d", sync: true},
		{name: "host conflict", conf: "host: 127.0.0.2\n", cfg: Config{Host: "127.0.0.1", DataDir: "/d"}, err: ErrConflict},
		{name: "port conflict", conf: "port: 4333\n", cfg: Config{Port: 4334, DataDir: "/d"}, err: ErrConflict},
		{name: "store conflict", conf: "jetstream { store_dir: /s }\n", cfg: Config{DataDir: "/d"}, err: ErrConflict},
		{name: "no store anywhere", conf: "port: 4333\n", err: ErrNoStoreDir},
		{name: "every interface without users", conf: "listen: 0.0.0.0:4333\n", cfg: Config{DataDir: "/d"}, err: ErrInsecureListen},
		{name: "every interface with a no_auth_user", conf: "listen: 0.0.0.0:4333\nno_auth_user: w\n" + users, cfg: Config{DataDir: "/d"}, err: ErrInsecureListen},
		{name: "every interface with users", conf: "listen: 0.0.0.0:4333\n" + users, cfg: Config{DataDir: "/d"},
			host: "0.0.0.0", port: 4333, dir: "/d", sync: true},
		{name: "every interface, insecure on purpose", conf: "", cfg: Config{Host: "::", DataDir: "/d", InsecureListen: true},
			host: "::", port: 4222, dir: "/d", sync: true},
		{name: "a bad file", conf: "port: [\n", cfg: Config{DataDir: "/d"}, err: errAny},
	} {
		c.cfg.ConfigFile = writeConf(t, c.conf)
		opts, err := Options(c.cfg)
		if c.err != nil {
			if err == nil || (c.err != errAny && !errors.Is(err, c.err)) {
				t.Errorf("%s: %v, want %v", c.name, err, c.err)
			}
			continue
		}
		if err != nil {
			t.Errorf("%s: %v", c.name, err)
			continue
		}
		if opts.Host != c.host || opts.Port != c.port || opts.StoreDir != c.dir || opts.SyncAlways != c.sync || !opts.JetStream {
			t.Errorf("%s: host %q port %d dir %q sync %v jetstream %v", c.name, opts.Host, opts.Port, opts.StoreDir, opts.SyncAlways, opts.JetStream)
		}
	}
}

var errAny = errors.New("any error")

// TestMonitorListener: the monitoring listener of a configuration file has
// no authentication, so a file's http line without a host listens on
// loopback (nats-server alone would take every interface), and a
// non-loopback one is refused unless InsecureListen, users or not.
func TestMonitorListener(t *testing.T) {
	t.Parallel()
	users := `authorization { users = [ { user: "w", password: "p" } ] }` + "\n"
	for _, c := range []struct {
		name, conf string
		insecure   bool
		host       string // the monitoring host; "" = refused
	}{
		{"a port alone listens on loopback", "http: 8222\n" + users, false, "127.0.0.1"},
		{"http_port alone listens on loopback", "http_port: 8222\n", false, "127.0.0.1"},
		{"https alone listens on loopback", "https: 8222\n", false, "127.0.0.1"},
		{"loopback as given", "http: \"127.0.0.1:8222\"\n", false, "127.0.0.1"},
		{"localhost as given", "http: \"localhost:8222\"\n", false, "localhost"},
		{"every interface is refused", "http: \"0.0.0.0:8222\"\n" + users, false, ""},
		{"a LAN address is refused", "http: \"192.0.2.1:8222\"\n" + users, false, ""},
		{"every interface, insecure on purpose", "http: \"0.0.0.0:8222\"\n", true, "0.0.0.0"},
	} {
		opts, err := Options(Config{ConfigFile: writeConf(t, c.conf), DataDir: "/d", InsecureListen: c.insecure})
		switch {
		case c.host == "" && !errors.Is(err, ErrInsecureListen):
			t.Errorf("%s: %v, want ErrInsecureListen", c.name, err)
		case c.host != "" && err != nil:
			t.Errorf("%s: %v", c.name, err)
		case c.host != "" && opts.HTTPHost != c.host:
			t.Errorf("%s: monitoring host %q, want %q", c.name, opts.HTTPHost, c.host)
		}
	}
}

// TestOptionsWithoutFile: without a file, a non-loopback host needs
// InsecureListen, and the other defaults are the fleet's.
func TestOptionsWithoutFile(t *testing.T) {
	t.Parallel()
	if _, err := Options(Config{Host: "0.0.0.0", DataDir: "/d"}); !errors.Is(err, ErrInsecureListen) {
		t.Fatalf("0.0.0.0 without auth: %v", err)
	}
	if _, err := Options(Config{Host: "192.0.2.1", DataDir: "/d"}); !errors.Is(err, ErrInsecureListen) {
		t.Fatalf("a LAN address without auth: %v", err)
	}
	if _, err := Options(Config{}); !errors.Is(err, ErrNoStoreDir) {
		t.Fatalf("no data dir: %v", err)
	}
	opts, err := Options(Config{DataDir: "/d"})
	if err != nil {
		t.Fatal(err)
	}
	if opts.Host != "127.0.0.1" || opts.Port != -1 || !opts.SyncAlways || opts.MaxPayload != DefaultMaxPayload ||
		opts.JetStreamMaxStore != DefaultMaxStore || opts.JetStreamMaxMemory != DefaultMaxMemory || !opts.NoLog {
		t.Fatalf("defaults: %+v", opts)
	}
}

// TestConnectURL: a server listening on every interface is reached on the
// loopback address, with its scheme.
func TestConnectURL(t *testing.T) {
	t.Parallel()
	opts, err := Options(Config{Host: "0.0.0.0", DataDir: t.TempDir(), InsecureListen: true, SyncAlways: new(bool)})
	if err != nil {
		t.Fatal(err)
	}
	s, err := StartOptions(opts)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { s.Shutdown(); s.WaitForShutdown() }()
	u := ConnectURL(s)
	nc, err := nats.Connect(u)
	if err != nil {
		t.Fatalf("%s: %v", u, err)
	}
	nc.Close()
	if want := "nats://127.0.0.1:"; len(u) <= len(want) || u[:len(want)] != want {
		t.Fatalf("connect URL %s", u)
	}
}
