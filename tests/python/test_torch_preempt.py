"""A preempted mpickpt.torch job exits 75 cleanly, under `python` and under `python -m mpi4py`.

    test_torch_preempt.py --outdir DIR [--np 2] [--mpirun mpiexec] [--cli mpickpt]

For each way to start the ranks (`python3 torch_preempt_job.py`, `python3 -m mpi4py
torch_preempt_job.py`): a fresh run whose last rank receives SIGUSR1 after step 7 must exit with
status 75, print no "MPI_ABORT" (mpi4py's runner turns sys.exit(75) into MPI_Abort(75), whose
banner makes a preemption look like a crash: mpickpt.preemption.exit() avoids it), say
"preempted at step 7" once, and leave a committed checkpoint of step 7; the next run resumes
from step 7 and finishes (exit 0). With --cli (or MPICKPT_CLI), a third run under
`python -m mpi4py` is stopped by a halt request (`mpickpt halt DIR` after step 7) the same way
(the request is cleared before the resume)."""
from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys

from nompi import skip_without_torch

HERE = os.path.dirname(os.path.abspath(__file__))


def fail(msg: str) -> None:
    print(f"FAIL: {msg}", flush=True)
    sys.exit(1)


def main() -> int:
    skip_without_torch()
    p = argparse.ArgumentParser()
    p.add_argument("--outdir", required=True)
    p.add_argument("--np", type=int, default=2)
    p.add_argument("--mpirun", default=os.environ.get("MPIEXEC", "mpirun"))
    p.add_argument("--timeout", type=float, default=240)
    p.add_argument("--cli", default=os.environ.get("MPICKPT_CLI"))
    a = p.parse_args()
    out = os.path.abspath(a.outdir)
    shutil.rmtree(out, ignore_errors=True)
    os.makedirs(out)
    job = os.path.join(HERE, "torch_preempt_job.py")
    cases = [("python", [], []), ("python -m mpi4py", ["-m", "mpi4py"], [])]
    if a.cli:
        cases.append(("python -m mpi4py, halt", ["-m", "mpi4py"], ["halt", a.cli]))
    for label, pre, how in cases:
        d = os.path.join(out, label.replace(" ", "_").replace(",", ""))

        def run(what, extra=()):
            cmd = [a.mpirun, "-n", str(a.np), sys.executable, *pre, job, d, *extra]
            r = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                               timeout=a.timeout)
            print(f"{label}, {what}: exit {r.returncode}: {' '.join(cmd)}", flush=True)
            return r

        r = run("preempted", how)
        both = r.stdout + r.stderr
        if r.returncode != 75:
            sys.stdout.write(both[-3000:])
            fail(f"{label}: the preempted run exited {r.returncode}, not 75")
        if "MPI_ABORT" in both:
            sys.stdout.write(both[-3000:])
            fail(f"{label}: the preempted run printed Open MPI's MPI_ABORT banner")
        if r.stderr.count("preempted at step 7") != 1:
            sys.stdout.write(both[-3000:])
            fail(f"{label}: not one 'preempted at step 7' line on stderr")
        import mpickpt

        with mpickpt.open(os.path.join(d, "ckpt-2")) as ck:
            if ck.meta["step"] != 7:
                fail(f"{label}: the final checkpoint is of step {ck.meta['step']}, not 7")
        if how:
            subprocess.run([a.cli, "halt", "--clear", d], check=True)
        r = run("resumed")
        if r.returncode != 0 or "start=7" not in r.stdout or "done step=20" not in r.stdout:
            sys.stdout.write((r.stdout + r.stderr)[-3000:])
            fail(f"{label}: the second run did not resume from step 7 and finish")
        print(f"   {label}: exit 75 without MPI_ABORT, checkpoint of step 7, resumed", flush=True)
    print("OK")
    return 0


if __name__ == "__main__":
    sys.exit(main())
