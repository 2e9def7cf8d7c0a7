package integration

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

	"github.com/nats-io/nats.go"

	"github.com/lanefleet/lanefleet/events"
)

// testPKI writes a CA and a server certificate for 127.0.0.1 and
// localhost signed by it, as PEM files in dir.
func testPKI(t *testing.T, dir string) (caFile, certFile, keyFile string) {
	t.Helper()
	newKey := func() *ecdsa.PrivateKey {
		k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		if err != nil {
			t.Fatal(err)
		}
		return k
	}
	write := func(name, kind string, der []byte) string {
		path := filepath.Join(dir, name)
		if err := os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: kind, Bytes: der}), 0o600); err != nil {
			t.Fatal(err)
		}
		return path
	}
	now := time.Now()
	caKey := newKey()
	caTmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "lanefleet test CA"},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(time.Hour), IsCA: true, BasicConstraintsValid: true,
		KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	ca, _ := x509.ParseCertificate(caDER)
	srvKey := newKey()
	srvTmpl := &x509.Certificate{SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: "lanefleet test server"},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(time.Hour), KeyUsage: x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1")}, DNSNames: []string{"localhost"}}
	srvDER, err := x509.CreateCertificate(rand.Reader, srvTmpl, ca, &srvKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, err := x509.MarshalECPrivateKey(srvKey)
	if err != nil {
		t.Fatal(err)
	}
	return write("ca.pem", "CERTIFICATE", caDER), write("server.pem", "CERTIFICATE", srvDER), write("server-key.pem", "EC PRIVATE KEY", keyDER)
}

// TestTLS: the embedded server of a worker process serves TLS from its
// configuration file; the worker reaches its own server without being
// given the CA (it trusts exactly its server's certificate), a sender
// that trusts the CA sends and follows a run, and a client that does not
// trust it cannot connect.
func TestTLS(t *testing.T) {
	if testing.Short() {
		t.Skip("process test")
	}
	t.Parallel()
	ca, cert, key := testPKI(t, t.TempDir())
	a := newAuthFleet(t, roleUsers()[:2], fmt.Sprintf("tls { cert_file: %q, key_file: %q, ca_file: %q }", cert, key, ca))
	w := workerProcess(t, []string{"NATS_PASSWORD=" + a.passwords["worker"]}, "--id", "tls", "--server-config", a.file, "--nats-user", "worker")
	w.waitReady(t)
	if !strings.Contains(w.logs.String(), `"tls":true`) {
		t.Fatalf("the embedded server does not say it serves TLS:\n%s", w.logs.String())
	}

	if _, err := nats.Connect(a.url(), nats.UserInfo("alice", a.passwords["alice"])); err == nil || !strings.Contains(err.Error(), "certificate") {
		t.Fatalf("a client without the CA: %v, want a certificate error", err)
	}
	alice := a.connectAs(t, "alice", nats.RootCAs(ca))
	if !alice.nc.TLSRequired() {
		t.Fatal("the connection is not TLS")
	}
	live := subscribeEvents(t, alice, "alice")
	run := sendRaw(t, alice, "alice", events.Inbound{Text: "over tls"})
	evs := live.run(t, run)
	if f := evs[len(evs)-1].Data.Result; f == nil || len(f.Payloads) == 0 || f.Payloads[0].Text != "echo: over tls" {
		t.Fatalf("the run ended with %+v", evs[len(evs)-1].Data)
	}
	if err := w.stop(t); err != nil {
		t.Fatalf("worker exit: %v", err)
	}
}
