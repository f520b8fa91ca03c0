#!/usr/bin/python3
"""The checks of test_cli_stats.sh (mpickpt stats), which runs them in an empty OUTDIR:

    /usr/bin/python3 -B test_cli_stats_checks.py OUTDIR

Environment: MPICKPT_CLI, MPICKPT_EXAMPLE_API, MPIEXEC (and the MPI environment of ctest).
"""
import json
import os
import re
import statistics
import subprocess
import sys

from scriptcheck import check, run_cli, finish

CLI = os.environ["MPICKPT_CLI"]
EXAMPLE = os.environ["MPICKPT_EXAMPLE_API"]
MPIEXEC = os.environ["MPIEXEC"]
OUT = sys.argv[1]


def run(*args, rc=None):
    return run_cli(CLI, *args, rc=rc)


def line(prefix, mode, nbytes, blocking, write, agree, merge, commit, since, saved, drop=(),
         **extra):
    d = {"prefix": prefix, "mode": mode, "bytes": nbytes, "ranks": 4, "blocking_s": blocking,
         "write_s": write, "agree_s": agree, "merge_s": merge, "commit_s": commit,
         "gbps": round(nbytes / (write + agree + merge + commit) / 1e9, 4),
         "since_prev_s": since, "training_time_saved_s": saved, "timestamp": 1763700000.25}
    d.update(extra)
    for k in drop:
        del d[k]
    return json.dumps(d, separators=(",", ":"), ensure_ascii=True)


# ---- a handwritten metrics.jsonl -------------------------------------------------------------
VALID = [  # (prefix, mode, bytes, blocking, write, agree, merge, commit, since, saved)
    ("ckpt-1", "sync", 104857600, 2.5, 2.0, 0.05, 0.1, 0.35, 0.0, 0.0),
    ("ckpt-2", "async", 104857600, 0.25, 2.2, 0.05, 0.1, 0.4, 30.5, 2.5),
    ("ckpt-3", "async", 209715200, 0.3, 3.0, 0.06, 0.12, 0.5, 31.25, 3.38),
    ("run/ckpt-\u00e9\"4", "async", 52428800, 0.2, 1.0, 0.01, 0.02, 0.03, 29.0, 0.86),
    ("ckpt-5", "sync", 1, 1.75, 1.5, 0.01, 0.02, 0.03, 28.0, 0.0),
]
# the slowest rank of each phase and the write median (since issue 17) on the first three lines;
# the others are lines of an older writer, without them
STRAG = [dict(blocking_slowest_rank=0, write_slowest_rank=2, agree_slowest_rank=1,
              merge_slowest_rank=0, commit_slowest_rank=0, write_median_s=1.0),
         dict(blocking_slowest_rank=1, write_slowest_rank=2, agree_slowest_rank=3,
              merge_slowest_rank=0, commit_slowest_rank=0, write_median_s=1.1),
         dict(blocking_slowest_rank=2, write_slowest_rank=3, merge_slowest_rank=0,
              write_median_s=2.0),  # agree and commit unknown
         {}, {}]
good = [line(*v, **STRAG[i]) for i, v in enumerate(VALID)]
lines = [
    good[0],                                                        # 1
    good[1],                                                        # 2
    good[2][:60],                                                   # 3 truncated (a crash)
    "",                                                             # 4 blank: ignored
    good[2].replace('"async"', '"fast"'),                           # 5 bad mode
    good[2].replace('"write_s":3.0', '"write_s":"3.0"'),            # 6 string for a number
    good[2][:-1] + ',"bytes":5}',                                   # 7 duplicate key
    re.sub(r',"commit_s":[^,]*', "", good[2]),                      # 8 missing key
    good[2][:-1] + ',"nested":{"a":1}}',                            # 9 nested value
    good[2] + " x",                                                 # 10 text after the object
    good[2].replace('"agree_s":0.06', '"agree_s":-0.06'),           # 11 negative time
    "hello",                                                        # 12 not JSON
    good[2].replace('"bytes":209715200', '"bytes":2.5e8'),          # 13 bytes not an integer
    good[2].replace("ckpt-3", "ckpt-3\\x"),                         # 14 bad escape
    good[2].replace('"merge_s":0.12', '"merge_s":1e999'),           # 15 out of range
    good[2],                                                        # 16 valid
    # 17 valid: unknown keys (with literals) ignored, no "gbps" (computed), escapes decoded
    line(*VALID[3], drop=("gbps",), extra=True, note=None),
    good[4] + "\r",                                                 # 18 valid, CRLF
    "   ",                                                          # 19 blank
    good[2].replace('"write_slowest_rank":3', '"write_slowest_rank":-3'),  # 20 bad rank
]
MALFORMED = [3, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 20]
d1 = os.path.join(OUT, "handwritten")
os.makedirs(d1)
with open(os.path.join(d1, "metrics.jsonl"), "w", newline="") as f:
    f.write("\n".join(lines) + "\n")
