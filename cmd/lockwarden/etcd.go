package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"strconv"
	"sync"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/server/v3/embed"
	"go.uber.org/zap"
)

// connectEtcd returns a client for --etcd-endpoints (with TLS when files are given), or
// starts the embedded etcd. stop closes the client and the embedded server.
func connectEtcd(o *options) (cli *clientv3.Client, stop func(), err error) {
	endpoints := o.etcdEndpoints
	var server *embed.Etcd
	if o.embeddedEtcdDir != "" {
		server, err = startEmbedded(o.embeddedEtcdDir, o.embeddedEtcdListen)
		if err != nil {
			return nil, nil, err
		}
		endpoints = []string{"http://" + o.embeddedEtcdListen}
	}
	cfg := clientv3.Config{
		Endpoints:            endpoints,
		DialTimeout:          5 * time.Second,
		DialKeepAliveTime:    5 * time.Second,
		DialKeepAliveTimeout: 5 * time.Second,
		Logger:               zap.NewNop(),
	}
	if o.etcdCA != "" || o.etcdCert != "" {
		cfg.TLS, err = clientTLS(o.etcdCA, o.etcdCert, o.etcdKey)
		if err != nil {
			if server != nil {
				server.Close()
			}
			return nil, nil, err
		}
	}
	cli, err = clientv3.New(cfg)
	if err != nil {
		if server != nil {
			server.Close()
		}
		return nil, nil, fmt.Errorf("etcd client: %w", err)
	}
	return cli, func() {
		_ = cli.Close()
		if server != nil {
			server.Close()
		}
	}, nil
}

func clientTLS(caFile, certFile, keyFile string) (*tls.Config, error) {
	cfg := &tls.Config{MinVersion: tls.VersionTLS12}
	if caFile != "" {
		pem, err := os.ReadFile(caFile)
		if err != nil {
			return nil, fmt.Errorf("--etcd-ca-file: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("--etcd-ca-file: no PEM certificate in %s", caFile)
		}
		cfg.RootCAs = pool
	}
	if certFile != "" {
		pair, err := tls.LoadX509KeyPair(certFile, keyFile)
		if err != nil {
			return nil, fmt.Errorf("--etcd-cert-file/--etcd-key-file: %w", err)
		}
		cfg.Certificates = []tls.Certificate{pair}
	}
	return cfg, nil
}

// startEmbedded runs a single-member etcd in this process on loopback, with fsync on.
func startEmbedded(dir, listen string) (*embed.Etcd, error) {
	host, portStr, _ := net.SplitHostPort(listen)
	port, err := strconv.Atoi(portStr)
	if err != nil {
		return nil, fmt.Errorf("--embedded-etcd-listen: port %q: %w", portStr, err)
	}
	cfg := embed.NewConfig()
	cfg.Dir = dir
	cfg.Name = "lockwarden-dev"
	cfg.Logger = "zap"
	cfg.LogLevel = "error"
	client := url.URL{Scheme: "http", Host: net.JoinHostPort(host, strconv.Itoa(port))}
	peer := url.URL{Scheme: "http", Host: net.JoinHostPort(host, strconv.Itoa(port+1))}
	cfg.ListenClientUrls, cfg.AdvertiseClientUrls = []url.URL{client}, []url.URL{client}
	cfg.ListenPeerUrls, cfg.AdvertisePeerUrls = []url.URL{peer}, []url.URL{peer}
	cfg.InitialCluster = cfg.Name + "=" + peer.String()
	e, err := embed.StartEtcd(cfg)
	if err != nil {
		return nil, fmt.Errorf("start embedded etcd in %s: %w", dir, err)
	}
	select {
	case <-e.Server.ReadyNotify():
		return e, nil
	case err := <-e.Err():
		e.Close()
		return nil, fmt.Errorf("embedded etcd: %w", err)
	case <-time.After(30 * time.Second):
		e.Close()
		return nil, errors.New("embedded etcd: not ready after 30s")
	}
}

// etcdCheck is a /readyz check: a linearizable read of one key, at most once a second, so
// probes cost etcd little. It fails while etcd is unreachable, never because this replica
// is a standby.
type etcdCheck struct {
	cli    *clientv3.Client
	key    string
	mu     sync.Mutex
	at     time.Time
	result error
}

func (c *etcdCheck) check(ctx context.Context) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.at.IsZero() && time.Since(c.at) < time.Second {
		return c.result
	}
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	_, err := c.cli.Get(ctx, c.key, clientv3.WithCountOnly())
	c.at, c.result = time.Now(), err
	if err != nil {
		return fmt.Errorf("etcd unreachable: %w", err)
	}
	return nil
}
