//go:build e2e

package e2e

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc"
)

// etcdPorts are the client ports of the lockwarden etcd members on the node IP (config/e2e
// names them); each member's peer port is the next one.
var etcdPorts = []int{32379, 32381, 32383}

// pki is the etcd cluster's certificates: one CA, a serving (and peer) certificate for the
// node IP, and client certificates, all made by the test.
type pki struct {
	dir    string
	ca     *x509.Certificate
	caKey  *ecdsa.PrivateKey
	caPEM  []byte
	serial int64
}

func newPKI(t testing.TB) *pki {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "lockwarden-e2e-etcd-ca"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	ca, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	p := &pki{dir: t.TempDir(), ca: ca, caKey: key, caPEM: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), serial: 1}
	if err := os.WriteFile(filepath.Join(p.dir, "ca.crt"), p.caPEM, 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// issue writes name.crt and name.key signed by the CA and returns their PEM.
func (p *pki) issue(t testing.TB, name string, ips []net.IP, usage ...x509.ExtKeyUsage) (certPEM, keyPEM []byte) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	p.serial++
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(p.serial), Subject: pkix.Name{CommonName: name},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: usage, IPAddresses: ips,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, p.ca, &key.PublicKey, p.caKey)
	if err != nil {
		t.Fatal(err)
	}
	kd, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	certPEM = pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
	keyPEM = pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kd})
	if err := os.WriteFile(filepath.Join(p.dir, name+".crt"), certPEM, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(p.dir, name+".key"), keyPEM, 0o600); err != nil {
		t.Fatal(err)
	}
	return certPEM, keyPEM
}

// etcdCluster is lockwarden's etcd: 3 members with TLS client certificates, outside the
// cluster (as docs/operations.md tells users to run it) but inside the node's network
// namespace, on the node IP.
type etcdCluster struct {
	pki       *pki
	endpoints []string
	client    *clientv3.Client
}

// startEtcd starts the members as processes in the node's network namespace and stops them,
// by PID, when the test ends.
func startEtcd(t testing.TB, n *node) *etcdCluster {
	t.Helper()
	p := newPKI(t)
	ip := net.ParseIP(nodeIP)
	p.issue(t, "server", []net.IP{ip, net.ParseIP("127.0.0.1")}, x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth)
	p.issue(t, "client", nil, x509.ExtKeyUsageClientAuth)
	var initial []string
	for i, port := range etcdPorts {
		initial = append(initial, fmt.Sprintf("m%d=https://%s:%d", i, nodeIP, port+1))
	}
	e := &etcdCluster{pki: p}
	for i, port := range etcdPorts {
		client := fmt.Sprintf("https://%s:%d", nodeIP, port)
		peer := fmt.Sprintf("https://%s:%d", nodeIP, port+1)
		e.endpoints = append(e.endpoints, client)
		cert, key := filepath.Join(p.dir, "server.crt"), filepath.Join(p.dir, "server.key")
		ca := filepath.Join(p.dir, "ca.crt")
		log, err := os.Create(filepath.Join(n.dir, "logs", fmt.Sprintf("lockwarden-etcd-%d.log", i)))
		if err != nil {
			t.Fatal(err)
		}
		// nsenter with only --net execs etcd itself: the PID below is etcd's
		cmd := exec.Command("nsenter", "--net="+n.ns.path, "--", "nice", "-n", "10", filepath.Join(n.root, "bin", "etcd"),
			"--name", fmt.Sprintf("m%d", i), "--data-dir", filepath.Join(t.TempDir(), "data"),
			"--listen-client-urls", client, "--advertise-client-urls", client,
			"--listen-peer-urls", peer, "--initial-advertise-peer-urls", peer,
			"--initial-cluster", strings.Join(initial, ","), "--initial-cluster-state", "new",
			"--cert-file", cert, "--key-file", key, "--trusted-ca-file", ca, "--client-cert-auth",
			"--peer-cert-file", cert, "--peer-key-file", key, "--peer-trusted-ca-file", ca, "--peer-client-cert-auth",
			"--unsafe-no-fsync", "--log-level", "warn")
		cmd.Stdout, cmd.Stderr = log, log
		if err := cmd.Start(); err != nil {
			t.Fatalf("start etcd member %d: %v", i, err)
		}
		t.Cleanup(func() {
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
			_ = log.Close()
		})
	}
	cert, err := tls.LoadX509KeyPair(filepath.Join(p.dir, "client.crt"), filepath.Join(p.dir, "client.key"))
	if err != nil {
		t.Fatal(err)
	}
	roots := x509.NewCertPool()
	roots.AddCert(p.ca)
	e.client, err = clientv3.New(clientv3.Config{
		Endpoints: e.endpoints, DialTimeout: 5 * time.Second,
		TLS:         &tls.Config{Certificates: []tls.Certificate{cert}, RootCAs: roots, MinVersion: tls.VersionTLS12},
		DialOptions: []grpc.DialOption{grpc.WithContextDialer(func(ctx context.Context, addr string) (net.Conn, error) { return n.ns.DialContext(ctx, "tcp", addr) })},
	})
	if err != nil {
		t.Fatalf("etcd client: %v", err)
	}
	t.Cleanup(func() { _ = e.client.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	for {
		sctx, scancel := context.WithTimeout(ctx, 2*time.Second)
		_, err := e.client.Put(sctx, "/e2e/ready", "1")
		scancel()
		if err == nil {
			break
		}
		if ctx.Err() != nil {
			t.Fatalf("the 3-member etcd did not accept a write within 60 s: %v (logs in %s/logs)", err, n.dir)
		}
		time.Sleep(200 * time.Millisecond)
	}
	return e
}
