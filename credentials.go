package lanefleet

import (
	"errors"
	"fmt"
	"os"
	"strings"

	"github.com/nats-io/nats.go"
)

// Credentials say how a connection authenticates and secures itself, the way
// the nats CLI takes them (flags --creds, --nkey, --user, --password,
// --tlscert, --tlskey, --tlsca, --inbox-prefix and the NATS_* variables).
// Its String method never shows a secret.
type Credentials struct {
	Creds       string // a credentials file (JWT and nkey seed): NATS_CREDS
	NKey        string // an nkey seed file: NATS_NKEY
	User        string // NATS_USER; without a password, a token
	Password    string // NATS_PASSWORD
	TLSCert     string // client certificate file: NATS_CERT
	TLSKey      string // its key file: NATS_KEY
	TLSCA       string // CA certificates that sign the server's: NATS_CA
	InboxPrefix string // reply subjects' prefix, e.g. _INBOX_alice, so no other user can read the replies: NATS_INBOX_PREFIX (Connect's default with a User and Password: _INBOX_<User>)
}

// CredentialsFromEnv reads NATS_CREDS, NATS_NKEY, NATS_USER, NATS_PASSWORD,
// NATS_CERT, NATS_KEY, NATS_CA and NATS_INBOX_PREFIX through getenv
// (os.Getenv when nil).
func CredentialsFromEnv(getenv func(string) string) Credentials {
	if getenv == nil {
		getenv = os.Getenv
	}
	return Credentials{Creds: getenv("NATS_CREDS"), NKey: getenv("NATS_NKEY"), User: getenv("NATS_USER"),
		Password: getenv("NATS_PASSWORD"), TLSCert: getenv("NATS_CERT"), TLSKey: getenv("NATS_KEY"),
		TLSCA: getenv("NATS_CA"), InboxPrefix: getenv("NATS_INBOX_PREFIX")}
}

// Or returns c with every field that is empty taken from d: flags over the
// environment.
func (c Credentials) Or(d Credentials) Credentials {
	pick := func(a, b string) string {
		if a != "" {
			return a
		}
		return b
	}
	return Credentials{Creds: pick(c.Creds, d.Creds), NKey: pick(c.NKey, d.NKey), User: pick(c.User, d.User),
		Password: pick(c.Password, d.Password), TLSCert: pick(c.TLSCert, d.TLSCert), TLSKey: pick(c.TLSKey, d.TLSKey),
		TLSCA: pick(c.TLSCA, d.TLSCA), InboxPrefix: pick(c.InboxPrefix, d.InboxPrefix)}
}

// Options returns the connect options for c. It fails when a file cannot be
// read, when a certificate comes without its key (or the reverse), when
// both a credentials file and an nkey are given, and when the inbox prefix
// is not a subject prefix.
func (c Credentials) Options() ([]nats.Option, error) {
	var opts []nats.Option
	if c.Creds != "" && c.NKey != "" {
		return nil, errors.New("lanefleet: credentials: a creds file and an nkey exclude each other")
	}
	if c.Creds != "" {
		if _, err := os.Stat(c.Creds); err != nil {
			return nil, fmt.Errorf("lanefleet: credentials file: %w", err)
		}
		opts = append(opts, nats.UserCredentials(c.Creds))
	}
	if c.NKey != "" {
		o, err := nats.NkeyOptionFromSeed(c.NKey)
		if err != nil {
			return nil, fmt.Errorf("lanefleet: nkey: %w", err)
		}
		opts = append(opts, o)
	}
	switch {
	case c.User != "" && c.Password != "":
		opts = append(opts, nats.UserInfo(c.User, c.Password))
	case c.User != "":
		opts = append(opts, nats.Token(c.User))
	case c.Password != "":
		return nil, errors.New("lanefleet: credentials: a password needs a user")
	}
	switch {
	case c.TLSCert != "" && c.TLSKey != "":
		opts = append(opts, nats.ClientCert(c.TLSCert, c.TLSKey))
	case c.TLSCert != "" || c.TLSKey != "":
		return nil, errors.New("lanefleet: credentials: a TLS certificate and its key go together")
	}
	if c.TLSCA != "" {
		opts = append(opts, nats.RootCAs(c.TLSCA))
	}
	if c.InboxPrefix != "" {
		if strings.ContainsAny(c.InboxPrefix, "*> \t") || strings.HasSuffix(c.InboxPrefix, ".") {
			return nil, fmt.Errorf("lanefleet: inbox prefix %q is not a subject prefix", c.InboxPrefix)
		}
		opts = append(opts, nats.CustomInboxPrefix(c.InboxPrefix))
	}
	return opts, nil
}

// String describes c without its secrets.
func (c Credentials) String() string {
	var parts []string
	add := func(name, v string) {
		if v != "" {
			parts = append(parts, name+"="+v)
		}
	}
	add("creds", c.Creds)
	add("nkey", c.NKey)
	switch {
	case c.User != "" && c.Password != "":
		add("user", c.User)
		parts = append(parts, "password=xxxxx")
	case c.User != "":
		parts = append(parts, "token=xxxxx")
	}
	add("tlscert", c.TLSCert)
	add("tlskey", c.TLSKey)
	add("tlsca", c.TLSCA)
	add("inbox-prefix", c.InboxPrefix)
	return "{" + strings.Join(parts, " ") + "}"
}

// GoString is String, so %#v never shows a secret either.
func (c Credentials) GoString() string { return "lanefleet.Credentials" + c.String() }