# a line with a NUL byte (line 21), and a last line without its newline (22, valid)
with open(os.path.join(d1, "metrics.jsonl"), "ab") as f:
    f.write(good[1].encode()[:20] + b"\0" + good[1].encode()[20:] + b"\n")
    f.write(good[1].encode())
MALFORMED.append(21)
# the valid lines in file order: 1, 2, 16, 17, 18, 22
rows = [VALID[0], VALID[1], VALID[2], VALID[3], VALID[4], VALID[1]]
rows_strag = [STRAG[0], STRAG[1], STRAG[2], STRAG[3], STRAG[4], STRAG[1]]


def expect_summary(rows):
    blocking = [r[3] for r in rows]
    background = [r[4] + r[5] + r[6] + r[7] for r in rows]
    return {
        "saves": len(rows),
        "sync_saves": sum(r[1] == "sync" for r in rows),
        "async_saves": sum(r[1] == "async" for r in rows),
        "bytes": sum(r[2] for r in rows),
        "blocking_s_median": statistics.median(blocking),
        "blocking_s_max": max(blocking),
        "background_s_median": statistics.median(background),
        "background_s_max": max(background),
        "training_time_saved_s": sum(r[9] for r in rows),
    }


def check_summary(got, want, what):
    for k, v in want.items():
        if isinstance(v, int):
            check(got.get(k) == v, f"{what}: {k} = {got.get(k)!r}, expected {v!r}")
        else:
            check(isinstance(got.get(k), (int, float)) and abs(got[k] - v) < 1e-9,
                  f"{what}: {k} = {got.get(k)!r}, expected {v!r}")


rc, so, se = run("stats", "--json", d1, rc=0)
try:
    summary = json.loads(so)
except ValueError as e:
    summary = {}
    check(False, f"stats --json: not JSON ({e}): {so!r}")
check(so.count("\n") == 1, f"stats --json: not one line: {so!r}")
want = expect_summary(rows)
check_summary(summary, want, "stats --json")
check(summary.get("skipped_lines") == len(MALFORMED),
      f"skipped_lines {summary.get('skipped_lines')}, expected {len(MALFORMED)}")
check(summary.get("path") == os.path.join(d1, "metrics.jsonl"), f"path {summary.get('path')!r}")
reported = sorted(int(m) for m in re.findall(r"metrics\.jsonl:(\d+): malformed line skipped", se))
check(reported == MALFORMED, f"malformed lines reported {reported}, expected {MALFORMED}\n{se}")
check(all(l.startswith("mpickpt: stats: ") for l in se.splitlines()), f"stderr format:\n{se}")
check(re.search(r":3: malformed line skipped: truncated", se), f"line 3 is truncated:\n{se}")
check(re.search(r":5: malformed line skipped: .*mode", se), f"line 5 names the mode:\n{se}")
check(re.search(r":8: malformed line skipped: .*commit_s", se), f"line 8 names the key:\n{se}")
check(re.search(r":20: malformed line skipped: .*write_slowest_rank", se),
      f"line 20 names the key:\n{se}")
# stragglers: rank 2 slowest to write in 3 of the 4 saves that say; write / median 2, 2, 1.5, 2
st = summary.get("straggler") or {}
check(st.get("rank") == 2 and st.get("slowest_saves") == 3 and st.get("saves") == 4,
      f"straggler {st!r}")
check(abs(st.get("write_vs_median_median", 0) - 2.0) < 1e-9 and
      abs(st.get("write_vs_median_max", 0) - 2.0) < 1e-9, f"straggler ratios {st!r}")
per = summary.get("per_save") or []
check(len(per) == len(rows), f"per_save: {len(per)} entries, expected {len(rows)}")
for got, r, x in zip(per, rows, rows_strag):
    check(got.get("prefix") == r[0], f"per_save prefix {got!r}")
    for k, ph in enumerate(("blocking", "write", "agree", "merge", "commit")):
        check(got.get(f"{ph}_slowest_rank") == x.get(f"{ph}_slowest_rank"),
              f"per_save {r[0]} {ph}: {got!r}")
        check(abs(got.get(f"{ph}_s", -1) - r[3 + k]) < 1e-9, f"per_save {r[0]} {ph}_s: {got!r}")
    if "write_median_s" in x:
        check(abs(got.get("write_vs_median", 0) - r[4] / x["write_median_s"]) < 1e-9,
              f"per_save {r[0]} ratio: {got!r}")
    else:
        check(got.get("write_median_s") is None and got.get("write_vs_median") is None,
              f"per_save {r[0]} (old line): {got!r}")

