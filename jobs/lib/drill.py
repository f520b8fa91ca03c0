#!/usr/bin/python3
"""The recovery drills of jobs/drill.sh (docs/drills.md), which runs this in the background:

    MPICKPT_ROOT=... MPICKPT_DEMO=.../mpickpt-demo MPICKPT_CLI=.../mpickpt \\
    MPICKPT_DRILL_MOUNTS=FILE /usr/bin/python3 -B jobs/lib/drill.py [drill.sh's options]

MPICKPT_DRILL_MOUNTS names a file where each tmpfs mount point is recorded (drill.sh unmounts what
is left of them on exit). The options and the environment are those of jobs/drill.sh --help.
"""
import fnmatch
import glob
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time

ROOT = os.environ["MPICKPT_ROOT"]
DEMO = os.environ["MPICKPT_DEMO"]
CLI = os.environ["MPICKPT_CLI"]
MPIEXEC = os.environ.get("MPIEXEC") or "mpirun"
MOUNTS_FILE = os.environ["MPICKPT_DRILL_MOUNTS"]
RUN_TIMEOUT = float(os.environ.get("DRILL_RUN_TIMEOUT") or 60)
OWNED = {"--dir", "--epochs", "--layout", "--async", "--crash-rank", "--crash-step"}
GEOM_DEFAULTS = {"--steps-per-epoch": 6, "--ckpt-every": 2, "--mb": 1, "--keep": 3}
EPOCHS = 2  # every drill trains 2 epochs in all (the base run: the first one)


def on_signal(signum, frame):
    raise KeyboardInterrupt(f"signal {signum}")


signal.signal(signal.SIGTERM, on_signal)
signal.signal(signal.SIGINT, on_signal)
RUNNING = set()  # mpirun processes of the drills (each in its own session)


def die(msg, code=2):
    print(f"drill.sh: {msg}", file=sys.stderr)
    sys.exit(code)


# ---- options ----
argv = sys.argv[1:]
opt = {"np": 4, "layout": "per-rank", "modes": ["sync", "async"], "only": [], "skip": [],
       "table": None,
       "work": os.path.join(ROOT, "build", "drills"), "list": False}
extra = []
i = 0
while i < len(argv):
    a = argv[i]
    v = argv[i + 1] if i + 1 < len(argv) else None
    if a == "--":
        extra = argv[i + 1:]
        break
    if a in ("--np", "--layout", "--only", "--skip", "--table", "--work"):
        if v is None:
            die(f"{a} needs a value")
        if a == "--np":
            if not re.fullmatch(r"[1-9][0-9]*", v):
                die(f"--np needs a positive integer, got '{v}'")
            opt["np"] = int(v)
        elif a == "--layout":
            if v not in ("shared", "per-rank"):
                die(f"--layout is shared or per-rank, got '{v}'")
            opt["layout"] = v
        elif a == "--only":
            opt["only"] += [x for x in v.split(",") if x]
        elif a == "--skip":
            opt["skip"] += [x for x in v.split(",") if x]
        elif a == "--table":
            opt["table"] = v
        else:
            opt["work"] = v
        i += 2
        continue
    if a == "--async":
        opt["modes"] = ["async"]
    elif a == "--sync":
        opt["modes"] = ["sync"]
    elif a == "--list":
        opt["list"] = True
    else:
        die(f"unknown option '{a}' (see jobs/drill.sh --help)")
    i += 1

geom = dict(GEOM_DEFAULTS)
j = 0
while j < len(extra):
    a = extra[j]
    if a in OWNED:
        die(f"{a} is set by the drill itself; not allowed after --")
    if a in geom:
        if j + 1 >= len(extra) or not re.fullmatch(r"[0-9]+", extra[j + 1]):
            die(f"{a} needs a non-negative integer")
        geom[a] = int(extra[j + 1])
        j += 2
        continue
    j += 1
S, K, MB, KEEP = geom["--steps-per-epoch"], geom["--ckpt-every"], geom["--mb"], geom["--keep"]
if S < 2:
    die("--steps-per-epoch must be at least 2 for the drills")


def is_save(t):
    return t % S == 0 or (K > 0 and t % K == 0)


SAVES = [t for t in range(1, EPOCHS * S + 1) if is_save(t)]
NEXT_SAVE = next(t for t in SAVES if t > S)  # the first save after the base run's last one
CRASH_STEP = NEXT_SAVE + 1 if NEXT_SAVE < EPOCHS * S else NEXT_SAVE  # right after it
NP = opt["np"]
WORKER = NP - 1 if NP > 1 else 1  # the non-chief rank of the worker drills (none when NP == 1)

# ---- the drills ----
KILLS = [("plan", "chief"), ("write", "chief"), ("write", "worker"), ("agree", "chief"),
         ("merge", "chief"), ("merge", "worker"), ("commit", "chief"), ("commit", "worker")]
KILL_NOTE = {
    ("plan", "chief"): "while it plans/validates the save",
    ("write", "chief"): "after writing its data, before the agreement",
    ("write", "worker"): "after writing its data, before the agreement",
    ("agree", "chief"): "at the agreement (allreduce of the write status)",
    ("merge", "chief"): "while merging the index fragments",
    ("merge", "worker"): "while sending its index fragment to the chief",
    ("commit", "chief"): "after renaming the data files into place, before writing the index",
    ("commit", "worker"): "at the pre-commit vote",
}
DAMAGE = {
    "flip-byte": "one bit flipped inside the kernel's bytes in a data file of the latest checkpoint",
    "truncate-data": "a data file of the latest checkpoint truncated to half its size",
    "delete-data": "a data file of the latest checkpoint deleted",
    "truncate-index": "the latest checkpoint's index truncated to half its size",
    "delete-index": "the latest checkpoint's index deleted",
}
DRILLS = []
for st, who in KILLS:
    DRILLS.append((f"kill-{st}-{who}", "kill", (st, who)))
DRILLS += [("index-without-state", "emulated", "state"), ("retention-interrupted", "emulated", "retention")]
DRILLS += [(n, "damage", n) for n in DAMAGE]
DRILLS += [("full-disk", "fulldisk", None), ("resume-4to3", "ranks", (4, 3)),
           ("resume-2to4", "ranks", (2, 4)), ("two-jobs", "twojobs", None)]
DESCR = {}
for st, who in KILLS:
    r = "rank 0 (the chief)" if who == "chief" else f"rank {WORKER} (a non-chief rank)"
    DESCR[f"kill-{st}-{who}"] = f"SIGKILL of {r} at `{st}`, {KILL_NOTE[(st, who)]}"
DESCR["index-without-state"] = ("emulated: the chief died after committing a checkpoint's index, "
                                "before rewriting the state file")
DESCR["retention-interrupted"] = ("emulated: the chief died in retention, after deleting the "
                                  "oldest checkpoint's index, before deleting its data files")
