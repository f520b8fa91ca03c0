#!/usr/bin/python3
"""`mpickpt gc`, `pin` and `drop` while a job holds the directory (lib/dirlock.h, docs/cli.md):

    MPICKPT_CLI=.../mpickpt MPICKPT_DEMO=.../mpickpt-demo MPIEXEC=mpirun test_cli_lock.py OUTDIR

A demo job (1 rank, --hold: it waits at its first committed checkpoint) holds RUN/chief. Then:
- gc RUN, gc RUN/chief, pin RUN ckpt-1, pin --clear RUN, drop RUN ckpt-1, drop --undo: each
  exits 1 with one message naming RUN/chief, the job's host and pid (the pid found in /proc, not
  in the lock file) and `mpickpt halt`; the directory is unchanged (no restart file written,
  nothing removed). What only reads works: list, pin RUN (show), gc --dry-run, verify, inspect.
- --wait needs a number (exit 2); a bad MPICKPT_LOCK_WAIT is exit 1 naming it.
- drop --wait 300 waits (its "waiting up to" warning), `mpickpt halt RUN` (which takes no lock)
  stops the job (exit 75), and the drop then goes through; gc and pin work again.
- A new run of the demo resumes from the job's checkpoint with every value verified.
No step depends on speed: each waits for a file or a line (a limit only catches a hang)."""
import json
import os
import socket
import subprocess
import sys
import time

OUT = sys.argv[1]
CLI, DEMO = os.environ["MPICKPT_CLI"], os.environ["MPICKPT_DEMO"]
MPIEXEC = os.environ.get("MPIEXEC") or "mpirun"
LIMIT = 25  # seconds for one wait: a hang guard (the ctest TIMEOUT is 60)
RUN = os.path.join(OUT, "run")
CHIEF = os.path.join(RUN, "chief")
DEMO_ARGS = ["--dir", RUN, "--epochs", "2", "--steps-per-epoch", "4", "--ckpt-every", "2",
             "--mb", "1", "--layout", "per-rank"]
checks = failed = 0


def check(cond, msg):
    global checks, failed
    checks += 1
    if not cond:
        failed += 1
        print(f"FAIL: {msg}", flush=True)


def cli(*args, env=None):
    e = dict(os.environ)
    e.pop("MPICKPT_LOCK_WAIT", None)
    e.update(env or {})
    p = subprocess.run([CLI, *args], capture_output=True, text=True, env=e, timeout=LIMIT)
    return p.returncode, p.stdout, p.stderr


def wait_until(what, cond, proc=None):
    t0 = time.monotonic()
    while not cond():
        if proc is not None and proc.poll() is not None:
            sys.exit(f"test_cli_lock: the job ended (exit {proc.returncode}) before {what}")
        if time.monotonic() - t0 > LIMIT:
            sys.exit(f"test_cli_lock: no {what} after {LIMIT} s")
        time.sleep(0.05)


def read(path):
    try:
        with open(path, errors="replace") as f:
            return f.read()
    except OSError:
        return ""


def tree(root):
    """{relative path: (size, mtime_ns)} of everything under root."""
    res = {}
    for d, dirs, files in os.walk(root):
        for n in dirs + files:
            p = os.path.join(d, n)
            st = os.lstat(p)
            res[os.path.relpath(p, root)] = (st.st_size, st.st_mtime_ns)
    return res


def demo_pids():
    pids = []
    for p in os.listdir("/proc"):
        if not p.isdigit():
            continue
        try:
            with open(f"/proc/{p}/cmdline", "rb") as f:
                cl = f.read().split(b"\0")
        except OSError:
            continue
        if cl and os.path.basename(cl[0]) == b"mpickpt-demo" and RUN.encode() in cl:
            pids.append(int(p))
    return pids


os.makedirs(OUT, exist_ok=True)
job_log = open(os.path.join(OUT, "job.log"), "w")
job = subprocess.Popen([MPIEXEC, "-np", "1", DEMO, *DEMO_ARGS, "--hold"], stdout=job_log,
                       stderr=subprocess.STDOUT, start_new_session=True)
