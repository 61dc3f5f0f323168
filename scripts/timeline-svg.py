#!/usr/bin/env python3
"""A lock timeline (a `GET /trace` dump) drawn as a self-contained SVG timing diagram.

Reads the JSON that `GET /trace?product=<id>&since=0` answers (a file, or stdin with `-`)
and writes an SVG: a time axis in ms from the first event, one row per holder (or, with
`--rows shard`, per shard of a segmented stock), and the page's timeline marks, larger,
for a projector:

  - a bar for each critical section (entering to leaving), coloured by instance, red where
    two holders of one shard were inside at once, a pale red band over that time;
  - a thin grey bar before it for the wait for the lock;
  - white ticks on the bar where the watchdog renewed the lease;
  - a black cross where the lease ran out under its holder (lease, grant and renewals from
    the holder's note, as crates/seckill/src/page/timeline.js computes it);
  - an arrow from a holder to the one it handed the lock to;
  - a red "no entry" sign where the stock refused a stale holder's commit (`fenced`);
  - the outcome after each bar (holder rows), a title, a subtitle and a legend of the
    marks the picture uses.

Fonts are the viewer's sans-serif (nothing fetched, no script). `--lang zh-CN` writes the
labels in Chinese; the drawing is the same.

  scripts/timeline-svg.py trace.json -o picture.svg --title "..." [--subtitle "..."]
                          [--figures "..."] [--rows holder|shard] [--lang en|zh-CN]
                          [--command "..."] [--comment "..."]

Standard library only. scripts/timing-pictures.sh makes the book's pictures with it.
"""
import argparse
import json
import sys
from xml.sax.saxutils import escape

WIDTH = 1280
LEFT = 230            # row labels
RIGHT = 190           # outcome labels
TOP = 146             # first row
ROW = 58              # row height
BAR = 30              # bar height
FONT = "DejaVu Sans, Helvetica, Arial, sans-serif"
RED = "#c62828"
INSTANCE_COLORS = ["#1f5fae", "#2e7d32", "#6a3d9a", "#b15928"]

WORDS = {
    "en": {
        "buyer": "buyer {}",
        "shard": "shard {}",
        "axis": "time (ms, Redis clock, from the first event)",
        "deducted": "sold",
        "sold_out": "sold out",
        "fenced": "refused",
        "lock_lost": "lock lost",
        "open": "still inside",
        "handoff": "hand-off",
        "ran_out": "lease ran out",
        "legend_section": "critical section ({})",
        "legend_overlap": "two holders inside at once",
        "legend_wait": "waiting for the lock",
        "legend_renewal": "lease renewed",
        "legend_ran_out": "lease ran out under its holder",
        "legend_handoff": "lock handed to the next holder",
        "legend_fenced": "commit refused (fencing token too old)",
        "legend_other": "left without selling",
        "source": "From a real run: GET /trace?product={} · made by {}",
        "empty": "no critical section on this timeline",
    },
    "zh-CN": {
        "buyer": "买家 {}",
        "shard": "分段 {}",
        "axis": "时间（毫秒，Redis 时钟，从第一个事件算起）",
        "deducted": "售出",
        "sold_out": "已售罄",
        "fenced": "被拒绝",
        "lock_lost": "锁已丢失",
        "open": "仍在里面",
        "handoff": "移交",
        "ran_out": "租约过期",
        "legend_section": "临界区（{}）",
        "legend_overlap": "两个持有者同时在里面",
        "legend_wait": "等锁",
        "legend_renewal": "租约续期",
        "legend_ran_out": "租约在持有者手里过期",
        "legend_handoff": "锁直接交给下一个持有者",
        "legend_fenced": "提交被拒绝（fencing token 过旧）",
        "legend_other": "离开时没有卖出",
        "source": "来自一次真实运行：GET /trace?product={} · 由 {} 生成",
        "empty": "时间线上没有临界区",
    },
}


