#!/bin/sh
# shell-worker: a POSIX sh worker that appends to the fenced-worker ledger
# (examples/fenced-worker/ledger) with lockwarden's fencing token. It needs sh and curl or
# wget (busybox's will do), and runs in one of two ways:
#
#   exec:    lockwarden-agent exec --lock NAME -- sh worker.sh
#            the agent starts it when the pod leads, with LOCKWARDEN_TOKEN set, and stops it
#            (SIGTERM, then SIGKILL after --grace) before the term's validity ends.
#   sidecar: LEADER_URL=http://127.0.0.1:8080 sh worker.sh, beside `lockwarden-agent sidecar`
#            it asks /leader before each write and writes only with the token it answered.
#
# Environment: LEDGER_URL (required), POD_UID (the writer ID the ledger fences by; downward
# API metadata.uid), POD_NAME (for the entries), WRITE_INTERVAL (seconds, default 1).
#
# Either way the first write of a term raises the fence at the ledger (POST /fence), so that
# the ledger refuses any later write with an older token: a worker that was paused or cut
# off and writes late is refused (409), however late it wakes up.
set -u

: "${LEDGER_URL:?set LEDGER_URL to the ledger, e.g. http://ledger:8090}"
: "${POD_UID:?set POD_UID from the downward API (metadata.uid)}"
name=${POD_NAME:-shell-worker}
interval=${WRITE_INTERVAL:-1}
if [ -z "${LOCKWARDEN_TOKEN:-}" ] && [ -z "${LEADER_URL:-}" ]; then
	echo "$name: run me under 'lockwarden-agent exec' (LOCKWARDEN_TOKEN) or set LEADER_URL to the sidecar" >&2
	exit 2
fi

log() { echo "$(date +%H:%M:%S) $name: $*"; }

# post PATH JSON: POST JSON to the ledger; prints the HTTP status (000: no answer).
post() {
	if command -v curl >/dev/null 2>&1; then
		curl -s -o /dev/null -w '%{http_code}' -m 5 -H 'Content-Type: application/json' --data "$2" "$LEDGER_URL$1" || true
	else
		# wget -S prints the status line ("HTTP/1.1 409 Conflict") even when it fails
		wget -S -q -T 5 -O /dev/null --header 'Content-Type: application/json' --post-data "$2" "$LEDGER_URL$1" 2>&1 |
			sed -n 's/.*HTTP\/1\.[01] \([0-9][0-9][0-9]\).*/\1/p' | tail -n 1
	fi
}

# get URL: prints the body of a 2xx answer; fails otherwise.
get() {
	if command -v curl >/dev/null 2>&1; then
		curl -fsS -m 2 "$1"
	else
		wget -q -T 2 -O - "$1"
	fi
}

# token: the token to write with now, or nothing when this pod does not lead. Under exec it is
# the term's; with the sidecar it is what /leader answers (200 only while the pod leads).
token() {
	if [ -n "${LOCKWARDEN_TOKEN:-}" ]; then
		echo "$LOCKWARDEN_TOKEN"
	else
		get "$LEADER_URL/leader" 2>/dev/null | sed -n 's/.*"token":\([0-9][0-9]*\).*/\1/p'
	fi
}

trap 'log "SIGTERM: stopping"; exit 0' TERM

fenced=""
seq=0
while :; do
	tok=$(token)
	if [ -z "$tok" ]; then
		fenced=""
		sleep "$interval"
		continue
	fi
	if [ "$tok" != "$fenced" ]; then
		status=$(post /fence "{\"writer\":\"$POD_UID\",\"token\":$tok}")
		if [ "$status" != 200 ]; then
			log "raise fence with token $tok: HTTP $status"
			[ -n "${LOCKWARDEN_TOKEN:-}" ] && [ "$status" = 409 ] && exit 3
			sleep "$interval"
			continue
		fi
		fenced=$tok
		log "leading with token $tok: fence raised"
	fi
	seq=$((seq + 1))
	status=$(post /append "{\"writer\":\"$POD_UID\",\"token\":$tok,\"entry\":\"$name #$seq\"}")
	case $status in
	200) log "appended #$seq with token $tok" ;;
	409)
		log "ledger refused token $tok (stale): a newer term has written"
		# under exec the term is over for this process; the sidecar's /leader says so soon
		[ -n "${LOCKWARDEN_TOKEN:-}" ] && exit 3
		fenced=""
		;;
	*) log "append #$seq: HTTP $status" ;;
	esac
	sleep "$interval" &
	wait $!
done