rc, text, se = run("stats", d1, rc=0)
body = text.splitlines()
hdr = [i for i, l in enumerate(body) if l.startswith("PREFIX") and " MODE " in l]
check(len(hdr) == 1, f"stats: one header line expected:\n{text}")
if hdr:
    cols = body[hdr[0]].split()
    check(cols == ["PREFIX", "MODE", "MIB", "BLOCKING_S", "WRITE_S", "AGREE_S", "MERGE_S",
                   "COMMIT_S", "GB/S", "SINCE_PREV_S", "SLOW_RANK", "X_MEDIAN"],
          f"stats: columns {cols}")
    table = body[hdr[0] + 1:hdr[0] + 1 + len(rows)]
    check(len(table) == len(rows), f"stats: {len(rows)} rows expected:\n{text}")
    for got, r, x in zip(table, rows, rows_strag):
        check(got.startswith(r[0]), f"row {got!r} should start with the prefix {r[0]!r}")
        f = got[len(r[0]):].split()
        if not check(len(f) == 11, f"row {got!r}: 11 values expected"):
            continue
        check(f[9] == str(x.get("write_slowest_rank", "-")), f"row {got!r}: slowest rank")
        ratio = f"{r[4] / x['write_median_s']:.2f}" if "write_median_s" in x else "-"
        check(f[10] == ratio, f"row {got!r}: x median {ratio}")
        check(f[0] == r[1], f"row {got!r}: mode")
        check(abs(float(f[1]) - r[2] / 2**20) < 0.006, f"row {got!r}: MiB")
        for j, v in enumerate(r[3:8]):
            check(abs(float(f[2 + j]) - v) < 1e-4, f"row {got!r}: column {j + 3} != {v}")
        gbps = r[2] / (r[4] + r[5] + r[6] + r[7]) / 1e9
        check(abs(float(f[7]) - gbps) < 1e-3, f"row {got!r}: GB/s != {gbps}")
        check(f[8] == ("-" if r[8] == 0 else f"{r[8]:.3f}"), f"row {got!r}: since previous")
for label, value in (("blocking s", want["blocking_s_median"]),
                     ("background s", want["background_s_median"])):
    m = re.search(label + r"\s+median ([0-9.]+)\s+max ([0-9.]+)", text)
    check(m and abs(float(m.group(1)) - value) < 1e-4, f"stats: {label} median in:\n{text}")
m = re.search(r"saves\s+(\d+) \((\d+) sync, (\d+) async\)", text)
check(m and m.groups() == (str(len(rows)), str(want["sync_saves"]), str(want["async_saves"])),
      f"stats: saves line in:\n{text}")
m = re.search(r"training time saved s\s+([0-9.]+)", text)
check(m and abs(float(m.group(1)) - want["training_time_saved_s"]) < 1e-4,
      f"stats: training time saved in:\n{text}")
check(f"{len(MALFORMED)} malformed lines skipped" in text, f"stats: skipped count in:\n{text}")
check(re.search(r"straggler\s+rank 2 slowest to write in 3 of 4 saves; write time x the median: "
                r"median 2\.00, max 2\.00", text), f"stats: straggler line in:\n{text}")
m = re.search(r"^PREFIX\s+BLOCKING\s+WRITE\s+AGREE\s+MERGE\s+COMMIT\n((?:.*\n){4})", text, re.M)
check(m is not None, f"stats: slowest rank per phase table in:\n{text}")
if m:
    want_rows = [(r[0], [str(x.get(f"{p}_slowest_rank", "-")) for p in
                         ("blocking", "write", "agree", "merge", "commit")])
                 for r, x in zip(rows, rows_strag) if x]
    for got, (pfx, cells) in zip(m.group(1).splitlines(), want_rows):
        check(got.startswith(pfx) and got[len(pfx):].split() == cells,
              f"per-phase row {got!r}, expected {pfx} {cells}")

# the file itself as operand, and a trailing slash on DIR
run("stats", "--json", os.path.join(d1, "metrics.jsonl"), rc=0)
rc, so, _ = run("stats", "--json", d1 + "/", rc=0)
check(json.loads(so or "{}").get("path") == os.path.join(d1, "metrics.jsonl"), f"DIR/: {so!r}")

# ---- DIR/chief fallback; DIR's own file wins -------------------------------------------------
d2 = os.path.join(OUT, "state")
os.makedirs(os.path.join(d2, "chief"))
with open(os.path.join(d2, "chief", "metrics.jsonl"), "w") as f:
    f.write(good[0] + "\n" + good[1] + "\n")
