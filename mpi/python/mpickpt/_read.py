"""mpickpt's read side without targets (docs/python.md "Reading a checkpoint" and "Load without
targets"): Checkpoint and Array (read-only views, no MPI), newest(dir) and open(dir) (the C
library's restore rule), and load(path, comm): a checkpoint as a tree of new arrays, replicated
leaves whole and sharded ones as this rank's share. Re-exported by the package."""
from __future__ import annotations

import os
from typing import Any, Dict, Iterator, List, Mapping, Optional, Sequence, Tuple

import numpy as np

from . import _mpickpt as _C
from . import _tree
from ._mpickpt import CorruptError, InvalidArgumentError
from ._state import collective, load_record, uninterruptible
from ._tree import CODE_NAMES, CODE_NUMPY, JSON_BLOB, RESERVED, PerRank, Shard, alias_view, unescape
from ._tree import not_found


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
            raise not_found(f"no tensor '{name}' in {self.prefix}", "no_tensor") from None

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

    @property
    def aliases(self) -> Dict[str, Dict[str, Any]]:
        """The replicated arrays not stored because they share memory with a stored one (tied
        weights, views; docs/python.md "Shared storage"): name -> {"of": the stored tensor,
        "offset" (bytes), "shape", "strides" (elements), "dtype", "torch"}. Empty for records
        of version 1 and checkpoints without one."""
        doc = self._json(0)
        return dict(doc.get("aliases", {})) if doc else {}

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


def newest(directory: str) -> str:
    """The prefix of the checkpoint a restore of `directory` starts from: the newest that
    `mpickpt pin` did not set aside, `mpickpt drop` did not retire, that is in the directory (not
    only in the nodes' caches) and whose index and data open; never one older than a pin (the
    pin's error instead, as the restore). Read-only: no lock, no MPI (works while the job that
    owns the directory runs). The C library decides, by the manager's own rule
    (ckpt_newest_restorable). Its checksums are checked when it is read. NotFoundError when there
    is none."""
    return _C.newest(os.fspath(directory))


def _prefix_of(path: str) -> str:
    """A checkpoint prefix, or a checkpoint directory's newest restorable checkpoint."""
    path = os.fspath(path)
    if os.path.isdir(path) and not os.path.exists(path + ".index"):
        return newest(path)
    return path


def open(prefix: str) -> Checkpoint:  # noqa: A001 - the name users know (h5py.File, np.load)
    """A read-only view of the checkpoint at `prefix` (``<dir>/ckpt-3``), or of the newest
    restorable checkpoint of a checkpoint directory (see newest()), without MPI."""
    return Checkpoint(_prefix_of(prefix))


# ---- load without targets ----------------------------------------------------------------------

_KINDS = {"d", "l", "t", "p", "s", "n", "T", "v", "a"}


def _v1_tree(tensors: Dict[str, Dict[str, Any]], replicated: Dict[str, Any],
             per_rank: Optional[Dict[str, Any]], where: str) -> list:
    """The tree of a record of version 1 (or of a checkpoint without one): nested dicts from the
    '/'-joined names (keys unescaped, all str); PerRank around each per-rank leaf."""
    root: Dict[str, Any] = {}
    leaves = []
    for name, t in tensors.items():
        if "/parallel_component_" in name:
            continue
        # a C program's full tensor (one rank wrote it whole) loads whole, as a replicated one
        node = {"replicated": ["n"], "full": ["n"], "component": ["p", ["n"]]}.get(t["kind"])
        if t["kind"] == "partitioned":
            node = ["s", list(t["shape"]), [0] * len(t["shape"])]
        if node is not None:
            leaves.append((name, node))
    leaves += [(n, ["v"]) for n in replicated]
    leaves += [(n, ["p", ["v"]]) for n in (per_rank or {})]
    for name, node in leaves:
        parts = [unescape(p) for p in name.split("/")]
        d = root
        for p in parts[:-1]:
            d = d.setdefault(p, {})
            if not isinstance(d, dict):
                raise CorruptError(f"{where}: '{name}' is inside a leaf")
        if parts[-1] in d:
            raise CorruptError(f"{where}: '{name}' is both a leaf and a subtree")
        d[parts[-1]] = node

    def conv(x: Any) -> list:
        if isinstance(x, dict):
            return ["d", [[k, conv(v)] for k, v in x.items()]]
        return x

    return conv(root)


