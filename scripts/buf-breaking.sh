#!/bin/sh
# buf breaking, against the last release (the newest v* tag) and against the previous commit: a
# release's contract must never break, and neither may a commit break what the one before it
# offered. Each contract is read with `git archive` rather than buf's own `.git#ref=`, which
# clones shallowly and cannot reach an older release.
# Usage: scripts/buf-breaking.sh BUF   (RELEASE_REF overrides the tag)
set -eu
buf=$1

against() {
	label=$1
	ref=$2
	dir=$(mktemp -d)
	trap 'rm -rf "$dir"' EXIT
	git archive "$ref" buf.yaml proto | tar -x -C "$dir"
	echo "buf breaking against $label ($ref)"
	"$buf" breaking --against "$dir"
	rm -rf "$dir"
	trap - EXIT
}

release=${RELEASE_REF:-$(git describe --tags --abbrev=0 --match 'v*' 2>/dev/null || true)}
if [ -n "$release" ]; then
	if ! git rev-parse --verify -q "$release^{commit}" >/dev/null; then
		echo "the release $release is not in this clone (a shallow one?): git fetch --tags" >&2
		exit 1
	fi
	against "the last release" "$release"
else
	echo "buf breaking: no release tag (v*) yet; the previous commit is the only contract to keep"
fi
if git rev-parse --verify -q HEAD~1 >/dev/null; then
	against "the previous commit" HEAD~1
fi
