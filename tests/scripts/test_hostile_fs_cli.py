#!/usr/bin/python3
"""The command-line tool in directories others can write to (issue 12, docs/design.md §10).

    MPICKPT_CLI=.../mpickpt MPICKPT_MAKE_CKPT=.../make_ckpt test_hostile_fs_cli.py OUTDIR

inspect, verify, dump, list, gc and stats on a checkpoint whose index is a FIFO, whose data file
is a FIFO, in a directory whose state file (or metrics.jsonl) is a FIFO or a link, and gc on a
directory that is not a checkpoint directory. Every call runs under `timeout 20`: a tool that opens
a FIFO without O_NONBLOCK blocks there, and exit status 124 says so. Each command must come back
on its own with the expected status and a message naming the file; nothing may change on disk
(FIFOs stay FIFOs, links stay links, the user's files stay), and each case's victim directory
outside the checkpoint directory, which planted links point into, must be byte-for-byte intact.
"""
import json
import os
import shutil
import stat
import subprocess
import sys

from scriptcheck import check, finish

CLI = os.environ["MPICKPT_CLI"]
MAKE = os.environ["MPICKPT_MAKE_CKPT"]
OUT = sys.argv[1]
TIMEOUT = 20  # seconds: a hang guard only; nothing here measures time
DATA = "ck-7.data-00000-of-00001"
INDEX = "ck-7.index"
ENV = dict(os.environ, MPICKPT_LOG="warn")


def run(*args, rc=None, names=(), what=""):
    """Runs the CLI under `timeout`; checks that it came back by itself, its exit code (when rc
    is given), that stderr names each of `names`, and that no sanitizer spoke."""
    p = subprocess.run(["timeout", str(TIMEOUT), CLI, *args], capture_output=True, env=ENV)
    so = p.stdout.decode("utf-8", "replace")
    se = p.stderr.decode("utf-8", "replace")
    label = f"{what}: mpickpt {' '.join(args)}"
    check(p.returncode not in (124, 137),
          f"{label}: did not come back within {TIMEOUT} s (blocked on a FIFO?)")
    if rc is not None:
        check(p.returncode == rc, f"{label}: exit {p.returncode}, expected {rc}\n"
              f"stdout: {so[:2000]}\nstderr: {se[:2000]}")
    for n in names:
        check(n in se, f"{label}: stderr should mention {n!r}: {se[:2000]}")
    check("Sanitizer" not in se and "runtime error" not in se,
          f"{label}: sanitizer report:\n{se}")
    return p.returncode, so, se


def snapshot(top):
    """Every entry under top, not followed: kind, link target or file bytes; not the lock file
    gc takes in a checkpoint directory (lib/dirlock.h)."""
    out = {}
    for dirpath, dirnames, filenames in os.walk(top, followlinks=False):
        for n in dirnames + filenames:
            p = os.path.join(dirpath, n)
            if n == "lock" and os.path.isfile(p) and not os.path.islink(p):
                continue
            st = os.lstat(p)
            if stat.S_ISLNK(st.st_mode):
                out[p] = ("link", os.readlink(p))
            elif stat.S_ISREG(st.st_mode):
                with open(p, "rb") as f:
                    out[p] = ("file", f.read())
            else:
                out[p] = (stat.S_IFMT(st.st_mode), None)
    return out


class Victim:
    """A directory outside every checkpoint directory, with sentinel files named like ours."""

    def __init__(self, path):
        self.path = path
        os.makedirs(path)
        for n in ("part-00000-of-00001", "ck-7.data-00001-of-00002", "notes.txt"):
            with open(os.path.join(path, n), "wb") as f:
                f.write(f"victim sentinel {n} in {path}\n".encode())
        self.before = snapshot(path)

    def plant(self, d):
        """Links in d, under names our gc and readers know, into the victim."""
        os.symlink(os.path.join(self.path, "ck-7.data-00001-of-00002"),
                   os.path.join(d, "ck-7.data-00001-of-00002"))
        os.symlink(self.path, os.path.join(d, "ck-3_temp"))
        os.symlink(self.path, os.path.join(d, "workertemp_5"))

    def check(self, what):
        check(snapshot(self.path) == self.before, f"{what}: victim {self.path} was touched")


def copy_ck(name):
    d = os.path.join(OUT, name)
    os.makedirs(d)
    for n in (INDEX, DATA):
        shutil.copyfile(os.path.join(OUT, "good", n), os.path.join(d, n))
    return d


def fifo(path):
    if os.path.lexists(path):
        os.unlink(path)
    os.mkfifo(path, 0o644)


def is_fifo(path):
    return os.path.lexists(path) and stat.S_ISFIFO(os.lstat(path).st_mode)


if os.path.exists(OUT):
    shutil.rmtree(OUT)
os.makedirs(os.path.join(OUT, "good"))
subprocess.run([MAKE, os.path.join(OUT, "good", "ck-7"), "--counter", "7"], check=True)
good = os.path.join(OUT, "good", "ck-7")
rc, so, _ = run("dump", good, "scalar/pi", rc=0, what="good")
check("3.141592653589793" in so, f"good: dump should print pi: {so[:500]}")

