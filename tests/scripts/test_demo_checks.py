#!/usr/bin/python3
"""The demo's crash/resume flows of test_demo.sh, which runs them in an empty OUTDIR:

    /usr/bin/python3 -B test_demo_checks.py OUTDIR

Environment: MPICKPT_DEMO, MPICKPT_CLI, MPIEXEC and the OMPI_* settings test_demo.sh exports.
"""
import json
import os
import re
import subprocess
import sys

import h5py

from scriptcheck import check, finish

DEMO = os.environ["MPICKPT_DEMO"]
CLI = os.environ["MPICKPT_CLI"]
MPIEXEC = os.environ["MPIEXEC"]
OUT = sys.argv[1]
# 3 epochs x 6 steps, a backup every 4 steps inside an epoch and at each epoch end:
# steps 4 (e0), 6 (e0 end), 8 (e1), 12 (e1 end), 16 (e2), 18 (e2 end).
SMALL = ["--epochs", "3", "--steps-per-epoch", "6", "--ckpt-every", "4", "--keep", "3",
         "--mb", "1"]
CKPT_RE = re.compile(r"^checkpoint prefix=(\S+) epoch=(\d+) step=(\d+) "
                     r"blocking_s=(\d+\.\d+) write_s=(\d+\.\d+)$")


def demo(np_, *args, env=None):
    """mpirun -np NP mpickpt-demo ARGS; returns (rc, stdout, stderr)."""
    e = dict(os.environ)
    if np_ > 3 and "detect_leaks=1" in e.get("ASAN_OPTIONS", ""):
        # sanitizer builds: leaks are looked for in the runs on 1 to 3 ranks, the runs on 4 are
        # checked for memory errors only, as every MPI test's (docs/building.md)
        e["ASAN_OPTIONS"] = "detect_leaks=0:strict_string_checks=1"
    e.update(env or {})
    cmd = [MPIEXEC, "-np", str(np_), DEMO, *args]
    p = subprocess.run(cmd, capture_output=True, env=e, timeout=300)
    so, se = p.stdout.decode(errors="replace"), p.stderr.decode(errors="replace")
    log = os.path.join(OUT, "runs.log")
    with open(log, "a") as f:
        f.write(f"$ {' '.join(cmd)}\n-- exit {p.returncode}\n-- stdout\n{so}-- stderr\n{se}\n")
    check("AddressSanitizer" not in se and "LeakSanitizer" not in se and "runtime error" not in se,
          f"{' '.join(cmd)}: sanitizer report:\n{se[-4000:]}")
    return p.returncode, so, se


def lines(text, prefix):
    return [l for l in text.splitlines() if l.startswith(prefix)]


def ckpt_lines(so):
    """[(prefix, epoch, step)] of the `checkpoint ...` lines, checking their format."""
    res = []
    for l in lines(so, "checkpoint "):
        m = CKPT_RE.match(l)
        if check(m, f"malformed checkpoint line: {l!r}"):
            res.append((m.group(1), int(m.group(2)), int(m.group(3))))
    return res


def listing(d):
    """The committed checkpoints of training dir d per `mpickpt list --json`: (latest, entries)."""
    p = subprocess.run([CLI, "list", "--json", os.path.join(d, "chief")], capture_output=True)
    if not check(p.returncode == 0, f"mpickpt list --json {d}/chief: exit {p.returncode}: "
                                    f"{p.stderr.decode(errors='replace')}"):
        return None, []
    j = json.loads(p.stdout)
    entries = j.get("checkpoints", [])
    latest = j.get("latest")
    return latest, entries


def prefix_of(d, name):
    return os.path.join(d, "chief", os.path.basename(name))


def crash(d, np_, rank, step, *extra):
    """A run that crashes: checks its output; returns the checkpoint lines."""
    rc, so, se = demo(np_, "--dir", d, *SMALL, *extra, "--crash-rank", str(rank),
                      "--crash-step", str(step))
    check(rc != 0, f"crashing run ({d}) exited 0")
    check(f"crash rank={rank} step={step}" in so.splitlines(),
          f"no 'crash rank={rank} step={step}' line:\n{so}")
    check(lines(so, "fresh start") == ["fresh start"], f"no 'fresh start':\n{so}")
    check(not lines(so, "done"), f"a crashed run printed done:\n{so}")
    return ckpt_lines(so)


def resume_ok(np_, d, extra=(), env=None):
    rc, so, se = demo(np_, "--dir", d, *SMALL, *extra, env=env)
    check(rc == 0, f"resume on {np_} ranks ({d}): exit {rc}\n{so}\n{se[-3000:]}")
    check("verification failed" not in so + se, f"verification failed:\n{se}")
    return so, se