try:
    wait_until("committed checkpoint", lambda: "checkpoint prefix=" in read(job_log.name), job)
    pids = demo_pids()
    check(len(pids) == 1, f"demo processes of {RUN}: {pids}")
    pid, host = (pids or [0])[0], socket.gethostname()
    before = tree(RUN)

    for args in (["gc", RUN], ["gc", CHIEF], ["pin", RUN, "ckpt-1"], ["pin", "--clear", RUN],
                 ["drop", RUN, "ckpt-1"], ["drop", "--undo", RUN, "ckpt-1"]):
        rc, so, se = cli(*args)
        what = "mpickpt " + " ".join(a.replace(OUT, "OUT") for a in args)
        check(rc == 1, f"{what} while the job runs: exit {rc}: {se}")
        check(f"checkpoint directory {CHIEF} is in use by another job" in se and
              f"host {host}, pid {pid}," in se and "since " in se and "mpickpt halt" in se,
              f"{what}: the message: {se!r}")
        check(len(se.strip().splitlines()) == 1, f"{what}: one message line: {se!r}")
    check(tree(RUN) == before, f"the refused commands changed {RUN}: "
          f"{sorted(set(tree(RUN).items()) ^ set(before.items()))}")
    check(not os.path.exists(os.path.join(CHIEF, "restart")), "a restart file was written")

    # what only reads goes on
    rc, so, se = cli("list", "--json", RUN)
    check(rc == 0 and [os.path.basename(c["prefix"]) for c in json.loads(so)["checkpoints"]] ==
          ["ckpt-1"], f"list while the job runs: {rc} {so} {se}")
    for args in (["pin", RUN], ["gc", "--dry-run", RUN], ["verify", os.path.join(CHIEF, "ckpt-1")],
                 ["inspect", os.path.join(CHIEF, "ckpt-1")]):
        rc, so, se = cli(*args)
        check(rc == 0, f"mpickpt {args[0]} {args[1]} while the job runs: exit {rc}: {se}")

    # bad waits
    rc, so, se = cli("gc", "--wait", "soon", RUN)
    check(rc == 2 and "--wait" in se, f"gc --wait soon: {rc} {se!r}")
    rc, so, se = cli("drop", "--wait=-1", RUN, "ckpt-1")
    check(rc == 2 and "--wait" in se, f"drop --wait=-1: {rc} {se!r}")
    rc, so, se = cli("gc", RUN, env={"MPICKPT_LOCK_WAIT": "a while"})
    check(rc == 1 and "MPICKPT_LOCK_WAIT" in se, f"gc with MPICKPT_LOCK_WAIT='a while': {rc} {se!r}")

    # a drop that waits; halt (no lock) stops the job; the drop goes through
    drop_err = open(os.path.join(OUT, "drop.err"), "w")
    drop = subprocess.Popen([CLI, "drop", "--wait", "300", "--json", RUN, "ckpt-1"],
                            stdout=subprocess.PIPE, stderr=drop_err, text=True)
    wait_until("'waiting up to' from the waiting drop", lambda: "waiting up to" in
               read(drop_err.name), job)
    rc, so, se = cli("halt", RUN)
    check(rc == 0, f"mpickpt halt while the job holds the lock: {rc} {se}")
    check(job.wait(timeout=LIMIT) == 75, f"the job after the halt: exit {job.returncode}")
    so, _ = drop.communicate(timeout=LIMIT)
    drop_err.close()
    check(drop.returncode == 0 and json.loads(so)["dropped"] == ["ckpt-1"],
          f"the waiting drop: exit {drop.returncode}: {so} {read(drop_err.name)}")
    check("drop ckpt-1 1" in read(os.path.join(CHIEF, "restart")), "the drop is not recorded")
finally:
    if job.poll() is None:
        os.killpg(job.pid, 9)
        job.wait()
    job_log.close()

# free again
for args in (["drop", "--undo", RUN, "ckpt-1"], ["pin", RUN, "ckpt-1"], ["pin", "--clear", RUN],
             ["gc", RUN], ["halt", "--clear", RUN]):
    rc, so, se = cli(*args)
    check(rc == 0, f"mpickpt {' '.join(args[:2])} after the job: exit {rc}: {se}")

# nothing of the job was lost: a new run resumes from its checkpoint, every value verified
p = subprocess.run([MPIEXEC, "-np", "1", DEMO, *DEMO_ARGS], capture_output=True, text=True,
                   timeout=LIMIT)
check(p.returncode == 0 and "resumed epoch=0 step=2 from=" in p.stdout and
      "verified every restored value at step 2" in p.stdout and "done epoch=1 step=8" in p.stdout,
      f"the resumed run: exit {p.returncode}: {p.stdout} {p.stderr}")
print(f"test_cli_lock: {checks} checks, {failed} failed")
sys.exit(1 if failed else 0)
