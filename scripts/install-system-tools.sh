#!/usr/bin/env bash
# Debian tools the test suite drives for real: chromium (browser tests through Playwright) and
# promtool (Prometheus config and rule checks). Installs only what is missing; needs root.
set -euo pipefail
missing=()
command -v chromium >/dev/null || missing+=(chromium)
command -v promtool >/dev/null || missing+=(promtool)
[ ${#missing[@]} -eq 0 ] && exit 0
echo "installing: ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
if [[ " ${missing[*]} " == *" chromium "* ]]; then
  apt-get install -y -qq chromium >/dev/null
fi
if [[ " ${missing[*]} " == *" promtool "* ]]; then
  # Only the checker from Debian's prometheus package, not the server and its service.
  work=$(mktemp -d)
  (cd "$work" && apt-get download -qq prometheus && dpkg-deb -x prometheus_*.deb root)
  install -m 755 "$work/root/usr/bin/promtool" /usr/local/bin/promtool
  rm -rf "$work"
fi