def sections_of(events, now_ms):
    """Enter and leave events paired into sections: by holder and shard, in time order
    (a segmented request enters one shard after another under one holder id)."""
    open_ = {}
    sections = []
    for e in sorted(events, key=lambda e: (e["at"], e.get("shard", 0), e.get("id", ""))):
        key = (e["holder"], e.get("shard", 0))
        if e["event"] == "enter":
            s = {
                "holder": e["holder"], "shard": e.get("shard", 0), "enter": e["at"],
                "instance": e.get("instance") or e["holder"].split("/")[0],
                "lease": e.get("lease_ms"), "granted": e.get("granted_ms", 0),
                "waited": e.get("waited_ms"), "handed_by": e.get("handed_by"),
                "renewals": [], "leave": None, "outcome": None,
            }
            open_[key] = s
            sections.append(s)
        elif e["event"] == "leave":
            s = open_.pop(key, None)
            if s is None:  # its entry fell off the stream's cap
                continue
            s["leave"] = e["at"]
            s["outcome"] = e.get("outcome")
            s["renewals"] = e.get("renewals_ms", [])
            if s["waited"] is None:
                s["waited"] = e.get("waited_ms")
    for s in sections:
        s["still_open"] = s["leave"] is None
        if s["leave"] is None:
            s["leave"] = max(now_ms or s["enter"], s["enter"])
    return sections


def expiry_of(s):
    """Where the lease ran out under the holder, or None (timeline.js's rule)."""
    if not s["lease"]:
        return None
    renewed = s["enter"] + s["renewals"][-1] if s["renewals"] else s["enter"] - (s["granted"] or 0)
    expiry = renewed + s["lease"]
    return expiry if expiry < s["leave"] else None


def overlaps(sections):
    """Marks the sections another of their shard overlaps, and returns the intervals."""
    bands = []
    for s in sections:
        s["red"] = False
    for i, a in enumerate(sections):
        for b in sections[i + 1:]:
            if a["shard"] != b["shard"]:
                continue
            lo, hi = max(a["enter"], b["enter"]), min(a["leave"], b["leave"])
            if lo < hi:
                a["red"] = b["red"] = True
                bands.append((lo, hi))
    return bands


def nice_step(span):
    for step in (10, 20, 50, 100, 200, 250, 500, 1000, 2000, 2500, 5000, 10000, 20000, 60000):
        if span / step <= 10:
            return step
    return 120000


def text(x, y, s, size=20, anchor="start", weight="normal", fill="#1c2430", extra=""):
    return (f'<text x="{x:.1f}" y="{y:.1f}" font-size="{size}" text-anchor="{anchor}" '
            f'font-weight="{weight}" fill="{fill}"{extra}>{escape(str(s))}</text>')


def no_entry(cx, cy, r=13):
    """A red circle with a white bar: the stock refused this commit."""
    return (f'<circle cx="{cx:.1f}" cy="{cy:.1f}" r="{r}" fill="{RED}" stroke="#fff" stroke-width="2"/>'
            f'<rect x="{cx - r * 0.62:.1f}" y="{cy - 2.5:.1f}" width="{r * 1.24:.1f}" height="5" fill="#fff"/>')


def cross(cx, cy, r=10):
    return (f'<path d="M{cx - r:.1f},{cy - r:.1f} L{cx + r:.1f},{cy + r:.1f} M{cx + r:.1f},{cy - r:.1f} '
            f'L{cx - r:.1f},{cy + r:.1f}" stroke="#fff" stroke-width="7" stroke-linecap="round"/>'
            f'<path d="M{cx - r:.1f},{cy - r:.1f} L{cx + r:.1f},{cy + r:.1f} M{cx + r:.1f},{cy - r:.1f} '
            f'L{cx - r:.1f},{cy + r:.1f}" stroke="#111" stroke-width="3.5" stroke-linecap="round"/>')


