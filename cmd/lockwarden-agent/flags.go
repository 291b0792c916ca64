package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/util/validation"
)

// Defaults and limits of the flags.
const (
	defaultGrace       = 5 * time.Second
	maxGrace           = 30 * time.Minute // half of the longest lease (3600 s): no term admits more
	defaultProbe       = ":8081"
	defaultListen      = ":8080"
	defaultMinValidity = 500 * time.Millisecond
	// serviceAccountNamespace is where a pod finds its own namespace.
	serviceAccountNamespace = "/var/run/secrets/kubernetes.io/serviceaccount/namespace"
)

var (
	// errHelp is returned by a parse that printed --help.
	errHelp = errors.New("help requested")
	// errCmdNotFound and errCmdNotExecutable are exec's cmd that cannot run.
	errCmdNotFound      = errors.New("cmd not found")
	errCmdNotExecutable = errors.New("cmd not executable")
)

// common are the flags of both modes.
type common struct {
	lock, namespace, kubeconfig string
	margin                      time.Duration
	identity, name              string // $POD_UID, $POD_NAME
}

// execOptions configure exec mode.
type execOptions struct {
	common
	grace         time.Duration
	releaseOnStop bool
	probe         string   // "0": none
	argv          []string // cmd and its arguments; argv[0] is resolved by LookPath
}

// sidecarOptions configure sidecar mode.
type sidecarOptions struct {
	common
	listen        string
	tokenFile     string
	slotFile      string // "": none
	minValidity   time.Duration
	releaseOnStop bool
	// nativeSidecar declares that the agent runs as a native sidecar (an init container with
	// restartPolicy Always): the release on stop requires it.
	nativeSidecar bool
}

// flagSet is a flag set for mode with the common flags in c.
func flagSet(mode string, c *common) *flag.FlagSet {
	fs := flag.NewFlagSet(mode, flag.ContinueOnError)
	fs.SetOutput(io.Discard) // errors are returned and printed once by run
	fs.Usage = func() {}     // flag calls it on every error too; parse prints usage for -h only
	fs.StringVar(&c.lock, "lock", "", "")
	fs.StringVar(&c.namespace, "namespace", "", "")
	fs.StringVar(&c.kubeconfig, "kubeconfig", "", "")
	fs.DurationVar(&c.margin, "margin", 0, "")
	return fs
}

// parse parses args with fs and turns flag's errors into usage errors; -h prints the usage
// on out.
func parse(fs *flag.FlagSet, args []string, out io.Writer) error {
	err := fs.Parse(args)
	if errors.Is(err, flag.ErrHelp) {
		fmt.Fprint(out, usage)
		return errHelp
	}
	if err != nil {
		return fmt.Errorf("%w: %s: %w", errUsage, fs.Name(), err)
	}
	return nil
}

// parseExec parses exec's arguments and checks them (cmd included) before anything touches
// the network.
func parseExec(args, environ []string, out io.Writer) (execOptions, error) {
	o := execOptions{}
	fs := flagSet("exec", &o.common)
	fs.DurationVar(&o.grace, "grace", defaultGrace, "")
	fs.StringVar(&o.probe, "probe-address", defaultProbe, "")
	fs.BoolVar(&o.releaseOnStop, "release-on-stop", true, "")
	if err := parse(fs, args, out); err != nil {
		return o, err
	}
	o.argv = fs.Args()
	if err := o.complete(environ); err != nil {
		return o, err
	}
	if err := checkGrace(o.grace); err != nil {
		return o, err
	}
	if err := checkAddress("--probe-address", o.probe, true); err != nil {
		return o, err
	}
	if len(o.argv) == 0 {
		return o, fmt.Errorf("%w: exec: no command: want `exec --lock NAME -- cmd args...`", errUsage)
	}
	path, err := lookCmd(o.argv[0], lookupEnv(environ, "PATH"))
	if err != nil {
		return o, err
	}
	o.argv[0] = path
	return o, nil
}