DESCR.update(DAMAGE)
DESCR["full-disk"] = "the job's directory on a tmpfs too small for the third checkpoint (ENOSPC)"
DESCR["resume-4to3"] = "4 ranks, rank 2 aborts mid-epoch; resume on 3 ranks"
DESCR["resume-2to4"] = "2 ranks, rank 1 aborts mid-epoch; resume on 4 ranks"
DESCR["two-jobs"] = ("a second job on the directory while the first runs (launched twice); a "
                     "third, with MPICKPT_LOCK_WAIT, waits for the first's end (a requeue)")
# The storage-level drills (docs/levels.md): the demo with a cache level in 2 simulated nodes
# (MPICKPT_RANKS_PER_NODE = NP/2), partner copies, every 2nd checkpoint drained to DIR/chief.
LEVELS = {
    "level-node-lost": "node 1's cache directory removed between runs (2 simulated nodes, "
                       "partner copies)",
    "level-node-and-partner-lost": "both nodes' cache directories removed between runs",
    "level-kill-partner": "SIGKILL of the last rank while it sends its partner copies",
    "level-kill-drain": "SIGKILL of rank 0 as the drain of a checkpoint to the persistent "
                        "directory starts",
    "level-full-cache": "the cache on a tmpfs too small for a checkpoint",
    "level-flip-own": "a byte flipped in node 1's own cache data file of the newest checkpoint "
                      "(its partner holds an intact copy)",
}
DRILLS += [(n, "level", n) for n in LEVELS]
DESCR.update(LEVELS)

if opt["list"]:
    for name, _, _ in DRILLS:
        print(f"{name:24} {DESCR[name]}")
    sys.exit(0)

names = [d[0] for d in DRILLS]
for pat in opt["only"]:
    if not any(fnmatch.fnmatchcase(n, pat) for n in names):
        die(f"--only {pat}: no such drill (jobs/drill.sh --list)")
selected = [d for d in DRILLS if (not opt["only"] or
                                  any(fnmatch.fnmatchcase(d[0], p) for p in opt["only"])) and
            not any(fnmatch.fnmatchcase(d[0], p) for p in opt["skip"])]

# ---- the work dir ----
WORK = os.path.abspath(opt["work"])
MARK = os.path.join(WORK, ".mpickpt-drills")
os.makedirs(WORK, exist_ok=True)
if os.listdir(WORK) and not os.path.exists(MARK):
    die(f"{WORK} is not empty and is not a drill work dir; refusing to clear it", 1)
open(MARK, "a").close()


def mounted_under(path):
    path = os.path.realpath(path)
    res = []
    with open("/proc/self/mounts") as f:
        for line in f:
            mp = line.split()[1].encode().decode("unicode_escape")
            if mp == path or mp.startswith(path + "/"):
                res.append(mp)
    return sorted(res, key=len, reverse=True)


def umount(mp):
    subprocess.run(["umount", mp], capture_output=True)
    if mounted_under(mp):
        subprocess.run(["umount", "-l", mp], capture_output=True)


def fresh_dir(path):
    for mp in mounted_under(path):
        umount(mp)
    shutil.rmtree(path, ignore_errors=True)
    os.makedirs(path)


# ---- running things ----
def leftovers(marker):
    """PIDs of demo processes whose command line holds `marker` (this drill's directory)."""
    pids = []
    for p in os.listdir("/proc"):
        if not p.isdigit():
            continue
        try:
            with open(f"/proc/{p}/cmdline", "rb") as f:
                cl = f.read().split(b"\0")
        except OSError:
            continue
        if cl and os.path.basename(cl[0].decode(errors="replace")) == os.path.basename(DEMO) \
                and marker.encode() in cl:
            pids.append(int(p))
    return pids


