#!/usr/bin/python3
"""jobs/bench.sh --check-scale: the scale rows printed complete, well-formed JSON lines.

    /usr/bin/python3 -B jobs/lib/bench_scale_check.py RESULTS.jsonl "SCALE_NPS" "COLL_CONFIGS" \
        MEM_NP "MEM_PIECES" "FIXED_NPS" "FIXED_LAYOUTS"

Checks fields and their consistency (counts > 0 where every save makes calls, memory numbers
present, ratios numeric), never speed. A per-node row may be skipped (with the saver's reason)
when this build has no per-node layout.
"""
import json
import sys

path, scale_nps, coll_configs, mem_np, mem_pieces, fixed_nps, fixed_layouts = sys.argv[1:8]
scale_nps = [int(n) for n in scale_nps.split()]
fixed_nps = [int(n) for n in fixed_nps.split()]
mem_np = int(mem_np)
mem_pieces = [int(p) for p in mem_pieces.split()]
bad, notes = [], []
rows = []
for n, line in enumerate(open(path), 1):
    try:
        rows.append(json.loads(line))
    except ValueError as e:
        bad.append("line %d does not parse: %s" % (n, e))


def num(j, f, lo=0, strict=False, integer=False):
    v = j.get(f)
    ok = isinstance(v, (int, float)) and not isinstance(v, bool)
    if ok and integer:
        ok = isinstance(v, int)
    if ok:
        ok = v > lo if strict else v >= lo
    if not ok:
        bad.append("%s %s: %s = %r, want a number %s %s" % (
            j.get("scenario"), j.get("op", j.get("layout")), f, v, ">" if strict else ">=", lo))
    return v if ok else None


def skipped(j, what):
    if "skipped" not in j:
        return False
    if j.get("layout") != "per-node" or not j["skipped"]:
        bad.append("%s skipped: %r (only per-node may be, with a reason)" % (what, j["skipped"]))
    else:
        notes.append("%s skipped: %s" % (what, j["skipped"]))
    return True


kinds = ("collective", "p2p", "io", "wait")
ops = ("save_first", "save_cached", "restore", "async")

# ---- collectives ----
for np_ in scale_nps:
    for cfg in coll_configs.split():
        layout, _, coll = cfg.partition(":")
        coll = int(coll or 0)
        what = "collectives np%d %s coll%d" % (np_, layout, coll)
        got = [j for j in rows if j.get("scenario") == "collectives" and j.get("ranks") == np_
               and j.get("layout") == layout and j.get("collective") == coll]
        if any(skipped(j, what) for j in got):
            continue
        for op in ops:
            js = [j for j in got if j.get("op") == op]
            if len(js) != 1:
                bad.append("%s: %d lines for op %s, want 1" % (what, len(js), op))
                continue
            j = js[0]
            for k in kinds:
                mx, ch = num(j, k + "_max", integer=True), num(j, k + "_chief", integer=True)
                if mx is not None and ch is not None and mx < ch:
                    bad.append("%s %s: %s_max %d < %s_chief %d" % (what, op, k, mx, k, ch))
            for f in ("mpickpt_collective", "agree", "hdf5_collective"):
                num(j, f + "_max", integer=True)
                num(j, f + "_chief", integer=True)
            # every save and restore makes collective calls from libmpickpt: none counted means
            # the executable's MPI_* are not interposed
            num(j, "collective_chief", strict=True)
            num(j, "mpickpt_collective_chief", strict=True)
            bf, bc = j.get("by_function"), j.get("by_caller")
            if not isinstance(bf, dict) or not bf:
                bad.append("%s %s: no by_function" % (what, op))
            else:
                for name, v in bf.items():
                    if not name.startswith("MPI_") or not isinstance(v, dict) or \
                            v.get("kind") not in kinds or not isinstance(v.get("max"), int) or \
                            not isinstance(v.get("chief"), int) or v["max"] < v["chief"]:
                        bad.append("%s %s: by_function %s = %r" % (what, op, name, v))
                for k in kinds:
                    s = sum(v.get("chief", 0) for v in bf.values() if v.get("kind") == k)
                    if s != j.get(k + "_chief"):
                        bad.append("%s %s: by_function's %s calls add up to %d, %s_chief is %r"
                                   % (what, op, k, s, k, j.get(k + "_chief")))
            if not isinstance(bc, dict) or set(bc) != {"mpickpt", "mpickpt_agree", "hdf5",
                                                         "bench", "other"}:
                bad.append("%s %s: by_caller = %r" % (what, op, bc))
            else:
                if bc["mpickpt"].get("collective_chief") != j.get("mpickpt_collective_chief"):
                    bad.append("%s %s: by_caller.mpickpt disagrees" % (what, op))
                tot = sum(bc[g].get("collective_chief", 0)
                          for g in ("mpickpt", "hdf5", "bench", "other"))
                if tot != j.get("collective_chief"):
                    bad.append("%s %s: by_caller adds up to %d, collective_chief %r"
                               % (what, op, tot, j.get("collective_chief")))

