#!/usr/bin/env bash
# A PostgreSQL of the project's own — the orders' store of record — in a data directory of
# its choosing, on loopback, with a database `seckill`. Debian's postgresql package
# (scripts/install-deps.sh installs it). PostgreSQL refuses to run as root: as root, the
# directory is handed to the `postgres` user and every step runs as that user.
#
#   scripts/postgres.sh start DIR PORT   initdb DIR if it is new, start on 127.0.0.1:PORT
#                                        unless it runs already, create the database;
#                                        prints the URL
#   scripts/postgres.sh stop DIR         stop it (fast shutdown); the data stays
#   scripts/postgres.sh clean DIR        stop it and delete its data
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

# Where DIR's data really lives. As root, the `postgres` user must reach DIR; under a
# folder it cannot enter (a checkout in /root, mode 700), the data goes to a folder of
# its own in /var/tmp named after DIR (the same for start and stop), and DIR says where.
data_dir() {
  local dir=$1 parent
  parent=$(dirname "$dir")
  mkdir -p "$parent"
  if [ "$(id -u)" -ne 0 ] || runuser -u postgres -- test -x "$parent" 2>/dev/null; then
    echo "$dir"
  else
    echo "/var/tmp/seckill-postgres-$(realpath -m "$dir" | sha1sum | cut -c1-12)"
  fi
}

case "${1:-}" in
  start)
    dir=${2:?usage: scripts/postgres.sh start DIR PORT} port=${3:?usage: scripts/postgres.sh start DIR PORT}
    real=$(data_dir "$dir")
    if [ "$real" != "$dir" ]; then
      mkdir -p "$dir"
      echo "the postgres user cannot reach $dir: the data is in $real" >"$dir/WHERE"
      dir=$real
    fi
    mkdir -p "$dir"
    [ "$(id -u)" -eq 0 ] && chown postgres: "$dir" && chmod 700 "$dir"
    if [ ! -f "$dir/PG_VERSION" ]; then
      # trust on loopback only: the server listens on 127.0.0.1 and its own socket directory.
      as_owner "$bin/initdb" -D "$dir" -U postgres --auth=trust -E UTF8 --locale=C.UTF-8 >/dev/null
    fi
    # Started already (a second `scripts/cluster.sh start`): left as it is.
    if ! as_owner "$bin/pg_ctl" -D "$dir" status >/dev/null 2>&1; then
      as_owner "$bin/pg_ctl" -D "$dir" -l "$dir/postgres.log" -w -t 30 start \
        -o "-p $port -c listen_addresses=127.0.0.1 -k $dir -c max_connections=200" >/dev/null
    fi
    as_owner "$bin/psql" -h 127.0.0.1 -p "$port" -U postgres -d postgres -qAt \
      -c "SELECT 1 FROM pg_database WHERE datname = 'seckill'" | grep -q 1 \
      || as_owner "$bin/createdb" -h 127.0.0.1 -p "$port" -U postgres seckill
    url "$port"
    ;;
  stop)
    dir=$(data_dir "${2:?usage: scripts/postgres.sh stop DIR}")
    [ -f "$dir/postmaster.pid" ] || exit 0
    as_owner "$bin/pg_ctl" -D "$dir" -m fast -w stop >/dev/null
    ;;
  clean)
    given=${2:?usage: scripts/postgres.sh clean DIR}
    "$0" stop "$given"
    rm -rf "$(data_dir "$given")" "$given"
    ;;
  url)
    url "${2:?usage: scripts/postgres.sh url PORT}"
    ;;
  *)
    echo "usage: scripts/postgres.sh start DIR PORT | stop DIR | clean DIR | url PORT" >&2
    exit 2
    ;;
esac