def _check_tree(node: Any, where: str, depth: int = 0) -> None:
    if not (isinstance(node, list) and node and node[0] in _KINDS) or depth > 200:
        raise CorruptError(f"{where}: the record's tree has a node that is not one: {node!r:.80}")
    k = node[0]
    if k in ("d", "l", "t"):
        if len(node) != 2 or not isinstance(node[1], list):
            raise CorruptError(f"{where}: the record's tree has a bad {k!r} node")
        for item in node[1]:
            if k == "d":
                if not (isinstance(item, list) and len(item) == 2 and
                        type(item[0]) in (str, int)):
                    raise CorruptError(f"{where}: the record's tree has a bad dict item")
                item = item[1]
            _check_tree(item, where, depth + 1)
    elif k == "p":
        if len(node) != 2:
            raise CorruptError(f"{where}: the record's tree has a bad 'p' node")
        _check_tree(node[1], where, depth + 1)
    elif k == "s":
        if len(node) != 3:
            raise CorruptError(f"{where}: the record's tree has a bad 's' node")


def _even(name: str, shape: Tuple[int, ...], rank: int, size: int):
    if not shape:
        raise InvalidArgumentError(f"tensor '{name}' is 0-d: shard='even' splits axis 0")
    n = shape[0]
    lo, hi = rank * n // size, (rank + 1) * n // size
    return (lo,) + (0,) * (len(shape) - 1), (hi - lo,) + tuple(shape[1:])


def _read_record(reader: Any, rank: int, prefix: str, infos: Dict[str, Any]) -> Optional[dict]:
    name = f"{JSON_BLOB}/rank_{rank}"
    info = infos.get(name)
    if info is None:
        return None
    shape = info["shape"]
    if info["dtype"] != _C.UINT8 or len(shape) != 1:
        raise CorruptError(f"{prefix}: the record of plain values of rank {rank} ('{name}') is "
                           "not bytes")
    raw = np.empty(shape[0], dtype=np.uint8)
    reader.read(name, raw, _C.UINT8)
    return load_record(raw.tobytes(), prefix, rank)


@uninterruptible
def load(path: str, comm: Any = None, *, to: Optional[str] = None, shard: Any = None,
         skip_missing_per_rank: bool = False) -> Dict[str, Any]:
    """Loads a checkpoint without targets: its state as a tree of new arrays (the counterpart of
    torch.load and of DCP's load). Collective over `comm` (default MPI.COMM_WORLD).

    path: a checkpoint prefix, or a checkpoint directory (its newest restorable checkpoint, found
    read-only: see newest()). to: "numpy", "torch", or None (each array as it was saved). shard:
    how Shard leaves come back: None, the whole global array on every rank (a plain array);
    "even", this rank's contiguous block along axis 0, as a Shard (so the tree saves back as it
    was); or a callable (name, global_shape, rank, size) -> (offsets, shape) giving a Shard.
    PerRank subtrees hold this rank's values; a rank the writer did not have is NotFoundError,
    or PerRank(None) with skip_missing_per_rank. Tuples come back as tuples, tied tensors
    (aliases) as views of one array. Every array is read by the C library (any number of ranks,
    checksums checked). Plain values come back as Python values (NumPy scalars as Python's)."""
    if to not in (None, "numpy", "torch"):
        raise InvalidArgumentError(f"to={to!r}: use None, 'numpy' or 'torch'")
    if not (shard is None or shard == "even" or callable(shard)):
        raise InvalidArgumentError(f"shard={shard!r}: use None, 'even' or a callable")
    from . import _comm_of  # the package's (its exit hook closes what is left open)

    dup = _comm_of(comm)
    try:
        return _load(dup, path, to, shard, bool(skip_missing_per_rank))
    finally:
        dup.Free()