# ---- the index is a FIFO ------------------------------------------------------------------------
case = "index-fifo"
v = Victim(os.path.join(OUT, case + "-victim"))
d = copy_ck(case)
fifo(os.path.join(d, INDEX))
v.plant(d)
before = snapshot(d)
prefix = os.path.join(d, "ck-7")
for args in (["inspect", prefix], ["inspect", "--json", prefix], ["verify", prefix],
             ["dump", prefix, "scalar/pi"]):
    run(*args, rc=1, names=(f"{d}/{INDEX}", "FIFO"), what=case)
# no state file, and the only index is a FIFO: the scan skips it (with a warning naming it) and
# finds nothing
run("list", d, rc=1, names=(f"{d}/{INDEX}", "FIFO", "no checkpoints"), what=case)
# ...which is not a checkpoint directory, so gc refuses it
for args in (["gc", d], ["gc", "--dry-run", d]):
    run(*args, rc=1, names=("refusing to clean", "nothing was removed"), what=case)
check(snapshot(d) == before, f"{case}: the directory changed")
check(is_fifo(os.path.join(d, INDEX)), f"{case}: the FIFO is gone")
v.check(case)

# ---- the data file is a FIFO --------------------------------------------------------------------
case = "data-fifo"
v = Victim(os.path.join(OUT, case + "-victim"))
d = copy_ck(case)
fifo(os.path.join(d, DATA))
v.plant(d)
before = snapshot(d)
prefix = os.path.join(d, "ck-7")
for args in (["inspect", prefix], ["verify", prefix], ["dump", prefix, "scalar/pi"],
             ["dump", "--json", prefix, "scalar/pi"]):
    rc, so, se = run(*args, rc=1, names=(DATA, "FIFO"), what=case)
    check("3.141592653589793" not in so, f"{case}: {args[0]} printed a value: {so[:500]}")
# inspect still shows the index before reporting the data file
rc, so, _ = run("inspect", prefix, rc=1, what=case)
check("scalar/pi" in so, f"{case}: inspect should still list the tensors: {so[:1000]}")
# list reads indexes only: the checkpoint is listed (there is no state file: a warning says so)
rc, so, se = run("list", d, rc=0, names=("no state file",), what=case)
check(f"{d}/ck-7" in so and "(latest)" in so, f"{case}: list should show ck-7: {so[:1000]}")
# gc: a committed checkpoint's data file, and not a regular file anyway: left alone
rc, so, _ = run("gc", d, rc=0, what=case)
check("removed 0 path(s)" in so, f"{case}: gc removed something: {so[:1000]}")
check(snapshot(d) == before, f"{case}: the directory changed")
check(is_fifo(os.path.join(d, DATA)), f"{case}: the FIFO is gone")
v.check(case)

# ---- the state file is a FIFO -------------------------------------------------------------------
case = "state-fifo"
v = Victim(os.path.join(OUT, case + "-victim"))
d = copy_ck(case)
fifo(os.path.join(d, "checkpoint"))
v.plant(d)
before = snapshot(d)
# list falls back to scanning, saying why, naming the state file
rc, so, se = run("list", d, rc=0, names=(f"{d}/checkpoint", "FIFO", "scanning"), what=case)
check(f"{d}/ck-7" in so and "(latest)" in so, f"{case}: list should show ck-7: {so[:1000]}")
rc, so, se = run("list", "--json", d, rc=0, what=case)
try:
    got = json.loads(so)
    check([c["prefix"] for c in got["checkpoints"]] == [f"{d}/ck-7"] and
          got["latest"] == f"{d}/ck-7" and got["checkpoints"][0]["save_counter"] == 7,
          f"{case}: list --json: {got}")
except ValueError as e:
    check(False, f"{case}: list --json is not JSON ({e}): {so[:1000]}")
# gc: the directory is recognisably ours by its index; nothing is garbage; the FIFO is left
rc, so, _ = run("gc", d, rc=0, what=case)
check("removed 0 path(s)" in so, f"{case}: gc removed something: {so[:1000]}")
# the checkpoint itself is fine: the commands that take a prefix do not read the state file
run("verify", os.path.join(d, "ck-7"), rc=0, what=case)
rc, so, _ = run("dump", os.path.join(d, "ck-7"), "scalar/pi", rc=0, what=case)
check("3.141592653589793" in so, f"{case}: dump should print pi: {so[:500]}")
# the training-state layout: DIR/chief/checkpoint is the FIFO
w = os.path.join(OUT, case + "-work")
os.makedirs(os.path.join(w, "chief"))
for n in (INDEX, DATA):
    shutil.copyfile(os.path.join(d, n), os.path.join(w, "chief", n))