def render(trace, title, subtitle, rows_by, lang, command, figures=""):
    w = WORDS[lang]
    sections = sections_of(trace.get("events", []), trace.get("now_ms"))
    bands = overlaps(sections)
    instances = sorted({s["instance"] for s in sections})
    color = {name: INSTANCE_COLORS[i % len(INSTANCE_COLORS)] for i, name in enumerate(instances)}

    # Rows: holders in the order they first entered, or shards.
    if rows_by == "shard":
        keys = sorted({s["shard"] for s in sections})
        row_of = {k: i for i, k in enumerate(keys)}
        labels = [(w["shard"].format(k), None) for k in keys]
        for s in sections:
            s["row"] = row_of[s["shard"]]
    else:
        order = []
        for s in sorted(sections, key=lambda s: s["enter"]):
            if s["holder"] not in order:
                order.append(s["holder"])
        row_of = {h: i for i, h in enumerate(order)}
        labels = []
        for i, h in enumerate(order):
            inst = next(s["instance"] for s in sections if s["holder"] == h)
            labels.append((w["buyer"].format(i + 1), inst))
        for s in sections:
            s["row"] = row_of[s["holder"]]
    nrows = max(1, len(labels))

    starts = [s["enter"] - (s["waited"] or 0 if rows_by == "holder" else 0) for s in sections]
    t0 = min(starts) if starts else 0
    t1 = max(s["leave"] for s in sections) if sections else t0 + 1000
    span = max(1, t1 - t0)
    step = nice_step(span)
    t_end = t0 + ((span + step - 1) // step) * step
    plot_w = WIDTH - LEFT - RIGHT

    def x(at):
        return LEFT + plot_w * (at - t0) / (t_end - t0)

    def ymid(row):
        return TOP + row * ROW + ROW / 2

    plot_bottom = TOP + nrows * ROW
    out = []
    # Bands where two holders were inside at once, behind everything.
    for lo, hi in bands:
        out.append(f'<rect x="{x(lo):.1f}" y="{TOP - 6}" width="{max(1.5, x(hi) - x(lo)):.1f}" '
                   f'height="{nrows * ROW + 12}" fill="{RED}" fill-opacity="0.13"/>')
    # Row stripes and labels.
    for i, (label, inst) in enumerate(labels):
        y = TOP + i * ROW
        if i % 2 == 0:
            out.append(f'<rect x="{LEFT}" y="{y}" width="{plot_w}" height="{ROW}" fill="#f3f5f8"/>')
        if inst:
            out.append(text(LEFT - 14, y + ROW / 2 - 2, label, 22, "end", "bold"))
            out.append(text(LEFT - 14, y + ROW / 2 + 19, inst, 16, "end", fill=color[inst]))
        else:
            out.append(text(LEFT - 14, y + ROW / 2 + 8, label, 22, "end", "bold"))
    # Time axis.
    tick = 0
    while t0 + tick <= t_end:
        tx = x(t0 + tick)
        out.append(f'<line x1="{tx:.1f}" y1="{TOP - 6}" x2="{tx:.1f}" y2="{plot_bottom + 8}" '
                   f'stroke="#c9d0d9" stroke-width="1"/>')
        out.append(text(tx, plot_bottom + 32, f"{tick}", 18, "middle", fill="#3d4a5c"))
        tick += step
    out.append(f'<line x1="{LEFT}" y1="{plot_bottom + 8}" x2="{LEFT + plot_w}" y2="{plot_bottom + 8}" '
               f'stroke="#5f6b7a" stroke-width="1.5"/>')
    out.append(text(LEFT + plot_w / 2, plot_bottom + 60, w["axis"], 18, "middle", fill="#3d4a5c"))

    used = set()
    marks = []  # drawn over the bars
    label_done = {"handoff": False, "ran_out": False}
    for s in sections:
        cy = ymid(s["row"])
        top = cy - BAR / 2
        waited = s["waited"] or 0
        if rows_by == "holder" and waited > 0:
            out.append(f'<rect x="{x(s["enter"] - waited):.1f}" y="{cy - 2.5:.1f}" '
                       f'width="{max(0.0, x(s["enter"]) - x(s["enter"] - waited)):.1f}" height="5" fill="#9aa5b1"/>')
            used.add("wait")
        fill = RED if s["red"] else color[s["instance"]]
        if not s["red"]:
            used.add(("instance", s["instance"]))
        sold = s["outcome"] in ("deducted", None)
        opacity = "1" if sold or s["red"] else "0.45"
        if not sold and not s["red"]:
            used.add("other")
        if s["red"]:
            used.add("overlap")
        width = max(3.0, x(s["leave"]) - x(s["enter"]))
        out.append(f'<rect x="{x(s["enter"]):.1f}" y="{top:.1f}" width="{width:.1f}" height="{BAR}" '
                   f'rx="4" fill="{fill}" fill-opacity="{opacity}"/>')
        for r in s["renewals"]:
            rx = x(s["enter"] + r)
            out.append(f'<line x1="{rx:.1f}" y1="{top + 3:.1f}" x2="{rx:.1f}" y2="{top + BAR - 3:.1f}" '
                       f'stroke="#fff" stroke-width="4"/>')
            used.add("renewal")
        expiry = expiry_of(s)
        if expiry is None and s["outcome"] == "lock_lost":
            expiry = s["leave"]
        if expiry is not None:
            marks.append(cross(x(expiry), cy))
            if not label_done["ran_out"]:
                marks.append(text(x(expiry), top - 6, w["ran_out"], 16, "middle", "bold", "#111"))
                label_done["ran_out"] = True
            used.add("ran_out")
        if s["outcome"] == "fenced":
            marks.append(no_entry(x(s["leave"]), cy))
            used.add("fenced")
        if rows_by == "holder":
            word = w["open"] if s["still_open"] else w.get(s["outcome"] or "", s["outcome"] or "")
            last = max((o["leave"] for o in sections if o["row"] == s["row"]), default=s["leave"])
            if s["leave"] == last and word:
                dx = 20 if s["outcome"] == "fenced" else 10
                out_fill = RED if s["outcome"] == "fenced" else "#1c2430"
                marks.append(text(x(s["leave"]) + dx, cy + 7, word, 19, fill=out_fill,
                                  weight="bold" if s["outcome"] == "fenced" else "normal"))
        # A hand-off: an arrow from the holder before, whose section left as this one entered.
        if s["handed_by"]:
            before = [o for o in sections if o["holder"] == s["handed_by"] and o["shard"] == s["shard"]
                      and o["leave"] <= s["enter"] + 5]
            if before:
                o = max(before, key=lambda o: o["leave"])
                fx, fy, tx, ty = x(o["leave"]), ymid(o["row"]), x(s["enter"]), ymid(s["row"])
                if rows_by == "holder" and o["row"] != s["row"]:
                    down = 1 if ty > fy else -1
                    marks.append(f'<path d="M{fx:.1f},{fy + down * BAR / 2:.1f} L{tx:.1f},{ty - down * (BAR / 2 + 3):.1f}" '
                                 f'stroke="#1c2430" stroke-width="3" fill="none" marker-end="url(#arrow)"/>')
                    if not label_done["handoff"]:
                        marks.append(text(max(fx, tx) + 12, (fy + ty) / 2 + 6, w["handoff"], 17, weight="bold"))
                        label_done["handoff"] = True
                    used.add("handoff")
                # A shard's row: the next bar starts where the last ended; no arrow.
    if not sections:
        out.append(text(LEFT + 10, TOP + ROW / 2 + 7, w["empty"], 20, fill="#5f6b7a"))
    out.extend(marks)

    # Legend: the marks this picture uses.
    legend = []
    for inst in instances:
        if ("instance", inst) in used:
            legend.append(("bar", color[inst], w["legend_section"].format(inst)))
    order = [("overlap", "bar-red", w["legend_overlap"]), ("wait", "wait", w["legend_wait"]),
             ("renewal", "renewal", w["legend_renewal"]), ("ran_out", "cross", w["legend_ran_out"]),
             ("handoff", "arrow", w["legend_handoff"]), ("fenced", "fenced", w["legend_fenced"]),
             ("other", "pale", w["legend_other"])]
    legend += [(kind, None, label) for key, kind, label in order if key in used]
    lx, ly = LEFT, plot_bottom + 100
    leg = []
    for kind, fill, label in legend:
        item_w = 44 + len(label) * (19 if lang == "zh-CN" else 10) + 30
        if lx + item_w > WIDTH - 20 and lx > LEFT:
            lx, ly = LEFT, ly + 36
        cy = ly - 6
        if kind == "bar":
            leg.append(f'<rect x="{lx}" y="{cy - 10}" width="34" height="20" rx="3" fill="{fill}"/>')
        elif kind == "bar-red":
            leg.append(f'<rect x="{lx}" y="{cy - 10}" width="34" height="20" rx="3" fill="{RED}"/>')
        elif kind == "pale":
            leg.append(f'<rect x="{lx}" y="{cy - 10}" width="34" height="20" rx="3" fill="{INSTANCE_COLORS[0]}" fill-opacity="0.45"/>')
        elif kind == "wait":
            leg.append(f'<rect x="{lx}" y="{cy - 2.5}" width="34" height="5" fill="#9aa5b1"/>')
        elif kind == "renewal":
            leg.append(f'<rect x="{lx}" y="{cy - 10}" width="34" height="20" rx="3" fill="{INSTANCE_COLORS[0]}"/>'
                       f'<line x1="{lx + 17}" y1="{cy - 8}" x2="{lx + 17}" y2="{cy + 8}" stroke="#fff" stroke-width="4"/>')
        elif kind == "cross":
            leg.append(cross(lx + 17, cy, 8))
        elif kind == "arrow":
            leg.append(f'<path d="M{lx},{cy} L{lx + 28},{cy}" stroke="#1c2430" stroke-width="3" marker-end="url(#arrow)"/>')
        elif kind == "fenced":
            leg.append(no_entry(lx + 17, cy, 11))
        leg.append(text(lx + 44, ly, label, 18))
        lx += item_w
    height = ly + 30 + (26 if command else 0)
    foot = []
    if command:
        foot.append(text(20, height - 14, w["source"].format(trace.get("product", "?"), command), 15,
                         fill="#5f6b7a"))

    head = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{height:.0f}" '
        f'viewBox="0 0 {WIDTH} {height:.0f}" font-family="{FONT}" role="img" aria-labelledby="title desc"'
        + (' xml:lang="zh-CN"' if lang == "zh-CN" else "") + ">",
        f'<title id="title">{escape(title)}</title>',
        f'<desc id="desc">{escape(" ".join(p for p in (subtitle, figures) if p) or title)}</desc>',
        '<defs><marker id="arrow" viewBox="0 0 10 10" refX="8" refY="5" markerWidth="5" markerHeight="5" '
        'orient="auto-start-reverse"><path d="M0,0 L10,5 L0,10 z" fill="#1c2430"/></marker></defs>',
        f'<rect width="{WIDTH}" height="{height:.0f}" fill="#ffffff"/>',
        text(20, 46, title, 30, weight="bold"),
    ]
    if subtitle:
        head.append(text(20, 82, subtitle, 19, fill="#3d4a5c"))
    if figures:
        head.append(text(20, 112, figures, 19, weight="bold", fill="#1c2430"))
    return "\n".join(head + out + leg + foot + ["</svg>", ""])


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("trace", nargs="?", default="-", help="a GET /trace dump (JSON); - for stdin")
    p.add_argument("-o", "--output", default="-", help="the SVG to write; - for stdout")
    p.add_argument("--title", default="Lock timeline")
    p.add_argument("--subtitle", default="")
    p.add_argument("--figures", default="", help="the run's figures, a bold line under the subtitle")
    p.add_argument("--rows", choices=("holder", "shard"), default="holder")
    p.add_argument("--lang", choices=tuple(WORDS), default="en")
    p.add_argument("--command", default="", help="what made the picture, written in its footer")
    p.add_argument("--comment", default="", help="an XML comment written at the top of the file")
    args = p.parse_args()
    raw = sys.stdin.read() if args.trace == "-" else open(args.trace, encoding="utf-8").read()
    svg = render(json.loads(raw), args.title, args.subtitle, args.rows, args.lang, args.command, args.figures)
    if args.comment:
        svg = "<!-- " + args.comment.replace("--", "- -") + " -->\n" + svg
    if args.output == "-":
        sys.stdout.write(svg)
    else:
        with open(args.output, "w", encoding="utf-8") as f:
            f.write(svg)


if __name__ == "__main__":
    main()