def resumed_line(so):
    r = lines(so, "resumed ")
    if not check(len(r) == 1, f"expected one 'resumed' line:\n{so}"):
        return None
    m = re.match(r"^resumed epoch=(\d+) step=(\d+) from=(\S+)$", r[0])
    check(m, f"malformed: {r[0]!r}")
    return (int(m.group(1)), int(m.group(2)), m.group(3)) if m else None


def flip_kernel_byte(prefix):
    """Flips one byte inside the stored kernel data of checkpoint prefix."""
    p = subprocess.run([CLI, "inspect", "--json", prefix], capture_output=True, check=True)
    idx = json.loads(p.stdout)
    t = next(t for t in idx["tensors"] if t["name"] == "model/dense/kernel")
    piece = t["pieces"][-1]
    path = os.path.join(os.path.dirname(prefix), piece["file"])
    with h5py.File(path, "r") as f:
        off = f[piece["dataset"]].id.get_offset()
    check(off is not None, f"{path}: kernel dataset is not contiguous")
    check(piece["bytes"] > 1000, f"kernel piece of {piece['bytes']} bytes: no byte 1000 to flip")
    off += piece["pack_offset"]  # the kernel's bytes inside a pack of small pieces
    with open(path, "r+b") as f:
        f.seek(off + 1000)
        b = f.read(1)
        f.seek(off + 1000)
        f.write(bytes([b[0] ^ 0x40]))
    return path


# ---- 1. crash on 4 ranks, resume on 2, resume the finished run ----
d1 = os.path.join(OUT, "crash4_resume2")
got = crash(d1, 4, 3, 10)
check([(e, s) for _, e, s in got] == [(0, 4), (0, 6), (1, 8)],
      f"checkpoints before the crash: {got}")
latest, entries = listing(d1)
check([(e.get("epoch"), e.get("step")) for e in entries] == [(0, 4), (0, 6), (1, 8)],
      f"mpickpt list after the crash: {entries}")
last = entries[-1] if entries else {}
so, se = resume_ok(2, d1)
r = resumed_line(so)
if r:
    check((r[0], r[1]) == (last.get("epoch"), last.get("step")),
          f"resumed at {r[:2]}, the last committed checkpoint is {last}")
    check(latest and os.path.basename(r[2]) == os.path.basename(latest),
          f"resumed from {r[2]}, latest listed is {latest}")
    check(os.path.samefile(os.path.dirname(r[2]), os.path.join(d1, "chief")),
          f"resumed from {r[2]}: not in {d1}/chief")
check(lines(so, "verified ") != [], f"no 'verified' line:\n{so}")
got = ckpt_lines(so)
check([(e, s) for _, e, s in got] == [(1, 12), (2, 16), (2, 18)],
      f"checkpoints after the resume: {got}")
check(lines(so, "done") == ["done epoch=2 step=18"], f"done line:\n{so}")
latest, entries = listing(d1)
check([(e.get("epoch"), e.get("step")) for e in entries] == [(1, 12), (2, 16), (2, 18)],
      f"--keep 3: mpickpt list after the resume: {entries}")
check(got and latest and os.path.basename(got[-1][0]) == os.path.basename(latest),
      f"latest {latest} is not the last checkpoint written {got[-1:]}")
# The finished run again: restores the end of epoch 2, trains nothing, writes nothing.
so, se = resume_ok(2, d1)
r = resumed_line(so)
check(r and (r[0], r[1]) == (2, 18), f"resuming the finished run: {so}")
check(not lines(so, "checkpoint "), f"the finished run wrote checkpoints:\n{so}")
check(lines(so, "done") == ["done epoch=2 step=18"], f"finished run, done line:\n{so}")
# Asking for more epochs continues from there.
so, se = resume_ok(3, d1, ["--epochs", "4"])  # the last flag wins
check(lines(so, "done") == ["done epoch=3 step=24"], f"one more epoch:\n{so}")
check([(e, s) for _, e, s in ckpt_lines(so)] == [(3, 20), (3, 24)], f"one more epoch:\n{so}")
p = subprocess.run([CLI, "verify", os.path.join(d1, "chief")], capture_output=True)
check(p.returncode == 0, f"mpickpt verify {d1}/chief: {p.stdout!r} {p.stderr!r}")

