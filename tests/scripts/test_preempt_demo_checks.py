#!/usr/bin/python3
"""The preemption flows of test_preempt_demo.sh, which runs them in an empty OUTDIR:

    /usr/bin/python3 -B test_preempt_demo_checks.py OUTDIR

Environment: MPICKPT_DEMO, MPICKPT_CLI, MPIEXEC, MPICKPT_SOURCE_DIR and the OMPI_* settings
test_preempt_demo.sh exports.
"""
import json
import os
import re
import signal
import subprocess
import sys
import time

from scriptcheck import check, finish

DEMO = os.environ["MPICKPT_DEMO"]
CLI = os.environ["MPICKPT_CLI"]
MPIEXEC = os.environ["MPIEXEC"]
LAUNCHER = os.path.join(os.environ["MPICKPT_SOURCE_DIR"], "jobs", "run-mpirun.sh")
OUT = sys.argv[1]
# 4 epochs x 6 steps, a backup every 4 steps and at each epoch end; 300 ms per step when slowed
# down (at least 7.2 s in all, for the deadline). HOLD: wait at the first checkpoint (0, 4) until
# preempted.
SMALL = ["--epochs", "4", "--steps-per-epoch", "6", "--ckpt-every", "4", "--keep", "3", "--mb", "1"]
SLOW = ["--step-sleep", "300"]
HOLD = ["--hold"]
FIRST = (0, 4)  # where a held run is preempted
SCHEDULE = [(0, 4), (0, 6), (1, 8), (1, 12), (2, 16), (2, 18), (3, 20), (3, 24)]
CKPT_RE = re.compile(r"^checkpoint prefix=(\S+) epoch=(\d+) step=(\d+) "
                     r"blocking_s=(\d+\.\d+) write_s=(\d+\.\d+)$")
PRE_RE = re.compile(r"^preempted epoch=(\d+) step=(\d+) reason=(signal|deadline)$")
live = []  # process groups still running (killed at exit)


class Run:
    """A command in its own process group, output to files under OUT."""
    count = 0

    def __init__(self, cmd, env=None):
        Run.count += 1
        self.cmd = cmd
        self.base = os.path.join(OUT, f"run{Run.count:02d}")
        e = dict(os.environ)
        e.update(env or {})
        self.so_f = open(self.base + ".out", "wb")
        self.se_f = open(self.base + ".err", "wb")
        self.t0 = time.monotonic()
        self.p = subprocess.Popen(cmd, stdout=self.so_f, stderr=self.se_f, env=e,
                                  stdin=subprocess.DEVNULL, start_new_session=True)
        live.append(self.p)

    def stdout(self):
        with open(self.base + ".out", errors="replace") as f:
            return f.read()

    def stderr(self):
        with open(self.base + ".err", errors="replace") as f:
            return f.read()

    def wait_for(self, pattern, timeout=90):
        """Waits until stdout has a line matching pattern; False on timeout or exit."""
        rx = re.compile(pattern, re.M)
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            if rx.search(self.stdout()):
                return True
            if self.p.poll() is not None:
                return bool(rx.search(self.stdout()))
            time.sleep(0.05)
        return False

    def finish(self, timeout=180):
        try:
            rc = self.p.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            check(False, f"{' '.join(self.cmd)}: still running after {timeout} s: killed")
            os.killpg(self.p.pid, signal.SIGKILL)
            rc = self.p.wait()
        self.elapsed = time.monotonic() - self.t0
        live.remove(self.p)
        self.so_f.close()
        self.se_f.close()
        so, se = self.stdout(), self.stderr()
        with open(os.path.join(OUT, "runs.log"), "a") as f:
            f.write(f"$ {' '.join(self.cmd)}\n-- exit {rc} after {self.elapsed:.1f} s\n"
                    f"-- stdout\n{so}-- stderr\n{se}\n")
        check("AddressSanitizer" not in se and "LeakSanitizer" not in se and
              "runtime error" not in se, f"{' '.join(self.cmd)}: sanitizer report:\n{se[-4000:]}")
        return rc, so, se


def demo(np_, *args, env=None):
    if np_ > 3 and "detect_leaks=1" in os.environ.get("ASAN_OPTIONS", ""):
        # sanitizer builds: leaks are looked for in the runs on 1 to 3 ranks, the run on 4 is
        # checked for memory errors only, as every MPI test's (docs/building.md)
        env = {"ASAN_OPTIONS": "detect_leaks=0:strict_string_checks=1", **(env or {})}
    return Run([MPIEXEC, "-np", str(np_), DEMO, *args], env)


def lines(text, prefix):
    return [l for l in text.splitlines() if l.startswith(prefix)]


def ckpts(so):
    res = []
    for l in lines(so, "checkpoint "):
        m = CKPT_RE.match(l)
        if check(m, f"malformed checkpoint line: {l!r}"):
            res.append((int(m.group(2)), int(m.group(3))))
    steps = [s for _, s in res]
    check(steps == sorted(set(steps)), f"checkpoint steps do not strictly increase: {res}")
    return res


