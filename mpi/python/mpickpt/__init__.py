"""mpickpt: checkpoint and restore the state of a distributed training job under MPI.

A thin layer over the C library (a CPython extension, ``mpickpt._mpickpt``): arrays (NumPy arrays,
PyTorch CPU tensors) are saved and restored in place, zero-copy; plain values are stored as JSON,
never pickle; every call is collective over an mpi4py communicator (default ``MPI.COMM_WORLD``) and
raises the same error on every rank. See docs/python.md.

    mgr = mpickpt.CheckpointManager("/scratch/run1", max_to_keep=3)
    state = {"model": model.state_dict(), "optim": optimizer.state_dict(), "epoch": 0}
    info = mgr.restore_or_initialize(state)         # in place; None when nothing was saved
    ...
    mgr.save(step, state)
"""
from __future__ import annotations

import atexit
import os
import weakref
from typing import Any, Dict, Iterator, List, Mapping, Optional, Sequence, Tuple

import numpy as np

from . import _mpickpt as _C
from ._mpickpt import (BusyError, CorruptError, Error, ExistsError, InvalidArgumentError,
                       MismatchError, MPIError, NoSpaceError, NotFoundError, TimeoutError,
                       VersionError)
from ._state import (Registered, agree, collective, load_record, restore_finish, restore_prepare,
                     save_prepare, uninterruptible)
from ._tree import CODE_NAMES, CODE_NUMPY, JSON_BLOB, RESERVED, PerRank, Shard
from . import preemption

__all__ = [
    "CheckpointManager", "TrainingState", "PerRank", "Shard", "open", "Checkpoint", "export",
    "import_tf",
    "preemption",
    "Error", "NotFoundError", "CorruptError", "MismatchError", "NoSpaceError",
    "InvalidArgumentError", "VersionError", "ExistsError", "TimeoutError", "BusyError", "MPIError",
    "EXIT_PREEMPTED", "__version__", "set_log_level",
]

__version__ = _C.version()
EXIT_PREEMPTED = _C.EXIT_PREEMPTED

_LOG_LEVELS = {"error": 0, "warn": 1, "warning": 1, "info": 2, "debug": 3}


def set_log_level(level: str) -> None:
    """The level of the library's messages on stderr ("error", "warn", "info" or "debug") when
    MPICKPT_LOG is unset (MPICKPT_LOG wins). The package's default is "info": the chief prints one
    summary line per save and per restore (docs/operations.md, "Summary lines")."""
    if level not in _LOG_LEVELS:
        raise ValueError(f"log level {level!r} is not one of error, warn, info, debug")
    _C.log_default_level(_LOG_LEVELS[level])


# The summary lines are on by default in Python, as in the programs (the C library alone is quiet).
set_log_level("info")

_LAYOUTS = {None: _C.LAYOUT_DEFAULT, "per-rank": _C.LAYOUT_PER_RANK, "shared": _C.LAYOUT_SHARED,
            "per-node": _C.LAYOUT_PER_NODE}

# Savers still open at exit are closed (an async save in flight is waited for) before mpi4py
# finalizes MPI: the handler is registered after mpi4py.MPI was imported, so it runs first.
_open = weakref.WeakSet()
_exit_hook = False


def _close_all() -> None:
    for obj in list(_open):
        try:
            obj.close()
        except Error:
            pass


def _comm_of(comm: Any) -> Any:
    """The caller's communicator (default MPI.COMM_WORLD), duplicated for mpickpt's own use."""
    global _exit_hook
    from mpi4py import MPI

    if comm is None:
        comm = MPI.COMM_WORLD
    if not isinstance(comm, MPI.Comm):
        raise TypeError(f"comm must be an mpi4py communicator, not {type(comm).__name__}")
    if not _exit_hook:
        atexit.register(_close_all)
        _exit_hook = True
    return comm.Dup()


def _lock_wait(lock_wait: Optional[float]) -> float:
    """The C option lock_wait_seconds: None leaves MPICKPT_LOCK_WAIT in charge (0.0), 0 or less
    never waits (-1.0)."""
    if lock_wait is None:
        return 0.0
    w = float(lock_wait)
    if w != w:
        raise InvalidArgumentError("lock_wait is NaN")
    return w if w > 0 else -1.0


def _layout(layout: Optional[str]) -> int:
    if layout not in _LAYOUTS:
        raise InvalidArgumentError(f"layout {layout!r}: use None, 'per-rank', 'shared' or 'per-node'")
    return _LAYOUTS[layout]


