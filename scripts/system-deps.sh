#!/usr/bin/env bash
# Installs the Debian packages the tests need (redis-server for the Redis event feed, nginx as the
# gRPC load balancer of the fleet test, chromium for the dashboard's browser test).
# Idempotent: does nothing when all are already present.
set -euo pipefail

need=()
command -v redis-server >/dev/null 2>&1 || need+=(redis-server)
command -v nginx >/dev/null 2>&1 || [ -x /usr/sbin/nginx ] || need+=(nginx)
[ -x /usr/bin/chromium ] || need+=(chromium)
[ ${#need[@]} -eq 0 ] && exit 0

sudo=()
if [ "$(id -u)" -ne 0 ]; then
  command -v sudo >/dev/null 2>&1 || { echo "system-deps: need root (or sudo) to install ${need[*]}" >&2; exit 1; }
  sudo=(sudo)
fi

export DEBIAN_FRONTEND=noninteractive
echo "system-deps: installing ${need[*]}" >&2
"${sudo[@]}" apt-get update -qq >/dev/null
# --no-install-recommends keeps the install small; policy-rc.d stops the packages from starting
# system-wide daemons (the tests start their own instances on free loopback ports).
policy=/usr/sbin/policy-rc.d
created_policy=0
if [ ! -e "$policy" ] && [ "$(id -u)" -eq 0 ]; then
  printf '#!/bin/sh\nexit 101\n' >"$policy" && chmod +x "$policy" && created_policy=1
fi
trap 'if [ "$created_policy" -eq 1 ]; then rm -f "$policy"; fi' EXIT
log=$(mktemp)
if ! "${sudo[@]}" apt-get install -y -qq -o DPkg::Lock::Timeout=300 --no-install-recommends "${need[@]}" >"$log" 2>&1; then
  cat "$log" >&2; rm -f "$log"; exit 1
fi
rm -f "$log"
