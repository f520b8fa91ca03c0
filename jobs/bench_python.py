#!/usr/bin/python3
"""bench_python.py: how fast the Python package saves and restores, against the C library driven
from the same process and against raw file I/O of the same bytes, measured in the same run.

    mpirun -np N /usr/bin/python3 jobs/bench_python.py --dir DIR [--mb-per-rank 256] [--reps 8]
                                                        [--json] [--check] [-v]

(PYTHONPATH=build/python.) The bytes are those of `mpickpt-bench --scenario large`: per rank,
4 float32 tensors of M/4 MiB each, [R, 1024]; the first is this rank's block of a tensor
partitioned by rows (global [N*R, 1024]), the other three are this rank's own. Here they are
PyTorch tensors, allocated and touched once, and every path below reads and writes those same
tensors in place:
  python     mpickpt.CheckpointManager(max_to_keep=K).save(step, state) and .restore(state), with
             state = {"part": Shard(t0, ...), "full1".."full3": PerRank(t)} (the Python API: tree
             walk, registration check, JSON blob, the C manager underneath)
  c_manager  the C manager (mpickpt._mpickpt.Manager, max_to_keep=K) over a C Saver with the same
             tensors registered directly (add_slice, add_replicated per component): save() and
             restore_or_initialize(), the C calls the Python manager makes, without its Python
  c_saver    the bare C Saver with the same registrations: write(prefix) and restore(prefix), what
             mpickpt-bench measures (no state file, no retention)
  raw        each rank writes the same 4 tensors to one plain file with numpy tofile, fsync, close
             (save) and reads them back into the same tensors with readinto (restore)
The paths run back to back in every rep, in an order that changes from rep to rep (rep_order;
this disk's speed drifts 2-3x over minutes: only ratios of medians of interleaved runs mean
anything); with 8 reps each path runs first, second, ... equally often within its pair. A
warm-up rep, not counted, goes first (plans, HDF5's first use, first allocations). Every time is
the maximum over ranks (os.sync() and a barrier before, allreduce MAX after). Saves fsync (the library's commit;
raw: fsync); restores are warm (the files were just written: page cache), each after the tensors
were poisoned, and every restore is checked against a copy of the saved values (outside the
timing). With --keep 1 (K, the default) retention deletes the previous checkpoint inside the
managers' timed save (unlinking 2 x 256 MiB of just-written files takes ~0.13 s on this disk:
most of what c_manager costs over c_saver; --keep 0 keeps them all and shows the difference);
the c_saver checkpoint and the raw file are removed after their restore, outside the timing, and
everything the bench wrote at the end.

Output (rank 0): a table of the medians (s and aggregate GB/s) per path and operation, then the
ratios: speed python/c_saver and python/c_manager (= C time / Python time; the goal is >= 0.95),
python/raw, and the Python layer's own time: the Python manager's time minus the time spent in
the C manager calls it makes (CTimed), i.e. the tree walk, the registration check, JSON and the
agreement collectives. The disk's noise in one rep is often 2-3x while the layer costs about a
millisecond: the layer's time says what the Python package costs, the ratios what a user sees
(read them with the per-rep quartiles). With --json one JSON line with every number. --check: tiny sizes (1 MiB per rank,
2 reps) and a check that the JSON record has every field and sane values (no speed assertion):
exit 0 when it does. Exit 1 on an error or a wrong restored value.
"""
from __future__ import annotations

import argparse
import glob
import json
import math
import os
import shutil
import sys
import time
from typing import Any, Callable, Dict, List

import numpy as np
from mpi4py import MPI

try:
    import torch
except ImportError:  # every rank alike: mpirun exits 77, which the test suite counts as skipped
    if MPI.COMM_WORLD.rank == 0:
        print(f"SKIP: {sys.executable} has no PyTorch (jobs/deps.sh python installs "
              "python3-torch)", flush=True)
    sys.exit(77)

import mpickpt
from mpickpt import _mpickpt as C

COLS = 1024
NT = 4
PATHS = ("python", "c_manager", "c_saver", "raw")
OPS = ("save", "restore")
PHASES = ("write", "agree", "merge", "commit")  # of a save (the saver's last_metrics)


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="bench_python.py", description=__doc__.split("\n\n")[0])
    p.add_argument("--dir", required=True, help="a directory on the file system to measure")
    p.add_argument("--mb-per-rank", type=int, default=256, help="MiB per rank (default 256)")
    p.add_argument("--reps", type=int, default=8, help="measured reps (default 8)")
    p.add_argument("--keep", type=int, default=1,
                   help="the managers' max_to_keep (default 1: each save deletes the previous "
                        "checkpoint; 0 keeps all, which needs reps x the bytes on disk)")
    p.add_argument("--json", action="store_true", help="also print one JSON line")
    p.add_argument("--check", action="store_true",
                   help="tiny sizes; check the output's fields (for the test suite)")
    p.add_argument("-v", "--verbose", action="store_true", help="every rep's times")
    a = p.parse_args()
    if a.check:
        a.mb_per_rank, a.reps, a.json = 1, 2, True
    if a.mb_per_rank < 1 or a.reps < 1:
        p.error("--mb-per-rank and --reps must be >= 1")
    return a