fifo(os.path.join(w, "chief", "checkpoint"))
rc, so, se = run("list", w, rc=0, names=(f"{w}/chief/checkpoint", "FIFO"), what=case + " (chief)")
check(f"{w}/chief/ck-7" in so, f"{case} (chief): list should show chief/ck-7: {so[:1000]}")
run("gc", w, rc=0, what=case + " (chief)")
check(is_fifo(os.path.join(w, "chief", "checkpoint")), f"{case} (chief): the FIFO is gone")
check(snapshot(d) == before, f"{case}: the directory changed")
check(is_fifo(os.path.join(d, "checkpoint")), f"{case}: the FIFO is gone")
v.check(case)

# ---- metrics.jsonl is a FIFO, or a link out of the directory ------------------------------------
case = "metrics"
v = Victim(os.path.join(OUT, case + "-victim"))
line = json.dumps({"prefix": "ck-7", "mode": "sync", "bytes": 1048576, "ranks": 1,
                   "blocking_s": 0.5, "write_s": 0.4, "agree_s": 0.01, "merge_s": 0.02,
                   "commit_s": 0.07, "gbps": 0.002, "since_prev_s": 0, "training_time_saved_s": 0,
                   "timestamp": 1763700000.25}, separators=(",", ":"))
d = copy_ck(case + "-ok")
with open(os.path.join(d, "metrics.jsonl"), "w") as f:
    f.write(line + "\n")
rc, so, _ = run("stats", d, rc=0, what=case)
check("ck-7" in so and "saves                  1" in so,
      f"{case}: stats of a good file: {so[:1000]}")
d = copy_ck(case + "-fifo")
fifo(os.path.join(d, "metrics.jsonl"))
v.plant(d)
before = snapshot(d)
run("stats", d, rc=1, names=(f"{d}/metrics.jsonl", "FIFO"), what=case)
run("stats", "--json", d, rc=1, names=(f"{d}/metrics.jsonl", "FIFO"), what=case)
check(snapshot(d) == before, f"{case}: the directory changed")
# DIR/chief/metrics.jsonl
w = os.path.join(OUT, case + "-work")
os.makedirs(os.path.join(w, "chief"))
fifo(os.path.join(w, "chief", "metrics.jsonl"))
run("stats", w, rc=1, names=(f"{w}/chief/metrics.jsonl", "FIFO"), what=case + " (chief)")
check(is_fifo(os.path.join(w, "chief", "metrics.jsonl")), f"{case} (chief): the FIFO is gone")
# a link planted in the directory, to a file of someone else's: not followed, nothing of it shown
d = copy_ck(case + "-link")
secret = os.path.join(v.path, "notes.txt")
os.symlink(secret, os.path.join(d, "metrics.jsonl"))
rc, so, se = run("stats", d, rc=1, names=(f"{d}/metrics.jsonl", "symbolic link"), what=case)
check("victim sentinel" not in so + se, f"{case}: stats showed the link's target: {so}{se}")
# a chief/ that is a link to a directory elsewhere holding a metrics.jsonl: not followed
w = os.path.join(OUT, case + "-work-link")
os.makedirs(w)
elsewhere = os.path.join(OUT, case + "-elsewhere")
os.makedirs(elsewhere)
with open(os.path.join(elsewhere, "metrics.jsonl"), "w") as f:
    f.write(line + "\n")
os.symlink(elsewhere, os.path.join(w, "chief"))
run("stats", w, rc=1, names=(f"{w}/chief", "symbolic link"), what=case + " (chief link)")
v.check(case)

# ---- gc on a directory that is not a checkpoint directory ---------------------------------------
case = "not-a-checkpoint-dir"
v = Victim(os.path.join(OUT, case + "-victim"))
d = os.path.join(OUT, case)
os.makedirs(os.path.join(d, "build_temp"))
os.makedirs(os.path.join(d, "workertemp_logs"))
for n, text in (("build_temp/main.o", "object code\n"), ("workertemp_logs/log.txt", "log\n"),
                ("corpus.data-00000-of-00010", "a corpus shard\n"), ("notes.txt", "notes\n"),
                ("ck-1.data-00000-of-00002", "\x89HDF\r\n\x1a\n and more\n")):
    with open(os.path.join(d, n), "w") as f:
        f.write(text)
open(os.path.join(d, "ck-2.data-00000-of-00001"), "w").close()  # empty, as a crashed writer's
os.makedirs(os.path.join(d, "ck-9_temp"))
open(os.path.join(d, "ck-9_temp", "part-00000-of-00001"), "w").close()
v.plant(d)
before = snapshot(d)
for args in (["gc", d], ["gc", "--dry-run", d], ["gc", d + "/"]):
    rc, so, se = run(*args, rc=1, names=("refusing to clean", "not a checkpoint directory",
                                         "nothing was removed"), what=case)
    check("removed " + d not in so and "would remove " + d not in so,
          f"{case}: gc reported a removal: {so[:1000]}")
check(snapshot(d) == before, f"{case}: gc changed the directory")
v.check(case)

finish(lambda c, f: f"test_hostile_fs_cli: {c} checks, {f} failed")
