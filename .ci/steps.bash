# Timed steps for .ci/run (sourced; it sets the EXIT trap). `step NAME CMD...` runs CMD,
# records how long it took and whether it passed, and ends the run at the first failure. At
# exit, after a failure or a Ctrl-C too, the table of every step and its time is printed as
# markdown and written to bin/ci-times.md (docs/ci.md keeps the measured tables).

ci_names=() ci_secs=() ci_results=()
ci_start=$SECONDS
ci_current= ci_current_start=0

# mmss prints seconds as m:ss.
mmss() { printf '%d:%02d' $(($1 / 60)) $(($1 % 60)); }

step() {
	local name=$1 rc=0
	shift
	echo "=== step: $name ($*)"
	ci_current=$name ci_current_start=$SECONDS
	"$@" || rc=$?
	ci_names+=("$name") ci_secs+=($((SECONDS - ci_current_start)))
	ci_current=
	if ((rc == 0)); then
		ci_results+=(ok)
	else
		ci_results+=("FAILED (exit $rc)")
		exit "$rc"
	fi
}

ci_table() {
	local i
	echo "| step | time (m:ss) | result |"
	echo "| --- | ---: | --- |"
	for i in "${!ci_names[@]}"; do
		echo "| ${ci_names[$i]} | $(mmss "${ci_secs[$i]}") | ${ci_results[$i]} |"
	done
	echo "| total | $(mmss $((SECONDS - ci_start))) | |"
}

ci_report() {
	local rc=$?
	if [ -n "$ci_current" ]; then # a signal ended the run inside a step
		ci_names+=("$ci_current") ci_secs+=($((SECONDS - ci_current_start))) ci_results+=(interrupted)
		((rc != 0)) || rc=1
	fi
	echo
	echo ".ci/run steps, $(date -u +%Y-%m-%dT%H:%MZ), $(nproc) cores, load average at the end $(cut -d' ' -f1-3 /proc/loadavg):"
	ci_table | tee bin/ci-times.md
	exit "$rc"
}
trap ci_report EXIT
