"""A training run killed at a random step and resumed reproduces, bit for bit, an uninterrupted run
on the same number of ranks (jobs/train_torch.py).

    test_train_resume.py --np N --outdir DIR [--async] [--seed S] [--steps T] [--ckpt-every K]
                         [--mpirun mpiexec] [--script jobs/train_torch.py]

Not run under mpirun itself: it launches the job with mpirun, three times, with Debian's
/usr/bin/python3 (this interpreter):
  A  an uninterrupted run of T steps, a checkpoint every K steps (and after the last);
  B1 the same run in another directory, where rank R kills itself (SIGKILL) after step S; R and S
     are drawn from the seed, which is printed first (replay: --seed S or MPICKPT_TEST_SEED=S);
  B2 B1 resumed on the same rank count: it restores the latest checkpoint B1 committed (step s).
Checks, each a failure with the line that differs:
  - B1 crashed at S (its `crash` line, a non-zero mpirun status) and its loss lines up to S equal A's;
  - B2 resumed from a checkpoint B1 committed (0 < s < S), the hash of the restored model and
    optimizer equals the one B1 printed when it saved step s, and B2 trained steps s+1..T only;
  - B2's loss lines for steps s+1..T equal A's byte for byte (`step t loss <repr of the float>`);
  - the final hashes are equal, and the final checkpoints of A and B2, read with mpickpt.open, hold
    the same tensors (bytes, including every rank's RNG state) and the same plain values.
With --async the job saves asynchronously (the crash may then come before the newest save
committed: s is what B2 reports) and S is drawn after the second checkpoint, so that one is
committed. Exit status 0 when everything matched.
"""
from __future__ import annotations

import argparse
import os
import random
import re
import shutil
import subprocess
import sys
import time

from nompi import skip_without_torch

HERE = os.path.dirname(os.path.abspath(__file__))
SRC = os.environ.get("MPICKPT_SOURCE_DIR", os.path.normpath(os.path.join(HERE, "..", "..")))

STEP = re.compile(r"^step (\d+) loss (\S+)$")


def fail(msg: str) -> None:
    print(f"FAIL: {msg}", flush=True)
    sys.exit(1)


def run(args, label: str, cmd, logdir: str, expect_ok: bool = True):
    """Runs one launch; returns (returncode, stdout lines). Output kept in logdir/label.*"""
    t0 = time.time()
    p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                       timeout=args.timeout)
    with open(os.path.join(logdir, label + ".out"), "w") as f:
        f.write(p.stdout)
    with open(os.path.join(logdir, label + ".err"), "w") as f:
        f.write(p.stderr)
    print(f"{label}: exit {p.returncode} in {time.time() - t0:.1f} s: {' '.join(cmd)}", flush=True)
    if expect_ok and p.returncode != 0:
        sys.stdout.write(p.stdout[-3000:])
        sys.stdout.write(p.stderr[-3000:])
        fail(f"{label} exited with status {p.returncode}")
    return p.returncode, p.stdout.splitlines()


def losses(lines):
    """{step: the whole `step t loss L` line} (a step printed twice is an error)."""
    out = {}
    for line in lines:
        m = STEP.match(line)
        if m:
            t = int(m.group(1))
            if t in out:
                fail(f"step {t} printed twice")
            out[t] = line
    return out


def field(lines, prefix: str, key: str):
    """The value of key=... in the last line starting with prefix, or None."""
    for line in reversed(lines):
        if line.startswith(prefix):
            m = re.search(rf"(?:^|\s){key}=(\S+)", line)
            return m.group(1) if m else None
    return None


def compare_checkpoints(pa: str, pb: str) -> int:
    import mpickpt

    a, b = mpickpt.open(pa), mpickpt.open(pb)
    try:
        if sorted(a) != sorted(b):
            fail(f"{pa} and {pb} hold different tensors: {sorted(set(a) ^ set(b))}")
        for name in a:
            x, y = a[name].read(), b[name].read()
            if x.dtype != y.dtype or x.shape != y.shape or x.tobytes() != y.tobytes():
                fail(f"tensor '{name}' differs between {pa} and {pb}")
        if a.json != b.json:
            fail(f"the plain values differ: {a.json} vs {b.json}")
        for r in range(int(a.meta["world_size"])):
            if a.json_of_rank(r) != b.json_of_rank(r):
                fail(f"rank {r}'s plain values differ")
        for k in ("step", "epoch", "world_size"):
            if a.meta[k] != b.meta[k]:
                fail(f"meta {k}: {a.meta[k]} vs {b.meta[k]}")
        return len(a)
    finally:
        a.close()
        b.close()


