package lanefleet

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
)

func TestCredentialsOptionsRefuse(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	tests := []struct {
		name string
		c    Credentials
		want string
	}{
		{"creds and nkey", Credentials{Creds: "a.creds", NKey: "a.nk"}, "exclude each other"},
		{"missing creds file", Credentials{Creds: filepath.Join(dir, "none.creds")}, "no such file"},
		{"missing nkey file", Credentials{NKey: filepath.Join(dir, "none.nk")}, "nkey"},
		{"password without user", Credentials{Password: "p"}, "needs a user"},
		{"cert without key", Credentials{TLSCert: "c.pem"}, "go together"},
		{"key without cert", Credentials{TLSKey: "k.pem"}, "go together"},
		{"wildcard inbox prefix", Credentials{InboxPrefix: "_INBOX.*"}, "not a subject prefix"},
		{"inbox prefix ending in a dot", Credentials{InboxPrefix: "_INBOX_a."}, "not a subject prefix"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if _, err := tt.c.Options(); err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("err = %v, want it to mention %q", err, tt.want)
			}
		})
	}
}

func TestCredentialsNeverShowSecrets(t *testing.T) {
	t.Parallel()
	c := Credentials{User: "alice", Password: "s3cret", TLSCA: "ca.pem"}
	for _, s := range []string{c.String(), fmt.Sprintf("%v %+v %#v", c, c, c), Credentials{User: "t0ken"}.String()} {
		if strings.Contains(s, "s3cret") || strings.Contains(s, "t0ken") {
			t.Fatalf("secret shown: %s", s)
		}
	}
	env := map[string]string{"NATS_USER": "u", "NATS_PASSWORD": "p", "NATS_CREDS": "c", "NATS_NKEY": "n",
		"NATS_CERT": "cert", "NATS_KEY": "key", "NATS_CA": "ca", "NATS_INBOX_PREFIX": "_INBOX_u"}
	got := CredentialsFromEnv(func(k string) string { return env[k] })
	want := Credentials{Creds: "c", NKey: "n", User: "u", Password: "p", TLSCert: "cert", TLSKey: "key", TLSCA: "ca", InboxPrefix: "_INBOX_u"}
	if got != want {
		t.Fatalf("from env: %#v", got)
	}
	if flags := (Credentials{User: "flag"}).Or(got); flags.User != "flag" || flags.Password != "p" {
		t.Fatalf("flags over env: %#v", flags)
	}
}

// TestCredentialsConnect: user/password, a token and mutual TLS against
// servers that require them.
func TestCredentialsConnect(t *testing.T) {
	t.Parallel()
	start := func(t *testing.T, opts *server.Options) string {
		opts.Host, opts.Port, opts.NoLog, opts.NoSigs = "127.0.0.1", server.RANDOM_PORT, true, true
		s, err := server.NewServer(opts)
		if err != nil {
			t.Fatal(err)
		}
		s.Start()
		if !s.ReadyForConnections(10 * time.Second) {
			t.Fatal("server not ready")
		}
		t.Cleanup(s.Shutdown)
		return s.ClientURL()
	}
	connect := func(url string, c Credentials) error {
		opts, err := c.Options()
		if err != nil {
			return err
		}
		cl, err := Connect(url, opts...)
		if err == nil {
			cl.Close()
		}
		return err
	}
	t.Run("user and password", func(t *testing.T) {
		url := start(t, &server.Options{Username: "alice", Password: "pw"})
		if err := connect(url, Credentials{User: "alice", Password: "pw"}); err != nil {
			t.Fatal(err)
		}
		if err := connect(url, Credentials{User: "alice", Password: "wrong"}); err == nil {
			t.Fatal("a wrong password connected")
		}
	})
	t.Run("token", func(t *testing.T) {
		url := start(t, &server.Options{Authorization: "t0ken"})
		if err := connect(url, Credentials{User: "t0ken"}); err != nil {
			t.Fatal(err)
		}
	})
	t.Run("mutual TLS", func(t *testing.T) {
		dir := t.TempDir()
		ca := newCA(t, dir)
		srvCert, srvKey := ca.issue(t, dir, "server", true)
		cliCert, cliKey := ca.issue(t, dir, "client", false)
		tc, err := server.GenTLSConfig(&server.TLSConfigOpts{CertFile: srvCert, KeyFile: srvKey, CaFile: ca.file, Verify: true})
		if err != nil {
			t.Fatal(err)
		}
		url := start(t, &server.Options{TLS: true, TLSVerify: true, TLSConfig: tc, TLSTimeout: 5})
		if err := connect(url, Credentials{TLSCA: ca.file, TLSCert: cliCert, TLSKey: cliKey}); err != nil {
			t.Fatal(err)
		}
		if err := connect(url, Credentials{TLSCA: ca.file}); err == nil {
			t.Fatal("connected without a client certificate")
		}
	})
}

// testCA is a certificate authority made for one test.
type testCA struct {
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
	file string
}

func newCA(t *testing.T, dir string) *testCA {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "test CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, _ := x509.ParseCertificate(der)
	ca := &testCA{cert: cert, key: key, file: filepath.Join(dir, "ca.pem")}
	writePEM(t, ca.file, "CERTIFICATE", der)
	return ca
}

// issue writes a certificate for 127.0.0.1 (a server's) or for a client,
// and its key, and returns their files.
func (ca *testCA) issue(t *testing.T, dir, name string, server bool) (certFile, keyFile string) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(time.Now().UnixNano()), Subject: pkix.Name{CommonName: name},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour), KeyUsage: x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}
	if server {
		tmpl.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}
		tmpl.IPAddresses = []net.IP{net.ParseIP("127.0.0.1")}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &key.PublicKey, ca.key)
	if err != nil {
		t.Fatal(err)
	}
	kder, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	certFile, keyFile = filepath.Join(dir, name+".pem"), filepath.Join(dir, name+"-key.pem")
	writePEM(t, certFile, "CERTIFICATE", der)
	writePEM(t, keyFile, "EC PRIVATE KEY", kder)
	return certFile, keyFile
}

func writePEM(t *testing.T, path, typ string, der []byte) {
	t.Helper()
	if err := os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
}