def preempted(so, reason):
    """(epoch, step) of the single `preempted` line, checking that the last checkpoint is it."""
    p = lines(so, "preempted ")
    if not check(len(p) == 1, f"expected one 'preempted' line:\n{so}"):
        return None
    m = PRE_RE.match(p[0])
    if not check(m and m.group(3) == reason, f"expected reason={reason}: {p[0]!r}"):
        return None
    et = (int(m.group(1)), int(m.group(2)))
    c = ckpts(so)
    check(c and c[-1] == et, f"the last checkpoint {c[-1:]} is not the preempted step {et}")
    body = so.splitlines()
    check(body.index(p[0]) > max((i for i, l in enumerate(body) if l.startswith("checkpoint ")),
                                 default=len(body)),
          f"'preempted' must follow the last 'checkpoint' line:\n{so}")
    check(not lines(so, "done"), f"a preempted run printed done:\n{so}")
    return et


def listing(d):
    p = subprocess.run([CLI, "list", "--json", os.path.join(d, "chief")], capture_output=True)
    if not check(p.returncode == 0, f"mpickpt list {d}/chief: exit {p.returncode} {p.stderr!r}"):
        return None, []
    j = json.loads(p.stdout)
    return j.get("latest"), [(e.get("epoch"), e.get("step")) for e in j.get("checkpoints", [])]


def expect_resume(np_, d, et, *extra, last=(3, 24), env=None):
    """Resumes d on np_ ranks: continues from exactly et, verifies, finishes at `last`."""
    rc, so, se = demo(np_, "--dir", d, *SMALL, *extra, env=env).finish()
    check(rc == 0, f"resume of {d} on {np_} ranks: exit {rc}\n{so}\n{se[-3000:]}")
    check("verification failed" not in so + se, f"verification failed:\n{se}")
    r = lines(so, "resumed ")
    check(len(r) == 1 and re.match(rf"^resumed epoch={et[0]} step={et[1]} from=\S+$", r[0]),
          f"expected 'resumed epoch={et[0]} step={et[1]}':\n{so}")
    check(lines(so, "verified ") != [], f"no 'verified' line:\n{so}")
    check(lines(so, "done") == [f"done epoch={last[0]} step={last[1]}"], f"done line:\n{so}")
    got = ckpts(so)
    want = [c for c in SCHEDULE if c[1] > et[1] and c[1] <= last[1]]
    check(got == want, f"checkpoints after resuming at {et}: {got}, expected {want}")
    return so


def children(pid):
    """PIDs whose parent is pid."""
    kids = []
    for s in os.listdir("/proc"):
        if s.isdigit():
            try:
                with open(f"/proc/{s}/stat") as f:
                    st = f.read()
                if int(st[st.rindex(")") + 2:].split()[1]) == pid:
                    kids.append(int(s))
            except (OSError, ValueError):
                pass
    return kids


