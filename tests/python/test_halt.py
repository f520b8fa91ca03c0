"""Halt requests from Python: a CheckpointManager watches its directory, so `mpickpt halt DIR`
makes mpickpt.preemption.check() say HALT on every rank (and reached_preemption True) until
`mpickpt halt DIR --clear`; a request due in a day does not. Usage: mpirun -np N python3
test_halt.py OUTDIR (MPICKPT_BINARY_DIR: the build with bin/mpickpt)."""
import json, os, subprocess, sys
import numpy as np
from mpi4py import MPI
import mpickpt
from mpickpt import preemption

comm = MPI.COMM_WORLD
r = comm.rank
d = os.path.join(sys.argv[1], "ck")
cli = os.path.join(os.environ["MPICKPT_BINARY_DIR"], "bin", "mpickpt")


def halt(*args):
    """Rank 0 runs `mpickpt halt ... --json DIR`; every rank gets its JSON."""
    out = None
    if r == 0:
        out = json.loads(subprocess.run([cli, "halt", *args, "--json", d], check=True,
                                        capture_output=True, text=True).stdout)
    return comm.bcast(out)


def reasons():
    """This rank's check, and every rank's."""
    mine = preemption.check()
    return mine, comm.allgather(mine)


assert (preemption.NONE, preemption.SIGNAL, preemption.DEADLINE, preemption.HALT) == (0, 1, 2, 3)
with mpickpt.CheckpointManager(d, max_to_keep=1) as mgr:
    mgr.save(1, {"w": np.arange(8, dtype=np.float64)})
    assert reasons() == (preemption.NONE, [preemption.NONE] * comm.size)
    j = halt("--after-seconds", "86400")
    assert j["action"] == "set" and j["present"] and not j["due"], j
    assert j["after"] - j["requested"] == 86400, j
    assert reasons() == (preemption.NONE, [preemption.NONE] * comm.size)
    j = halt()
    assert j["due"] and j["file"] == os.path.join(d, "halt"), j
    assert reasons() == (preemption.HALT, [preemption.HALT] * comm.size)
    assert preemption.reached_preemption(7) is True
    assert reasons()[0] == preemption.HALT  # it stays
    j = halt("--clear")
    assert j["removed"] is True, j
    assert reasons() == (preemption.NONE, [preemption.NONE] * comm.size)
    assert preemption.reached_preemption() is False
preemption.watch_dir(None)
if r == 0:
    print(f"halt from python on {comm.size} rank(s): ok")
