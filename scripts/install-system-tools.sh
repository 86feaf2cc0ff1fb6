#!/usr/bin/env bash
# Debian tools the test suite drives for real: chromium (browser tests through Playwright), promtool
# (Prometheus config and rule checks), the Prometheus server (dashboard queries against a live
# replica) and nginx (the Ansible TLS proxy, tests/ansible). Installs only what is missing; needs root.
set -euo pipefail
missing=()
command -v chromium >/dev/null || missing+=(chromium)
command -v nginx >/dev/null || missing+=(nginx)
{ command -v promtool >/dev/null && command -v prometheus >/dev/null; } || missing+=(prometheus)
[ ${#missing[@]} -eq 0 ] && exit 0
echo "installing: ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
if [[ " ${missing[*]} " == *" chromium "* ]]; then
  apt-get install -y -qq chromium >/dev/null
fi
if [[ " ${missing[*]} " == *" nginx "* ]]; then
  apt-get install -y -qq nginx >/dev/null
fi
if [[ " ${missing[*]} " == *" prometheus "* ]]; then
  # The two binaries of Debian's prometheus package, without its service (tests start their own).
  work=$(mktemp -d)
  (cd "$work" && apt-get download -qq prometheus && dpkg-deb -x prometheus_*.deb root)
  install -m 755 "$work/root/usr/bin/promtool" /usr/local/bin/promtool
  install -m 755 "$work/root/usr/bin/prometheus" /usr/local/bin/prometheus
  rm -rf "$work"
fi