class _Base:
    """A saver with a registered state; closed at exit at the latest."""

    def __init__(self, comm: Any, async_save: bool, layout: Optional[str],
                 skip_missing_per_rank: bool, check_replicas: Optional[str] = None,
                 replica_mismatch: Optional[str] = None) -> None:
        self._saver = None
        self._reg = Registered()
        self._skip = bool(skip_missing_per_rank)
        code = _layout(layout)
        if check_replicas not in (None, "first", "every", "off"):
            raise InvalidArgumentError(f"check_replicas {check_replicas!r}: use None, 'first', "
                                       "'every' or 'off'")
        if replica_mismatch not in (None, "error", "warn"):
            raise InvalidArgumentError(f"replica_mismatch {replica_mismatch!r}: use None, "
                                       "'error' or 'warn'")
        self._comm = _comm_of(comm)
        try:
            self._saver = _C.Saver(self._comm, layout=code, async_save=bool(async_save),
                                   check_replicas=check_replicas,
                                   replica_mismatch=replica_mismatch)
        except BaseException:
            self._comm.Free()
            raise
        _open.add(self)

    @property
    def comm(self) -> Any:
        """The (duplicated) communicator mpickpt uses."""
        return self._comm

    @uninterruptible
    def wait_until_finished(self) -> None:
        """Waits for an async save in flight; raises its failure (on every rank)."""
        self._saver.sync()

    def reached_preemption(self, step: Optional[int] = None) -> bool:
        """Collective: True on every rank when a preemption signal or the deadline arrived
        (install handlers first: mpickpt.preemption.install())."""
        return preemption.reached_preemption(step, self._comm)

    def _finish(self, info: Dict[str, Any], strict: bool) -> Dict[str, Any]:
        """Collective, after the C restore: the plain values put back (restore_finish), and
        info's 'missing' and 'unexpected' lists: the tensors' (from C, before any data was read;
        the record of plain values left out) and the plain values'."""
        miss, unexp = restore_finish(self._comm, self._reg, self._saver, self._skip,
                                     info["prefix"], strict=strict)
        tensors = [n for n in info.get("missing", []) if not n.startswith(RESERVED + "/")]
        info["missing"] = sorted(set(tensors) | set(miss))
        info["unexpected"] = sorted(set(info.get("unexpected", [])) | set(unexp))
        return info

    def _close(self, inner: Any) -> None:
        if self._saver is None:
            return
        try:
            if inner is not None:
                inner.close()
            self._saver.close()
        finally:
            self._saver = None
            _open.discard(self)
            self._comm.Free()

    def __enter__(self):
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def close(self) -> None:  # pragma: no cover - overridden
        raise NotImplementedError


