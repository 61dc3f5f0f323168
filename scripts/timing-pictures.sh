#!/usr/bin/env bash
# The book's timing pictures, drawn from real runs: docs/src/images/timing-*.svg.
#
# Starts the local cluster (scripts/cluster.sh, SKIP_BUILD=1: the release binary already
# in target/release), runs five small scenarios through Nginx on loopback, each on a
# product of its own reset with "trace": true, fetches each product's lock timeline
# (GET /trace), draws it with scripts/timeline-svg.py in English and in Chinese, and stops
# the cluster (also when something fails). About 30 seconds; nothing is left running.
#
#   token-overlap      token, 1500 ms of work under a 1000 ms TTL: two holders inside at once
#   fencing            the same, with fence=on: the stale holders' commits refused
#   watchdog-renewing  watchdog, the same work under a 1000 ms lease renewed (renew=on)
#   handoff            watchdog, 300 ms of work: a holder hands the lock to a waiter of
#                      its own instance
#   segmented          24 units in 8 shards, 32 buyers: a holder inside each shard at once
#
# Each scenario's picture must show what it is for (checked from the trace: an overlap, a
# fenced commit, renewals, a hand-off, shards inside at once); a run that does not is run
# again, up to three times, and the script fails if none did. None of these lessons needs
# --faults, so the instances start with no extra flag.
#
# The SVGs in docs/src/images/timing-*.svg (and timing-*.zh-CN.svg) came from this script;
# run it again to redraw them. It refuses to start while a cluster runs in ./run, since
# it stops the cluster it starts.
#
#   scripts/timing-pictures.sh
#
# Settings, from the environment: OUT=docs/src/images  where the SVGs go.
set -euo pipefail
cd "$(dirname "$0")/.."

OUT=${OUT:-docs/src/images}
BASE="http://127.0.0.1:8080"
WORK=$(mktemp -d)
MADE_BY="scripts/timing-pictures.sh"

say() { echo "timing-pictures: $*" >&2; }

if scripts/cluster.sh status 2>/dev/null | grep -q ': running'; then
  say "a cluster already runs in ./run; stop it first (scripts/cluster.sh stop)"
  exit 1
fi
if [ ! -x target/release/seckill ]; then
  say "no target/release/seckill: build it first (cargo build --release -p seckill)"
  exit 1
fi

cleanup() {
  scripts/cluster.sh stop >/dev/null 2>&1 || true
  rm -rf "$WORK"
}
trap cleanup EXIT INT TERM

SKIP_BUILD=1 SECKILL_SERVE_ARGS="" scripts/cluster.sh start
mkdir -p "$OUT"

reset() { # product stock shards
  curl -sf --max-time 10 -X POST "$BASE/admin/reset" \
    -d "{\"product\":\"$1\",\"stock\":$2,\"shards\":$3,\"trace\":true}" >/dev/null
}

buy() { # product buyers variant query: that many buyers at once, each one request
  local i
  for i in $(seq 1 "$2"); do
    curl -s --max-time 30 -o /dev/null -X POST "$BASE/deduct_stock/$3?product=$1&$4" &
  done
  wait
}

# Whether the trace shows what the picture is for (exit 0); the run's figures on stdout,
# a line in English, a line in Chinese.
check() { # name trace.json stats.json
  python3 - "$@" <<'EOF'
import json, sys
name, trace, stats = sys.argv[1], json.load(open(sys.argv[2])), json.load(open(sys.argv[3]))
ev = trace["events"]
enters = [e for e in ev if e["event"] == "enter"]
leaves = [e for e in ev if e["event"] == "leave"]
def inside_at_once():
    # Most sections of different shards inside at one time.
    spans, open_ = [], {}
    for e in ev:
        key = (e["holder"], e["shard"])
        if e["event"] == "enter": open_[key] = e["at"]
        elif key in open_: spans.append((open_.pop(key), e["at"]))
    return max((sum(1 for a, b in spans if a <= t < b) for t, _ in spans), default=0)
at_once = inside_at_once()
handoffs = sum(1 for e in enters if e.get("handed_by"))
sold, initial = stats["sold"], stats["initial"]
shown, en, zh = {
    "token-overlap": (any(e.get("overlap") for e in enters),
                      f"This run: {sold} sold of {initial} units, {stats['lock_overlaps']} overlaps, {stats['oversold']} oversold",
                      f"本次：{initial} 件卖出 {sold} 件，重叠 {stats['lock_overlaps']} 次，超卖 {stats['oversold']} 件"),
    "fencing": (any(e.get("outcome") == "fenced" for e in leaves),
                f"This run: {stats['fenced']} commits refused, {sold} sold, {stats['oversold']} oversold",
                f"本次：{stats['fenced']} 次提交被拒绝，卖出 {sold} 件，超卖 {stats['oversold']} 件"),
    "watchdog-renewing": (any(e.get("renewals_ms") for e in leaves) and not any(e.get("overlap") for e in enters),
                          f"This run: {sold} sold of {initial} units, {stats['lock_overlaps']} overlaps",
                          f"本次：{initial} 件卖出 {sold} 件，重叠 {stats['lock_overlaps']} 次"),
    "handoff": (handoffs > 0,
                f"This run: {handoffs} hand-offs, {sold} sold of {initial} units",
                f"本次：移交 {handoffs} 次，{initial} 件卖出 {sold} 件"),
    "segmented": (at_once >= stats["shards"],
                  f"This run: {at_once} holders inside at once, {sold} sold of {initial} units, {stats['oversold']} oversold",
                  f"本次：最多 {at_once} 个持有者同时在里面，{initial} 件卖出 {sold} 件，超卖 {stats['oversold']} 件"),
}[name]
print(en)
print(zh)
sys.exit(0 if shown else 1)
EOF
}