def main() -> int:
    skip_without_torch()
    p = argparse.ArgumentParser()
    p.add_argument("--np", type=int, required=True)
    p.add_argument("--outdir", required=True)
    p.add_argument("--async", dest="async_save", action="store_true")
    p.add_argument("--resume-np", type=int, default=None,
                   help="resume on this many ranks (default --np); then also run R")
    p.add_argument("--cli", default=os.environ.get("MPICKPT_CLI"),
                   help="the mpickpt CLI (mpickpt pin: R's restart point)")
    p.add_argument("--seed", type=int, default=None)
    p.add_argument("--steps", type=int, default=24)
    p.add_argument("--ckpt-every", type=int, default=4)
    p.add_argument("--mpirun", default=os.environ.get("MPIEXEC", "mpirun"))
    p.add_argument("--script", default=os.path.join(SRC, "jobs", "train_torch.py"))
    p.add_argument("--timeout", type=float, default=240)
    args = p.parse_args()

    seed = args.seed
    if seed is None and os.environ.get("MPICKPT_TEST_SEED"):
        seed = int(os.environ["MPICKPT_TEST_SEED"])
    if seed is None:
        seed = random.SystemRandom().randrange(1 << 31)
    rng = random.Random(seed)
    T, K = args.steps, args.ckpt_every
    if args.async_save:
        # right after a save returned (step c*K, c >= 2): its write is then likely in flight
        crash_step = rng.randint(2, (T - 1) // K) * K + 1
    else:
        crash_step = rng.randint(K + 1, T - 1)  # a crash after a committed checkpoint
    crash_rank = rng.randrange(args.np)
    mode = "async" if args.async_save else "sync"
    M = args.resume_np or args.np
    if M != args.np and not args.cli:
        fail("--resume-np needs --cli (or MPICKPT_CLI)")
    print(f"seed={seed} (replay: MPICKPT_TEST_SEED={seed}): np={args.np}->{M} {mode} steps={T} "
          f"ckpt_every={K} crash rank={crash_rank} step={crash_step}", flush=True)

    out = os.path.abspath(args.outdir)
    os.makedirs(out, exist_ok=True)
    da, db, dr, logs = (os.path.join(out, n) for n in ("uninterrupted", "crashed", "reference",
                                                       "logs"))
    for d in (da, db, dr, logs):
        shutil.rmtree(d, ignore_errors=True)
    os.makedirs(logs)
    # a killed rank brings the job down at once (CTest sets it too)
    os.environ.setdefault("OMPI_MCA_odls_base_sigkill_timeout", "0")

    def cmd(d, *extra, np=None):
        c = [args.mpirun, "-n", str(np or args.np), sys.executable, args.script, "--dir", d,
             "--steps", str(T), "--ckpt-every", str(K), "--keep", "0", "--seed", str(seed % 1000),
             "--hidden", "48", "--threads", "1"]
        if args.async_save:
            c.append("--async")
        return c + list(extra)

    _, a_lines = run(args, "A-uninterrupted", cmd(da), logs)
    a_loss = losses(a_lines)
    if sorted(a_loss) != list(range(1, T + 1)):
        fail(f"the uninterrupted run printed the losses of steps {sorted(a_loss)}")
    a_hash = field(a_lines, "done ", "hash")

    rc, b1 = run(args, "B1-crash", cmd(db, "--crash-rank", str(crash_rank), "--crash-step",
                                          str(crash_step)), logs, expect_ok=False)
    if f"crash rank={crash_rank} step={crash_step}" not in b1:
        fail(f"the crashed run has no line 'crash rank={crash_rank} step={crash_step}' "
             f"(exit {rc}; logs in {logs})")
    if rc == 0:
        fail("mpirun exited 0 although a rank killed itself")
    if any(line.startswith("done ") for line in b1):
        fail("the crashed run says done")
    b1_loss = losses(b1)
    for t, line in b1_loss.items():
        if t > crash_step or line != a_loss[t]:
            fail(f"before the crash: {line!r} vs the uninterrupted {a_loss.get(t)!r}")
    saved = {int(field([l], "checkpoint ", "step")): field([l], "checkpoint ", "hash")
             for l in b1 if l.startswith("checkpoint ")}

    _, b2 = run(args, "B2-resume", cmd(db, np=M), logs)
    res = [l for l in b2 if l.startswith("resumed ")]
    if len(res) != 1 or "fresh start" in b2:
        fail(f"the second run did not resume: {res or b2[:3]}")
    s = int(field(res, "resumed ", "step"))
    print(f"resumed from step {s} ({field(res, 'resumed ', 'from')}); crash was at step "
          f"{crash_step}", flush=True)
    if args.async_save and s < crash_step - 1:
        print(f"the save of step {crash_step - 1} was still being written when the rank was "
              "killed: not committed, resumed from the one before", flush=True)
    if not 0 < s < crash_step:
        fail(f"resumed from step {s}, not from a checkpoint before the crash at {crash_step}")
    if s not in saved:
        fail(f"resumed from step {s}, which the crashed run never saved ({sorted(saved)})")
    if field(res, "resumed ", "hash") != saved[s]:
        fail(f"the restored model+optimizer hash {field(res, 'resumed ', 'hash')} differs from "
             f"the one saved at step {s}: {saved[s]}")
    if M != args.np:
        # another rank count: the reference is the uninterrupted run's checkpoint of step s
        # resumed on M ranks (a copy of A's directory, pinned there with mpickpt pin)
        a_saved = {int(field([l], "checkpoint ", "step")): l for l in a_lines
                   if l.startswith("checkpoint ")}
        if field([a_saved[s]], "checkpoint ", "hash") != saved[s]:
            fail(f"step {s}: the uninterrupted run saved hash "
                 f"{field([a_saved[s]], 'checkpoint ', 'hash')}, the crashed one {saved[s]}")
        shutil.copytree(da, dr)
        name = os.path.basename(field([a_saved[s]], "checkpoint ", "prefix"))
        pin = subprocess.run([args.cli, "pin", dr, name], capture_output=True, text=True)
        if pin.returncode != 0:
            fail(f"mpickpt pin {dr} {name}: {pin.returncode} {pin.stderr}")
        _, r_lines = run(args, "R-reference", cmd(dr, np=M), logs)
        rres = [l for l in r_lines if l.startswith("resumed ")]
        if len(rres) != 1 or int(field(rres, "resumed ", "step")) != s:
            fail(f"the reference did not resume from step {s}: {rres or r_lines[:3]}")
        a_lines, a_loss = r_lines, losses(r_lines)
        a_hash = field(r_lines, "done ", "hash")
        print(f"reference: {args.np}-rank uninterrupted run's step {s} ({name}) resumed on {M} "
              "ranks", flush=True)
    b2_loss = losses(b2)
    if sorted(b2_loss) != list(range(s + 1, T + 1)):
        fail(f"the resumed run trained steps {sorted(b2_loss)}, expected {s + 1}..{T}")
    for t in range(s + 1, T + 1):
        if b2_loss[t] != a_loss[t]:
            fail(f"step {t}: resumed {b2_loss[t]!r} != uninterrupted {a_loss[t]!r}")
    b_hash = field(b2, "done ", "hash")
    if not a_hash or a_hash != b_hash:
        fail(f"final hashes differ: uninterrupted {a_hash}, resumed {b_hash}")
    pa, pb = field(a_lines, "checkpoint ", "prefix"), field(b2, "checkpoint ", "prefix")
    if int(field(a_lines, "checkpoint ", "step")) != T or int(field(b2, "checkpoint ", "step")) != T:
        fail("the last checkpoints are not of the last step")
    n = compare_checkpoints(pa, pb)
    what = "uninterrupted run's" if M == args.np else "reference's"
    print(f"OK: {args.np}->{M} ranks, {mode}: {T - s} loss lines after the restored step {s} "
          f"equal the {what} byte for byte, final hash {a_hash} equal, final checkpoints equal "
          f"({n} tensors + plain values, {M} rank(s)' RNG states)", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
