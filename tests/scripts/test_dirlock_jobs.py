#!/usr/bin/python3
"""Two MPI jobs on one checkpoint directory at once (tests/mpi/test_dirlock.c has the checks):

    MPIEXEC=mpirun MPICKPT_TEST_DIRLOCK=.../test_dirlock test_dirlock_jobs.py NP OUTDIR

1. `first` (NP ranks) holds DIR: two saves, then it waits for OUTDIR/sync/go.
2. `second` (NP ranks) while first waits: refused on every rank, naming first's host and pid.
3. `waiter` (NP ranks, lock_wait_seconds) while first waits; once its rank 0 logged that it waits
   for the directory, go is touched: first saves twice more, checks its four checkpoints and ends;
   the waiter then starts, restores first's last save exactly and saves its own.
Every job must exit 0 (its own checks passed); no step depends on how fast anything runs, only on
files the jobs write (a job that never gets there fails at the timeout)."""
import os
import subprocess
import sys
import time

NP, OUT = sys.argv[1], sys.argv[2]
MPIEXEC = os.environ.get("MPIEXEC") or "mpirun"
PROG = os.environ["MPICKPT_TEST_DIRLOCK"]
LIMIT = 300  # seconds for any one wait (the ctest TIMEOUT is lower: that one fails first)

DIR, SYNC = os.path.join(OUT, "dir"), os.path.join(OUT, "sync")
os.makedirs(SYNC, exist_ok=True)
failures = []


def job(role, extra_env=None):
    env = dict(os.environ)
    env.pop("MPICKPT_LOCK_WAIT", None)
    env.update(extra_env or {})
    log = open(os.path.join(OUT, f"{role}.log"), "w")
    return subprocess.Popen([MPIEXEC, "-np", NP, PROG, role, DIR, SYNC], stdout=log,
                            stderr=subprocess.STDOUT, env=env, start_new_session=True), log


def text_of(role):
    with open(os.path.join(OUT, f"{role}.log"), errors="replace") as f:
        return f.read()


def wait_until(what, cond, procs):
    """Polls cond() (sleeps of 50 ms) until it holds; a job in procs that ended first, or the
    limit, fails the test."""
    t0 = time.monotonic()
    while not cond():
        for name, p in procs:
            if p.poll() is not None:
                sys.exit(f"test_dirlock_jobs: {name} ended (exit {p.returncode}) before {what}:\n"
                         f"{text_of(name)}")
        if time.monotonic() - t0 > LIMIT:
            sys.exit(f"test_dirlock_jobs: no {what} after {LIMIT} s")
        time.sleep(0.05)


def finish(name, p, log):
    try:
        rc = p.wait(timeout=LIMIT)
    except subprocess.TimeoutExpired:
        os.killpg(p.pid, 9)
        rc = p.wait()
    log.close()
    out = text_of(name)
    print(f"---- {name} (exit {rc})\n{out}", flush=True)
    if rc != 0:
        failures.append(f"{name}: exit {rc}")
    return out


first, flog = job("first")
wait_until("first.ready", lambda: os.path.exists(os.path.join(SYNC, "first.ready")),
           [("first", first)])
second, slog = job("second")
finish("second", second, slog)
waiter, wlog = job("waiter")
wait_until("the waiter's 'waiting' warning", lambda: "waiting up to" in text_of("waiter"),
           [("first", first), ("waiter", waiter)])
open(os.path.join(SYNC, "go"), "w").close()
finish("first", first, flog)
out = finish("waiter", waiter, wlog)
if failures:
    sys.exit("test_dirlock_jobs: FAILED: " + "; ".join(failures))
print(f"test_dirlock_jobs: np={NP}: second refused, waiter went on after first; all checks passed")