draw() { # name product rows title-en subtitle-en title-zh subtitle-zh (figures: $WORK/name.figures)
  local name=$1 product=$2 rows=$3 trace="$WORK/$1.json"
  local note="Generated by $MADE_BY from a real run (product $product, its GET /trace drawn by scripts/timeline-svg.py); do not edit by hand, run the script again."
  python3 scripts/timeline-svg.py "$trace" --rows "$rows" -o "$OUT/timing-$name.svg" \
    --title "$4" --subtitle "$5" --figures "$(sed -n 1p "$WORK/$name.figures")" \
    --command "$MADE_BY" --comment "$note"
  python3 scripts/timeline-svg.py "$trace" --rows "$rows" --lang zh-CN -o "$OUT/timing-$name.zh-CN.svg" \
    --title "$6" --subtitle "$7" --figures "$(sed -n 2p "$WORK/$name.figures")" \
    --command "$MADE_BY" --comment "$note"
  python3 -c "import xml.dom.minidom,sys; [xml.dom.minidom.parse(f) for f in sys.argv[1:]]" \
    "$OUT/timing-$name.svg" "$OUT/timing-$name.zh-CN.svg"
  say "$OUT/timing-$name.svg (and .zh-CN.svg)"
}

# One scenario, run until its trace shows what it is for (at most three times); its
# figures go to $WORK/name.figures.
scenario() { # name product stock shards buyers variant query
  local name=$1 product=$2 try
  for try in 1 2 3; do
    reset "$product" "$3" "$4"
    buy "$product" "$5" "$6" "$7"
    curl -sf --max-time 10 "$BASE/trace?product=$product&since=0" >"$WORK/$name.json"
    curl -sf --max-time 10 "$BASE/stats?product=$product" >"$WORK/$name.stats.json"
    if check "$name" "$WORK/$name.json" "$WORK/$name.stats.json" >"$WORK/$name.figures"; then
      say "$name: try $try shows it ($(head -1 "$WORK/$name.figures"))"
      return 0
    fi
    say "$name: try $try does not show it ($(head -1 "$WORK/$name.figures")); again"
  done
  say "$name: three tries, none showed it; see $WORK/$name.json"
  return 1
}

scenario token-overlap 9101 3 1 6 token "work_ms=1500&ttl_ms=1000&wait_ms=10000"
draw token-overlap 9101 holder \
  "token: the lock expires under its holder" \
  "6 buyers at once for 3 units; each works 1500 ms under a 1000 ms TTL (token)." \
  "token：锁在持有者手里过期" \
  "6 个买家同时抢 3 件；每人工作 1500 毫秒，锁 1000 毫秒过期（token）。"

scenario fencing 9102 3 1 6 token "work_ms=1500&ttl_ms=1000&wait_ms=10000&fence=on"
draw fencing 9102 holder \
  "fencing: the stock refuses a stale holder's write" \
  "The same run with fence=on: the lock still expires, a commit with an older token is refused." \
  "fencing：库存拒绝过期持有者的写入" \
  "同样的运行加上 fence=on：锁照样过期，令牌较旧的提交被拒绝。"

scenario watchdog-renewing 9103 3 1 3 watchdog "work_ms=1500&lease_ms=1000&renew=on&wait_ms=10000"
draw watchdog-renewing 9103 holder \
  "watchdog: the lease is renewed while its holder works" \
  "3 buyers for 3 units; 1500 ms of work under a 1000 ms lease, renewed every third of it." \
  "看门狗：持有者工作时租约不断续期" \
  "3 个买家抢 3 件；1000 毫秒的租约下工作 1500 毫秒，每三分之一租约续期一次。"

scenario handoff 9104 6 1 6 watchdog "work_ms=300&wait_ms=10000"
draw handoff 9104 holder \
  "hand-off: the holder passes the lock to a waiter of its instance" \
  "watchdog: 6 buyers at once for 6 units through Nginx, 300 ms of work each." \
  "移交：持有者把锁直接交给本实例的等待者" \
  "watchdog：6 个买家经 Nginx 同时抢 6 件，每人工作 300 毫秒。"

# More buyers than units, as in the lesson: a buyer picks a shard at random, so with
# as many buyers as units a shard can be left for later and the picture shows fewer
# holders at once than shards.
scenario segmented 9105 24 8 32 segmented "work_ms=300&wait_ms=10000"
draw segmented 9105 shard \
  "segmented: 8 shards, a lock each, holders inside at once" \
  "24 units in 8 shards, 32 buyers at once, 300 ms of work each (segmented)." \
  "分段：8 段库存各一把锁，持有者同时在里面" \
  "24 件分成 8 段，32 个买家同时抢，每人工作 300 毫秒（segmented）。"

say "done; stopping the cluster"
