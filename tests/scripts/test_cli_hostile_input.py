#!/usr/bin/python3
"""Hostile or careless input to the tools (issue 29): large control files, over-long metrics lines,
integer settings with junk around them.

    /usr/bin/python3 -B test_cli_hostile_input.py OUTDIR [restart] [metrics] [runs]

(the parts named, all by default)
Environment: MPICKPT_CLI, MPICKPT_RUN_BIN (mpickpt-run), MPICKPT_MAKE_CKPT, MPICKPT_MAKE_STATE.

  restart   a `restart` control of 1 MiB (CKPT__RESTART_MAX_BYTES) of distinct drop records, one of
            them dropping the newest checkpoint: `mpickpt list` shows it dropped and the right
            restart point; `mpickpt drop` adds one record and `drop --undo` removes one, keeping
            every other record. The file was parsed in quadratic time (over 300 s per command in
            the sanitizer build, 6 s in the default one): the test's TIMEOUT catches that, nothing
            here measures time.
  metrics   a metrics.jsonl line of 64 MiB (a valid line but for its length) between two valid
            lines: `mpickpt stats` reports it skipped, naming the file and the line number, lists
            the other two, and its peak memory stays far below the line's size (it was read whole:
            three copies of it).
  runs      MPICKPT_RUNS=' 3' (and '3 ', '+3', '3\\n', '0x3', '٣'): `mpickpt config` calls it
            invalid naming the variable, and mpickpt-run refuses it (exit 2) naming it; '3' is
            valid for both; --max-runs ' 3' is refused as well.
"""
import json
import os
import shutil
import subprocess
import sys

from scriptcheck import check, finish, run_cli

CLI = os.environ["MPICKPT_CLI"]
RUN = os.environ["MPICKPT_RUN_BIN"]
MAKE = os.environ["MPICKPT_MAKE_CKPT"]
MAKE_STATE = os.environ["MPICKPT_MAKE_STATE"]
OUT = sys.argv[1]
PARTS = set(sys.argv[2:]) or {"restart", "metrics", "runs"}
BASE = {k: v for k, v in os.environ.items() if not k.startswith("MPICKPT_")}


def fresh(name):
    d = os.path.join(OUT, name)
    shutil.rmtree(d, ignore_errors=True)
    os.makedirs(d)
    return d


def list_json(d):
    _, so, _ = run_cli(CLI, "list", "--json", d, rc=0)
    doc = json.loads(so)
    return {os.path.basename(c["prefix"]): c["restart"] for c in doc["checkpoints"]}, \
        os.path.basename(doc["restart_from"] or "")


def metrics_line(prefix):
    return json.dumps({"prefix": prefix, "mode": "sync", "bytes": 1048576, "ranks": 2,
                       "blocking_s": 0.5, "write_s": 0.25, "agree_s": 0.0, "merge_s": 0.0,
                       "commit_s": 0.25}) + "\n"


# os.wait4 gives this child's own peak memory (RUSAGE_CHILDREN's is the largest of all)
def run_peak(args):
    r, w = os.pipe()
    re_, we = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.dup2(w, 1)
        os.dup2(we, 2)
        os.execv(args[0], args)
    os.close(w)
    os.close(we)
    out, err = b"", b""
    for fd in (r, re_):
        while True:
            chunk = os.read(fd, 1 << 16)
            if not chunk:
                break
            if fd == r:
                out += chunk
            else:
                err += chunk
        os.close(fd)
    _, status, usage = os.wait4(pid, 0)
    return os.waitstatus_to_exitcode(status), out.decode(), err.decode(), usage.ru_maxrss