def _load(comm: Any, path: str, to: Optional[str], shard: Any, skip: bool) -> Dict[str, Any]:
    """load()'s collective part: rank 0 reads the header, the tensor list and its record (one
    agreement and a broadcast), then every rank reads its own record, builds its tree of new
    arrays and registers them with a saver (one agreement), and the C restore fills them."""
    def first() -> Any:
        if comm.rank != 0:
            return None
        prefix = _prefix_of(path)
        r = _C.Reader(prefix)
        try:
            header = r.header()
            infos = {t["name"]: t for t in r.tensors()}
            rec = _read_record(r, 0, prefix, infos)
        finally:
            r.close()
        return prefix, header, infos, rec

    prefix, header, infos, rec0 = comm.bcast(collective(comm, first), root=0)
    tree = _LoadTree(comm, prefix, int(header["world_size"]), infos, rec0, to, shard, skip)
    saver = _C.Saver(comm, layout=_C.LAYOUT_DEFAULT, async_save=False)
    try:
        state = collective(comm, lambda: tree.build_and_register(saver))
        # not strict: a C program's registered savers (blobs) are in the checkpoint and not
        # loaded; every array registered here comes from the checkpoint's own list, so one it
        # lacks is a damaged record (the same lists on every rank)
        info = saver.restore(prefix, skip_missing_per_rank=skip, strict=False)
        lost = [n for n in info.get("missing", []) if not n.startswith(RESERVED + "/")]
        if lost:
            raise CorruptError(f"{prefix}: the record of plain values names arrays the "
                               f"checkpoint does not hold: {', '.join(map(repr, lost[:8]))}"
                               + (f" and {len(lost) - 8} more" if len(lost) > 8 else ""))
    finally:
        saver.close()
    return state


class _LoadTree:
    """One rank's tree of new arrays for load(), from the checkpoint's records: rank 0's
    (replicated values, the tree, aliases) and this rank's own (per-rank values). Local."""

    def __init__(self, comm: Any, prefix: str, writers: int, infos: Dict[str, Any],
                 rec0: Optional[dict], to: Optional[str], shard: Any, skip: bool) -> None:
        self.rank, self.size = comm.rank, comm.size
        self.prefix, self.writers, self.infos, self.rec0 = prefix, writers, infos, rec0
        self.to, self.shard, self.skip = to, shard, skip
        self.v2 = rec0 is not None and rec0.get("mpickpt_json", 1) >= 2
        self.missing = self.rank >= writers
        self.own_values: Optional[Dict[str, Any]] = None
        self.replicated: Dict[str, Any] = rec0["replicated"] if rec0 else {}
        self.arrays: Dict[str, Any] = {}
        self.regs: List[Tuple[str, Any, int, Any]] = []  # (tensor name, view, code, kind)

    def own_record(self) -> Optional[dict]:
        """This rank's record of plain values (rank 0's is read already); None when it has
        none."""
        if self.rank == 0:
            return self.rec0
        if self.missing or self.rec0 is None:
            return None
        if self.v2 and not _has_per_rank(self.rec0["tree"]):
            return None
        r = _C.Reader(self.prefix)
        try:
            return _read_record(r, self.rank, self.prefix, self.infos)
        finally:
            r.close()

    def build_and_register(self, saver: Any) -> Dict[str, Any]:
        """The tree of new arrays, each registered with `saver` for the restore to fill."""
        rec0, prefix = self.rec0, self.prefix
        mine = self.own_record()
        if self.v2:
            tree = (mine if mine is not None else rec0)["tree"]
        else:
            tree = _v1_tree(self.infos, self.replicated,
                            mine["per_rank"] if mine is not None else None, prefix)
        _check_tree(tree, prefix)
        if tree[0] != "d":
            raise CorruptError(f"{prefix}: the record's tree is not a dict")
        self.own_values = mine["per_rank"] if mine is not None else None
        aliases = dict(rec0.get("aliases", {})) if rec0 else {}
        if mine is not None and mine is not rec0:
            aliases.update(mine.get("aliases", {}))
        state = _resolve_aliases(self.visit(tree, "", False), self.arrays, aliases, prefix)
        for name, view, code, kind in self.regs:
            if kind[0] == "slice":
                saver.add_slice(name, view, code, kind[1], kind[2], kind[3])
            else:
                saver.add_replicated(name, view, code, kind[1], kind[0] == "component")
        return state

    def tensor_info(self, tname: str) -> Dict[str, Any]:
        info = self.infos.get(tname)
        if info is None:
            raise not_found(f"tensor '{tname}' is not in {self.prefix}", "no_tensor")
        return info

    @staticmethod
    def alloc(code: int, shape: Sequence[int], as_torch: bool, name: str) -> Any:
        if as_torch:
            torch = _tree._torch_module()
            tdt = {v: k for k, v in _tree._TORCH_CODES.items()}.get(code)
            if tdt is None:
                raise InvalidArgumentError(f"tensor '{name}': {CODE_NAMES[code]} has no "
                                           "PyTorch dtype mpickpt uses; load it with "
                                           "to='numpy'")
            return torch.empty(tuple(shape), dtype=tdt)
        return np.empty(tuple(shape), dtype=CODE_NUMPY[code])

    def per_rank_missing(self) -> bool:
        if not self.missing:
            return False
        if self.skip:
            return True
        raise not_found(f"{self.prefix} was written by {self.writers} ranks: rank "
                        f"{self.rank} has no per-rank values in it (load with "
                        "skip_missing_per_rank=True to get PerRank(None))", "no_tensor")

    def visit(self, node: list, name: str, per_rank: bool) -> Any:
        k = node[0]
        if k == "d":
            return {key: self.visit(child, f"{name}/{_tree._escape(key)}" if name else
                                    _tree._escape(key), per_rank)
                    for key, child in node[1]}
        if k in ("l", "t"):
            items = [self.visit(c, f"{name}/{i}" if name else str(i), per_rank)
                     for i, c in enumerate(node[1])]
            return tuple(items) if k == "t" else items
        if k == "p":
            if self.per_rank_missing():
                return PerRank(None)
            return PerRank(self.visit(node[1], name, True))
        if k == "v":
            table = self.own_values if per_rank else self.replicated
            if table is None or name not in table:
                raise not_found(f"the plain value '{name}' is not in {self.prefix}",
                                "no_tensor")
            return table[name]
        if k == "a":
            return _Alias(name)
        if k == "s":
            return self.shard_leaf(name)
        return self.tensor_leaf(name, k, per_rank)  # "n" / "T"

    def shard_leaf(self, name: str) -> Any:
        info = self.tensor_info(name)
        gshape = tuple(info["shape"])
        if self.shard is None:
            offsets, shp = (0,) * len(gshape), gshape
        else:
            fn = _even if self.shard == "even" else self.shard
            offsets, shp = fn(name, gshape, self.rank, self.size)
            offsets, shp = tuple(int(o) for o in offsets), tuple(int(d) for d in shp)
        a = self.alloc(info["dtype"], shp, self.to == "torch", name)
        view = _tree.array_view(a, name)[0]  # bfloat16 as uint16 bits: the file's code
        self.regs.append((name, view, info["dtype"], ("slice", gshape, offsets, shp)))
        self.arrays[name] = a
        return a if self.shard is None else Shard(a, gshape, offsets)

    def tensor_leaf(self, name: str, kind: str, per_rank: bool) -> Any:
        tname = (name if not per_rank or self.rank == 0 else
                 f"{name}/parallel_component_{self.rank}")
        info = self.tensor_info(tname)
        as_torch = self.to == "torch" or (self.to is None and kind == "T")
        a = self.alloc(info["dtype"], info["shape"], as_torch, name)
        view, _, shape = _tree.array_view(a, name)
        self.regs.append((name, view, info["dtype"],
                          ("component" if per_rank else "replicated", shape)))
        self.arrays[name] = a
        return a