class CheckpointManager(_Base):
    """Numbered checkpoints of a state tree in `directory` (``<directory>/ckpt-<N>``), like
    TensorFlow's and Orbax's CheckpointManager. Collective over `comm`.

    max_to_keep: newest checkpoints kept (None or <= 0: all); keep_every_n_hours: also keep one
    per this many hours; async_save: save() returns once the arrays are copied, a background
    thread writes; layout: 'per-rank' (default) or 'shared' (one HDF5 file); skip_missing_per_rank:
    restoring on more ranks than wrote, leave the extra ranks' PerRank values as they are.

    Storage levels (docs/levels.md): cache_dir, a node-local directory ('%n': the node's index,
    e.g. '/dev/shm/ckpt/%n'), makes checkpoints go to the nodes' caches, and every
    persist_every-th (default 10) also to `directory`; redundancy='partner' copies each node's
    files to a partner node (in another failure_group, e.g. a rack name); cache_max_to_keep
    (default 2) is the cache's retention. Unset, MPICKPT_CACHE_DIR and its family decide.

    One job at a time uses a directory: its lock is held from here until close(); another job
    holding it is BusyError on every rank naming that job (host, pid, since when), unless it ends
    within lock_wait seconds (None: MPICKPT_LOCK_WAIT, else no wait).

    The replica check (docs/python.md): check_replicas 'first' (the default: at the first save
    of the same arrays), 'every' or 'off' compares every rank's copy of each replicated array;
    copies that differ are a MismatchError at save() naming the arrays and the ranks
    (replica_mismatch='error', the default) or a warning ('warn'). None: MPICKPT_CHECK_REPLICAS,
    MPICKPT_REPLICA_MISMATCH. Restores are strict by default (restore(strict=...))."""

    @uninterruptible
    def __init__(self, directory: str, comm: Any = None, max_to_keep: Optional[int] = 5,
                 keep_every_n_hours: Optional[float] = None, async_save: bool = False,
                 layout: Optional[str] = None, skip_missing_per_rank: bool = False,
                 name: str = "ckpt", cache_dir: Optional[str] = None,
                 redundancy: Optional[str] = None, persist_every: Optional[int] = None,
                 cache_max_to_keep: Optional[int] = None,
                 failure_group: Optional[str] = None,
                 lock_wait: Optional[float] = None, check_replicas: Optional[str] = None,
                 replica_mismatch: Optional[str] = None) -> None:
        wait = _lock_wait(lock_wait)
        super().__init__(comm, async_save, layout, skip_missing_per_rank, check_replicas,
                         replica_mismatch)
        self._dir = os.fspath(directory)
        try:
            levels: Dict[str, Any] = {}
            if cache_dir:
                levels["cache_dir"] = os.fspath(cache_dir)
            self._mgr = _C.Manager(self._saver, self._dir,
                                   max_to_keep=max_to_keep if max_to_keep else 0,
                                   keep_every_n_hours=keep_every_n_hours or 0.0, name=name,
                                   skip_missing_per_rank=self._skip,
                                   redundancy=redundancy, persist_every=persist_every or 0,
                                   cache_max_to_keep=cache_max_to_keep or 0,
                                   failure_group=failure_group, lock_wait=wait, **levels)
        except BaseException:
            self._close(None)
            raise

    @property
    def directory(self) -> str:
        return self._dir

    @uninterruptible
    def save(self, step: int, state: Mapping[str, Any], epoch: Optional[int] = None,
             end_of_epoch: bool = False, force: bool = False) -> Optional[str]:
        """Saves `state` as the next checkpoint; returns its path. Collective. With async_save
        it returns once the arrays are copied (the state may change at once); a failure of the
        background write is raised by the next call, on every rank."""
        save_prepare(self._comm, self._reg, self._saver, state)
        return self._mgr.save(epoch=int(epoch or 0), step=int(step),
                              end_of_epoch=bool(end_of_epoch), force=bool(force))

    def _entries(self) -> List[Dict[str, Any]]:
        return self._mgr.state()["entries"]

    def all_steps(self) -> List[int]:
        """The steps restore(step=...) accepts, oldest first: the kept checkpoints that no
        `mpickpt drop` retired, no `mpickpt pin` set aside, and that are on a level this manager
        reads (one only in the nodes' caches is not, without cache_dir). Those older than a pin
        are listed: restore() does not fall back to them, restore(step=...) restores them. The C
        manager decides (ckpt_manager_restorable)."""
        return [e["step"] for e in self._mgr.restorable()["entries"]]

    def latest_step(self) -> Optional[int]:
        """The step of the checkpoint restore() starts from (the newest restorable one, or the
        pinned one: `mpickpt pin`), or None."""
        r = self._mgr.restorable()
        return None if r["start"] is None else r["entries"][r["start"]]["step"]

    @uninterruptible
    def restore(self, state: Mapping[str, Any], step: Optional[int] = None,
                strict: bool = True) -> Dict[str, Any]:
        """Restores into `state` in place: the newest valid checkpoint (damaged ones are skipped
        with a warning, and counted in info['skipped']) or the one of `step` (one of
        all_steps(); a dropped, set-aside or damaged one is an error naming it, never a fall back
        to another). Returns info (prefix, step, epoch, world_size, ..., 'missing' and
        'unexpected': names as in the checkpoint). NotFoundError when there is none.

        strict (the default): an entry of the state the checkpoint lacks, or one of the
        checkpoint the state lacks, is a MismatchError on every rank listing them all, like
        load_state_dict. Tensors are compared before any is read, plain values after the tensors
        were read: one error lists the tensors' mismatches, or else the plain values'. With
        strict=False what matches is restored, the rest left as it is, and info lists the
        'missing' and 'unexpected' names. Collective."""
        restore_prepare(self._comm, self._reg, self._saver, state)
        if step is not None:
            info = self._mgr.restore(step=int(step), strict=bool(strict))
        else:
            info = self._mgr.restore_or_initialize(strict=bool(strict))
            if not info["restored"]:
                raise NotFoundError(f"no valid checkpoint in {self._dir} ({info['skipped']} "
                                    "damaged)")
        return self._finish(info, bool(strict))

    @uninterruptible
    def restore_or_initialize(self, state: Mapping[str, Any],
                              strict: bool = True) -> Optional[Dict[str, Any]]:
        """restore(state, strict=strict), or None when there is nothing to restore: the caller
        initializes (every array of the state: a damaged checkpoint may have left values in
        them)."""
        restore_prepare(self._comm, self._reg, self._saver, state)
        info = self._mgr.restore_or_initialize(strict=bool(strict))
        if not info["restored"]:
            return None
        return self._finish(info, bool(strict))

    @uninterruptible
    def close(self) -> None:
        """Waits for a save in flight, then frees everything. Collective."""
        if self._saver is not None:
            self._close(self._mgr)
            self._mgr = None


