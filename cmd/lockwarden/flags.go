package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"k8s.io/apimachinery/pkg/util/validation"
	"net"
	"net/url"
	"os"
	"strings"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/client/config"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	"github.com/lockwarden/lockwarden/pkg/lease"
)

// options are the manager's flags, validated before anything touches kubeconfig, etcd or
// the network.
type options struct {
	etcdEndpoints      []string
	embeddedEtcdDir    string
	embeddedEtcdListen string
	etcdCA             string
	etcdCert           string
	etcdKey            string
	etcdPrefix         string
	grantTTL           time.Duration
	electionTTL        time.Duration
	metricsAddr        string
	probeAddr          string
	pprofAddr          string
	maxConcurrent      int
	identity           string
	namespaces         []string
	rawNamespaces      string
	zap                zap.Options
	rawEndpoints       string
	clusterName        string
	globalEtcdPrefix   string
}

// flagError names the flag a bad value came from.
type flagError struct {
	flag string
	msg  string
}

func (e *flagError) Error() string { return fmt.Sprintf("--%s: %s", e.flag, e.msg) }

func bad(flag, format string, args ...any) error {
	return &flagError{flag: flag, msg: fmt.Sprintf(format, args...)}
}

// parseFlags parses and validates args. Usage goes to usage (for --help only); --version
// returns errVersion before any other flag is validated.
func parseFlags(args []string, usage io.Writer) (*options, error) {
	o := &options{}
	var showVersion bool
	fs := flag.NewFlagSet("lockwarden", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.BoolVar(&showVersion, "version", false, "print the version and exit")
	fs.StringVar(&o.rawEndpoints, "etcd-endpoints", "", "comma-separated etcd client URLs (https://host:2379,...); exactly one of this and --embedded-etcd-dir")
	fs.StringVar(&o.embeddedEtcdDir, "embedded-etcd-dir", "", "run a single-member etcd in this process with its data (fsync on) in this directory: one replica only, never two processes on one directory (config/default puts it on a PersistentVolumeClaim)")
	fs.StringVar(&o.embeddedEtcdListen, "embedded-etcd-listen", "127.0.0.1:2379", "client address of the embedded etcd (loopback); its peer port is the next one")
	fs.StringVar(&o.etcdCA, "etcd-ca-file", "", "CA bundle that signs the etcd server certificates")
	fs.StringVar(&o.etcdCert, "etcd-cert-file", "", "client certificate for etcd (with --etcd-key-file)")
	fs.StringVar(&o.etcdKey, "etcd-key-file", "", "client key for etcd (with --etcd-cert-file)")
	fs.StringVar(&o.etcdPrefix, "etcd-prefix", "/lockwarden", "etcd key prefix of every key lockwarden writes")
	fs.DurationVar(&o.grantTTL, "etcd-lease-ttl", 60*time.Second, "TTL of the shared grant lease every grant hangs on (whole seconds, above --election-ttl)")
	fs.DurationVar(&o.electionTTL, "election-ttl", 15*time.Second, "TTL of this replica's election session (whole seconds, at least 2s)")
	fs.StringVar(&o.metricsAddr, "metrics-bind-address", ":8080", `address of /metrics ("0" disables)`)
	fs.StringVar(&o.probeAddr, "health-probe-bind-address", ":8081", `address of /healthz and /readyz ("0" disables)`)
	fs.StringVar(&o.pprofAddr, "pprof-bind-address", "0", `address of /debug/pprof/ ("0" disables; keep it on loopback)`)
	fs.IntVar(&o.maxConcurrent, "max-concurrent-reconciles", 16, "locks reconciled in parallel (each mostly waits for the API server: 16 reach its status-write rate, docs/scale.md)")
	fs.StringVar(&o.rawNamespaces, "watch-namespaces", "", "comma-separated namespaces whose locks and pods the manager watches (default: all; nodes are cluster-wide either way)")
	fs.StringVar(&o.identity, "identity", "", "this replica's name in the election (default $POD_NAME, else hostname-pid)")
	fs.StringVar(&o.clusterName, "cluster-name", "", "this cluster's name among the clusters whose managers share Global locks (a DNS-1123 label, unique among them; registered in etcd with the kube-system namespace's UID). Unset: Global locks get Held=False ClusterNameUnset and are never granted here")
	fs.StringVar(&o.globalEtcdPrefix, "global-etcd-prefix", lease.DefaultGlobalPrefix, "etcd key prefix of the Global locks' keys, shared by every cluster's manager (apart from --etcd-prefix, which is this cluster's own)")
	config.RegisterFlags(fs) // --kubeconfig
	o.zap.BindFlags(fs)

	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			fs.SetOutput(usage)
			fmt.Fprintln(usage, "Usage: lockwarden [flags]")
			fs.PrintDefaults()
			return nil, err
		}
		return nil, flagParseError(err)
	}
	if showVersion {
		return nil, errVersion
	}
	if fs.NArg() > 0 {
		return nil, fmt.Errorf("unexpected argument %q: lockwarden takes flags only", fs.Arg(0))
	}
	return o, o.validate()
}

