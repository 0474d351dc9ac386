#!/bin/sh
# install-chromium.sh installs Debian's chromium package, which the
# dashboard's browser tests drive headless through chromedp:
#
#	scripts/install-chromium.sh && go test -tags browser ./dashboard/...
#
# It does nothing when a chromium binary is already on PATH (or
# $CHROMIUM names one), so it is safe to run before every test run. It
# needs root, or sudo, to install.
set -eu

for bin in "${CHROMIUM:-}" chromium chromium-browser google-chrome; do
	if [ -n "$bin" ] && command -v "$bin" >/dev/null 2>&1; then
		echo "install-chromium.sh: $(command -v "$bin") is installed"
		exit 0
	fi
done

if [ "$(id -u)" -eq 0 ]; then
	sudo=
elif command -v sudo >/dev/null 2>&1; then
	sudo=sudo
else
	echo "install-chromium.sh: chromium is missing, and installing it needs root or sudo" >&2
	exit 1
fi

export DEBIAN_FRONTEND=noninteractive
if ! $sudo apt-get install -y --no-install-recommends chromium; then
	# The package lists may be missing or stale (fresh containers have none).
	$sudo apt-get update
	$sudo apt-get install -y --no-install-recommends chromium
fi
command -v chromium >/dev/null
echo "install-chromium.sh: installed $(command -v chromium)"