class _Alias:
    __slots__ = ("name",)

    def __init__(self, name: str) -> None:
        self.name = name


def _has_per_rank(node: Any) -> bool:
    if not isinstance(node, list) or not node:
        return False
    if node[0] == "p":
        return True
    if node[0] == "d":
        return any(_has_per_rank(item[1]) for item in node[1] if isinstance(item, list) and
                   len(item) == 2)
    if node[0] in ("l", "t"):
        return any(_has_per_rank(c) for c in node[1])
    return False


def _resolve_aliases(node: Any, arrays: Dict[str, Any], aliases: Dict[str, dict],
                     where: str) -> Any:
    """The tree with each alias placeholder replaced by a view of its target's array."""
    if isinstance(node, _Alias):
        a = aliases.get(node.name)
        if a is None or a["of"] not in arrays:
            raise CorruptError(f"{where}: '{node.name}' is an alias of "
                               f"{a['of'] if a else 'nothing'!r}, not of a stored array")
        return alias_view(arrays[a["of"]], a)
    if isinstance(node, dict):
        return {k: _resolve_aliases(v, arrays, aliases, where) for k, v in node.items()}
    if isinstance(node, list):
        return [_resolve_aliases(v, arrays, aliases, where) for v in node]
    if isinstance(node, tuple):
        return tuple(_resolve_aliases(v, arrays, aliases, where) for v in node)
    if isinstance(node, PerRank):
        node.value = _resolve_aliases(node.value, arrays, aliases, where)
        return node
    return node