rc, so, se = run("stats", "--json", d2, rc=0)
s2 = json.loads(so or "{}")
check(s2.get("saves") == 2 and s2.get("path") == os.path.join(d2, "chief", "metrics.jsonl"),
      f"chief fallback: {so!r} {se!r}")
check(se == "", f"chief fallback: unexpected stderr {se!r}")
with open(os.path.join(d2, "metrics.jsonl"), "w") as f:
    f.write(good[2] + "\n")
rc, so, _ = run("stats", "--json", d2, rc=0)
check(json.loads(so or "{}").get("saves") == 1, f"DIR's own metrics.jsonl first: {so!r}")

# ---- failures ----------------------------------------------------------------------------------
d3 = os.path.join(OUT, "empty")
os.makedirs(d3)
rc, so, se = run("stats", d3, rc=1)
check("no metrics.jsonl" in se and so == "", f"no file: {so!r} {se!r}")
rc, so, se = run("stats", os.path.join(OUT, "missing"), rc=1)
check("cannot access" in se, f"missing DIR: {se!r}")
with open(os.path.join(d3, "metrics.jsonl"), "w") as f:
    pass
rc, so, se = run("stats", d3, rc=1)
check("no valid metrics line" in se and so == "", f"empty file: {so!r} {se!r}")
with open(os.path.join(d3, "metrics.jsonl"), "w") as f:
    f.write("garbage\n{\"prefix\":1}\n")
rc, so, se = run("stats", "--json", d3, rc=1)
check(":1: malformed" in se and ":2: malformed" in se and "no valid metrics line" in se
      and so == "", f"only malformed lines: {so!r} {se!r}")
run("stats", rc=2)
run("stats", d1, d2, rc=2)
run("stats", "--bogus", d1, rc=2)
rc, so, _ = run("stats", "--help", rc=0)
check(so.startswith("usage: mpickpt stats"), f"stats --help: {so!r}")
rc, so, _ = run("help", rc=0)
check(re.search(r"^  stats ", so, re.M), f"help lists stats: {so!r}")

# ---- end to end: the metrics.jsonl of a real save ---------------------------------------------
d4 = os.path.join(OUT, "example_api")
os.makedirs(d4)
p = subprocess.run([MPIEXEC, "-np", "2", EXAMPLE, d4], capture_output=True, timeout=120)
so, se = p.stdout.decode(), p.stderr.decode()
check(p.returncode == 0 and "on 2 ranks: ok" in so,
      f"example_api: exit {p.returncode}\nstdout: {so}\nstderr: {se}")
mpath = os.path.join(d4, "metrics.jsonl")
if check(os.path.exists(mpath), f"example_api wrote no {mpath}: {os.listdir(d4)}"):
    with open(mpath) as f:
        real = [json.loads(l) for l in f if l.strip()]
    check(len(real) == 1 and real[0]["mode"] == "sync" and real[0]["ranks"] == 2,
          f"example_api metrics: {real}")
    rows = [(r["prefix"], r["mode"], r["bytes"], r["blocking_s"], r["write_s"], r["agree_s"],
             r["merge_s"], r["commit_s"], r["since_prev_s"], r["training_time_saved_s"])
            for r in real]
    rc, so, se = run("stats", "--json", d4, rc=0)
    got = json.loads(so or "{}")
    check_summary(got, expect_summary(rows), "example_api stats --json")
    check(got.get("skipped_lines") == 0 and se == "", f"example_api stats: {so!r} {se!r}")
    check(real[0]["bytes"] >= 10 * 4 * 4 + 4 * 4, f"example_api bytes: {real[0]['bytes']}")
    # a real save records every phase's slowest rank (one of the 2) and the write median
    for ph in ("blocking", "write", "agree", "merge", "commit"):
        check(real[0].get(f"{ph}_slowest_rank") in (0, 1), f"example_api {ph}: {real[0]}")
    check(0 <= real[0].get("write_median_s", -1) <= real[0]["write_s"],
          f"example_api median: {real[0]}")
    ps = (got.get("per_save") or [{}])[0]
    check(ps.get("write_slowest_rank") == real[0]["write_slowest_rank"] and
          got.get("straggler", {}).get("rank") == real[0]["write_slowest_rank"],
          f"example_api stats straggler: {got}")
    rc, so, se = run("stats", d4, rc=0)
    check(re.search(r"^ckpt-1\s+sync\s", so, re.M) and "1 (1 sync, 0 async)" in so,
          f"example_api stats text:\n{so}")

finish(lambda c, f: f"test_cli_stats: {c - f}/{c} checks passed")