class TrainingState(_Base):
    """The worker training state of TensorFlow's BackupAndRestore: backups of `state` in
    ``<directory>/chief`` (in-flight parts of other ranks in ``workertemp_<rank>``), one kept; the
    chief's epoch and step broadcast at restore. Collective over `comm`. Holds the lock of
    ``<directory>/chief`` until close() (lock_wait: as CheckpointManager's)."""

    @uninterruptible
    def __init__(self, directory: str, state: Mapping[str, Any], comm: Any = None,
                 async_save: bool = False, layout: Optional[str] = None,
                 skip_missing_per_rank: bool = False,
                 lock_wait: Optional[float] = None, check_replicas: Optional[str] = None,
                 replica_mismatch: Optional[str] = None) -> None:
        wait = _lock_wait(lock_wait)
        super().__init__(comm, async_save, layout, skip_missing_per_rank, check_replicas,
                         replica_mismatch)
        self._dir = os.fspath(directory)
        self._state = state
        try:
            self._t = _C.Training(self._saver, self._dir, skip_missing_per_rank=self._skip,
                                  lock_wait=wait)
        except BaseException:
            self._close(None)
            raise

    @uninterruptible
    def back_up(self, epoch: int, step: Optional[int] = None) -> None:
        """Backs up the state: at the end of `epoch`, or inside it at `step`. Collective."""
        save_prepare(self._comm, self._reg, self._saver, self._state)
        self._t.back_up(int(epoch), int(step or 0), step is None)

    @uninterruptible
    def restore(self, strict: bool = True) -> Optional[Dict[str, Any]]:
        """Restores the backup into the state in place; None when there is none. strict: as
        CheckpointManager.restore's. Collective."""
        restore_prepare(self._comm, self._reg, self._saver, self._state)
        info = self._t.restore(strict=bool(strict))
        if not info["restored"]:
            return None
        return self._finish(info, bool(strict))

    @property
    def initial_epoch(self) -> int:
        """The epoch to start at: the backup's + 1 (end of epoch) or the backup's (mid-epoch)."""
        return self._t.initial_epoch(0)

    @property
    def initial_step(self) -> int:
        """The step to start at: the backup's + 1, or 0."""
        return self._t.initial_step(0)

    @uninterruptible
    def delete_backup(self) -> None:
        """Removes the backup directory (training finished). Collective."""
        self._t.delete_backup()

    @uninterruptible
    def close(self) -> None:
        if self._saver is not None:
            self._close(self._t)
            self._t = None


# ---- read-only access, without MPI ----------------------------------------------------------------

