"""What the checks of tests/scripts/*.py share: a count of checks and failures (every failure is
printed and the run goes on, so that one run lists them all), the CLI runner, and the last line.
The scripts are run as `/usr/bin/python3 -B tests/scripts/<name>.py`: this directory is first on
sys.path, so `from scriptcheck import ...` finds this file."""
import subprocess
import sys

failures = 0
checks = 0


def check(cond, msg):
    """Counts a check; prints msg when cond is false. Returns cond."""
    global failures, checks
    checks += 1
    if not cond:
        failures += 1
        print("FAIL:", msg, file=sys.stderr)
    return cond


def run_cli(cli, *args, rc=None):
    """Runs the CLI; checks the exit code when rc is given and that no sanitizer spoke.
    Returns (exit code, stdout, stderr), decoded as UTF-8."""
    p = subprocess.run([cli, *args], capture_output=True)
    so, se = p.stdout.decode("utf-8"), p.stderr.decode("utf-8")
    if rc is not None:
        check(p.returncode == rc,
              f"mpickpt {args!r}: exit {p.returncode}, expected {rc}\nstdout: {so[:3000]}\n"
              f"stderr: {se[:3000]}")
    check("Sanitizer" not in se and "runtime error" not in se,
          f"mpickpt {args!r}: sanitizer report:\n{se}")
    return p.returncode, so, se


def flip_piece_byte(cli, prefix, name, start):
    """Flips the first byte of the piece of tensor `name` at `start` of checkpoint `prefix`, found
    with `cli inspect --json` and located in the raw file (contiguous or chunked storage).
    Returns (the piece's index, the piece)."""
    import json
    import os

    import h5py
    import numpy as np

    t = next(t for t in json.loads(run_cli(cli, "inspect", "--json", prefix, rc=0)[1])["tensors"]
             if t["name"] == name)
    j, p = next((j, p) for j, p in enumerate(t["pieces"]) if p["start"] == list(start))
    path = os.path.join(os.path.dirname(prefix), p["file"])
    with h5py.File(path, "r") as f:
        ds = f[p["dataset"]]
        off = ds.id.get_offset()
        if off is None:  # chunked storage: find the chunk holding the piece's first element
            info = ds.id.get_chunk_info_by_coord(tuple(
                s // c * c for s, c in zip(p["dataset_start"], ds.chunks)))
            off, dshape = info.byte_offset, ds.chunks
            first = [s % c for s, c in zip(p["dataset_start"], ds.chunks)]
        else:
            dshape, first = ds.shape, p["dataset_start"]
        off += int(np.ravel_multi_index(first, dshape)) * ds.dtype.itemsize if dshape else 0
    with open(path, "r+b") as f:
        f.seek(off)
        b = f.read(1)
        f.seek(off)
        f.write(bytes([b[0] ^ 0xFF]))
    return j, p


def finish(line):
    """Prints line(checks, failures) and exits 1 when any check failed."""
    print(line(checks, failures))
    sys.exit(1 if failures else 0)