class CTimed:
    """Stands in for the C Manager inside the Python CheckpointManager and adds up the time of its
    save and restore_or_initialize calls (the C library's work): the Python manager's time minus
    this is what the Python layer costs (tree walk, registration check, JSON, agreement)."""

    def __init__(self, inner: Any) -> None:
        self._inner = inner
        self.spent = 0.0

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self._inner, name)
        if name not in ("save", "restore_or_initialize"):
            return attr

        def timed(*args: Any, **kw: Any) -> Any:
            t0 = time.perf_counter()
            try:
                return attr(*args, **kw)
            finally:
                self.spent += time.perf_counter() - t0
        return timed


class Bench:
    def __init__(self, a: argparse.Namespace) -> None:
        self.a = a
        self.comm = MPI.COMM_WORLD
        self.rank, self.size = self.comm.rank, self.comm.size
        self.bytes = a.mb_per_rank << 20
        rows = max(1, self.bytes // NT // (COLS * 4))
        self.rows = rows
        self.bytes = NT * rows * COLS * 4
        g = torch.Generator().manual_seed(1000 + self.rank)
        # allocated and touched once (first touch is slow here), reused by every path
        self.t = [torch.rand(rows, COLS, generator=g) for _ in range(NT)]
        self.ref = [t.clone() for t in self.t]
        self.dir = os.path.abspath(a.dir)
        self.sub = {p: os.path.join(self.dir, p) for p in PATHS}
        if self.rank == 0:
            for d in self.sub.values():
                shutil.rmtree(d, ignore_errors=True)
                os.makedirs(d)
        self.comm.Barrier()
        gshape = (self.size * rows, COLS)
        self.state = {"part": mpickpt.Shard(self.t[0], gshape, (self.rank * rows, 0))}
        for k in range(1, NT):
            self.state[f"full{k}"] = mpickpt.PerRank(self.t[k])
        self.py = mpickpt.CheckpointManager(self.sub["python"], max_to_keep=a.keep)
        self.py_c = CTimed(self.py._mgr)
        self.py._mgr = self.py_c

        def c_saver() -> Any:
            s = C.Saver(self.comm)
            views = [t.numpy() for t in self.t]
            s.add_slice("part", views[0], C.FLOAT32, gshape, (self.rank * rows, 0), (rows, COLS))
            for k in range(1, NT):
                s.add_replicated(f"full{k}", views[k], C.FLOAT32, (rows, COLS), True)
            return s

        self.cm_saver = c_saver()
        self.cm = C.Manager(self.cm_saver, self.sub["c_manager"], max_to_keep=a.keep)
        self.cs = c_saver()
        self.raw = os.path.join(self.sub["raw"], f"rank{self.rank:05d}.bin")
        self.step = 0
        self.times: Dict[str, Dict[str, List[float]]] = {p: {o: [] for o in OPS} for p in PATHS}
        self.last_phases: Dict[str, Dict[str, float]] = {}
        self.layer: Dict[str, List[float]] = {o: [] for o in OPS}  # the Python layer's time
        self.last_layer: Dict[str, float] = {}
        self.phases: Dict[str, Dict[str, List[float]]] = {
            p: {k: [] for k in PHASES} for p in PATHS if p != "raw"}

    def close(self) -> None:
        self.py.close()
        self.cm.close()
        self.cm_saver.close()
        self.cs.close()
        self.comm.Barrier()
        if self.rank == 0:  # what the bench wrote
            for d in self.sub.values():
                shutil.rmtree(d, ignore_errors=True)

    # ---- one timed operation: max over ranks ----
    def timed(self, fn: Callable[[], Any]) -> float:
        # what earlier operations left for the disk to do (deleted files, journal) is done
        # before, not during, the measurement
        os.sync()
        self.comm.Barrier()
        t0 = time.perf_counter()
        fn()
        self.local = time.perf_counter() - t0
        return self.comm.allreduce(self.local, op=MPI.MAX)

    def timed_python(self, op: str, fn: Callable[[], Any]) -> float:
        """timed(fn) for the Python manager, also noting its Python layer's time (max over
        ranks) in last_layer[op]."""
        self.py_c.spent = 0.0
        dt = self.timed(fn)
        self.last_layer[op] = self.comm.allreduce(self.local - self.py_c.spent, op=MPI.MAX)
        return dt

    def poison(self) -> None:
        for t in self.t:
            t.fill_(-1.0)

    def check(self, what: str) -> None:
        ok = all(torch.equal(t, r) for t, r in zip(self.t, self.ref))
        if not self.comm.allreduce(ok, op=MPI.LAND):
            if self.rank == 0:
                print(f"bench_python.py: {what}: restored values are wrong", file=sys.stderr)
            self.comm.Abort(1)

    def c_prefix(self) -> str:
        return os.path.join(self.sub["c_saver"], f"bench-{self.step}")

    def remove_c(self) -> None:
        if self.rank == 0:
            p = self.c_prefix()
            for f in [p + ".index"] + glob.glob(p + ".*"):
                if os.path.exists(f):
                    os.unlink(f)
        self.comm.Barrier()

    def raw_write(self) -> None:
        with open(self.raw, "wb") as f:
            for t in self.t:
                t.numpy().tofile(f)
            f.flush()
            os.fsync(f.fileno())

    def raw_read(self) -> None:
        with open(self.raw, "rb", buffering=0) as f:
            for t in self.t:
                mv = memoryview(t.numpy()).cast("B")
                n = 0
                while n < len(mv):
                    got = f.readinto(mv[n:])
                    if not got:
                        raise OSError(f"{self.raw}: short read")
                    n += got

    def save(self, path: str) -> float:
        s = self.step
        if path == "python":
            dt = self.timed_python("save", lambda: self.py.save(s, self.state))
        elif path == "c_manager":
            dt = self.timed(lambda: self.cm.save(step=s))
        elif path == "c_saver":
            dt = self.timed(lambda: self.cs.write(self.c_prefix(), step=s))
        else:
            return self.timed(self.raw_write)
        saver = {"python": self.py._saver, "c_manager": self.cm_saver, "c_saver": self.cs}[path]
        m = saver.last_metrics()  # this rank's phases of that save
        self.last_phases[path] = {k: self.comm.allreduce(m[k + "_s"], op=MPI.MAX)
                                  for k in PHASES}
        return dt

    def restore(self, path: str) -> float:
        self.poison()
        if path == "python":
            dt = self.timed_python("restore", lambda: self.py.restore(self.state))
        elif path == "c_manager":
            dt = self.timed(self.cm.restore_or_initialize)
        elif path == "c_saver":
            dt = self.timed(lambda: self.cs.restore(self.c_prefix()))
        else:
            dt = self.timed(self.raw_read)
        self.check(f"{path} restore")
        return dt

    def rep(self, i: int, record: bool) -> None:
        """Saves by every path, then restores by every path, in the order of rep i."""
        self.step += 1
        order = rep_order(i)
        got = {p: {} for p in PATHS}
        for p in order:
            got[p]["save"] = self.save(p)
        for p in order:
            got[p]["restore"] = self.restore(p)
        self.remove_c()
        os.unlink(self.raw)
        self.comm.Barrier()
        if record:
            for p in PATHS:
                for o in OPS:
                    self.times[p][o].append(got[p][o])
            for p, ph in self.last_phases.items():
                for k in PHASES:
                    self.phases[p][k].append(ph[k])
            for o in OPS:
                self.layer[o].append(self.last_layer[o])
        if self.a.verbose and self.rank == 0:
            def phases(p: str) -> str:
                ph = self.last_phases.get(p)
                return f" [write {ph['write']:.3f} agree {ph['agree']:.3f}]" if ph else ""
            print(f"  rep {i}{'' if record else ' (warm-up)'}: save/restore s: " + ", ".join(
                f"{p} {got[p]['save']:.3f}/{got[p]['restore']:.3f}{phases(p)}" for p in order),
                file=sys.stderr, flush=True)


def rep_order(i: int) -> tuple:
    """The order of the paths in rep i: python and c_manager (the pair the goal compares) back
    to back, c_saver and raw back to back; which of a pair goes first alternates every rep, which
    pair goes first every other rep. Not a rotation: that keeps the same path right after
    another one in every rep, and on this disk a save pays for what the previous one left
    behind (a path always run after raw was 2x slower)."""
    a = ("python", "c_manager") if i % 2 == 0 else ("c_manager", "python")
    b = ("c_saver", "raw") if i // 2 % 2 == 0 else ("raw", "c_saver")
    return a + b if i // 4 % 2 == 0 else b + a


def median(xs: List[float]) -> float:
    return float(np.median(xs)) if xs else float("nan")


def report(b: Bench, a: argparse.Namespace) -> Dict[str, Any]:
    total = b.bytes * b.size
    med = {p: {o: median(b.times[p][o]) for o in OPS} for p in PATHS}
    rec: Dict[str, Any] = {"ranks": b.size, "bytes_per_rank": b.bytes, "reps": a.reps,
                           "max_to_keep": a.keep,
                           "tensors_per_rank": NT}
    for p in PATHS:
        for o in OPS:
            rec[f"{p}_{o}_s"] = med[p][o]
            rec[f"{p}_{o}_gbps"] = total / med[p][o] / 1e9
    for p, ph in b.phases.items():
        for k in PHASES:
            rec[f"{p}_save_{k}_s"] = median(ph[k])
    for o in OPS:
        rec[f"python_layer_{o}_s"] = median(b.layer[o])
        rec[f"python_layer_{o}_share"] = median(b.layer[o]) / med["python"][o]
    for o in OPS:
        py = med["python"][o]
        # speed ratios: the other path's time / Python's (1.0: as fast; the goal vs C: >= 0.95)
        rec[f"{o}_python_over_c_saver"] = med["c_saver"][o] / py
        rec[f"{o}_python_over_c_manager"] = med["c_manager"][o] / py
        rec[f"{o}_python_over_raw"] = med["raw"][o] / py
        paired = [c / p for c, p in zip(b.times["c_manager"][o], b.times["python"][o])]
        rec[f"{o}_paired_python_over_c_manager_p25"] = float(np.quantile(paired, 0.25))
        rec[f"{o}_paired_python_over_c_manager_p75"] = float(np.quantile(paired, 0.75))
    return rec


def print_table(rec: Dict[str, Any]) -> None:
    mib = rec["bytes_per_rank"] / (1 << 20)
    print(f"bench_python: {rec['ranks']} rank(s) x {mib:.1f} MiB ({rec['tensors_per_rank']} "
          f"float32 tensors per rank), {rec['reps']} reps, managers' max_to_keep "
          f"{rec['max_to_keep']}, medians (max over ranks)")
    print(f"{'path':<10} {'save_s':>9} {'save_GB/s':>10} {'restore_s':>10} {'restore_GB/s':>13}")
    for p in PATHS:
        ph = ""
        if p + "_save_write_s" in rec:
            ph = "   save phases " + " ".join(f"{k} {rec[f'{p}_save_{k}_s']:.4f}" for k in PHASES)
        print(f"{p:<10} {rec[p + '_save_s']:9.4f} {rec[p + '_save_gbps']:10.3f} "
              f"{rec[p + '_restore_s']:10.4f} {rec[p + '_restore_gbps']:13.3f}{ph}")
    for o in OPS:
        print(f"{o:<8} speed python/c_saver {rec[o + '_python_over_c_saver']:.3f}  "
              f"python/c_manager {rec[o + '_python_over_c_manager']:.3f} (per-rep quartiles "
              f"{rec[o + '_paired_python_over_c_manager_p25']:.3f}.."
              f"{rec[o + '_paired_python_over_c_manager_p75']:.3f})  "
              f"python/raw {rec[o + '_python_over_raw']:.3f}   (goal vs C: >= 0.95)")
    for o in OPS:
        print(f"{o:<8} the Python layer (the Python manager's time outside the C calls, max over "
              f"ranks): {rec['python_layer_' + o + '_s'] * 1e3:.2f} ms, "
              f"{rec['python_layer_' + o + '_share'] * 100:.2f}% of the Python {o}")
    sys.stdout.flush()


def check_record(rec: Dict[str, Any]) -> List[str]:
    """What is missing or not a positive finite number in the record (--check)."""
    want = ["ranks", "bytes_per_rank", "reps"]
    want += [f"{p}_{o}_{u}" for p in PATHS for o in OPS for u in ("s", "gbps")]
    want += [f"{o}_python_over_{x}" for o in OPS for x in ("c_saver", "c_manager", "raw")]
    want += [f"python_layer_{o}_{u}" for o in OPS for u in ("s", "share")]
    bad = []
    for k in want:
        v = rec.get(k)
        if not isinstance(v, (int, float)) or not math.isfinite(v) or v <= 0:
            bad.append(f"{k}={v!r}")
    return bad


def main() -> int:
    a = parse_args()
    torch.set_num_threads(1)
    b = Bench(a)
    try:
        b.rep(0, record=False)
        for i in range(a.reps):
            b.rep(i + 1, record=True)
    finally:
        b.close()
    if b.rank != 0:
        return 0
    rec = report(b, a)
    print_table(rec)
    if a.json:
        line = json.dumps({"bench": "python", **rec}, sort_keys=True)
        print(line, flush=True)
        if a.check:
            bad = check_record(json.loads(line))
            if bad:
                print(f"bench_python.py --check: bad fields: {bad}", file=sys.stderr)
                return 1
            print("bench_python.py --check: every field present", flush=True)
    return 0


if __name__ == "__main__":
    rc = main()
    rc = MPI.COMM_WORLD.allreduce(rc, op=MPI.MAX)
    sys.exit(rc)
