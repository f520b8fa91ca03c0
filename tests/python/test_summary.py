"""The summary lines in Python (docs/operations.md, "Summary lines"): on by default in the package
(the chief's info line per save and restore on stderr, nothing from the other ranks), off after
mpickpt.set_log_level("warn"), and MPICKPT_LOG wins over the package's default.
Usage: mpirun -np N python3 test_summary.py OUTDIR"""
import json, os, subprocess, sys, tempfile
import numpy as np
from mpi4py import MPI
import mpickpt

comm = MPI.COMM_WORLD
r, n = comm.rank, comm.size
d = os.path.join(sys.argv[1], "ck")
failures = []


def check(cond, msg):
    if not cond:
        failures.append(msg)
        print(f"[rank {r}] FAIL: {msg}", file=sys.stderr, flush=True)


def captured(fn):
    """Runs fn with file descriptor 2 sent to a file; returns what the C library wrote there."""
    sys.stderr.flush()
    saved = os.dup(2)
    with tempfile.TemporaryFile() as f:
        os.dup2(f.fileno(), 2)
        try:
            fn()
        finally:
            sys.stderr.flush()
            os.dup2(saved, 2)
            os.close(saved)
        f.seek(0)
        return f.read().decode()


local = np.arange(1000, dtype=np.float64) + 1000 * r
state = {"w": mpickpt.Shard(local, (1000 * n,), (1000 * r,)), "step": 1}
mgr = mpickpt.CheckpointManager(d, max_to_keep=5)

if "MPICKPT_LOG" not in os.environ:
    err = captured(lambda: mgr.save(1, state))
    lines = [l for l in err.splitlines() if "info: save " in l]
    if r == 0:
        # the checkpoint's bytes, as the tool reads them from its index
        cli = os.path.join(os.environ["MPICKPT_BINARY_DIR"], "bin", "mpickpt")
        idx = json.loads(subprocess.run([cli, "inspect", "--json", os.path.join(d, "ckpt-1")],
                                        check=True, capture_output=True).stdout)
        nbytes = sum(p["bytes"] for t in idx["tensors"] for p in t["pieces"])
        check(nbytes >= 1000 * n * 8, f"bytes {nbytes}")
        check(len(lines) == 1, f"default: expected one save line, stderr {err!r}")
        check(lines and f" bytes={nbytes} " in lines[0] and f" ranks={n} " in lines[0],
              f"fields of {lines}")
    else:
        check(err == "", f"default: rank {r} printed {err!r}")
    err = captured(lambda: mgr.restore(state))
    check((err.count("info: restore bytes=") == 1) == (r == 0), f"restore line: {err!r}")
    mpickpt.set_log_level("warn")
    err = captured(lambda: mgr.save(2, state))
    check(err == "", f"set_log_level('warn'): {err!r}")
    try:
        mpickpt.set_log_level("loud")
        check(False, "set_log_level accepted 'loud'")
    except ValueError:
        pass
    mpickpt.set_log_level("info")
else:  # run with MPICKPT_LOG=warn: the variable wins over the package's default
    err = captured(lambda: mgr.save(1, state))
    check(err == "", f"MPICKPT_LOG={os.environ['MPICKPT_LOG']}: {err!r}")
mgr.close()
bad = comm.allreduce(len(failures))
if r == 0:
    print(f"test_summary.py: {n} ranks, {bad} failures")
sys.exit(1 if bad else 0)