try:
    # ---- 1. SIGUSR1 to mpirun -> final checkpoint, exit 75, list, resume on 2 ranks ----
    d1 = os.path.join(OUT, "usr1")
    r = demo(3, "--dir", d1, *SMALL, *HOLD)
    check(r.wait_for(r"^checkpoint "), f"no checkpoint line before preempting:\n{r.stdout()}")
    r.p.send_signal(signal.SIGUSR1)
    rc, so, se = r.finish()
    check(rc == 75, f"SIGUSR1: exit {rc}, expected 75\n{so}\n{se[-3000:]}")
    et = preempted(so, "signal")
    check(et == FIRST, f"preempted at {et}, expected {FIRST} (held there)")
    latest, entries = listing(d1)
    check(et and entries and entries[-1] == et, f"mpickpt list after SIGUSR1: {entries}, want {et}")
    if et:
        expect_resume(2, d1, et)

    # ---- 2. SIGTERM to one rank only ----
    d2 = os.path.join(OUT, "term_one_rank")
    r = demo(3, "--dir", d2, *SMALL, *HOLD)
    check(r.wait_for(r"^checkpoint "), f"no checkpoint line:\n{r.stdout()}")
    ranks = children(r.p.pid)
    check(len(ranks) == 3, f"ranks of mpirun {r.p.pid}: {ranks}")
    if ranks:
        os.kill(max(ranks), signal.SIGTERM)
    rc, so, se = r.finish()
    check(rc == 75, f"SIGTERM to one rank: exit {rc}\n{so}\n{se[-3000:]}")
    et = preempted(so, "signal")
    check(et == FIRST, f"SIGTERM to one rank: preempted at {et}, expected {FIRST}")
    if et:
        expect_resume(4, d2, et)

    # ---- 3. deadline (MPICKPT_DEADLINE) ----
    d3 = os.path.join(OUT, "deadline")
    r = demo(2, "--dir", d3, *SMALL, *SLOW, "--deadline-reserve", "1",
             env={"MPICKPT_DEADLINE": str(int(time.time()) + 3)})
    rc, so, se = r.finish()
    check(rc == 75, f"deadline: exit {rc}\n{so}\n{se[-3000:]}")
    et = preempted(so, "deadline")
    check(et and et[1] < 24, f"deadline: preempted at {et}, the run should have stopped early")
    # (always: the deadline is due at most 2 s after the launch; the sleeps alone take 7.2 s)
    if et:
        expect_resume(2, d3, et)
    d3b = os.path.join(OUT, "deadline_past")
    rc, so, se = demo(2, "--dir", d3b, *SMALL, env={"MPICKPT_DEADLINE": "1000000000"}).finish()
    check(rc == 75, f"past deadline: exit {rc}\n{se[-2000:]}")
    check(preempted(so, "deadline") == (0, 1), f"past deadline: expected step 1:\n{so}")
    expect_resume(2, d3b, (0, 1))
    rc, so, se = demo(1, "--dir", os.path.join(OUT, "deadline_bad"), *SMALL,
                      env={"MPICKPT_DEADLINE": "soon"}).finish()
    check(rc == 1 and "MPICKPT_DEADLINE" in se, f"bad MPICKPT_DEADLINE: exit {rc}\n{se}")

    # ---- 4. jobs/run-mpirun.sh ----
    d4 = os.path.join(OUT, "launcher_usr1")
    r = Run([LAUNCHER, DEMO, "--dir", d4, *SMALL, *HOLD], env={"NP": "2", "RESTARTS": "2"})
    check(r.wait_for(r"^checkpoint "), f"launcher: no checkpoint line:\n{r.stdout()}")
    r.p.send_signal(signal.SIGUSR1)
    rc, so, se = r.finish()
    check(rc == 0, f"launcher + SIGUSR1: exit {rc}\n{so}\n{se[-3000:]}")
    check("launch 2 (MPICKPT_RESTART_COUNT=1)" in se and "launch 3" not in se,
          f"launcher: expected exactly one relaunch:\n{se[-3000:]}")
    p = lines(so, "preempted ")
    m = PRE_RE.match(p[0]) if len(p) == 1 else None
    if check(m and m.group(3) == "signal", f"launcher: one 'preempted ... reason=signal':\n{so}"):
        check((int(m.group(1)), int(m.group(2))) == FIRST, f"launcher: preempted at {p[0]!r}")
        check(f"resumed epoch={m.group(1)} step={m.group(2)} from=" in so,
              f"launcher: the relaunch did not resume at the preempted step:\n{so}")
    check(lines(so, "done") == ["done epoch=3 step=24"], f"launcher: done line:\n{so}")
    check("verification failed" not in so + se, "launcher: verification failed")

    d5 = os.path.join(OUT, "launcher_term")
    r = Run([LAUNCHER, DEMO, "--dir", d5, *SMALL, *HOLD], env={"NP": "2", "RESTARTS": "2"})
    check(r.wait_for(r"^checkpoint "), f"launcher: no checkpoint line:\n{r.stdout()}")
    r.p.send_signal(signal.SIGTERM)
    rc, so, se = r.finish()
    check(rc == 75, f"launcher + SIGTERM: exit {rc}\n{so}\n{se[-3000:]}")
    check("launch 2" not in se, f"launcher + SIGTERM relaunched:\n{se}")
    et = preempted(so, "signal")
    check(et == FIRST, f"launcher + SIGTERM: preempted at {et}, expected {FIRST}")
    if et:
        expect_resume(2, d5, et)

    rc, so, se = Run([LAUNCHER, DEMO, "--dir", os.path.join(OUT, "launcher_give_up"), *SMALL],
                     env={"NP": "2", "RESTARTS": "1", "MPICKPT_DEADLINE": "1000000000"}).finish()
    check(rc == 75 and "launch 2 (MPICKPT_RESTART_COUNT=1)" in se and "launch 3" not in se,
          f"launcher, RESTARTS=1, always preempted: exit {rc}\n{se[-3000:]}")
    check([l.split(" reason")[0] for l in lines(so, "preempted ")] ==
          ["preempted epoch=0 step=1", "preempted epoch=0 step=2"],
          f"launcher, RESTARTS=1: one step per launch:\n{so}")

    # ---- 5. options ----
    for opt in ("--step-sleep", "--deadline-reserve"):
        rc, so, se = demo(1, "--dir", os.path.join(OUT, "bad"), opt, "-1").finish()
        check(rc == 2 and opt in se, f"{opt} -1: exit {rc}\n{se}")
    rc, so, se = demo(1, "--help").finish()
    check(rc == 0 and "--step-sleep MS" in so and "--deadline-reserve S" in so and "--hold" in so,
          f"--help:\n{so}")
finally:
    for p in list(live):
        try:
            os.killpg(p.pid, signal.SIGKILL)
        except OSError:
            pass

finish(lambda c, f: f"test_preempt_demo: {c - f}/{c} checks passed (runs in {OUT}/runs.log)")