# ---- 2. more ranks on resume (shared layout): 2 -> 4 ----
d2 = os.path.join(OUT, "crash2_resume4_shared")
got = crash(d2, 2, 1, 13, "--layout", "shared")
check([(e, s) for _, e, s in got] == [(0, 4), (0, 6), (1, 8), (1, 12)],
      f"checkpoints before the crash (2 ranks): {got}")
so, se = resume_ok(4, d2, ["--layout", "shared"])
r = resumed_line(so)
check(r and (r[0], r[1]) == (1, 12), f"2 -> 4 resumed at {r}")
check(any("data_loader of ranks 0-1 (ranks 2-3 were not in the checkpoint" in l
          for l in lines(so, "verified ")),
      f"2 -> 4: the verified line should say ranks 2-3 start fresh:\n{so}")
check(lines(so, "done") == ["done epoch=2 step=18"], f"2 -> 4 done line:\n{so}")

# ---- 3. a damaged latest checkpoint: fall back to the previous one ----
for how in ("flip", "truncate"):
    d3 = os.path.join(OUT, f"damaged_latest_{how}")
    crash(d3, 4, 0, 10)
    latest, entries = listing(d3)
    check(len(entries) == 3 and latest, f"{how}: listing {entries}")
    if not latest:
        continue
    lp = prefix_of(d3, latest)
    if how == "flip":
        damaged = flip_kernel_byte(lp)
    else:
        damaged = lp + ".data-00001-of-00004"
        os.truncate(damaged, os.path.getsize(damaged) // 2)
    so, se = resume_ok(3, d3)
    r = resumed_line(so)
    prev = entries[-2]
    check(r and (r[0], r[1]) == (prev.get("epoch"), prev.get("step")),
          f"{how}: resumed at {r}, expected the previous checkpoint {prev}")
    check(r and os.path.basename(r[2]) == os.path.basename(prev.get("prefix", "?")),
          f"{how}: resumed from {r}, expected {prev}")
    warn = [l for l in se.splitlines() if "skipping" in l and os.path.basename(lp) in l]
    check(warn, f"{how}: no warning naming the skipped {lp} on stderr:\n{se}")
    check(lines(so, "verified ") != [], f"{how}: not verified:\n{so}")
    check(lines(so, "done") == ["done epoch=2 step=18"], f"{how}: done line:\n{so}")

# ---- 4. negatives ----
rc, so, se = demo(2, "--dir", d1, *SMALL, "--mb", "2")
check(rc == 1, f"--mb 2 over a --mb 1 run: exit {rc}")
msg = [l for l in se.splitlines() if l.startswith("mpickpt-demo: ")]
check(any("model/dense/kernel" in l and "517,1024" in l and "1029,1024" in l for l in msg),
      f"--mb 2 over a --mb 1 run: expected an error naming the kernel and both shapes:\n{se}")
check(not lines(so, "done"), f"--mb mismatch printed done:\n{so}")

d4 = os.path.join(OUT, "tamper")
crash(d4, 3, 2, 5)
rc, so, se = demo(3, "--dir", d4, *SMALL, env={"MPICKPT_DEMO_TAMPER": "1"})
check(rc != 0, f"tampered value: exit {rc}")
check(re.search(r"rank 1: verification failed: model/dense/kernel\[\d+\] = ", se),
      f"tampered value: no 'rank 1: verification failed' naming the tensor:\n{se}")
check(not re.search(r"rank [02]: verification failed", se), f"other ranks failed too:\n{se}")
check(not lines(so, "done") and not lines(so, "checkpoint "), f"tampered: trained on:\n{so}")

# --async: a crash on 4 ranks, a resume on 2, every checkpoint line printed once committed
da = os.path.join(OUT, "async")
rc, so, se = demo(4, "--dir", da, *SMALL, "--async", "--crash-rank", "2", "--crash-step", "8")
check(rc != 0, f"--async crash run: exit {rc}")
committed = [ln for ln in lines(so, "checkpoint ")]
check(all(re.search(r"blocking_s=[0-9.]+ write_s=[0-9.]+$", ln) for ln in committed),
      f"--async checkpoint lines:\n{so}")
rc, so, se = demo(2, "--dir", da, *SMALL, "--async")
check(rc == 0, f"--async resume: exit {rc}\n{se}")
check(lines(so, "resumed") and lines(so, "done") and "verification failed" not in so + se,
      f"--async resume output:\n{so}\n{se}")
rc, so, se = demo(1, "--dir", os.path.join(OUT, "bad"), "--epochs", "x")
check(rc == 2 and "--epochs" in se, f"bad option: exit {rc}, {se}")

finish(lambda c, f: f"test_demo: {c - f}/{c} checks passed (runs in {OUT}/runs.log)")