class Array:
    """A tensor of a checkpoint, read when indexed: ``a[10:20]``, ``a[...]``, ``np.asarray(a)``.
    bfloat16 values come as their uint16 bits (``dtype_name`` says 'bfloat16')."""

    def __init__(self, reader: Any, info: Dict[str, Any]) -> None:
        self._r = reader
        self.name: str = info["name"]
        self.shape: Tuple[int, ...] = tuple(info["shape"])
        self._code: int = info["dtype"]
        self.dtype = CODE_NUMPY[self._code]
        self.dtype_name: str = CODE_NAMES[self._code]
        self.kind: str = info["kind"]

    @property
    def ndim(self) -> int:
        return len(self.shape)

    def __len__(self) -> int:
        if not self.shape:
            raise TypeError("len() of a scalar")
        return self.shape[0]

    def _empty(self, shape: Sequence[int]) -> np.ndarray:
        """An array of `shape` to read into; an InvalidArgumentError naming the tensor when NumPy
        cannot have one (the product of the nonzero extents, in bytes, past the address space:
        a shape such as [0, 2**62, 2**62] holds no element, and still no array has it)."""
        size = self.dtype.itemsize
        for n in shape:
            size *= n or 1
        if size > np.iinfo(np.intp).max:
            raise InvalidArgumentError(
                f"tensor '{self.name}': no NumPy array can have the shape {list(shape)} of "
                f"{self.dtype_name} (its extents other than 0 make {size} bytes, more than "
                f"{np.iinfo(np.intp).max}); index a part of it instead, such as a[:, :2]")
        return np.empty(shape, dtype=self.dtype)

    def read(self) -> np.ndarray:
        out = self._empty(self.shape)
        self._r.read(self.name, out, self._code)
        return out

    def __array__(self, dtype: Any = None) -> np.ndarray:
        a = self.read()
        return a if dtype is None else a.astype(dtype)

    def __getitem__(self, key: Any) -> np.ndarray:
        box = _box(key, self.shape)
        if box is None:  # steps, fancy indexing: read all, let NumPy index
            return self.read()[key]
        offsets, counts, squeeze = box
        out = self._empty(counts)
        if out.size:
            self._r.read(self.name, out, self._code, offsets, counts)
        return out.reshape([c for c, s in zip(counts, squeeze) if not s])

    def to_torch(self) -> Any:
        """The whole tensor as a PyTorch tensor of its own dtype (bfloat16 included)."""
        import torch

        a = self.read()
        if self.dtype_name == "bfloat16":  # its bits: torch.from_numpy knows int16, not uint16
            return torch.from_numpy(a.view(np.int16)).view(torch.bfloat16)
        return torch.from_numpy(a)

    def __repr__(self) -> str:
        return f"<mpickpt.Array {self.name!r} {self.dtype_name}{list(self.shape)}>"


def _box(key: Any, shape: Tuple[int, ...]) -> Optional[Tuple[List[int], List[int], List[bool]]]:
    """Offsets, counts and which axes an int index drops, for basic indexing with step 1."""
    if not isinstance(key, tuple):
        key = (key,)
    if sum(k is Ellipsis for k in key) > 1:
        return None
    if Ellipsis in key:
        i = key.index(Ellipsis)
        key = key[:i] + (slice(None),) * (len(shape) - len(key) + 1) + key[i + 1:]
    key = key + (slice(None),) * (len(shape) - len(key))
    if len(key) != len(shape):
        raise IndexError(f"{len(key)} indices for a {len(shape)}-d tensor")
    offsets, counts, squeeze = [], [], []
    for k, n in zip(key, shape):
        if isinstance(k, (int, np.integer)):
            i = int(k) + n if int(k) < 0 else int(k)
            if not 0 <= i < n:
                raise IndexError(f"index {int(k)} is out of bounds for an axis of size {n}")
            offsets.append(i), counts.append(1), squeeze.append(True)
        elif isinstance(k, slice):
            start, stop, step = k.indices(n)
            if step != 1:
                return None
            offsets.append(start), counts.append(max(0, stop - start)), squeeze.append(False)
        else:
            return None
    return offsets, counts, squeeze