// flagParseError rewrites the flag package's message so that its last line names the flag.
func flagParseError(err error) error {
	msg := err.Error()
	// "invalid value "x" for flag -election-ttl: parse error"
	if i := strings.Index(msg, " for flag -"); i >= 0 {
		rest := msg[i+len(" for flag -"):]
		name, why, _ := strings.Cut(rest, ": ")
		return bad(name, "%s (%s)", strings.TrimSpace(msg[:i]), why)
	}
	if name, ok := strings.CutPrefix(msg, "flag provided but not defined: -"); ok {
		return bad(name, "unknown flag (see --help)")
	}
	if name, ok := strings.CutPrefix(msg, "flag needs an argument: -"); ok {
		return bad(name, "needs a value")
	}
	return err
}

func (o *options) validate() error {
	for _, e := range strings.Split(o.rawEndpoints, ",") {
		if e = strings.TrimSpace(e); e != "" {
			o.etcdEndpoints = append(o.etcdEndpoints, e)
		}
	}
	switch {
	case len(o.etcdEndpoints) == 0 && o.embeddedEtcdDir == "":
		return bad("etcd-endpoints", "required: set --etcd-endpoints (an etcd cluster), or --embedded-etcd-dir (one replica with its own etcd)")
	case len(o.etcdEndpoints) > 0 && o.embeddedEtcdDir != "":
		return bad("embedded-etcd-dir", "cannot be combined with --etcd-endpoints")
	case strings.TrimSpace(o.rawEndpoints) != "" && len(o.etcdEndpoints) == 0:
		return bad("etcd-endpoints", "no endpoint in %q", o.rawEndpoints)
	}
	for _, e := range o.etcdEndpoints {
		if err := checkEndpoint(e); err != nil {
			return bad("etcd-endpoints", "%q: %v", e, err)
		}
	}
	if o.embeddedEtcdDir != "" {
		if o.etcdCA != "" || o.etcdCert != "" || o.etcdKey != "" {
			return bad("embedded-etcd-dir", "TLS flags apply to --etcd-endpoints only")
		}
		if err := checkLoopback(o.embeddedEtcdListen); err != nil {
			return bad("embedded-etcd-listen", "%v", err)
		}
	}
	if (o.etcdCert == "") != (o.etcdKey == "") {
		if o.etcdCert == "" {
			return bad("etcd-cert-file", "required with --etcd-key-file")
		}
		return bad("etcd-key-file", "required with --etcd-cert-file")
	}
	for _, f := range []struct{ flag, path string }{{"etcd-ca-file", o.etcdCA}, {"etcd-cert-file", o.etcdCert}, {"etcd-key-file", o.etcdKey}} {
		flag, path := f.flag, f.path
		if path == "" {
			continue
		}
		if _, err := os.Stat(path); err != nil {
			return bad(flag, "cannot read %s: %v", path, errors.Unwrap(err))
		}
	}
	if !strings.HasPrefix(o.etcdPrefix, "/") || strings.HasSuffix(o.etcdPrefix, "/") || strings.Contains(o.etcdPrefix, "..") {
		return bad("etcd-prefix", "%q must start with / and not end with / or contain ..", o.etcdPrefix)
	}
	if err := o.validateGlobal(); err != nil {
		return err
	}
	for _, f := range []struct {
		flag string
		d    time.Duration
	}{{"election-ttl", o.electionTTL}, {"etcd-lease-ttl", o.grantTTL}} {
		flag, d := f.flag, f.d
		switch {
		case d < lease.MinTTL:
			return bad(flag, "%v is below the minimum of %v", d, lease.MinTTL)
		case d%time.Second != 0:
			return bad(flag, "%v is not a whole number of seconds (etcd leases are in seconds)", d)
		}
	}
	if o.grantTTL <= o.electionTTL {
		return bad("etcd-lease-ttl", "%v must exceed --election-ttl (%v) so that grants outlive a handover", o.grantTTL, o.electionTTL)
	}
	for _, f := range []struct{ flag, addr string }{{"metrics-bind-address", o.metricsAddr}, {"health-probe-bind-address", o.probeAddr}, {"pprof-bind-address", o.pprofAddr}} {
		flag, addr := f.flag, f.addr
		if addr == "0" {
			continue
		}
		if _, _, err := net.SplitHostPort(addr); err != nil {
			return bad(flag, "%q is not host:port or \"0\": %v", addr, err)
		}
	}
	if o.maxConcurrent < 1 {
		return bad("max-concurrent-reconciles", "%d must be at least 1", o.maxConcurrent)
	}
	for _, ns := range strings.Split(o.rawNamespaces, ",") {
		ns = strings.TrimSpace(ns)
		if ns == "" {
			continue
		}
		if errs := validation.IsDNS1123Label(ns); len(errs) > 0 {
			return bad("watch-namespaces", "%q is not a namespace name: %s", ns, strings.Join(errs, "; "))
		}
		o.namespaces = append(o.namespaces, ns)
	}
	if o.rawNamespaces != "" && len(o.namespaces) == 0 {
		return bad("watch-namespaces", "%q names no namespace", o.rawNamespaces)
	}
	if o.identity == "" {
		o.identity = os.Getenv("POD_NAME")
	}
	if o.identity == "" {
		host, _ := os.Hostname()
		o.identity = fmt.Sprintf("%s-%d", host, os.Getpid())
	}
	return nil
}

