package gateway

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"io"
	"math/big"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/lanefleet/lanefleet"
	"github.com/lanefleet/lanefleet/internal/natstest"
)

// TestListenTLS: Listen refuses a public address without a token file and
// half a TLS pair; with --tls-cert/--tls-key it serves HTTPS, and Serve
// returns once its context ends. Methods nobody names are one metrics
// label.
func TestListenTLS(t *testing.T) {
	t.Parallel()
	ns := natstest.Start(t)
	c, err := lanefleet.Connect(ns.URL)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	if _, err := Listen(Options{Addr: "0.0.0.0:0"}, Config{Client: c}); err == nil || !strings.Contains(err.Error(), "not a loopback address") {
		t.Fatalf("public address without tokens: %v", err)
	}
	if _, err := Listen(Options{Addr: "127.0.0.1:0", TLSCert: "x.pem"}, Config{Client: c}); err == nil {
		t.Fatal("a certificate without its key")
	}
	cert, key, pool := selfSigned(t)
	ln, err := Listen(Options{Addr: "127.0.0.1:0", TLSCert: cert, TLSKey: key}, Config{Client: c})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- ln.Serve(ctx) }()
	hc := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}}
	if !strings.HasPrefix(ln.URL(), "https://") {
		t.Fatalf("URL %s", ln.URL())
	}
	resp, err := hc.Get(ln.URL() + "/healthz")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || string(body) != "ok\n" {
		t.Fatalf("%d %q", resp.StatusCode, body)
	}
	for _, m := range []string{"BREW", "WHEN"} {
		req, _ := http.NewRequest(m, ln.URL()+"/healthz", nil)
		if resp, err := hc.Do(req); err == nil {
			resp.Body.Close()
		}
	}
	if got := testCount(t, ln.srv, "other"); got != 2 {
		t.Fatalf("methods nobody names: %d requests labelled other", got)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

// testCount sums lanefleet_gateway_requests_total over method.
func testCount(t *testing.T, s *Server, method string) int {
	t.Helper()
	fams, err := s.metrics.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, f := range fams {
		if f.Name != "lanefleet_gateway_requests_total" {
			continue
		}
		for _, sr := range f.Series {
			for i, l := range f.LabelNames {
				if l == "method" && sr.Labels[i] == method {
					n += int(sr.Value)
				}
			}
		}
	}
	return n
}

// selfSigned writes a self-signed certificate for 127.0.0.1 and its key,
// and returns their paths and a pool trusting it.
func selfSigned(t *testing.T) (certFile, keyFile string, pool *x509.CertPool) {
	t.Helper()
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "gateway test"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1")}, KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &k.PublicKey, k)
	if err != nil {
		t.Fatal(err)
	}
	kd, err := x509.MarshalECPrivateKey(k)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	certFile, keyFile = filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
	if err := os.WriteFile(certFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kd}), 0o600); err != nil {
		t.Fatal(err)
	}
	cert, _ := x509.ParseCertificate(der)
	pool = x509.NewCertPool()
	pool.AddCert(cert)
	return certFile, keyFile, pool
}
