#!/usr/bin/env bash
# Installs what the tests and the demo run against — redis-server, redis-tools (redis-cli),
# redis-sentinel, nginx, postgresql (the orders' store of record, started by
# scripts/postgres.sh) and zookeeper on a headless JRE (the zookeeper variant's ensemble,
# started by scripts/zookeeper.sh), and for the tests openssl (TLS certificates), iproute2 (a
# network namespace) and kubectl (kubernetes-client, for scripts/k8s-check.sh) — from
# Debian's packages when they are missing. Runs apt-get update at most once.
#
#   scripts/install-deps.sh           the servers and tools
#   scripts/install-deps.sh browser   Chromium, chromedriver and a Chinese font, for the page's browser
#                                     test; best effort: when they cannot be installed it
#                                     says so and exits 0, and that test skips, saying so
set -euo pipefail

if [ "${1:-}" = browser ]; then
  # A font with Chinese glyphs too: the page's Chinese screenshot is read, not boxes.
  if command -v chromedriver >/dev/null 2>&1 && { [ -x /usr/bin/chromium ] || command -v chromium >/dev/null 2>&1; } \
      && [ -d /usr/share/fonts/truetype/wqy ]; then
    exit 0
  fi
  sudo=""
  if [ "$(id -u)" -ne 0 ]; then
    command -v sudo >/dev/null 2>&1 || { echo "not root and no sudo: cannot install chromium; the browser test will skip" >&2; exit 0; }
    sudo="sudo"
  fi
  echo "installing chromium and chromium-driver from Debian's packages (for the page's browser test)" >&2
  install() { DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends chromium chromium-driver fonts-wqy-zenhei >/dev/null; }
  # The package lists are usually fresh from the install above: update only if they are not.
  if ! install 2>/dev/null && ! { $sudo apt-get update -qq && install; }; then
    echo "could not install chromium: the page's browser test will skip" >&2
  fi
  exit 0
fi

missing=()
command -v redis-server >/dev/null 2>&1 || missing+=(redis-server)
command -v redis-cli >/dev/null 2>&1 || missing+=(redis-tools)
command -v redis-sentinel >/dev/null 2>&1 || missing+=(redis-sentinel)
command -v nginx >/dev/null 2>&1 || [ -x /usr/sbin/nginx ] || missing+=(nginx)
ls /usr/lib/postgresql/*/bin/pg_ctl >/dev/null 2>&1 || missing+=(postgresql)
[ -f /usr/share/java/zookeeper.jar ] || missing+=(zookeeper)
command -v java >/dev/null 2>&1 || missing+=(default-jre-headless)
command -v openssl >/dev/null 2>&1 || missing+=(openssl)
# scripts/walk.sh: the request's path traced under gdb (nm and addr2line from binutils).
command -v gdb >/dev/null 2>&1 || missing+=(gdb)
command -v addr2line >/dev/null 2>&1 || missing+=(binutils)
command -v ip >/dev/null 2>&1 || [ -x /usr/sbin/ip ] || [ -x /sbin/ip ] || missing+=(iproute2)
# scripts/k8s-check.sh renders the Kubernetes manifests with `kubectl kustomize`; any kubectl
# will do, Debian's (1.20, kustomize 2.0.3) included.
command -v kubectl >/dev/null 2>&1 || missing+=(kubernetes-client)
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
  for svc in redis-server redis-sentinel nginx postgresql zookeeper; do $sudo service "$svc" stop >/dev/null 2>&1 || true; done
fi
