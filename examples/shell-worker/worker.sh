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
# Environment: LEDGER_URL (required), POD_UID (downward API metadata.uid), POD_NAME (for the
# entries), WRITE_INTERVAL (seconds, default 1), STALL_FILE (a test hook, below). The writer ID the ledger fences by names this
# process, not only its pod: $LOCKWARDEN_WRITER under exec (the agent draws one per child),
# else $POD_UID/<16 hex digits drawn at start>. A restarted worker is another writer, so a
# write its dead predecessor sent late never passes for its own.
#
# Either way the first write of a term raises the fence at the ledger (POST /fence), and no
# entry is written before that raise is admitted, so that the ledger refuses any later write
# with an older token: a worker that was paused or cut off and writes late is refused (409),
# however late it wakes up. A raise refused for the very token it holds (another writer
# presented it first) ends the term for this process: it exits 3.
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

# The writer ID of this process.
writer=${LOCKWARDEN_WRITER:-$POD_UID/$(od -An -N8 -tx1 /dev/urandom | tr -d ' \n')}

# post PATH JSON: POST JSON to the ledger; prints "<HTTP status> <highest token accepted>"
# (status 000: no answer). Both come from the reply's headers: the status line, which wget -S
# prints even when the request fails, and Ledger-Highest.
post() {
	if command -v curl >/dev/null 2>&1; then
		curl -s -o /dev/null -D - -m 5 -H 'Content-Type: application/json' --data "$2" "$LEDGER_URL$1" 2>/dev/null
	else
		wget -S -q -T 5 -O /dev/null --header 'Content-Type: application/json' --post-data "$2" "$LEDGER_URL$1" 2>&1
	fi | tr -d '\r' | awk '$1 ~ /^HTTP\/1\.[01]$/ { s = $2 } tolower($1) == "ledger-highest:" { h = $2 }
		END { if (s == "") s = "000"; print s, h }'
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

# stall TOKEN: a test hook (cmd/lockwarden-agent's TestShellWorkerStalledWriteIsRefused). While
# $STALL_FILE exists, the write about to be sent with TOKEN, whose token was just checked, waits
# here, and says so in $STALL_FILE.stalled: the pause between a validity check and a write that
# only the fence can make harmless. Unset (the default), it does nothing.
stall() {
	[ -n "${STALL_FILE:-}" ] && [ -e "$STALL_FILE" ] || return 0
	log "stalled with token $1 between its check and its write ($STALL_FILE)"
	echo "$1" >"$STALL_FILE.stalled"
	while [ -e "$STALL_FILE" ]; do sleep 0.05; done
	rm -f "$STALL_FILE.stalled"
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
	stall "$tok"
	if [ "$tok" != "$fenced" ]; then
		r=$(post /fence "{\"writer\":\"$writer\",\"token\":$tok}")
		status=${r%% *} highest=${r#* }
		if [ "$status" != 200 ]; then
			log "raise fence with token $tok: HTTP $status"
			if [ "$status" = 409 ] && [ "$highest" = "$tok" ]; then
				log "token $tok is in use by another writer: the term is over for this process"
				exit 3
			fi
			[ -n "${LOCKWARDEN_TOKEN:-}" ] && [ "$status" = 409 ] && exit 3
			sleep "$interval"
			continue
		fi
		fenced=$tok
		log "leading with token $tok: fence raised"
	fi
	seq=$((seq + 1))
	r=$(post /append "{\"writer\":\"$writer\",\"token\":$tok,\"entry\":\"$name #$seq\"}")
	status=${r%% *}
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
