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

// Compaction of the embedded etcd's history. Without it every grant, release and election
// entry stays in etcd's history for good: a long-lived single-member etcd grows until its
// 2 GiB quota raises the NOSPACE alarm and refuses every write, grants included. The engine
// never reads old revisions (waiters watch from "now" and re-read on ErrCompacted), so an
// hour of history is plenty.
const (
	embeddedCompactionMode      = "periodic"
	embeddedCompactionRetention = "1h"
)

// embeddedConfig is the configuration of the single-member etcd that --embedded-etcd-dir
// runs: data (WAL and snapshots included) under dir, fsync on, client and peer URLs on the
// loopback address listen and the next port, history compacted hourly.
func embeddedConfig(dir, listen string) (*embed.Config, error) {
	host, portStr, err := net.SplitHostPort(listen)
	if err != nil {
		return nil, fmt.Errorf("--embedded-etcd-listen: %w", err)
	}
	port, err := strconv.Atoi(portStr)
	if err != nil || port < 1 || port > 65534 {
		return nil, fmt.Errorf("--embedded-etcd-listen: port %q is not 1-65534 (the peer port is the next one)", portStr)
	}
	cfg := embed.NewConfig()
	cfg.Dir = dir
	cfg.Name = "lockwarden-dev"
	cfg.Logger = "zap"
	cfg.LogLevel = "error"
	cfg.UnsafeNoFsync = false // a grant is acknowledged only once it is on disk
	cfg.AutoCompactionMode = embeddedCompactionMode
	cfg.AutoCompactionRetention = embeddedCompactionRetention
	client := url.URL{Scheme: "http", Host: net.JoinHostPort(host, strconv.Itoa(port))}
	peer := url.URL{Scheme: "http", Host: net.JoinHostPort(host, strconv.Itoa(port+1))}
	cfg.ListenClientUrls, cfg.AdvertiseClientUrls = []url.URL{client}, []url.URL{client}
	cfg.ListenPeerUrls, cfg.AdvertisePeerUrls = []url.URL{peer}, []url.URL{peer}
	cfg.InitialCluster = cfg.Name + "=" + peer.String()
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("embedded etcd configuration: %w", err)
	}
	return cfg, nil
}

// startEmbedded runs a single-member etcd in this process (embeddedConfig). A data dir that
// already holds a member is restarted from, keys and leases included: the grant lease
// survives a restart of the one manager pod.
func startEmbedded(dir, listen string) (*embed.Etcd, error) {
	cfg, err := embeddedConfig(dir, listen)
	if err != nil {
		return nil, err
	}
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
