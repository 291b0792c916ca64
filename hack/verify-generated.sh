#!/usr/bin/env bash
# Regenerates deepcopy code and manifests and fails if any generated file changed, including a
# file edited by hand and not yet committed (the comparison is against the working tree).
set -euo pipefail
make=${1:-make}
cd "$(git rev-parse --show-toplevel)"

generated() {
	{ git ls-files -co --exclude-standard -- 'api/**/zz_generated.*.go' config/crd config/rbac; } | sort -u
}
checksum() { generated | xargs -r sha256sum; }

before=$(checksum)
$make --no-print-directory generate manifests >/dev/null
after=$(checksum)
if [ "$before" != "$after" ]; then
	echo "generated files were stale or edited by hand; they are now regenerated:" >&2
	diff <(echo "$before") <(echo "$after") | sed -n 's/^> [0-9a-f]*  /  /p' >&2
	echo "review with 'git diff' and commit them (never edit generated files by hand)" >&2
	exit 1
fi
