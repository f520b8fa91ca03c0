#!/usr/bin/python3
"""The collective calls of a save and a restore stay within what docs/scaling.md states.

    test_collective_count.py MPIEXEC BENCH DIR NP [NP...]

Runs `mpickpt-bench --scenario collectives --json` (MPI calls counted through PMPI, the max over
ranks) at each rank count and asserts counts, never times: the bare saver's save with a cached
plan <= 8 and its restore <= 6; a sync ckpt_manager_save (default layout, plan cached, with and
without retention deleting a checkpoint) <= 10, an async one to its ckpt_saver_sync <= 10 and
ckpt_manager_restore_latest (op mgr_restore) <= 8 (issue 31), and the same restore of a checkpoint
with a replicated tensor, which the cooperative restore reads once and forwards (op
mgr_restore_rep), <= 8 and exactly as many as mgr_restore. Fails when a count regresses past
its bound.
"""
import json
import os
import shutil
import subprocess
import sys

BOUNDS = {"save_cached": 8, "restore": 6, "mgr_save": 10, "mgr_save_ret": 10, "mgr_restore": 8,
          "mgr_restore_rep": 8, "mgr_async": 10}

mpiexec, bench, top = sys.argv[1:4]
nps = [int(n) for n in sys.argv[4:]]
bad = []
for np_ in nps:
    d = os.path.join(top, "np%d" % np_)
    shutil.rmtree(d, ignore_errors=True)
    os.makedirs(d)
    cmd = [mpiexec, "-n", str(np_), "--oversubscribe", bench, "--dir", d, "--scenario",
           "collectives", "--fixed-mb", "1", "--json"]
    p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                       timeout=600)
    sys.stdout.write(p.stdout)
    if p.returncode != 0:
        sys.exit("collective count: %s exited %d\n%s" % (cmd, p.returncode, p.stderr[-3000:]))
    rows = {}
    for line in p.stdout.splitlines():
        if line.startswith("{"):
            j = json.loads(line)
            if j.get("scenario") == "collectives" and "op" in j:
                rows[j["op"]] = j
    for op, bound in BOUNDS.items():
        j = rows.get(op)
        if j is None:
            bad.append("np%d: no %s row" % (np_, op))
            continue
        n = j.get("collective_max")
        if not isinstance(n, int) or n <= 0:
            bad.append("np%d %s: collective_max = %r (none counted: PMPI not interposed?)"
                       % (np_, op, n))
        elif n > bound:
            bad.append("np%d %s: %d collective calls, docs/scaling.md states at most %d (%s)"
                       % (np_, op, n, bound, j.get("by_function")))
        else:
            print("np%d %s: %d collective calls (bound %d)" % (np_, op, n, bound))
    plain, rep = rows.get("mgr_restore"), rows.get("mgr_restore_rep")
    if plain and rep and plain.get("collective_max") != rep.get("collective_max"):
        bad.append("np%d: a forwarding restore makes %r collective calls, a plain one %r (%s)"
                   % (np_, rep.get("collective_max"), plain.get("collective_max"),
                      rep.get("by_function")))
    shutil.rmtree(d, ignore_errors=True)
if bad:
    sys.exit("collective count FAILED:\n  " + "\n  ".join(bad))
print("collective count passed")
