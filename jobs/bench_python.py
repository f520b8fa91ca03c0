#!/usr/bin/python3
"""bench_python.py: how fast the Python package saves and restores, against the C library driven
from the same process and against raw file I/O of the same bytes, measured in the same run.

    mpirun -np N /usr/bin/python3 jobs/bench_python.py --dir DIR [--mb-per-rank 256] [--reps 8]
                                                        [--json] [--check] [-v]
                                                        [--scenario layers|torch|all]

--scenario torch (issue 30; jobs/bench.sh runs it at 2 and 4 ranks) measures a PyTorch user's
case instead: see TorchBench. A Transformer LM's state_dict + AdamW's state (d_model 512, 4
layers, vocabulary 4096: 201.7 MB, 212 tensors), the same on every rank (data parallel: plain
tensors, replicated), saved by mpickpt.CheckpointManager(max_to_keep=1, or --torch-keep) sync for
each layout of --torch-layouts and async (blocking time, then the background write), restored in place warm and
cold (posix_fadvise DONTNEED on the files first; said in the output when unavailable), against
torch.save(state, f) + f.flush() + os.fsync by rank 0 and torch.load on every rank, and the
machine's limits: write+fsync of the same bytes by rank 0 (raw1) or split over the ranks (rawN),
and reading them on every rank. Every path in every rep, the order rotated and reversed from rep to
rep; medians (and minimums) of the max over ranks; the ratios are time ratios, mpickpt / torch
(the save's goal: <= 1), restores also as torch.load / mpickpt (the goal: >= 10x). Never asserted.
The default --scenario is layers, the rows below.

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
    p.add_argument("--scenario", choices=("layers", "torch", "all"), default="layers",
                   help="layers: the rows python/c_manager/c_saver/raw (default); torch: a "
                        "replicated PyTorch state against torch.save/torch.load (TorchBench); "
                        "all: both")
    p.add_argument("--torch-d", type=int, default=512, help="torch: d_model (default 512)")
    p.add_argument("--torch-layers", type=int, default=4, help="torch: encoder layers (default 4)")
    p.add_argument("--torch-vocab", type=int, default=4096,
                   help="torch: vocabulary (default 4096: with the above, 16.8M parameters, "
                        "201.7 MB with AdamW's state)")
    p.add_argument("--torch-layouts", default=",".join(TORCH_LAYOUTS),
                   help="torch: the layouts saved, comma-separated: default (the library's "
                        "choice), per-rank, per-node, shared; +inline after one: with "
                        "MPICKPT_RETENTION=inline (default: %(default)s)")
    p.add_argument("--torch-keep", type=int, default=1,
                   help="torch: the managers' max_to_keep (default 1: each save deletes the "
                        "previous checkpoint inside save(), as a job keeping one would; 0 keeps "
                        "all: reps x layouts x the state on disk)")
    p.add_argument("--no-torch-async", dest="torch_async", action="store_false",
                   help="torch: skip the async saves")
    a = p.parse_args()
    a.torch_layouts = [x for x in a.torch_layouts.split(",") if x]
    if any(x.split("+")[0] not in ("default", "per-rank", "per-node", "shared") or
           x.split("+")[1:] not in ([], ["inline"]) for x in a.torch_layouts):
        p.error(f"--torch-layouts {a.torch_layouts}: default, per-rank, per-node or shared, each "
                "optionally +inline (MPICKPT_RETENTION=inline for that manager)")
    if a.check:
        a.mb_per_rank, a.reps, a.json, a.scenario = 1, 2, True, "all"
        a.torch_d, a.torch_layers, a.torch_vocab = 64, 2, 256
    if a.mb_per_rank < 1 or a.reps < 1:
        p.error("--mb-per-rank and --reps must be >= 1")
    return a


def poison(tensors: List["torch.Tensor"]) -> None:
    """Overwrites the tensors a restore must bring back (a restore that reads nothing shows)."""
    for t in tensors:
        t.fill_(-1)


def check_restored(comm: Any, tensors: List["torch.Tensor"], ref: List["torch.Tensor"],
                   what: str) -> None:
    """Collective: aborts the job when a rank's restored tensors differ from the saved ones."""
    ok = all(torch.equal(t, r) for t, r in zip(tensors, ref))
    if not comm.allreduce(ok, op=MPI.LAND):
        if comm.rank == 0:
            print(f"bench_python.py: {what}: restored values are wrong", file=sys.stderr)
        comm.Abort(1)


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
        poison(self.t)

    def check(self, what: str) -> None:
        check_restored(self.comm, self.t, self.ref, what)

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