def stop_job(p, marker, wait):
    """SIGTERM, then SIGKILL, to job p's process group and to its leftovers (processes carrying
    `marker`), until wait() returns; returns what it returned, or None when the job never ended."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        try:
            os.killpg(p.pid, sig)
        except ProcessLookupError:
            pass
        for pid in leftovers(marker):
            try:
                os.kill(pid, sig)
            except ProcessLookupError:
                pass
        try:
            return wait()
        except subprocess.TimeoutExpired:
            continue
    return None


class Run:
    def __init__(self, rc, so, se, hung, log):
        self.rc, self.so, self.se, self.hung, self.log = rc, so, se, hung, log

    def lines(self, prefix):
        return [l for l in self.so.splitlines() if l.startswith(prefix)]

    def error_line(self):
        errs = [l for l in self.se.splitlines() if l.startswith("mpickpt-demo:")]
        return errs[0] if errs else ""


class Drill:
    def __init__(self, name, mode):
        self.name, self.mode = name, mode
        self.home = os.path.join(WORK, mode, name)
        fresh_dir(self.home)
        self.run_dir = os.path.join(self.home, "run")
        self.nruns = 0
        self.problems = []
        self.broken = DESCR[name]
        self.expected = "?"
        self.actual = ""

    def problem(self, msg):
        self.problems.append(msg)

    def demo(self, np_, what, args, env=None, run_dir=None, timeout=None):
        d = run_dir or self.run_dir
        cmd = [MPIEXEC, "-np", str(np_), DEMO, "--dir", d, "--layout", opt["layout"],
               "--steps-per-epoch", str(S), "--ckpt-every", str(K), "--mb", str(MB),
               "--keep", str(KEEP), *extra, *args]
        if self.mode == "async":
            cmd.append("--async")
        return run_cmd(cmd, self, what, env, d, timeout or RUN_TIMEOUT)

    def log_path(self, what):
        self.nruns += 1
        return os.path.join(self.home, f"{self.nruns:02d}-{what}.log")


def run_cmd(cmd, drill, what, env, marker, timeout):
    e = dict(os.environ)
    e.update(env or {})
    log = drill.log_path(what)
    t0 = time.time()
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=e,
                         start_new_session=True)
    RUNNING.add((p, marker))
    hung = False
    try:
        so, se = p.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        hung = True
        so, se = stop_job(p, marker, lambda: p.communicate(timeout=10)) or (b"", b"")
    RUNNING.discard((p, marker))
    so, se = so.decode(errors="replace"), se.decode(errors="replace")
    with open(log, "w") as f:
        f.write(f"$ {' '.join(cmd)}\n")
        if env:
            f.write(f"  env: {' '.join(f'{k}={v}' for k, v in env.items())}\n")
        f.write(f"-- exit {'HUNG (killed after %gs)' % timeout if hung else p.returncode}"
                f" in {time.time() - t0:.1f}s\n-- stdout\n{so}-- stderr\n{se}")
    r = Run(p.returncode, so, se, hung, log)
    if hung:
        drill.problem(f"{what}: hung, killed after {timeout:g}s (log {log})")
    for s in ("AddressSanitizer", "LeakSanitizer", "runtime error:"):
        if s in se:
            summary = [l for l in se.splitlines() if l.startswith("SUMMARY:") or s in l]
            drill.problem(f"{what}: sanitizer report: {(summary[-1] if summary else s)[:160]} "
                          f"(log {log})")
            break
    return r


def cli(*args):
    p = subprocess.run([CLI, *args], capture_output=True, timeout=120)
    return p.returncode, p.stdout.decode(errors="replace"), p.stderr.decode(errors="replace")


def listing(run_dir):
    """mpickpt list --json RUN/chief -> (latest name or None, [entry dicts]) (the state's view)."""
    rc, so, se = cli("list", "--json", os.path.join(run_dir, "chief"))
    if rc != 0:
        return None, []
    j = json.loads(so)
    latest = os.path.basename(j["latest"]) if j.get("latest") else None
    return latest, j.get("checkpoints", [])


def committed(run_dir):
    """Every checkpoint whose index is on disk in RUN/chief, oldest first, with validity:
    [{name, counter, epoch, step, valid}] (valid: `mpickpt verify` passes)."""
    chief = os.path.join(run_dir, "chief")
    res = []
    if not os.path.isdir(chief):
        return res
    for n in os.listdir(chief):
        if not n.endswith(".index"):
            continue
        prefix = os.path.join(chief, n[:-6])
        rc, so, se = cli("inspect", "--json", prefix)
        try:
            h = json.loads(so)
        except ValueError:
            h = {}
        vrc, _, _ = cli("verify", prefix)
        res.append({"name": n[:-6], "counter": h.get("save_counter", -1),
                    "epoch": h.get("epoch"), "step": h.get("step"), "valid": vrc == 0})
    res.sort(key=lambda e: (e["counter"], e["name"]))
    return res


def newest_valid(entries, exclude=()):
    ok = [e for e in entries if e["valid"] and e["name"] not in exclude]
    return ok[-1] if ok else None


def fmt(e):
    if e is None:
        return "fresh start (no valid checkpoint)"
    return f"{e['name']} (epoch {e['epoch']}, step {e['step']})"


def debris(run_dir):
    """What a finished save must not leave behind."""
    found = []
    chief = os.path.join(run_dir, "chief")
    names = os.listdir(chief) if os.path.isdir(chief) else []
    idx = {n[:-6] for n in names if n.endswith(".index")}
    for n in sorted(names):
        p = os.path.join(chief, n)
        m = re.match(r"^(.*)\.data-\d{5}-of-\d{5}$", n)
        if os.path.isdir(p) and n.endswith("_temp"):
            found.append(f"chief/{n}/")
        elif re.search(r"\.tmp-\d+$", n):
            found.append(f"chief/{n}")
        elif m and m.group(1) not in idx:
            found.append(f"chief/{n} (no index)")
    if os.path.isdir(run_dir):
        for n in sorted(os.listdir(run_dir)):
            p = os.path.join(run_dir, n)
            if n.startswith("workertemp_") and os.path.isdir(p) and os.listdir(p):
                found.append(f"{n}/{os.listdir(p)[0]}")
    return found


RESUMED = re.compile(r"^resumed epoch=(\d+) step=(\d+) from=(\S+)$")


def check_restart(d, r, expected, epochs=EPOCHS, damaged=(), what="restart"):
    """The restart must resume from `expected` (a committed() entry or None), verify every value,
    finish, leave no debris; `mpickpt verify` of the final latest must pass. Sets d.actual."""
    res = r.lines("resumed ")
    got = None
    if res:
        m = RESUMED.match(res[0])
        if m:
            got = {"name": os.path.basename(m.group(3)), "epoch": int(m.group(1)),
                   "step": int(m.group(2)), "dir": os.path.dirname(m.group(3))}
    if got:
        d.actual = fmt(got)
    elif r.lines("fresh start"):
        d.actual = "fresh start"
    else:
        d.actual = "did not resume"
    if "verification failed" in r.so + r.se:
        d.problem(f"{what}: verification failed (wrong restored values; log {r.log})")
    if expected is None:
        if got:
            d.problem(f"{what}: resumed from {fmt(got)}, expected a fresh start")
    elif not got:
        d.problem(f"{what}: no 'resumed' line (log {r.log})")
    else:
        if (got["name"], got["epoch"], got["step"]) != (expected["name"], expected["epoch"],
                                                        expected["step"]):
            d.problem(f"{what}: resumed from {fmt(got)}, expected {fmt(expected)}")
        if not os.path.isdir(got["dir"]) or not os.path.samefile(
                got["dir"], os.path.join(d.run_dir, "chief")):
            d.problem(f"{what}: resumed from {got['dir']}, not from {d.run_dir}/chief")
    if got and got["name"] in damaged:
        d.problem(f"{what}: loaded the damaged checkpoint {got['name']}")
    want_done = f"done epoch={epochs - 1} step={epochs * S}"
    if r.hung:
        pass
    elif r.rc != 0:
        d.problem(f"{what}: exit {r.rc}" + (f": {r.error_line()}" if r.error_line() else "") +
                  f" (log {r.log})")
    if r.lines("done ") != [want_done]:
        d.problem(f"{what}: no '{want_done}' line")
    else:
        d.actual += ", done"
    latest, _ = listing(d.run_dir)
    if not latest:
        d.problem("no latest checkpoint after the restart")
    else:
        if latest in damaged:
            d.problem(f"the final latest is the damaged {latest}")
        vrc, vso, vse = cli("verify", os.path.join(d.run_dir, "chief", latest))
        if vrc != 0:
            d.problem(f"mpickpt verify {latest}: exit {vrc}: {(vso + vse).strip()[:300]}")
        else:
            d.actual += f", verify {latest} ok"
    left = debris(d.run_dir)
    if left:
        d.problem("debris left behind: " + ", ".join(left[:4]) + (" ..." if len(left) > 4 else ""))


# ---- the base run shared by the kill/damage/emulated drills: epoch 0 only ----
bases = {}


def base(mode):
    """A finished first epoch (checkpoints at the save steps <= S) in WORK/mode/_base/run."""
    if mode not in bases:
        b = Drill.__new__(Drill)
        b.name, b.mode, b.home = "_base", mode, os.path.join(WORK, mode, "_base")
        fresh_dir(b.home)
        b.run_dir, b.nruns, b.problems = os.path.join(b.home, "run"), 0, []
        r = b.demo(NP, "base", ["--epochs", "1"])
        ok = r.rc == 0 and r.lines("done ") == [f"done epoch=0 step={S}"]
        ents = committed(b.run_dir)
        if not ents:
            ok = False
        bases[mode] = (b.run_dir, ents) if ok else (None, f"the base run failed (log {r.log})")
    return bases[mode]


def from_base(d):
    """Copies the base run into the drill's directory; returns its committed() entries."""
    src, ents = base(d.mode)
    if src is None:
        raise SetupError(ents)
    shutil.copytree(src, d.run_dir, symlinks=True)
    return committed(d.run_dir)


class SetupError(Exception):
    pass


# ---- drills ----
def drill_kill(d, arg):
    step, who = arg
    rank = 0 if who == "chief" else WORKER
    if who == "worker" and NP < 2:
        return "SKIPPED", "needs at least 2 ranks"
    before = from_base(d)
    expected = newest_valid(before)
    d.expected = fmt(expected)
    fault = f"{rank}:{step}:kill"
    d.broken = f"`MPICKPT_FAULT={fault}`: " + d.broken + f" (the save of step {NEXT_SAVE})"
    r = d.demo(NP, "killed", ["--epochs", str(EPOCHS)], env={"MPICKPT_FAULT": fault})
    marker = f"[mpickpt rank {rank}] MPICKPT_FAULT: killing this rank at {step}"
    if marker not in r.se:
        d.problem(f"the fault did not fire: no '{marker}' (log {r.log})")
    if r.rc == 0 and not r.hung:
        d.problem(f"the killed run exited 0 (log {r.log})")
    if r.lines("done "):
        d.problem("the killed run printed done")
    after = committed(d.run_dir)
    new = [e["name"] for e in after if e["name"] not in {b["name"] for b in before}]
    if new:
        d.problem(f"the killed save committed {', '.join(new)}")
    r = d.demo(NP, "restart", ["--epochs", str(EPOCHS)])
    check_restart(d, r, expected)


def drill_emulated(d, kind):
    before = from_base(d)
    snap = os.path.join(d.home, "chief-before")
    shutil.copytree(os.path.join(d.run_dir, "chief"), snap)
    # One more save (end of epoch 1) in a clean run: its retention deletes the oldest checkpoint.
    r = d.demo(NP, "one-save", ["--epochs", str(EPOCHS), "--ckpt-every", "0"])
    if r.rc != 0:
        raise SetupError(f"the run that makes one more checkpoint failed (log {r.log})")
    after = committed(d.run_dir)
    new = [e for e in after if e["name"] not in {b["name"] for b in before}]
    if len(new) != 1:
        raise SetupError(f"expected one new checkpoint, got {[e['name'] for e in new]}")
    new = new[0]
    chief = os.path.join(d.run_dir, "chief")
    gone = sorted({n.split(".")[0] for n in os.listdir(snap) if n.endswith(".index")} -
                  {n.split(".")[0] for n in os.listdir(chief) if n.endswith(".index")})
    if kind == "state":
        # Put back what the interrupted save had not done yet: the state file, retention.
        shutil.copy2(os.path.join(snap, "checkpoint"), os.path.join(chief, "checkpoint"))
        for n in os.listdir(snap):
            if n.split(".")[0] in gone and not os.path.exists(os.path.join(chief, n)):
                shutil.copy2(os.path.join(snap, n), os.path.join(chief, n))
        d.broken += (f" (emulated: after {new['name']} was committed by a clean run, the state "
                     f"file was put back to its copy from before that save"
                     + (f", and {', '.join(gone)} deleted by its retention put back" if gone else "")
                     + f"; {new['name']} is committed but not listed)")
    else:
        if gone:
            victim = gone[0]
            for n in os.listdir(snap):
                if n.startswith(victim + ".data-"):
                    shutil.copy2(os.path.join(snap, n), os.path.join(chief, n))
            d.broken += (f" (emulated: {victim}, deleted by the retention of {new['name']}'s save, "
                         f"got its data files back without its index)")
        else:
            victim = after[0]["name"]
            os.unlink(os.path.join(chief, victim + ".index"))
            d.broken += (f" (emulated: --keep {KEEP} deleted nothing, so the oldest checkpoint "
                         f"{victim} lost its index only; the state file still lists it)")
    ents = committed(d.run_dir)
    expected = newest_valid(ents)
    d.expected = fmt(expected)
    r = d.demo(NP, "restart", ["--epochs", str(EPOCHS + 1)])
    check_restart(d, r, expected, epochs=EPOCHS + 1)


def flip_byte(prefix, nrank, in_file=None):
    """Flips a byte in the middle of a piece of model/dense/kernel (the middle rank's, or with
    `in_file` the middle one of the pieces in that data file); says where."""
    import h5py  # noqa: E402 (only these drills need it)
    rc, so, se = cli("inspect", "--json", prefix)
    idx = json.loads(so)
    t = next(t for t in idx["tensors"] if t["name"] == "model/dense/kernel")
    pieces = sorted((p for p in t["pieces"] if in_file in (None, p["file"])),
                    key=lambda p: p["rank"])
    if not pieces:
        raise SetupError(f"{prefix}: no piece of model/dense/kernel in {in_file}")
    piece = pieces[len(pieces) // 2]
    path = os.path.join(os.path.dirname(prefix), piece["file"])
    with h5py.File(path, "r") as f:
        ds = f[piece["dataset"]]
        off, shape, esize = ds.id.get_offset(), ds.shape, ds.dtype.itemsize
    if off is None:
        raise SetupError(f"{path}: {piece['dataset']} is not contiguous")
    lin = 0
    if piece["packed"]:  # a byte range of a uint8 pack dataset
        lin, esize = piece["pack_offset"], 1
    else:
        for s, n in zip(piece["dataset_start"], shape):
            lin = lin * n + s
    pos = off + lin * esize + piece["bytes"] // 2
    with open(path, "r+b") as f:
        f.seek(pos)
        b = f.read(1)
        f.seek(pos)
        f.write(bytes([b[0] ^ 0x10]))
    return f"{os.path.basename(path)} byte {pos} (rank {piece['rank']}'s rows)"


def drill_damage(d, how):
    before = from_base(d)
    victim = newest_valid(before)
    if victim is None:
        raise SetupError("the base run left no valid checkpoint")
    expected = newest_valid(before, exclude={victim["name"]})
    d.expected = fmt(expected)
    prefix = os.path.join(d.run_dir, "chief", victim["name"])
    datas = sorted(n for n in os.listdir(os.path.dirname(prefix))
                   if n.startswith(victim["name"] + ".data-"))
    if how == "flip-byte":
        try:
            import h5py  # noqa: F401
        except ImportError:
            return "SKIPPED", "needs python3-h5py in /usr/bin/python3 (jobs/deps.sh test)"
        where = flip_byte(prefix, NP)
    elif how == "truncate-data":
        p = os.path.join(os.path.dirname(prefix), datas[-1])
        os.truncate(p, os.path.getsize(p) // 2)
        where = datas[-1]
    elif how == "delete-data":
        os.unlink(os.path.join(os.path.dirname(prefix), datas[0]))
        where = datas[0]
    elif how == "truncate-index":
        p = prefix + ".index"
        os.truncate(p, os.path.getsize(p) // 2)
        where = victim["name"] + ".index"
    else:
        os.unlink(prefix + ".index")
        where = victim["name"] + ".index"
    d.broken = d.broken.replace("the latest checkpoint", f"the latest checkpoint {victim['name']}")
    d.broken += f": {where}"
    r = d.demo(NP, "restart", ["--epochs", str(EPOCHS)])
    check_restart(d, r, expected, damaged={victim["name"]})
    warn = [l for l in r.se.splitlines() if "skipping checkpoint" in l and prefix in l]
    if not warn:
        d.problem(f"no warning naming the skipped {prefix} on stderr (log {r.log})")
    else:
        d.actual += ", warned"


def drill_fulldisk(d, _):
    if os.geteuid() != 0:
        return "SKIPPED", "mounting a tmpfs needs root"
    src, ents = base(d.mode)
    if src is None:
        raise SetupError(ents)
    size = max(e_bytes(src))
    small = (size * 5 // 2 + 65535) // 65536 * 65536  # two checkpoints fit, the third does not
    mnt = os.path.join(d.home, "mnt")
    os.makedirs(mnt)
    with open(MOUNTS_FILE, "a") as f:
        f.write(mnt + "\n")
    p = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={small}", "tmpfs", mnt],
                       capture_output=True)
    if p.returncode != 0:
        return "SKIPPED", f"mount -t tmpfs not permitted: {p.stderr.decode().strip()[:200]}"
    try:
        d.run_dir = os.path.join(mnt, "run")
        d.broken += f" (tmpfs of {small // 1024} KiB, a checkpoint is {size // 1024} KiB)"
        r = d.demo(NP, "disk-full", ["--epochs", str(EPOCHS)], timeout=min(RUN_TIMEOUT, 30))
        full = r
        nospace = [l for l in r.se.splitlines() if re.search(r"no space left", l, re.I)]
        if r.rc == 0 and not r.hung:
            d.problem("the run on the full disk exited 0")
        elif not r.hung:
            if not nospace:
                d.problem(f"the failed run did not say 'No space left on device' (log {r.log})")
            if "exited on signal" in r.se or "Segmentation fault" in r.se or r.rc < 0:
                sig = re.search(r"process rank (\d+) .*exited on signal (\d+) \(([^)]*)\)", r.se)
                d.problem("a rank crashed instead of failing cleanly" +
                          (f": rank {sig.group(1)} {sig.group(3)}" if sig else "") +
                          f" (log {r.log})")
            elif r.rc != 1:
                d.problem(f"the failed run exited {r.rc}, expected 1 (log {r.log})")
            elif not r.error_line():
                d.problem(f"no 'mpickpt-demo: ...' error line (log {r.log})")
        if r.lines("done "):
            d.problem("the run on the full disk printed done")
        after = committed(d.run_dir)
        expected = newest_valid(after)
        d.expected = fmt(expected)
        written = [l.split()[1].split("=", 1)[1] for l in r.lines("checkpoint prefix=")]
        if not written:
            d.problem("no checkpoint was committed before the disk was full")
        elif d.mode == "sync" and (expected is None or
                                   os.path.basename(written[-1]) != expected["name"]):
            d.problem(f"the last checkpoint the run reported, {os.path.basename(written[-1])}, "
                      f"is not the newest valid one on disk ({fmt(expected)})")
        left = debris(d.run_dir)
        if left and not r.hung:  # a hung run was killed: its debris is no surprise
            d.problem("the failed save left: " + ", ".join(left[:4]))
        p = subprocess.run(["mount", "-o", f"remount,size={size * 40}", mnt], capture_output=True)
        if p.returncode != 0:
            raise SetupError(f"remount bigger failed: {p.stderr.decode().strip()}")
        r = d.demo(NP, "restart", ["--epochs", str(EPOCHS)])
        check_restart(d, r, expected)
        if nospace:
            msg = full.error_line() or nospace[0]
            msg = msg.replace(d.run_dir + "/", "").strip()
            msg = msg[:100] + (" ..." if len(msg) > 100 else "")
            if not re.search(r"no space left", msg, re.I):
                msg += (" " if msg.endswith("...") else " ... ") + "'No space left on device'"
            d.actual = f"the run failed: `{msg}`; the restart resumed " + d.actual
    finally:
        umount(mnt)


def e_bytes(run_dir):
    _, ents = listing(run_dir)
    return [e.get("bytes", 0) for e in ents] or [0]


def drill_ranks(d, arg):
    n0, n1 = arg
    crash_rank = n0 - 2 if n0 > 2 else n0 - 1
    d.broken = (f"{n0} ranks, rank {crash_rank} aborts at step {CRASH_STEP} (--crash-rank "
                f"{crash_rank} --crash-step {CRASH_STEP}); resume on {n1} ranks")
    r = d.demo(n0, "crash", ["--epochs", str(EPOCHS), "--crash-rank", str(crash_rank),
                             "--crash-step", str(CRASH_STEP)])
    if f"crash rank={crash_rank} step={CRASH_STEP}" not in r.so.splitlines():
        d.problem(f"the run did not crash at step {CRASH_STEP} (log {r.log})")
    if r.rc == 0:
        d.problem("the crashed run exited 0")
    after = committed(d.run_dir)
    expected = newest_valid(after)
    d.expected = fmt(expected)
    written = [os.path.basename(l.split()[1].split("=", 1)[1])
               for l in r.lines("checkpoint prefix=")]
    if d.mode == "sync" and written and (expected is None or written[-1] != expected["name"]):
        d.problem(f"the crashed run's last checkpoint was {written[-1]}, newest valid on disk: "
                  f"{fmt(expected)}")
    r = d.demo(n1, "restart", ["--epochs", str(EPOCHS)])
    check_restart(d, r, expected)
    if n1 > n0 and not any(f"ranks {n0}-{n1 - 1} were not in the checkpoint" in l
                           for l in r.lines("verified ")):
        d.problem("the verified line does not say which ranks start fresh")


# ---- two jobs on one directory (lib/dirlock.h) ----
def start_bg(d, what, cmd, env=None):
    """A job in the background, its stdout and stderr in files: (Popen, out path, err path)."""
    e = dict(os.environ)
    e.update(env or {})
    log = d.log_path(what)[:-len(".log")]
    out, err = log + ".out", log + ".err"
    p = subprocess.Popen(cmd, stdout=open(out, "w"), stderr=open(err, "w"), env=e,
                         start_new_session=True)
    RUNNING.add((p, d.run_dir))
    return p, out, err


def text(path):
    try:
        with open(path, errors="replace") as f:
            return f.read()
    except OSError:
        return ""


def wait_for(d, what, cond, procs, limit=None):
    """Polls cond() until it holds; False (a problem noted) when a job in procs ended first or
    after `limit` seconds (a hang guard, not a measurement)."""
    t0 = time.time()
    while not cond():
        for name, p in procs:
            if p.poll() is not None:
                d.problem(f"{name} ended (exit {p.returncode}) before {what}")
                return False
        if time.time() - t0 > (limit or RUN_TIMEOUT):
            d.problem(f"no {what} after {limit or RUN_TIMEOUT:g}s")
            return False
        time.sleep(0.05)
    return True


def finish_bg(d, what, p, out, err):
    """Waits for a background job (stopped at the run timeout); a Run like run_cmd's."""
    hung = False
    try:
        p.wait(timeout=RUN_TIMEOUT)
    except subprocess.TimeoutExpired:
        hung = True
        stop_job(p, d.run_dir, lambda: p.wait(timeout=10))
        d.problem(f"{what}: hung, killed after {RUN_TIMEOUT:g}s (log {out})")
    RUNNING.discard((p, d.run_dir))
    r = Run(p.returncode, text(out), text(err), hung, out)
    for s in ("AddressSanitizer", "LeakSanitizer", "runtime error:"):
        if s in r.se:
            d.problem(f"{what}: sanitizer report (log {err})")
            break
    return r


def files_of(run_dir):
    """{path: (size, mtime)} of every file under run_dir."""
    res = {}
    for dp, _, fs in os.walk(run_dir):
        for n in fs:
            st = os.lstat(os.path.join(dp, n))
            res[os.path.relpath(os.path.join(dp, n), run_dir)] = (st.st_size, st.st_mtime_ns)
    return res


def drill_two_jobs(d, _):
    demo = [MPIEXEC, "-np", str(NP), DEMO, "--dir", d.run_dir, "--layout", opt["layout"],
            "--steps-per-epoch", str(S), "--ckpt-every", str(K), "--mb", str(MB),
            "--keep", str(KEEP), *extra, "--epochs", str(EPOCHS)]
    if d.mode == "async":
        demo.append("--async")
    # the first job: it holds at its first committed checkpoint until it is preempted
    first, fout, ferr = start_bg(d, "first", demo + ["--hold"])
    waiter = None
    try:
        if not wait_for(d, "first checkpoint of the first job",
                        lambda: "checkpoint prefix=" in text(fout), [("the first job", first)]):
            return
        held = leftovers(d.run_dir)  # the first job's ranks
        before, files = committed(d.run_dir), files_of(d.run_dir)
        # the second job, launched by mistake: refused at once, on every rank, naming the first
        r = d.demo(NP, "second", ["--epochs", str(EPOCHS)])
        msg = r.error_line()
        if r.rc == 0 or r.hung or r.lines("fresh start") or r.lines("resumed "):
            d.problem(f"the second job was not refused: exit {r.rc} (log {r.log})")
        elif ("is in use by another job" not in msg or
              not any(f"pid {pid}," in msg for pid in held)):
            d.problem(f"the second job's error does not name the first job's pid {held}: "
                      f"{msg[:300]} (log {r.log})")
        else:
            d.actual = "second job refused (" + msg[msg.find("in use"):][:90] + "...)"
        if first.poll() is not None:
            d.problem(f"the first job ended (exit {first.returncode}) when the second started")
        now = files_of(d.run_dir)
        if now != files:
            changed = sorted(k for k in set(now) | set(files) if now.get(k) != files.get(k))
            d.problem("the second job changed the first job's directory: " +
                      ", ".join(changed)[:300])
        if not before or not all(e["valid"] for e in before):
            d.problem(f"the first job's checkpoints do not all verify: {before}")
        # a requeue that overlaps the first job's end: it waits for the directory
        waiter, wout, werr = start_bg(d, "waiter", demo, env={"MPICKPT_LOCK_WAIT": str(
            int(RUN_TIMEOUT * 2))})
        if not wait_for(d, "'waiting up to' from the third job", lambda: "waiting up to" in
                        text(werr), [("the third job", waiter), ("the first job", first)]):
            return
        os.kill(first.pid, signal.SIGUSR1)  # mpirun forwards it: a final checkpoint, exit 75
        rf = finish_bg(d, "first", first, fout, ferr)
        if rf.rc != 75 or not rf.lines("preempted "):
            d.problem(f"the first job after SIGUSR1: exit {rf.rc} (log {fout})")
        last = rf.lines("checkpoint prefix=")
        m = re.match(r"^checkpoint prefix=(\S+) epoch=(\d+) step=(\d+) ",
                     last[-1] if last else "")
        expected = {"name": os.path.basename(m.group(1)), "epoch": int(m.group(2)),
                    "step": int(m.group(3))} if m else None
        d.expected = ("second refused; third waits, then resumes from the first's last: " +
                      fmt(expected))
        rw = finish_bg(d, "waiter", waiter, wout, werr)
        waiter = None
        actual = d.actual
        check_restart(d, rw, expected, what="third job")
        d.actual = actual + "; third: " + d.actual
    finally:
        for p in (first, waiter):
            if p is not None and p.poll() is None:
                stop_job(p, d.run_dir, lambda: p.wait(timeout=10))
                RUNNING.discard((p, d.run_dir))


# ---- the storage levels ----
LEVEL_ARGS = ["--redundancy", "partner", "--persist-every", "2", "--cache-keep", "2"]


def level_env():
    return {"MPICKPT_RANKS_PER_NODE": str(max(NP // 2, 1))}


def level_demo(d, what, epochs, cache, env=None, args=()):
    e = level_env()
    e.update(env or {})
    return d.demo(NP, what, ["--epochs", str(epochs), "--cache-dir", os.path.join(cache, "%n"),
                             *LEVEL_ARGS, *args], env=e)


def level_state(d):
    """The state's entries: {name: (step, levels)} and the latest name."""
    latest, ents = listing(d.run_dir)
    return latest, {os.path.basename(e["prefix"]): (e["step"], e.get("levels", []))
                    for e in ents}


def cache_debris(cache):
    """What a finished save must not leave in the nodes' caches."""
    found = []
    for node in sorted(os.listdir(cache)) if os.path.isdir(cache) else []:
        nd = os.path.join(cache, node)
        for n in sorted(os.listdir(nd)):
            p = os.path.join(nd, n)
            if re.search(r"\.tmp-[0-9a-f]+$", n) or (os.path.isdir(p) and n.endswith("_temp")) \
                    or n.startswith("fetch_") or \
                    (n.startswith("workertemp_") and os.path.isdir(p) and os.listdir(p)):
                found.append(f"{node}/{n}")
    return found


def cache_data_files(cache, node, name):
    """Node `node`'s data files of checkpoint `name`: the regular files named
    <name>.data-* anywhere below its cache directory (where the library keeps them there is its
    business), as {file name: path}."""
    found = {}
    for p in glob.glob(os.path.join(cache, str(node), "**", f"{name}.data-*"), recursive=True):
        if os.path.isfile(p) and not os.path.islink(p) and \
                re.fullmatch(re.escape(name) + r"\.data-\d+-of-\d+", os.path.basename(p)):
            found[os.path.basename(p)] = p
    return found


def check_level_restart(d, r, name, step, from_cache, cache, what="restart"):
    """The restart resumed from checkpoint `name` at `step`, from the cache (its path under
    `cache`) or from DIR/chief, verified every value, finished, left no debris."""
    res = r.lines("resumed ")
    m = RESUMED.match(res[0]) if res else None
    if not m:
        d.actual = "fresh start" if r.lines("fresh start") else "did not resume"
        d.problem(f"{what}: no 'resumed' line (log {r.log})")
    else:
        got_dir, got = os.path.dirname(m.group(3)), os.path.basename(m.group(3))
        where = "the cache" if got_dir.startswith(cache + "/") else \
            "DIR/chief" if os.path.samefile(got_dir, os.path.join(d.run_dir, "chief")) else got_dir
        d.actual = f"{got} (step {m.group(2)}) from {where}"
        if (got, int(m.group(2))) != (name, step):
            d.problem(f"{what}: resumed from {got} step {m.group(2)}, expected {name} step {step}")
        if (where == "the cache") != from_cache:
            d.problem(f"{what}: resumed from {where}, expected "
                      f"{'the cache' if from_cache else 'DIR/chief'}")
    if "verification failed" in r.so + r.se:
        d.problem(f"{what}: verification failed (wrong restored values; log {r.log})")
    want_done = f"done epoch={EPOCHS - 1} step={EPOCHS * S}"
    if r.rc != 0 or r.lines("done ") != [want_done]:
        d.problem(f"{what}: exit {r.rc}, no '{want_done}' line (log {r.log})")
    else:
        d.actual += ", done"
    left = debris(d.run_dir) + cache_debris(cache)
    if left:
        d.problem("debris left behind: " + ", ".join(left[:4]))


def drill_level(d, kind):
    if d.mode != "sync":
        return "SKIPPED", "sync only (tests/mpi/test_cache.c runs the cache with an async saver)"
    if NP < 2:
        return "SKIPPED", "needs two simulated nodes (--np 2 or more)"
    if opt["layout"] == "shared":
        return "SKIPPED", "the cache level needs the per-rank or per-node layout"
    if kind == "level-full-cache" and os.geteuid() != 0:
        return "SKIPPED", "mounting a tmpfs needs root"
    cache = os.path.join(d.home, "cache")
    # the first epoch: ckpt-1..3 (steps 2, 4, 6); ckpt-2 drained; the cache keeps ckpt-2 and 3
    r = level_demo(d, "base", 1, cache)
    if r.rc != 0 or r.lines("done ") != [f"done epoch=0 step={S}"]:
        raise SetupError(f"the base run failed (log {r.log})")
    latest, st = level_state(d)
    newest, older = f"ckpt-{len(SAVES[:SAVES.index(S) + 1])}", None
    persisted = [n for n, (_, lv) in st.items() if "persistent" in lv]
    if latest != newest or "cache" not in st.get(newest, (0, []))[1] or not persisted:
        raise SetupError(f"after the base run the state is {st}, latest {latest}")
    older = max(persisted, key=lambda n: st[n][0])
    if kind == "level-node-lost":
        shutil.rmtree(os.path.join(cache, "1"))
        d.expected = f"{newest} (step {S}) from the cache, node 1's files rebuilt"
        r = level_demo(d, "restart", EPOCHS, cache)
        check_level_restart(d, r, newest, S, True, cache)
        if not os.path.isdir(os.path.join(cache, "1")):
            d.problem("node 1's cache directory was not rebuilt")
    elif kind == "level-node-and-partner-lost":
        shutil.rmtree(cache)
        d.expected = f"{older} (step {st[older][0]}) from DIR/chief (the newest, {newest}, was " \
                     f"only in the caches)"
        r = level_demo(d, "restart", EPOCHS, cache)
        check_level_restart(d, r, older, st[older][0], False, cache)
        if not [l for l in r.se.splitlines() if "cannot be restored from the cache" in l]:
            d.problem(f"no warning that {newest} cannot be restored from the cache (log {r.log})")
    elif kind in ("level-kill-partner", "level-kill-drain"):
        fault = f"{NP - 1}:partner:kill" if kind == "level-kill-partner" else "0:drain:kill"
        r = level_demo(d, "killed", EPOCHS, cache, env={"MPICKPT_FAULT": fault})
        if r.rc == 0 or r.lines("done "):
            d.problem(f"the run with MPICKPT_FAULT={fault} finished (log {r.log})")
        latest2, st2 = level_state(d)
        # the kill at partner: nothing new committed; at drain: the save committed to the cache
        if kind == "level-kill-partner":
            name, step = newest, S
            if latest2 != newest:
                d.problem(f"after the kill the latest is {latest2}, expected {newest}")
        else:
            name = latest2
            step = st2.get(latest2, (None,))[0]
            if latest2 == newest or st2.get(latest2, (0, []))[1] != ["cache"]:
                d.problem(f"after the kill in the drain the latest is {latest2} "
                          f"{st2.get(latest2)}, expected a newer checkpoint in the cache only")
        d.expected = f"{name} (step {step}) from the cache"
        r = level_demo(d, "restart", EPOCHS, cache)
        check_level_restart(d, r, name, step, True, cache)
        if kind == "level-kill-drain" and name and \
                not os.path.exists(os.path.join(d.run_dir, "chief", f"{name}.index")):
            d.problem(f"the interrupted drain of {name} was not done again: no "
                      f"DIR/chief/{name}.index after the restart")
        elif kind == "level-kill-drain":
            d.actual += f", {name} drained at the restart"
    elif kind == "level-flip-own":
        try:
            import h5py  # noqa: F401
        except ImportError:
            return "SKIPPED", "needs python3-h5py in /usr/bin/python3 (jobs/deps.sh test)"
        # node 1's own file: per rank, the file of its first rank (nodes of NP/2 ranks)
        rpn = max(NP // 2, 1)
        own = f"{newest}.data-{rpn:05d}-of-{NP:05d}"
        mine, held = cache_data_files(cache, 1, newest), cache_data_files(cache, 0, newest)
        if own not in mine or own not in held:
            raise SetupError(f"node 1's {own} or its partner copy on node 0 is not in the caches "
                             f"(node 1: {sorted(mine)}, node 0: {sorted(held)})")
        path = mine[own]
        where = flip_byte(os.path.join(os.path.dirname(path), newest), NP, in_file=own)
        d.broken += f": node 1's {where}"
        d.expected = f"{newest} (step {S}) from the cache, {own} replaced by node 0's copy"
        r = level_demo(d, "restart", EPOCHS, cache)
        check_level_restart(d, r, newest, S, True, cache)
        fixed = [l for l in r.se.splitlines() if f"damaged copy of {own} replaced" in l]
        if not fixed:
            d.problem(f"no warning that node 1's damaged {own} was replaced (log {r.log})")
        else:
            d.actual += ", repaired"
        if [l for l in r.se.splitlines() if "cannot be restored from the cache" in l]:
            d.problem(f"{newest} was reported as not restorable from the cache (log {r.log})")
    elif kind == "level-full-cache":
        mnt = os.path.join(d.home, "mnt")
        os.makedirs(mnt)
        with open(MOUNTS_FILE, "a") as f:
            f.write(mnt + "\n")
        p = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=256k", "tmpfs", mnt],
                           capture_output=True)
        if p.returncode != 0:
            return "SKIPPED", f"mount -t tmpfs not permitted: {p.stderr.decode().strip()[:200]}"
        try:
            # the caches' copies are not there: the restart resumes from DIR/chief, then its
            # first save finds the cache full
            r = level_demo(d, "full-cache", EPOCHS, mnt)
            nospace = [l for l in r.se.splitlines() if re.search(r"no space left", l, re.I)]
            if r.rc == 0 or r.lines("done "):
                d.problem(f"the run with a full cache finished (log {r.log})")
            elif not nospace or not r.error_line():
                d.problem(f"the failed run did not say 'No space left on device' (log {r.log})")
            if r.rc < 0 or "exited on signal" in r.se:
                d.problem(f"a rank crashed instead of failing cleanly (log {r.log})")
            latest2, st2 = level_state(d)
            if latest2 != newest:
                d.problem(f"after the full cache the latest is {latest2}, expected {newest}")
            left = cache_debris(mnt)
            if left:
                d.problem("the failed save left in the cache: " + ", ".join(left[:4]))
        finally:
            umount(mnt)
        d.expected = f"{newest} (step {S}) from the cache"
        r = level_demo(d, "restart", EPOCHS, cache)
        check_level_restart(d, r, newest, S, True, cache)
        if nospace:
            d.actual = f"the run failed: `{nospace[0].strip()[:90]}`; the restart resumed " + \
                d.actual


RUNNERS = {"kill": drill_kill, "emulated": drill_emulated, "damage": drill_damage,
           "fulldisk": drill_fulldisk, "ranks": drill_ranks, "level": drill_level,
           "twojobs": drill_two_jobs}


# ---- async: does this demo have it? ----
def probe_async():
    home = os.path.join(WORK, "async-probe")
    fresh_dir(home)
    cmd = [MPIEXEC, "-np", "1", DEMO, "--dir", os.path.join(home, "run"), "--epochs", "1",
           "--steps-per-epoch", "1", "--ckpt-every", "0", "--mb", "1", "--async"]
    try:
        p = subprocess.run(cmd, capture_output=True, timeout=RUN_TIMEOUT)
    except subprocess.TimeoutExpired:
        return False, "the async probe hung"
    se = p.stderr.decode(errors="replace")
    if p.returncode == 0:
        return True, ""
    m = re.search(r"mpickpt-demo: (--async needs the async saver[^\n]*)", se)
    if p.returncode == 2 and m:
        return None, f"async not available: {m.group(1)}"
    return False, f"the async probe failed: exit {p.returncode}: {se.strip()[-200:]}"


# ---- main ----
rows = []
HDR = ["drill", "what was broken", "expected resume point", "actual", "result"]
print(f"== recovery drills: np={NP} layout={opt['layout']} modes={','.join(opt['modes'])} "
      f"steps/epoch={S} ckpt-every={K} mb={MB} keep={KEEP}; work dir {WORK}", flush=True)
print(" | ".join(HDR), flush=True)
t_start = time.time()
try:
    for mode in opt["modes"]:
        fresh_dir(os.path.join(WORK, mode))
        avail, why = (True, "") if mode == "sync" else probe_async()
        for name, kind, arg in selected:
            t0 = time.time()
            if not avail:
                row = [f"{mode}/{name}", DESCR[name], "-", why,
                       "SKIPPED" if avail is None else "FAIL"]
                rows.append(row)
                print(" | ".join(row), flush=True)
                continue
            d = Drill(name, mode)
            status = None
            try:
                out = RUNNERS[kind](d, arg)
                if out:
                    status, why_skip = out
                    d.actual = why_skip
            except SetupError as e:
                d.problem(f"setup: {e}")
            except Exception as e:  # a bug in a drill is a failed drill, not a crashed table
                d.problem(f"drill error: {type(e).__name__}: {e}")
            if status is None:
                status = "FAIL" if d.problems else "PASS"
            actual = d.actual or "-"
            if d.problems:
                actual += "; PROBLEMS: " + "; ".join(d.problems)
            row = [f"{mode}/{name}", d.broken, d.expected if status != "SKIPPED" else "-",
                   actual, status]
            rows.append(row)
            print(" | ".join(row) + f"  [{time.time() - t0:.1f}s]", flush=True)
except KeyboardInterrupt as e:
    signal.signal(signal.SIGTERM, signal.SIG_IGN)  # a second signal must not cut the cleanup short
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    print(f"drill.sh: interrupted ({e}); stopping the running job and unmounting", file=sys.stderr)
    for p, marker in list(RUNNING):
        stop_job(p, marker, lambda: p.wait(timeout=5))
    for mp in mounted_under(WORK):
        umount(mp)
    sys.exit(130)
finally:
    for mp in mounted_under(WORK):
        umount(mp)

npass = sum(r[4] == "PASS" for r in rows)
nfail = sum(r[4] == "FAIL" for r in rows)
nskip = sum(r[4] == "SKIPPED" for r in rows)
summary = (f"{npass} passed, {nfail} failed, {nskip} skipped of {len(rows)} drills "
           f"in {time.time() - t_start:.0f}s")
print(f"== {summary} (logs: {WORK}/<mode>/<drill>/)", flush=True)
if opt["table"]:
    def cell(s):
        return s.replace("|", "\\|").replace("\n", " ")
    with open(opt["table"], "w") as f:
        f.write(f"`jobs/drill.sh {' '.join(sys.argv[1:])}` (np={NP}, layout={opt['layout']}, "
                f"{EPOCHS} epochs x {S} steps, ckpt every {K}, --mb {MB}, --keep {KEEP}), "
                f"{time.strftime('%Y-%m-%d %H:%M %Z')}: {summary}\n\n")
        f.write("| " + " | ".join(HDR) + " |\n|" + "---|" * len(HDR) + "\n")
        for r in rows:
            f.write("| " + " | ".join(cell(c) for c in r[:4]) + f" | **{r[4]}** |\n")
sys.exit(1 if nfail else 0)
