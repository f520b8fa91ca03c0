#!/usr/bin/python3
"""jobs/bench.sh --check: every scenario of every layout printed a complete JSON line.

    /usr/bin/python3 -B jobs/lib/bench_check.py RESULTS.jsonl "NPS" "CONFIGS"

NPS: the rank counts ("1 4"); CONFIGS: layout[:collective] of each column, as bench.sh names
them ("per-rank shared:0 shared:1").
"""
import json, sys
path, nps, configs = sys.argv[1], sys.argv[2].split(), sys.argv[3].split()
want = ["large", "small", "restore_small", "restore_warm", "restore_cold",
        "restore_reshard_warm", "restore_reshard_cold", "async"]
num = ["ranks", "bytes_per_rank", "reps", "mpickpt_s", "baseline_s", "speed_ratio",
       "mpickpt_gbps", "baseline_gbps"]
bad, seen = [], {}
for n, line in enumerate(open(path), 1):
    try:
        j = json.loads(line)
    except ValueError as e:
        bad.append("line %d does not parse: %s" % (n, e)); continue
    key = (j.get("ranks"), j.get("layout"), j.get("collective"))
    seen.setdefault(key, set()).add(j.get("scenario"))
    sc = j.get("scenario")
    if not isinstance(sc, str) or j.get("layout") not in ("shared", "per-rank", "per-node"):
        bad.append("line %d: no scenario/layout" % n); continue
    if "skipped" in j:
        if not sc.endswith("_cold") or not j["skipped"]:
            bad.append("line %d: %s skipped: %r" % (n, sc, j["skipped"]))
        else:
            print("note: %s %s skipped: %s" % (sc, key, j["skipped"]))
        continue
    fields = num + (["blocking_over_memcpy", "background_s"] if sc == "async" else [])
    for f in fields:
        v = j.get(f)
        if not isinstance(v, (int, float)) or isinstance(v, bool) or not v > 0:
            bad.append("line %d (%s): %s = %r, want a positive number" % (n, sc, f, v))
    ph = j.get("phases")
    if not isinstance(ph, dict):
        bad.append("line %d (%s): no phases" % (n, sc))
    else:
        for f in ("write", "agree", "merge", "commit"):
            v = ph.get(f)
            if not isinstance(v, (int, float)) or not v > 0:
                bad.append("line %d (%s): phases.%s = %r, want a positive number" % (n, sc, f, v))
for np_ in nps:
    for cfg in configs:
        layout, _, coll = cfg.partition(":")
        key = (int(np_), layout, int(coll or 0))
        missing = [s for s in want if s not in seen.get(key, set())]
        if missing:
            bad.append("%s: missing scenarios %s" % (key, missing))
for b in bad:
    print("FAIL:", b)
if bad:
    sys.exit(1)
print("bench check passed: every scenario of every layout printed a complete JSON line")