# ---- the PyTorch-state rows (issue 30): a data-parallel model's state against torch.save ----

TORCH_LAYOUTS = ("default", "per-rank", "per-node")


def torch_model(d: int, layers: int, vocab: int) -> "torch.nn.Module":
    """A Transformer LM's shape (embedding, encoder layers, final LayerNorm, an untied head)."""
    nn = torch.nn

    class LM(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.embed = nn.Embedding(vocab, d)
            self.layers = nn.ModuleList(
                nn.TransformerEncoderLayer(d, max(1, d // 64), 4 * d, batch_first=True)
                for _ in range(layers))
            self.norm = nn.LayerNorm(d)
            self.head = nn.Linear(d, vocab)

    return LM()


class TorchBench:
    """The PyTorch rows: one state {"model": state_dict, "optim": AdamW's state} the same on every
    rank (data parallel: plain tensors are replicated), saved by mpickpt.CheckpointManager (sync,
    per layout; async: the time save() blocks, then the background write) and restored in place
    (warm: just written; cold: the files' pages dropped with posix_fadvise(DONTNEED) first),
    against torch.save(state, f) + f.flush() + os.fsync by rank 0 alone (every rank waits) and
    torch.load of that file on every rank (what each rank of a data-parallel job resumes with;
    torch.load builds new tensors, mpickpt writes into existing ones: the load_state_dict copy
    that follows a torch.load is not counted), and the machine's own limits: raw write+fsync of
    the same bytes by rank 0 alone (raw1) and shared by the ranks, each its 1/N to its own file
    (rawN), and a raw read of all the bytes by every rank (warm and cold)."""

    def __init__(self, a: argparse.Namespace) -> None:
        self.a = a
        self.comm = MPI.COMM_WORLD
        self.rank, self.size = self.comm.rank, self.comm.size
        torch.manual_seed(1234)  # the same state on every rank
        m = torch_model(a.torch_d, a.torch_layers, a.torch_vocab)
        opt = torch.optim.AdamW(m.parameters(), lr=1e-3)
        for p in m.parameters():  # one step creates AdamW's state (exp_avg, exp_avg_sq, step)
            p.grad = torch.rand_like(p) * 1e-3
        opt.step()
        opt.zero_grad(set_to_none=True)
        self.model, self.opt = m, opt
        self.state = {"model": m.state_dict(), "optim": opt.state_dict()["state"]}
        self.tensors = [t for t in walk_tensors(self.state)]
        self.bytes = sum(t.numel() * t.element_size() for t in self.tensors)
        self.ref = [t.clone() for t in self.tensors]
        self.dir = os.path.abspath(a.dir)
        self.layouts = list(a.torch_layouts)
        self.paths = ([f"mpickpt:{l}" for l in self.layouts] +
                      ([f"async:{l}" for l in self.layouts] if a.torch_async else []) +
                      ["torch", "raw1", "rawN"])
        self.sub = {p: os.path.join(self.dir, "torch-" + p.replace(":", "-")) for p in self.paths}
        if self.rank == 0:
            for d in self.sub.values():
                shutil.rmtree(d, ignore_errors=True)
                os.makedirs(d)
        self.comm.Barrier()
        self.mgr: Dict[str, Any] = {}
        for p in self.paths:
            kind, _, lay = p.partition(":")
            lay, _, retention = lay.partition("+")
            if kind in ("mpickpt", "async"):
                # "+inline": retention frees the deleted files' blocks inside the save (read by
                # the manager's rank 0 when it is made), to compare with the default in one run
                old = os.environ.get("MPICKPT_RETENTION")
                os.environ["MPICKPT_RETENTION"] = retention or "background"
                try:
                    self.mgr[p] = mpickpt.CheckpointManager(
                        self.sub[p], max_to_keep=a.torch_keep, async_save=(kind == "async"),
                        layout=None if lay == "default" else lay)
                finally:
                    if old is None:
                        del os.environ["MPICKPT_RETENTION"]
                    else:
                        os.environ["MPICKPT_RETENTION"] = old
        self.torch_file = os.path.join(self.sub["torch"], "state.pt")
        self.raw1 = os.path.join(self.sub["raw1"], "state.bin")
        self.rawn = os.path.join(self.sub["rawN"], f"rank{self.rank:05d}.bin")
        # rawN: this rank's share of the tensors (by bytes, in order)
        per = -(-self.bytes // self.size)
        lo, hi, acc = self.rank * per, (self.rank + 1) * per, 0
        self.share = []
        for t in self.tensors:
            n = t.numel() * t.element_size()
            if lo <= acc < hi:
                self.share.append(t)
            acc += n
        self.step = 0
        self.t: Dict[str, Dict[str, List[float]]] = {}
        self.phases: Dict[str, Dict[str, List[float]]] = {}
        self.layout_used: Dict[str, int] = {}
        self.cold_ok = True  # posix_fadvise available (else cold = warm, said in the output)

    def close(self) -> None:
        for m in self.mgr.values():
            m.close()
        self.comm.Barrier()
        if self.rank == 0:
            for d in self.sub.values():
                shutil.rmtree(d, ignore_errors=True)

    def note(self, path: str, op: str, dt: float) -> None:
        self.t.setdefault(path, {}).setdefault(op, []).append(dt)

    def timed(self, fn: Callable[[], Any]) -> float:
        os.sync()
        self.comm.Barrier()
        t0 = time.perf_counter()
        fn()
        dt = time.perf_counter() - t0
        # Ranks done early (all but rank 0 in torch.save and raw1) wait without spinning: a
        # busy MPI wait on 2 cores would take the CPU from the rank still working.
        req = self.comm.Ibarrier()
        while not req.Test():
            time.sleep(0.0005)
        return self.comm.allreduce(dt, op=MPI.MAX)

    def drop_cache(self, paths: List[str]) -> None:
        """Drops the pages of every file under paths (every rank, after a sync): a cold read."""
        os.sync()
        if not hasattr(os, "posix_fadvise"):
            self.cold_ok = False
            return
        for top in paths:
            for root, _, files in os.walk(top):
                for f in files:
                    try:
                        fd = os.open(os.path.join(root, f), os.O_RDONLY)
                    except OSError:
                        continue
                    try:
                        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
                    finally:
                        os.close(fd)
        self.comm.Barrier()

    def poison(self) -> None:
        poison(self.tensors)

    def check(self, what: str) -> None:
        check_restored(self.comm, self.tensors, self.ref, what)

    # ---- the paths ----
    def torch_save(self) -> None:
        if self.rank == 0:
            with open(self.torch_file, "wb") as f:
                torch.save(self.state, f)
                f.flush()
                os.fsync(f.fileno())

    def torch_load(self) -> None:
        self.loaded = torch.load(self.torch_file)

    @staticmethod
    def write_fsync(path: str, ts: List["torch.Tensor"]) -> None:
        with open(path, "wb", buffering=0) as f:
            for t in ts:
                f.write(memoryview(t.numpy()).cast("B"))
            os.fsync(f.fileno())

    def raw_read(self) -> None:
        with open(self.raw1, "rb", buffering=0) as f:
            buf = bytearray(1 << 24)
            while f.readinto(buf):
                pass

    def save(self, p: str) -> None:
        kind = p.partition(":")[0]
        s = self.step
        if kind == "mpickpt":
            self.note(p, "save", self.timed(lambda: self.mgr[p].save(s, self.state)))
            m = self.mgr[p]._saver.last_metrics()
            for k in PHASES:
                self.phases.setdefault(p, {}).setdefault(k, []).append(
                    self.comm.allreduce(m[k + "_s"], op=MPI.MAX))
        elif kind == "async":
            self.note(p, "blocking", self.timed(lambda: self.mgr[p].save(s, self.state)))
            self.note(p, "background", self.timed(self.mgr[p].wait_until_finished))
        elif p == "torch":
            self.note(p, "save", self.timed(self.torch_save))
        elif p == "raw1":
            self.note(p, "save", self.timed(
                lambda: self.write_fsync(self.raw1, self.tensors) if self.rank == 0 else None))
        else:
            self.note(p, "save", self.timed(lambda: self.write_fsync(self.rawn, self.share)))

    def restore(self, p: str, cold: bool) -> None:
        kind = p.partition(":")[0]
        op = "restore_cold" if cold else "restore"
        if cold:
            self.drop_cache([self.sub[p], self.sub["raw1"]] if p == "raw1" else [self.sub[p]])
        if kind in ("mpickpt", "async"):
            self.poison()
            self.note(p, op, self.timed(lambda: self.mgr[p].restore(self.state)))
            self.check(f"{p} {op}")
        elif p == "torch":
            self.note(p, op, self.timed(self.torch_load))
            self.loaded = None
        elif p == "raw1":
            self.note(p, op, self.timed(self.raw_read))

    def rep(self, i: int, record: bool) -> None:
        self.step += 1
        # rotated and reversed every other rep: no path always follows the same one
        k = i % len(self.paths)
        order = self.paths[k:] + self.paths[:k]
        if i % 2:
            order = order[::-1]
        for p in order:
            self.save(p)
        for cold in (False, True):
            for p in order:
                self.restore(p, cold)
        if self.rank == 0:
            os.unlink(self.raw1)
            if os.path.exists(self.torch_file):
                os.unlink(self.torch_file)
        os.unlink(self.rawn)
        self.comm.Barrier()
        if self.a.verbose and self.rank == 0:
            print(f"  torch rep {i}{'' if record else ' (warm-up)'}: " + ", ".join(
                f"{p} " + "/".join(f"{v[-1]:.3f}" for v in self.t[p].values()) for p in order),
                file=sys.stderr, flush=True)
        if not record:  # the warm-up rep (the first) is not counted
            self.t, self.phases = {}, {}


def walk_tensors(tree: Any) -> List["torch.Tensor"]:
    """The tensors of a state tree, in a fixed order (dict keys sorted by str)."""
    if isinstance(tree, torch.Tensor):
        return [tree]
    if isinstance(tree, dict):
        return [t for k in sorted(tree, key=str) for t in walk_tensors(tree[k])]
    if isinstance(tree, (list, tuple)):
        return [t for v in tree for t in walk_tensors(v)]
    return []


def torch_report(b: TorchBench) -> Dict[str, Any]:
    rec: Dict[str, Any] = {"ranks": b.size, "state_bytes": b.bytes, "reps": b.a.reps,
                           "tensors": len(b.tensors), "cold_by_fadvise": b.cold_ok,
                           "layouts": b.layouts, "paths": b.paths,
                           "max_to_keep": b.a.torch_keep}
    for p, ops in b.t.items():
        for o, xs in ops.items():
            rec[f"{p}_{o}_s"] = median(xs)
            rec[f"{p}_{o}_min_s"] = min(xs)
    for p, ph in b.phases.items():
        for k, xs in ph.items():
            rec[f"{p}_save_{k}_s"] = median(xs)
    ts, tl, tlc = rec["torch_save_s"], rec["torch_restore_s"], rec["torch_restore_cold_s"]
    for l in b.layouts:
        p = f"mpickpt:{l}"
        # time ratios: mpickpt's time / torch's (lower is better; the save's goal is <= 1)
        rec[f"{p}_save_over_torch"] = rec[f"{p}_save_s"] / ts
        rec[f"{p}_restore_over_torch"] = rec[f"{p}_restore_s"] / tl
        rec[f"{p}_restore_cold_over_torch"] = rec[f"{p}_restore_cold_s"] / tlc
        # the same ratio rep by rep (each rep ran both; the disk and the load drift between reps)
        paired = [m / t for m, t in zip(b.t[p]["save"], b.t["torch"]["save"])]
        for q in (25, 50, 75):
            rec[f"{p}_save_over_torch_paired_p{q}"] = float(np.percentile(paired, q))
        rec[f"{p}_save_over_raw1"] = rec[f"{p}_save_s"] / rec["raw1_save_s"]
        rec[f"{p}_save_over_rawN"] = rec[f"{p}_save_s"] / rec["rawN_save_s"]
        rec[f"{p}_restore_cold_over_raw"] = rec[f"{p}_restore_cold_s"] / rec["raw1_restore_cold_s"]
        if f"async:{l}_blocking_s" in rec:
            rec[f"async:{l}_blocking_over_torch"] = rec[f"async:{l}_blocking_s"] / ts
    rec["torch_save_over_raw1"] = ts / rec["raw1_save_s"]
    return rec


def torch_print(rec: Dict[str, Any]) -> None:
    print(f"bench_python torch: {rec['ranks']} rank(s), a replicated PyTorch state of "
          f"{rec['state_bytes'] / 1e6:.1f} MB ({rec['tensors']} tensors: a Transformer LM's "
          f"state_dict + AdamW's state), {rec['reps']} reps, max_to_keep {rec['max_to_keep']}, "
          "medians (min) of the max over ranks, s")
    cold = "cold: pages dropped by posix_fadvise(DONTNEED)" if rec["cold_by_fadvise"] else \
        "cold: NOT dropped (no posix_fadvise): the same as warm"
    print(f"{'path':<18} {'save/blocking':>15} {'background':>11} {'restore':>15} "
          f"{'restore cold':>15}   ({cold})")

    def cell(k: str) -> str:
        return f"{rec[k]:.3f} ({rec[k[:-2] + '_min_s']:.3f})" if k in rec else "-"
    for p in rec["paths"]:
        sv = cell(f"{p}_save_s") if f"{p}_save_s" in rec else cell(f"{p}_blocking_s")
        print(f"{p:<18} {sv:>15} {cell(p + '_background_s'):>11} {cell(p + '_restore_s'):>15} "
              f"{cell(p + '_restore_cold_s'):>15}")
    for l in rec["layouts"]:
        p = f"mpickpt:{l}"
        ph = " ".join(f"{k} {rec[f'{p}_save_{k}_s']:.3f}" for k in PHASES)
        print(f"{p:<18} save/torch.save+fsync {rec[p + '_save_over_torch']:.2f} (goal <= 1; rep "
              f"by rep p25/p50/p75 {rec[p + '_save_over_torch_paired_p25']:.2f}/"
              f"{rec[p + '_save_over_torch_paired_p50']:.2f}/"
              f"{rec[p + '_save_over_torch_paired_p75']:.2f}), "
              f"/raw1 {rec[p + '_save_over_raw1']:.2f}, /rawN {rec[p + '_save_over_rawN']:.2f}; "
              f"torch.load/restore warm {1 / rec[p + '_restore_over_torch']:.1f}x, cold "
              f"{1 / rec[p + '_restore_cold_over_torch']:.1f}x (goal >= 10x); save phases {ph}")
        if f"async:{l}_blocking_over_torch" in rec:
            print(f"{'async:' + l:<18} blocking/torch.save+fsync "
                  f"{rec[f'async:{l}_blocking_over_torch']:.3f}")
    print(f"torch.save+fsync / raw1 write+fsync: {rec['torch_save_over_raw1']:.2f}")
    sys.stdout.flush()


def torch_check(rec: Dict[str, Any]) -> List[str]:
    bad = []
    want = ["torch_save_s", "torch_restore_s", "torch_restore_cold_s", "raw1_save_s",
            "rawN_save_s", "raw1_restore_s", "raw1_restore_cold_s"]
    for l in rec["layouts"]:
        want += [f"mpickpt:{l}_{o}_s" for o in ("save", "restore", "restore_cold")]
        want += [f"mpickpt:{l}_save_over_torch", f"mpickpt:{l}_restore_over_torch"]
    for k in want:
        v = rec.get(k)
        if not isinstance(v, (int, float)) or not math.isfinite(v) or v <= 0:
            bad.append(f"{k}={v!r}")
    return bad

def run_scenario(b: Any, bench: str, fields: str, table: Callable[[], Dict[str, Any]],
                 show: Callable[[Dict[str, Any]], None],
                 check: Callable[[Dict[str, Any]], List[str]], a: argparse.Namespace) -> int:
    """One warm-up rep, a.reps recorded ones, then rank 0 prints the table (and the JSON line,
    checked with --check). `fields` names the fields in --check's messages."""
    try:
        b.rep(0, record=False)
        for i in range(a.reps):
            b.rep(i + 1, record=True)
    finally:
        b.close()
    if b.rank != 0:
        return 0
    rec = table()
    show(rec)
    if a.json:
        line = json.dumps({"bench": bench, **rec}, sort_keys=True)
        print(line, flush=True)
        if a.check:
            bad = check(json.loads(line))
            if bad:
                print(f"bench_python.py --check: bad {fields}: {bad}", file=sys.stderr)
                return 1
            print(f"bench_python.py --check: every {fields[:-1]} present", flush=True)
    return 0


def run_layers(a: argparse.Namespace) -> int:
    """The rows of the docstring: python / c_manager / c_saver / raw."""
    b = Bench(a)
    return run_scenario(b, "python", "fields", lambda: report(b, a), print_table, check_record, a)


def run_torch(a: argparse.Namespace) -> int:
    """The PyTorch rows (TorchBench)."""
    b = TorchBench(a)
    return run_scenario(b, "python_torch", "torch fields", lambda: torch_report(b), torch_print,
                        torch_check, a)


def main() -> int:
    a = parse_args()
    torch.set_num_threads(1)
    rc = 0
    if a.scenario in ("layers", "all"):
        rc = run_layers(a)
    if a.scenario in ("torch", "all"):
        rc = max(rc, run_torch(a))
    return rc

if __name__ == "__main__":
    rc = main()
    rc = MPI.COMM_WORLD.allreduce(rc, op=MPI.MAX)
    sys.exit(rc)
