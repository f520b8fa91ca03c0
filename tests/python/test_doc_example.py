"""docs/python.md's complete PyTorch example, run as it is written there.

    test_doc_example.py --outdir DIR [--np 2] [--mpirun mpiexec] [--doc docs/python.md]

Takes the ```python block that follows the line `<!-- example: ... -->` in the doc, writes it
unchanged to DIR/train_example.py and runs it with mpirun (this interpreter, PYTHONPATH as given):
  A   train_example.py DIR/a 12    fresh start, 12 steps
  B1  train_example.py DIR/b 7     fresh start, 7 steps
  B2  train_example.py DIR/b 12    must resume from step 7 and train to 12
  B3  train_example.py DIR/b 12    must resume from step 12 and train nothing
and checks that B2 and B3 end with A's weights (`done step=12 weights=<repr>`), and that the
checkpoints are listed by the manager. Exit 0 when all of that holds.
"""
from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys

from nompi import skip_without_torch

HERE = os.path.dirname(os.path.abspath(__file__))
SRC = os.environ.get("MPICKPT_SOURCE_DIR", os.path.normpath(os.path.join(HERE, "..", "..")))
MARKER = re.compile(r"^<!-- example: .*-->\s*$")


def fail(msg: str) -> None:
    print(f"FAIL: {msg}", flush=True)
    sys.exit(1)


def extract(doc: str) -> str:
    lines = open(doc, encoding="utf-8").read().split("\n")
    for i, line in enumerate(lines):
        if MARKER.match(line):
            if i + 1 >= len(lines) or lines[i + 1].strip() != "```python":
                fail(f"{doc}:{i + 2}: the example marker is not followed by a ```python block")
            try:
                end = lines.index("```", i + 2)
            except ValueError:
                fail(f"{doc}:{i + 2}: the example's block is not closed")
            return "\n".join(lines[i + 2:end]) + "\n"
    fail(f"{doc}: no line '<!-- example: ... -->'")
    raise AssertionError


def main() -> int:
    skip_without_torch()
    p = argparse.ArgumentParser()
    p.add_argument("--outdir", required=True)
    p.add_argument("--np", type=int, default=2)
    p.add_argument("--mpirun", default=os.environ.get("MPIEXEC", "mpirun"))
    p.add_argument("--doc", default=os.path.join(SRC, "docs", "python.md"))
    p.add_argument("--timeout", type=float, default=300)
    a = p.parse_args()

    # the runs start in the output directory: a relative PYTHONPATH must survive that
    os.environ["PYTHONPATH"] = os.pathsep.join(
        os.path.abspath(d) for d in os.environ.get("PYTHONPATH", "").split(os.pathsep) if d)
    out = os.path.abspath(a.outdir)
    shutil.rmtree(out, ignore_errors=True)
    os.makedirs(out)
    code = extract(a.doc)
    script = os.path.join(out, "train_example.py")
    with open(script, "w", encoding="utf-8") as f:
        f.write(code)
    print(f"{a.doc}: the example ({code.count(chr(10))} lines) -> {script}", flush=True)

    def run(label: str, ckdir: str, steps: int):
        cmd = [a.mpirun, "-n", str(a.np), sys.executable, script, os.path.join(out, ckdir),
               str(steps)]
        r = subprocess.run(cmd, cwd=out, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                           text=True, timeout=a.timeout)
        print(f"{label}: exit {r.returncode}: {' '.join(cmd)}", flush=True)
        for line in r.stdout.splitlines():
            print(f"   {line}")
        if r.returncode != 0:
            sys.stdout.write(r.stderr[-4000:])
            fail(f"{label} exited with status {r.returncode}")
        return r.stdout.splitlines()

    def done(lines, label):
        got = [l for l in lines if l.startswith("done ")]
        if len(got) != 1 or not re.match(r"^done step=\d+ weights=\S+$", got[0]):
            fail(f"{label}: no single 'done step=N weights=W' line: {got}")
        return got[0]

    a_done = done(run("A", "a", 12), "A")
    b1 = run("B1", "b", 7)
    if any(l.startswith("resumed") for l in b1):
        fail("B1 resumed, but its directory was empty")
    b2 = run("B2", "b", 12)
    if not any(re.match(r"^resumed from step 7 \(.*ckpt-\d+\)$", l) for l in b2):
        fail("B2 did not resume from step 7")
    if done(b2, "B2") != a_done:
        fail(f"B2 (7 steps + a resume to 12) ends with {done(b2, 'B2')!r}, A with {a_done!r}")
    b3 = run("B3", "b", 12)
    if not any(l.startswith("resumed from step 12 ") for l in b3) or done(b3, "B3") != a_done:
        fail("B3 did not restore step 12 with the same weights")

    import mpickpt

    with mpickpt.open(os.path.join(out, "b", "ckpt-4")) as ck:
        if ck.meta["step"] != 12 or "model/0.weight" not in ck or "optim/state/0/exp_avg" not in ck:
            fail(f"ckpt-4 holds {ck!r}: {list(ck)}")
    print(f"OK: the example ran as written; 7 steps + resume to 12 == 12 steps ({a_done})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
