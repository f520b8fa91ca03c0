"""docs/python.md's opening example, run as it is written there.

    test_doc_example.py --outdir DIR [--np 2] [--mpirun mpiexec] [--doc docs/python.md]

Takes the ```diff block that follows the line `<!-- example: ... -->` in the doc (a plain
training loop, and the lines that add mpickpt.torch to it: at most 6 added lines, checked), and
writes both versions as they are: DIR/plain.py (the context and '-' lines) and DIR/train_example.py
(the context and '+' lines). Runs them with mpirun (this interpreter, PYTHONPATH as given):
  P   plain.py DIR/p 12            the loop without mpickpt, 12 steps
  A   train_example.py DIR/a 12    fresh start, 12 steps
  B1  train_example.py DIR/b 7     fresh start, 7 steps
  B2  train_example.py DIR/b 12    must restore step 7 (the chief's `restore ... prefix=...`
                                   line on stderr) and train to 12
  B3  train_example.py DIR/b 12    must restore step 12 and train nothing
and checks that P, B2 and B3 end with A's weights (`done step=12 weights=<repr>`), and that the
last checkpoint holds step 12. Exit 0 when all of that holds.
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


MAX_ADDED = 6  # the promise: save, resume, async and preemption in at most 6 lines


def extract(doc: str):
    """(the plain loop, the loop with mpickpt, the number of lines added) from the diff block."""
    lines = open(doc, encoding="utf-8").read().split("\n")
    for i, line in enumerate(lines):
        if MARKER.match(line):
            if i + 1 >= len(lines) or lines[i + 1].strip() != "```diff":
                fail(f"{doc}:{i + 2}: the example marker is not followed by a ```diff block")
            try:
                end = lines.index("```", i + 2)
            except ValueError:
                fail(f"{doc}:{i + 2}: the example's block is not closed")
            body = lines[i + 2:end]
            bad = [n for n, l in enumerate(body, i + 3) if l and l[0] not in " +-"]
            if bad:
                fail(f"{doc}:{bad[0]}: a diff line starts with neither ' ', '+' nor '-'")
            plain = "\n".join(l[1:] for l in body if not l.startswith("+")) + "\n"
            new = "\n".join(l[1:] for l in body if not l.startswith("-")) + "\n"
            return plain, new, sum(l.startswith("+") for l in body)
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
    plain, code, added = extract(a.doc)
    if added > MAX_ADDED:
        fail(f"{a.doc}: the example adds {added} lines to the plain loop, more than {MAX_ADDED}")
    script = os.path.join(out, "train_example.py")
    with open(script, "w", encoding="utf-8") as f:
        f.write(code)
    with open(os.path.join(out, "plain.py"), "w", encoding="utf-8") as f:
        f.write(plain)
    print(f"{a.doc}: the example ({code.count(chr(10))} lines, {added} added to the plain loop) "
          f"-> {script}", flush=True)
    stderr = {}

    def run(label: str, ckdir: str, steps: int, path: str = script):
        env = dict(os.environ)
        env.pop("MPICKPT_LOG", None)  # the chief's summary lines say what was restored
        cmd = [a.mpirun, "-n", str(a.np), sys.executable, path, os.path.join(out, ckdir),
               str(steps)]
        r = subprocess.run(cmd, cwd=out, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                           text=True, timeout=a.timeout, env=env)
        stderr[label] = r.stderr
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

    def restored(label):
        return re.findall(r"info: restore .* prefix=\S*/(ckpt-\d+)$", stderr[label], re.M)

    def saved(label):
        return re.findall(r"info: save .* prefix=\S*/(ckpt-\d+)$", stderr[label], re.M)

    p_done = done(run("P", "p", 12, os.path.join(out, "plain.py")), "P")
    a_done = done(run("A", "a", 12), "A")
    if p_done != a_done:
        fail(f"the loop with mpickpt ends with {a_done!r}, without it {p_done!r}")
    done(run("B1", "b", 7), "B1")
    if restored("B1") or saved("B1") != ["ckpt-1", "ckpt-2"]:
        fail(f"B1 restored {restored('B1')}, saved {saved('B1')} (expected steps 5 and 7)")
    b2 = run("B2", "b", 12)
    if restored("B2") != ["ckpt-2"] or saved("B2") != ["ckpt-3", "ckpt-4"]:
        fail(f"B2 restored {restored('B2')} (expected ckpt-2: step 7), saved {saved('B2')}")
    if done(b2, "B2") != a_done:
        fail(f"B2 (7 steps + a resume to 12) ends with {done(b2, 'B2')!r}, A with {a_done!r}")
    b3 = run("B3", "b", 12)
    if restored("B3") != ["ckpt-4"] or saved("B3") or done(b3, "B3") != a_done:
        fail("B3 did not restore step 12 with the same weights")

    import mpickpt

    with mpickpt.open(os.path.join(out, "b", "ckpt-4")) as ck:
        if ck.meta["step"] != 12 or "model/0.weight" not in ck or "optim/state/0/exp_avg" not in ck:
            fail(f"ckpt-4 holds {ck!r}: {list(ck)}")
    print(f"OK: the example ran as written; 7 steps + resume to 12 == 12 steps ({a_done})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