def part_restart():
    d = fresh("restart")
    for i in (1, 2, 3):
        subprocess.run([MAKE, os.path.join(d, f"ckpt-{i}"), "--counter", str(i)], check=True,
                       capture_output=True)
    subprocess.run([MAKE_STATE, d], check=True, capture_output=True)
    LIMIT = 1 << 20
    records, size, k = [], 0, 0
    while True:
        line = f"drop q {k + 10}\n"  # distinct (name, counter) pairs that match no checkpoint
        # room left for the header comment and the record `drop` adds below (the tool refuses to
        # write a control its reader would refuse)
        if size + len(line) + len("drop ckpt-3 3\n") > LIMIT - 200:
            break
        records.append(line)
        size += len(line)
        k += 1
    records.insert(len(records) // 2, "drop ckpt-3 3\n")
    with open(os.path.join(d, "restart"), "w") as f:
        f.write("".join(records))
    check(os.path.getsize(os.path.join(d, "restart")) <= LIMIT and len(records) > 70000,
          f"restart: {len(records)} records, {os.path.getsize(os.path.join(d, 'restart'))} bytes")
    status, point = list_json(d)
    check(status == {"ckpt-1": None, "ckpt-2": None, "ckpt-3": "dropped"} and point == "ckpt-2",
          f"restart: list of a 1 MiB control: {status}, restart from {point!r}")
    # a drop more: the file is rewritten with every record (sorted) plus the new one
    run_cli(CLI, "drop", d, "ckpt-2", rc=0)
    status, point = list_json(d)
    check(status == {"ckpt-1": None, "ckpt-2": "dropped", "ckpt-3": "dropped"} and
          point == "ckpt-1", f"restart: after drop ckpt-2: {status}, restart from {point!r}")
    run_cli(CLI, "drop", "--undo", d, "ckpt-3", rc=0)
    status, point = list_json(d)
    check(status == {"ckpt-1": None, "ckpt-2": "dropped", "ckpt-3": None} and point == "ckpt-3",
          f"restart: after drop --undo ckpt-3: {status}, restart from {point!r}")
    with open(os.path.join(d, "restart")) as f:
        kept = [ln for ln in f if ln.startswith("drop ")]
    check(len(kept) == len(records) and "drop ckpt-2 2\n" in kept and "drop ckpt-3 3\n" not in kept
          and "drop q 10\n" in kept and f"drop q {k + 9}\n" in kept,
          f"restart: the rewritten control has {len(kept)} drop records, expected {len(records)}")


def part_metrics():
    d = fresh("metrics")
    BIG = 64 << 20
    path = os.path.join(d, "metrics.jsonl")
    # the long line written in pieces: this process never holds it (a child's peak memory counts
    # what it inherited at fork)
    head, tail = metrics_line("@").split("@")
    with open(path, "w") as f:
        f.write(metrics_line("ckpt-1"))
        f.write(head)
        for _ in range(BIG >> 20):
            f.write("x" * (1 << 20))
        f.write(tail)
        f.write(metrics_line("ckpt-3"))
    big_len = len(head) + BIG + len(tail)

    small = os.path.join(d, "small.jsonl")
    with open(small, "w") as f:
        f.write(metrics_line("ckpt-1"))
        f.write(metrics_line("ckpt-3"))
    rc0, _, _, base_kib = run_peak([CLI, "stats", "--json", small])
    rc, so, se, peak_kib = run_peak([CLI, "stats", "--json", path])
    check(rc0 == 0 and rc == 0, f"metrics: exit {rc0} / {rc}: {se[:2000]}")
    try:
        doc = json.loads(so)
    except ValueError:
        doc = {}
    check(doc.get("saves") == 2 and doc.get("skipped_lines") == 1 and
          [s.get("prefix") for s in doc.get("per_save", [])] == ["ckpt-1", "ckpt-3"],
          f"metrics: the 64 MiB line is not the one skipped: {so[:500]}")
    check(f"{path}:2: line of {big_len} bytes skipped" in se,
          f"metrics: the warning does not name the file, line 2 and its length: {se[:500]!r}")
    check(peak_kib - base_kib < 16 << 10,
          f"metrics: stats held {peak_kib - base_kib} KiB more for a 64 MiB line than for none "
          f"({peak_kib} vs {base_kib} KiB): the line was read whole")


def part_runs():
    for bad in (" 3", "3 ", "+3", "3\n", "0x3", "\u0663", "3 3"):
        p = subprocess.run([CLI, "config", "--json"], capture_output=True,
                           env={**BASE, "MPICKPT_RUNS": bad})
        try:
            rows = {s["name"]: s for s in json.loads(p.stdout)["settings"]}
        except (ValueError, KeyError):
            rows = {}
        r = rows.get("MPICKPT_RUNS", {})
        check(p.returncode == 1 and r.get("valid") is False and
              "MPICKPT_RUNS" in (r.get("error") or ""),
              f"runs: config with MPICKPT_RUNS={bad!r}: exit {p.returncode}, {r}")
        p = subprocess.run([RUN, "--launcher", "none", "true"], capture_output=True,
                           env={**BASE, "MPICKPT_RUNS": bad})
        check(p.returncode == 2 and b"MPICKPT_RUNS" in p.stderr,
              f"runs: mpickpt-run with MPICKPT_RUNS={bad!r}: exit {p.returncode}, {p.stderr!r}")
        p = subprocess.run([RUN, "--launcher", "none", "--max-runs", bad, "true"],
                           capture_output=True,
                           env=BASE)
        check(p.returncode == 2 and b"max-runs" in p.stderr,
              f"runs: mpickpt-run --max-runs {bad!r}: exit {p.returncode}, {p.stderr!r}")
    p = subprocess.run([CLI, "config", "--json"], capture_output=True,
                       env={**BASE, "MPICKPT_RUNS": "3"})
    rows = {s["name"]: s for s in json.loads(p.stdout)["settings"]}
    check(p.returncode == 0 and rows["MPICKPT_RUNS"]["valid"] is True and
          rows["MPICKPT_RUNS"]["value"] == "3", f"runs: MPICKPT_RUNS=3: {rows['MPICKPT_RUNS']}")
    p = subprocess.run([RUN, "--launcher", "none", "true"], capture_output=True,
                       env={**BASE, "MPICKPT_RUNS": "3"})
    check(p.returncode == 0,
          f"runs: mpickpt-run with MPICKPT_RUNS=3: exit {p.returncode} {p.stderr!r}")


for part in ("restart", "metrics", "runs"):
    if part in PARTS:
        globals()[f"part_{part}"]()
finish(lambda c, f: f"test_cli_hostile_input: {c} checks, {f} failed")
