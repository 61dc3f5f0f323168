#!/usr/bin/env bash
# A PostgreSQL of the project's own — the orders' store of record — in a data directory of
# its choosing, on loopback, with a database `seckill`. Debian's postgresql package
# (scripts/install-deps.sh installs it). PostgreSQL refuses to run as root: as root, the
# directory is handed to the `postgres` user and every step runs as that user.
#
#   scripts/postgres.sh start DIR PORT   initdb DIR if it is new, start on 127.0.0.1:PORT,
#                                        create the database; prints the URL
#   scripts/postgres.sh stop DIR         stop it (fast shutdown); the data stays
#   scripts/postgres.sh url PORT         the URL the instances take (--orders-db)
#
# scripts/cluster.sh, the demo and the tests (seckill-testkit) all start it here.
set -euo pipefail

bin=""
for candidate in /usr/lib/postgresql/*/bin; do
  [ -x "$candidate/pg_ctl" ] && bin=$candidate
done
[ -n "$bin" ] || bin=$(dirname "$(command -v pg_ctl 2>/dev/null || echo /nonexistent/pg_ctl)")
[ -x "$bin/pg_ctl" ] || { echo "PostgreSQL is not installed: scripts/install-deps.sh installs it" >&2; exit 127; }

as_owner() {
  if [ "$(id -u)" -eq 0 ]; then
    runuser -u postgres -- "$@"
  else
    "$@"
  fi
}

url() { echo "postgres://postgres@127.0.0.1:$1/seckill"; }

case "${1:-}" in
  start)
    dir=${2:?usage: scripts/postgres.sh start DIR PORT} port=${3:?usage: scripts/postgres.sh start DIR PORT}
    mkdir -p "$dir"
    [ "$(id -u)" -eq 0 ] && chown postgres: "$dir" && chmod 700 "$dir"
    if [ ! -f "$dir/PG_VERSION" ]; then
      # trust on loopback only: the server listens on 127.0.0.1 and its own socket directory.
      as_owner "$bin/initdb" -D "$dir" -U postgres --auth=trust -E UTF8 --locale=C.UTF-8 >/dev/null
    fi
    as_owner "$bin/pg_ctl" -D "$dir" -l "$dir/postgres.log" -w -t 30 start \
      -o "-p $port -c listen_addresses=127.0.0.1 -k $dir -c max_connections=200" >/dev/null
    as_owner "$bin/psql" -h 127.0.0.1 -p "$port" -U postgres -d postgres -qAt \
      -c "SELECT 1 FROM pg_database WHERE datname = 'seckill'" | grep -q 1 \
      || as_owner "$bin/createdb" -h 127.0.0.1 -p "$port" -U postgres seckill
    url "$port"
    ;;
  stop)
    dir=${2:?usage: scripts/postgres.sh stop DIR}
    [ -f "$dir/postmaster.pid" ] || exit 0
    as_owner "$bin/pg_ctl" -D "$dir" -m fast -w stop >/dev/null
    ;;
  url)
    url "${2:?usage: scripts/postgres.sh url PORT}"
    ;;
  *)
    echo "usage: scripts/postgres.sh start DIR PORT | stop DIR | url PORT" >&2
    exit 2
    ;;
esac