# ---- files ----
for np_ in scale_nps:
    got = [j for j in rows if j.get("scenario") == "files" and j.get("ranks") == np_]
    for layout, data in (("per-rank", np_), ("shared", 1), ("per-node", None)):
        js = [j for j in got if j.get("layout") == layout]
        if not js:
            bad.append("files np%d: no %s line" % (np_, layout))
        for j in js:
            what = "files np%d %s (%s/node)" % (np_, layout, j.get("ranks_per_node"))
            if skipped(j, what):
                continue
            num(j, "entries", strict=True, integer=True)
            num(j, "regular_files", strict=True, integer=True)
            d = num(j, "data_files", strict=True, integer=True)
            if j.get("index_files") != 1:
                bad.append("%s: index_files = %r, want 1" % (what, j.get("index_files")))
            if data is not None and d is not None and d != data:
                bad.append("%s: data_files = %d, want %d" % (what, d, data))
            if data is None and d is not None and d > np_:
                bad.append("%s: data_files = %d, more than the ranks" % (what, d))
            num(j, "left_after_delete", integer=True)

# ---- restore memory ----
got = [j for j in rows if j.get("scenario") == "restore_memory" and j.get("ranks") == mem_np]
if len(got) != len(mem_pieces) and not (len(got) == 1 and "skipped" in got[0]):
    bad.append("restore_memory np%d: %d lines, want %d (%s)"
               % (mem_np, len(got), len(mem_pieces), mem_pieces))
for j, want in zip(got, mem_pieces):
    what = "restore_memory np%d %s pieces" % (mem_np, want)
    if skipped(j, what):
        continue
    t = num(j, "total_pieces", strict=True, integer=True)
    if t is not None and not 0 < t <= want:
        bad.append("%s: total_pieces %d" % (what, t))
    num(j, "pieces_chief", strict=True, integer=True)
    if mem_np > 1:
        num(j, "pieces_rank1", strict=True, integer=True)
    num(j, "index_bytes", strict=True, integer=True)
    for f in ("save_s", "restore_s"):
        num(j, f, strict=True)
    num(j, "register_s")
    for f in ("heap_retained_kb_chief", "heap_retained_kb_rank1"):
        if not isinstance(j.get(f), int):
            bad.append("%s: %s = %r" % (what, f, j.get(f)))
    if j.get("method") == "unavailable":
        notes.append("%s: VmHWM could not be reset here: no peak" % what)
    elif j.get("method") != "VmHWM after clear_refs 5":
        bad.append("%s: method = %r" % (what, j.get("method")))
    else:
        num(j, "peak_kb_chief", integer=True)
        num(j, "hwm_kb_chief", strict=True, integer=True)
        if mem_np > 1:
            num(j, "peak_kb_rank1", integer=True)
            num(j, "hwm_kb_rank1", strict=True, integer=True)
        if mem_np > 2:
            num(j, "peak_kb_others_max", integer=True)

# ---- fixed cost ----
for np_ in fixed_nps:
    for layout in fixed_layouts.split():
        for sc, goal, base in (("fixed_save", 1.5, "write+fsync"), ("fixed_restore", 3, "pread")):
            what = "%s np%d %s" % (sc, np_, layout)
            js = [j for j in rows if j.get("scenario") == sc and j.get("ranks") == np_
                  and j.get("layout") == layout]
            if len(js) != 1:
                bad.append("%s: %d lines, want 1" % (what, len(js)))
                continue
            j = js[0]
            if skipped(j, what):
                continue
            num(j, "bytes_per_rank", strict=True, integer=True)
            num(j, "reps", strict=True, integer=True)
            for f in ("mpickpt_s", "mpickpt_best_s", "raw_s", "raw_best_s", "over_raw",
                      "over_raw_best", "paired_over_raw_p25", "paired_over_raw_p50",
                      "paired_over_raw_p75"):
                num(j, f, strict=True)
            if j.get("goal_over_raw") != goal or j.get("baseline") != base:
                bad.append("%s: goal %r baseline %r" % (what, j.get("goal_over_raw"),
                                                        j.get("baseline")))
            # the best of the reps is their minimum: never above the median (not a speed check)
            for a, b in (("mpickpt_best_s", "mpickpt_s"), ("raw_best_s", "raw_s")):
                if isinstance(j.get(a), float) and isinstance(j.get(b), float) and j[a] > j[b]:
                    bad.append("%s: %s > %s" % (what, a, b))
            if sc == "fixed_save" and not isinstance(j.get("phases"), dict):
                bad.append("%s: no phases" % what)
            if j.get("timing") != "span":
                bad.append("%s: timing = %r" % (what, j.get("timing")))
            num(j, "empty_span_s", strict=True)
            own = j.get("own")
            if not isinstance(own, dict):
                bad.append("%s: no own durations" % what)
            else:
                own = dict(own, scenario=sc, layout=layout)
                for f in ("mpickpt_s", "mpickpt_best_s", "raw_s", "raw_best_s", "over_raw",
                          "over_raw_best"):
                    num(own, f, strict=True)

for n in notes:
    print("note:", n)
for b in bad:
    print("FAIL:", b)
if bad:
    sys.exit(1)
print("bench scale check passed: collective calls, files, restore memory and fixed-cost rows "
      "printed complete JSON lines")
