package main

// usage is the --help text; docs/agent.md says the same at length.
const usage = `lockwarden-agent: leadership of a lockwarden DistributedLock for any program.

Usage:
  lockwarden-agent exec --lock NAME [flags] -- cmd [args...]
  lockwarden-agent sidecar --lock NAME [flags]
  lockwarden-agent --help

exec runs cmd only while this pod leads the lock. At each term's start it starts cmd in a
process group of its own with LOCKWARDEN_TOKEN=<fencing token>, LOCKWARDEN_WRITER=<writer ID:
$POD_UID/<an incarnation drawn for this child>>, LOCKWARDEN_SLOT=<the term's slot: 0 for a
one-slot lock, 0 to N-1 for a lock of spec.slots N> (and LOCKWARDEN_LOCK=<ns>/<name>) in its
environment: send the token and the writer with every write to a fenced resource (of that
slot). It sends SIGTERM to the group
(and to every process cmd started that left it) when the term ends or when less than --grace
of the term's validity is left (ValidUntil - grace), whichever comes first, and SIGKILL when
the grace has passed (never later than ValidUntil); a stop ends when all of them are gone.
cmd runs at most once under a token: stopped for want of validity, the agent abandons the
token (/readyz fails while the lock names the pod with it, so the controller ends the term)
and starts cmd again only under a new token, at the next term. If cmd exits by itself
during a term, the agent ends the term without a release and exits with cmd's exit code (the
pod keeps the lock until the controller sees it go; the kubelet's restart policy decides what
happens next). cmd never outlives the agent: if the agent is killed (even by SIGKILL), cmd's
process group is killed at once.

sidecar serves, on --listen:
  GET /leader   200 {"holder","token","slot","validUntilSeconds"} while this pod leads (checked at
                the request, and at least --min-validity left); 409 {"holder","token","error"}
                otherwise, with the last holder seen if any
  GET /watch    server-sent events: leading, stopped, holder (a new holder seen)
  GET /readyz   pkg/leadership's readiness check; GET /healthz 200
and writes the token to --token-file (temporary file + rename) at each term's start, and an
empty file in its place when the term ends, at start and at exit; with --slot-file, the same
for the term's slot index (written before the token file, emptied after it). On SIGTERM or SIGINT it stops
offering the term (/leader answers 409, the file is emptied), releases it only when it knows the
workload stopped (see --native-sidecar), and exits.

Common flags:
  --lock NAME          the DistributedLock (required)
  --namespace NS       its namespace (default $POD_NAMESPACE, else the service account's)
  --kubeconfig PATH    kubeconfig file (default: in-cluster config, else $KUBECONFIG)
  --margin D           pkg/leadership's margin (default 0: min(max(2s, L/50), L/4))
exec flags:
  --grace D            time between SIGTERM and SIGKILL (default 5s; 250ms <= D < 30m); a term
                       whose validity is not more than twice D is refused: cmd does not run
                       and /readyz fails while that term stands
  --probe-address A    serve /readyz and /healthz on A (default :8081; "0" disables)
  --release-on-stop    when a term ends while the lock still names this pod (the
                       controller's Releasing, or the agent told to stop), release it once cmd,
                       its group and every process it started are gone, so the next pod is
                       granted at once instead of after the
                       lock delay (default true; --release-on-stop=false turns it off; needs
                       patch on distributedlocks and config/policy: ClusterRole
                       lockwarden-lock-reader)
sidecar flags:
  --listen A           address of /leader, /watch, /readyz, /healthz (default :8080)
  --token-file PATH    the token file (required; its folder must exist)
  --slot-file PATH     also write the term's slot index to PATH (default: none; its folder
                       must exist); /leader answers token and slot of one term together
  --min-validity D     /leader answers 200 only with at least D of validity left
                       (default 500ms), so that an answer is not stale when it arrives
  --native-sidecar     declare that the agent runs as a native sidecar (an init container with
                       restartPolicy: Always), which the kubelet stops only after the pod's
                       regular containers exited (default false). The release on SIGTERM needs it
  --release-on-stop    on SIGTERM, release this pod's last term, so the next pod is granted at
                       once, when --native-sidecar is set AND the lock shows that term Releasing
                       for the pod's deletion (reason HolderTerminating; waited for up to 1s):
                       only then is the workload known to have stopped. A sidecar stopped alone
                       (liveness restart) or without --native-sidecar sends nothing (default
                       true; --release-on-stop=false turns it off even then)

Environment: POD_UID (required; downward API metadata.uid) is the pod's identity; POD_NAME
and POD_NAMESPACE (downward API) name it in answers and logs.

Exit codes:
  0    stopped by SIGTERM or SIGINT, after stopping cmd; --help
  125  bad flags or arguments, or the agent failed (kubeconfig, API server, token file)
  126  exec: cmd is not executable
  127  exec: cmd was not found
  n    exec: cmd exited by itself during a term with code n (128+s: killed by signal s)
`
