#!/usr/bin/env bash
# Runs JMeter in non-GUI mode with the given arguments, e.g.
#
#   loadtest/jmeter.sh -n -t loadtest/seckill.jmx -Jport=8080 -Jvariant=naive -l run/naive.jtl
#
# With JMeter 5.x this is plain `jmeter "$@"`. With Debian's jmeter 2.13 package, which
# cannot load any test plan as shipped (see debian-jmeter/NoTypePermission.java), it first
# builds a small classpath shim and runs jmeter with it.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
JMETER=${JMETER:-jmeter}

version=$("$JMETER" --version 2>&1 | grep -o 'Version [0-9][0-9.]*' | head -n 1 || true)
if [[ "$version" != "Version 2."* ]] || [ ! -f /usr/share/java/xstream.jar ]; then
  exec "$JMETER" "$@"
fi

shim_dir=${SHIM_DIR:-${TMPDIR:-/tmp}/seckill-jmeter-shim}
shim=$shim_dir/xstream-jmeter-types.jar
if [ ! -f "$shim" ] || [ "$here/debian-jmeter/NoTypePermission.java" -nt "$shim" ]; then
  command -v javac >/dev/null 2>&1 || {
    echo "Debian's jmeter needs a small shim compiled with javac: apt-get install default-jdk-headless" >&2
    exit 1
  }
  rm -rf "$shim_dir/classes" && mkdir -p "$shim_dir/classes"
  javac -nowarn -cp /usr/share/java/xstream.jar -d "$shim_dir/classes" \
    "$here/debian-jmeter/NoTypePermission.java"
  jar cf "$shim" -C "$shim_dir/classes" .
fi
# java-wrappers (Debian's jmeter launcher) puts JAVA_CLASSPATH ahead of the packaged jars.
JAVA_CLASSPATH="$shim${JAVA_CLASSPATH:+:$JAVA_CLASSPATH}" exec "$JMETER" "$@"
