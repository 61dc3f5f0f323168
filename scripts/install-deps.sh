#!/usr/bin/env bash
# Installs what the tests and the demo run against — redis-server, redis-tools (redis-cli),
# redis-sentinel and nginx, and for the
# tests openssl (TLS certificates) and iproute2 (a network namespace) — from Debian's
# packages when they are missing. Runs apt-get update at most once.
set -euo pipefail

missing=()
command -v redis-server >/dev/null 2>&1 || missing+=(redis-server)
command -v redis-cli >/dev/null 2>&1 || missing+=(redis-tools)
command -v redis-sentinel >/dev/null 2>&1 || missing+=(redis-sentinel)
command -v nginx >/dev/null 2>&1 || [ -x /usr/sbin/nginx ] || missing+=(nginx)
command -v openssl >/dev/null 2>&1 || missing+=(openssl)
command -v ip >/dev/null 2>&1 || [ -x /usr/sbin/ip ] || [ -x /sbin/ip ] || missing+=(iproute2)
[ ${#missing[@]} -eq 0 ] && exit 0

sudo=""
if [ "$(id -u)" -ne 0 ]; then
  command -v sudo >/dev/null 2>&1 || { echo "need root (or sudo) to install: ${missing[*]}" >&2; exit 1; }
  sudo="sudo"
fi
echo "installing ${missing[*]} from Debian's packages" >&2
$sudo apt-get update -qq
DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
# The packages start system services on their default ports; the project runs its own
# servers on ports of its choosing, so stop those where a service manager started them.
if command -v service >/dev/null 2>&1; then
  for svc in redis-server redis-sentinel nginx; do $sudo service "$svc" stop >/dev/null 2>&1 || true; done
fi