class Checkpoint(Mapping[str, Array]):
    """A read-only view of one checkpoint: names to lazily read arrays, ``.meta`` (epoch, step,
    world size, ...), ``.json`` (the plain values the Python package stored). No MPI."""

    def __init__(self, prefix: str) -> None:
        self.prefix = os.fspath(prefix)
        self._r = _C.Reader(self.prefix)
        self.meta: Dict[str, Any] = self._r.header()
        self._arrays = {t["name"]: Array(self._r, t) for t in self._r.tensors()
                        if not t["name"].startswith(RESERVED + "/")}

    def __getitem__(self, name: str) -> Array:
        try:
            return self._arrays[name]
        except KeyError:
            raise NotFoundError(f"no tensor '{name}' in {self.prefix}") from None

    # A missing name raises NotFoundError, which is a LookupError but not the KeyError that
    # Mapping's `in` and get() catch: they answer from the names instead.
    def __contains__(self, name: object) -> bool:
        return name in self._arrays

    def get(self, name: str, default: Any = None) -> Any:
        return self._arrays.get(name, default)

    def __iter__(self) -> Iterator[str]:
        return iter(self._arrays)

    def __len__(self) -> int:
        return len(self._arrays)

    def _json(self, rank: int) -> Optional[Dict[str, Any]]:
        name = f"{JSON_BLOB}/rank_{rank}"
        try:
            info = next(t for t in self._r.tensors() if t["name"] == name)
        except StopIteration:
            return None
        shape = info["shape"]
        if info["dtype"] != _C.UINT8 or len(shape) != 1 or shape[0] > np.iinfo(np.intp).max:
            raise CorruptError(f"{self.prefix}: the record of plain values of rank {rank} "
                               f"('{name}') is {CODE_NAMES.get(info['dtype'], '?')} "
                               f"{list(shape)}, not bytes")
        raw = np.empty(shape[0], dtype=np.uint8)
        self._r.read(name, raw, _C.UINT8)
        return load_record(raw.tobytes(), self.prefix, rank)

    @property
    def json(self) -> Dict[str, Any]:
        """The replicated plain values (as rank 0 wrote them), by name."""
        doc = self._json(0)
        return dict(doc["replicated"]) if doc else {}

    def json_of_rank(self, rank: int) -> Optional[Dict[str, Any]]:
        """Rank `rank`'s PerRank plain values, or None when the writer had no such rank."""
        doc = self._json(rank)
        return dict(doc["per_rank"]) if doc else None

    def verify(self) -> None:
        """Recomputes every checksum; CorruptError naming the first bad piece."""
        self._r.verify()

    def close(self) -> None:
        self._r.close()

    def __enter__(self) -> "Checkpoint":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __repr__(self) -> str:
        return (f"<mpickpt.Checkpoint {self.prefix!r}: {len(self)} tensors, step "
                f"{self.meta['step']}, {self.meta['world_size']} ranks>")


def open(prefix: str) -> Checkpoint:  # noqa: A001 - the name users know (h5py.File, np.load)
    """A read-only view of the checkpoint at `prefix` (``<dir>/ckpt-3``), without MPI."""
    return Checkpoint(prefix)


# ---- export to other formats, without MPI (docs/interop.md) ------------------------------------

_EXPORT_SUFFIXES = {".h5": "hdf5", ".hdf5": "hdf5", ".he5": "hdf5", ".safetensors": "safetensors"}


def export(prefix: str, out: str, format: Optional[str] = None,  # noqa: A002 - the CLI's word
           overwrite: bool = False) -> Dict[str, Any]:
    """Writes the checkpoint at `prefix` as `format`: "hdf5" (one HDF5 file, a dataset per
    tensor, groups from '/' in names), "safetensors" (one file) or "tf" (a TensorFlow bundle:
    `out` is its prefix). Without `format`, `out` ending in .h5, .hdf5 or .he5 means hdf5 and
    .safetensors means safetensors. The output appears whole or not at all; an existing one is
    ExistsError unless `overwrite`. Returns {"tensors": count, "bytes": of values, "files":
    [paths written]}. Like `mpickpt export`; no MPI."""
    out = os.fspath(out)
    if format is None:
        format = next((f for s, f in _EXPORT_SUFFIXES.items() if out.endswith(s) and out != s),
                      None)
        if format is None:
            raise InvalidArgumentError(
                f"cannot tell the format from {out!r}: pass format='tf', 'hdf5' or "
                "'safetensors' (a name ending in .h5, .hdf5, .he5 or .safetensors implies hdf5 or "
                "safetensors)")
    return _C.export(os.fspath(prefix), out, format, overwrite=bool(overwrite))


def import_tf(tf_prefix: str, out_prefix: str, skip_unsupported: bool = False,
              overwrite: bool = False, save_counter: int = 0, epoch: int = 0,
              step: int = 0) -> Dict[str, Any]:
    """Reads the TensorFlow checkpoint (tensor bundle) at `tf_prefix` (or the one a directory's
    TensorFlow `checkpoint` file names) and writes the mpickpt checkpoint `out_prefix`, every
    block and tensor checksum checked; keys become tensor names, partitioned variables
    partitioned tensors. Tensors of dtypes mpickpt lacks (strings: every TensorFlow 2 checkpoint
    has `_CHECKPOINTABLE_OBJECT_GRAPH`) raise InvalidArgumentError naming the key, or are left
    out with `skip_unsupported`. Returns {"tensors", "bytes", "skipped": [{"name", "dtype",
    "reason"}]}. Like `mpickpt import-tf`; no MPI. Read the result with mpickpt.open()."""
    return _C.import_tf(os.fspath(tf_prefix), os.fspath(out_prefix),
                        skip_unsupported=bool(skip_unsupported), overwrite=bool(overwrite),
                        save_counter=int(save_counter), epoch=int(epoch), step=int(step))
