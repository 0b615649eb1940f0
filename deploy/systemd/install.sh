#!/bin/sh
# Installs turnkeeper as a systemd service on Debian 12 (or any systemd distribution with
# Python >= 3.11 and its venv module), from the wheels `make wheel` writes to dist/:
#
#   make wheel
#   sudo apt-get install -y python3-venv      # Debian/Ubuntu: the venv module
#   sudo deploy/systemd/install.sh dist
#
# It creates a virtual environment in /opt/turnkeeper (never the system Python: Debian 12 refuses
# a system pip, PEP 668) and installs the wheels into it; the other dependencies come from the
# package index pip is configured with. Then the system user `turnkeeper`, the unit in
# /etc/systemd/system, and `systemctl enable --now`. Running it again upgrades in place.
# TURNKEEPER_ROOT=DIR installs under DIR instead and skips the user and systemctl (for packaging
# and for `make test-install`, which runs the README's steps this way).
set -eu

usage="usage: $0 DIST_DIR (the turnkeeper and turnkeeper_client wheels of 'make wheel')"
dist=${1:?$usage}
root=${TURNKEEPER_ROOT:-}
here=$(cd "$(dirname "$0")" && pwd)
prefix=/opt/turnkeeper
unit=/etc/systemd/system/turnkeeper.service
python=${PYTHON:-python3}

server_wheel=$(ls "$dist"/turnkeeper-*.whl 2>/dev/null | sort -V | tail -n 1)
client_wheel=$(ls "$dist"/turnkeeper_client-*.whl 2>/dev/null | sort -V | tail -n 1)
if [ -z "$server_wheel" ] || [ -z "$client_wheel" ]; then
    echo "$0: no turnkeeper-*.whl and turnkeeper_client-*.whl in $dist: run 'make wheel'" >&2
    exit 2
fi
if ! "$python" -c 'import sys; sys.exit(sys.version_info < (3, 11))'; then
    echo "$0: turnkeeper needs Python >= 3.11; $python is $("$python" -V 2>&1)" >&2
    exit 2
fi
if ! "$python" -c 'import ensurepip, venv' 2>/dev/null; then
    echo "$0: $python has no venv module: apt-get install python3-venv" >&2
    exit 2
fi

if [ ! -x "$root$prefix/bin/python" ]; then
    "$python" -m venv "$root$prefix"
fi
# The client wheel carries the generated turnkeeper.v1 code the server imports; --find-links
# lets the server wheel's pin on it resolve to the file.
"$root$prefix/bin/pip" install --quiet --disable-pip-version-check \
    --find-links "$dist" --upgrade "$client_wheel" "$server_wheel"

install -d -m 0755 "$root/etc/systemd/system"
install -m 0644 "$here/turnkeeper.service" "$root$unit"

if [ -n "$root" ]; then
    echo "installed under $root: $prefix, $unit"
    exit 0
fi
if ! getent passwd turnkeeper >/dev/null; then
    useradd --system --user-group --no-create-home --home-dir /nonexistent \
        --shell /usr/sbin/nologin turnkeeper
fi
systemctl daemon-reload
systemctl enable turnkeeper
# Starts it, or restarts it on the new code after an upgrade.
systemctl restart turnkeeper
echo "turnkeeper is running: systemctl status turnkeeper; journalctl -u turnkeeper"