// validateGlobal checks --cluster-name and --global-etcd-prefix.
func (o *options) validateGlobal() error {
	if o.clusterName != "" {
		if errs := validation.IsDNS1123Label(o.clusterName); len(errs) > 0 {
			return bad("cluster-name", "%q is not a DNS-1123 label (lower-case letters, digits and '-', at most 63): %s", o.clusterName, strings.Join(errs, "; "))
		}
	}
	p := o.globalEtcdPrefix
	if !strings.HasPrefix(p, "/") || strings.HasSuffix(p, "/") || strings.Contains(p, "..") {
		return bad("global-etcd-prefix", "%q must start with / and not end with / or contain ..", p)
	}
	if strings.HasPrefix(p+"/", o.etcdPrefix+"/") || strings.HasPrefix(o.etcdPrefix+"/", p+"/") {
		return bad("global-etcd-prefix", "%q and --etcd-prefix %q must not contain one another: the Global keys are shared by every cluster, the others are this cluster's", p, o.etcdPrefix)
	}
	return nil
}

func checkEndpoint(e string) error {
	if !strings.Contains(e, "://") {
		e = "http://" + e
	}
	u, err := url.Parse(e)
	if err != nil {
		return err
	}
	if u.Scheme != "http" && u.Scheme != "https" && u.Scheme != "unix" && u.Scheme != "unixs" {
		return fmt.Errorf("scheme %q is not http or https", u.Scheme)
	}
	if u.Scheme == "http" || u.Scheme == "https" {
		if _, _, err := net.SplitHostPort(u.Host); err != nil {
			return fmt.Errorf("want host:port: %w", err)
		}
	}
	return nil
}

func checkLoopback(addr string) error {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("%q is not host:port: %w", addr, err)
	}
	if ip := net.ParseIP(host); host != "localhost" && (ip == nil || !ip.IsLoopback()) {
		return fmt.Errorf("%q is not a loopback address: the embedded etcd has no TLS", addr)
	}
	return nil
}