// parseSidecar parses sidecar's arguments and checks them.
func parseSidecar(args, environ []string, out io.Writer) (sidecarOptions, error) {
	o := sidecarOptions{}
	fs := flagSet("sidecar", &o.common)
	fs.StringVar(&o.listen, "listen", defaultListen, "")
	fs.StringVar(&o.tokenFile, "token-file", "", "")
	fs.StringVar(&o.slotFile, "slot-file", "", "")
	fs.DurationVar(&o.minValidity, "min-validity", defaultMinValidity, "")
	fs.BoolVar(&o.releaseOnStop, "release-on-stop", true, "")
	fs.BoolVar(&o.nativeSidecar, "native-sidecar", false, "")
	if err := parse(fs, args, out); err != nil {
		return o, err
	}
	if fs.NArg() > 0 {
		return o, fmt.Errorf("%w: sidecar: unexpected argument %q", errUsage, fs.Arg(0))
	}
	if err := o.complete(environ); err != nil {
		return o, err
	}
	if err := checkAddress("--listen", o.listen, false); err != nil {
		return o, err
	}
	if o.minValidity < 0 {
		return o, fmt.Errorf("%w: --min-validity %v is negative", errUsage, o.minValidity)
	}
	if o.tokenFile == "" {
		return o, fmt.Errorf("%w: --token-file is required", errUsage)
	}
	if st, err := os.Stat(filepath.Dir(o.tokenFile)); err != nil || !st.IsDir() {
		return o, fmt.Errorf("%w: --token-file %s: folder %s does not exist", errUsage, o.tokenFile, filepath.Dir(o.tokenFile))
	}
	if o.slotFile != "" {
		if st, err := os.Stat(filepath.Dir(o.slotFile)); err != nil || !st.IsDir() {
			return o, fmt.Errorf("%w: --slot-file %s: folder %s does not exist", errUsage, o.slotFile, filepath.Dir(o.slotFile))
		}
		if filepath.Clean(o.slotFile) == filepath.Clean(o.tokenFile) {
			return o, fmt.Errorf("%w: --slot-file %s is the token file", errUsage, o.slotFile)
		}
	}
	return o, nil
}

// complete fills the defaults of the common flags from environ and checks them.
func (c *common) complete(environ []string) error {
	c.identity, c.name = lookupEnv(environ, "POD_UID"), lookupEnv(environ, "POD_NAME")
	if c.namespace == "" {
		c.namespace = lookupEnv(environ, "POD_NAMESPACE")
	}
	if c.namespace == "" {
		if b, err := os.ReadFile(serviceAccountNamespace); err == nil {
			c.namespace = strings.TrimSpace(string(b))
		}
	}
	switch {
	case c.lock == "":
		return fmt.Errorf("%w: --lock is required", errUsage)
	case c.namespace == "":
		return fmt.Errorf("%w: no namespace: set --namespace or $POD_NAMESPACE", errUsage)
	case c.identity == "":
		return fmt.Errorf("%w: $POD_UID is not set: set it from the downward API (fieldRef metadata.uid)", errUsage)
	case c.margin < 0:
		return fmt.Errorf("%w: --margin %v is negative", errUsage, c.margin)
	}
	if errs := validation.IsDNS1123Subdomain(c.lock); len(errs) > 0 {
		return fmt.Errorf("%w: --lock %q: %s", errUsage, c.lock, strings.Join(errs, "; "))
	}
	if errs := validation.IsDNS1123Label(c.namespace); len(errs) > 0 {
		return fmt.Errorf("%w: namespace %q: %s", errUsage, c.namespace, strings.Join(errs, "; "))
	}
	return nil
}

// checkGrace refuses a grace no term could admit.
func checkGrace(g time.Duration) error {
	if g < killLead || g >= maxGrace {
		return fmt.Errorf("%w: --grace %v: want at least %v and less than %v", errUsage, g, killLead, maxGrace)
	}
	return nil
}

// checkAddress checks a host:port listen address; "0" disables it where allowed.
func checkAddress(flagName, addr string, zeroDisables bool) error {
	if zeroDisables && addr == "0" {
		return nil
	}
	if _, _, err := net.SplitHostPort(addr); err != nil {
		return fmt.Errorf("%w: %s %q: %w", errUsage, flagName, addr, err)
	}
	return nil
}

// lookCmd resolves cmd on path as the shell does (the first executable file wins) and tells
// a missing command (errCmdNotFound) from one that cannot be executed (errCmdNotExecutable).
func lookCmd(cmd, path string) (string, error) {
	if strings.Contains(cmd, "/") {
		return checkExecutable(cmd, cmd)
	}
	var notExec error
	for _, dir := range filepath.SplitList(path) {
		if dir == "" {
			dir = "."
		}
		p, err := checkExecutable(cmd, filepath.Join(dir, cmd))
		if err == nil {
			return p, nil
		}
		if errors.Is(err, errCmdNotExecutable) && notExec == nil {
			notExec = err
		}
	}
	if notExec != nil {
		return "", notExec
	}
	return "", fmt.Errorf("exec: %s: %w in $PATH", cmd, errCmdNotFound)
}

// checkExecutable returns p when it is an executable file.
func checkExecutable(cmd, p string) (string, error) {
	st, err := os.Stat(p)
	switch {
	case err != nil:
		return "", fmt.Errorf("exec: %s: %w", cmd, errCmdNotFound)
	case st.IsDir() || st.Mode()&0o111 == 0:
		return "", fmt.Errorf("exec: %s (%s): %w", cmd, p, errCmdNotExecutable)
	}
	return p, nil
}

// lookupEnv is the value of key in environ ("" when unset); the last entry wins, as in
// os/exec.
func lookupEnv(environ []string, key string) string {
	v := ""
	for _, kv := range environ {
		if k, val, ok := strings.Cut(kv, "="); ok && k == key {
			v = val
		}
	}
	return v
}
