"""State trees: nested dicts, lists and tuples (a PyTorch ``state_dict()``, an optimizer's state)
flattened to names joined by ``/``.

Leaves are arrays (NumPy arrays, PyTorch CPU tensors), stored zero-copy, or plain values (None,
bool, int, float, str), stored as JSON, never pickle. Arrays that share memory (tied weights,
views) are stored once: see find_aliases. ``PerRank`` and ``Shard`` wrappers say how
an array (or a subtree) is spread over the ranks.
"""
from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Any, Dict, Iterator, List, Optional, Sequence, Tuple

import numpy as np

from . import _mpickpt as _C

# Names the package keeps for itself: a state may not use them at its top level.
RESERVED = "__mpickpt__"
JSON_BLOB = RESERVED + "/json"


class PerRank:
    """A value that differs from rank to rank (an RNG state, a data-loader position).

    Arrays inside are stored once per rank (rank r's as ``<name>/parallel_component_<r>``) and
    restored to the same rank; plain values are stored in the rank's own JSON. On another number
    of ranks a rank the writer did not have is an error, unless the manager was created with
    ``skip_missing_per_rank=True`` (then its values are left as they are)."""

    __slots__ = ("value",)

    def __init__(self, value: Any) -> None:
        self.value = value

    def __repr__(self) -> str:
        return f"PerRank({self.value!r})"


class Shard:
    """This rank's block of a partitioned array: ``local`` holds the box of the global array of
    shape ``global_shape`` that starts at ``offsets``. The blocks of all ranks must tile the global
    array; a checkpoint restores onto any number of ranks with any other tiling (N -> M)."""

    __slots__ = ("local", "global_shape", "offsets")

    def __init__(self, local: Any, global_shape: Sequence[int], offsets: Sequence[int]) -> None:
        self.local = local
        self.global_shape = tuple(int(d) for d in global_shape)
        self.offsets = tuple(int(o) for o in offsets)
        if len(self.global_shape) != len(self.offsets):
            raise _C.InvalidArgumentError(
                f"Shard: global_shape {self.global_shape} and offsets {self.offsets} differ in "
                "length")

    def __repr__(self) -> str:
        return f"Shard(<{type(self.local).__name__}>, {self.global_shape}, {self.offsets})"


# ---- arrays ------------------------------------------------------------------------------------

_NUMPY_CODES = {
    np.dtype(np.float16): _C.FLOAT16, np.dtype(np.float32): _C.FLOAT32,
    np.dtype(np.float64): _C.FLOAT64, np.dtype(np.int8): _C.INT8, np.dtype(np.int16): _C.INT16,
    np.dtype(np.int32): _C.INT32, np.dtype(np.int64): _C.INT64, np.dtype(np.uint8): _C.UINT8,
    np.dtype(np.uint16): _C.UINT16, np.dtype(np.uint32): _C.UINT32,
    np.dtype(np.uint64): _C.UINT64, np.dtype(np.bool_): _C.BOOL,
}
CODE_NAMES = {
    _C.FLOAT16: "float16", _C.BFLOAT16: "bfloat16", _C.FLOAT32: "float32",
    _C.FLOAT64: "float64", _C.INT8: "int8", _C.INT16: "int16", _C.INT32: "int32",
    _C.INT64: "int64", _C.UINT8: "uint8", _C.UINT16: "uint16", _C.UINT32: "uint32",
    _C.UINT64: "uint64", _C.BOOL: "bool",
}
# NumPy dtype that holds a code's bytes (bfloat16: its bits, as uint16).
CODE_NUMPY = {code: np.dtype(name) for code, name in CODE_NAMES.items() if name != "bfloat16"}
CODE_NUMPY[_C.BFLOAT16] = np.dtype(np.uint16)

_torch = None
_TORCH_CODES: dict = {}


def _torch_module():
    """PyTorch, imported only when a tensor is met (NumPy-only programs never import it)."""
    global _torch, _TORCH_CODES
    if _torch is None:
        import torch

        _torch = torch
        _TORCH_CODES = {
            torch.float16: _C.FLOAT16, torch.bfloat16: _C.BFLOAT16, torch.float32: _C.FLOAT32,
            torch.float64: _C.FLOAT64, torch.int8: _C.INT8, torch.int16: _C.INT16,
            torch.int32: _C.INT32, torch.int64: _C.INT64, torch.uint8: _C.UINT8,
            torch.bool: _C.BOOL,
        }
    return _torch


def is_tensor(x: Any) -> bool:
    return type(x).__module__.startswith("torch") and hasattr(x, "data_ptr")


def is_array(x: Any) -> bool:
    return isinstance(x, np.ndarray) or is_tensor(x)


def array_view(x: Any, name: str) -> Tuple[np.ndarray, int, Tuple[int, ...]]:
    """(a NumPy array sharing x's memory, dtype code, shape) for an array leaf; a clear error
    naming the key when it cannot be stored zero-copy."""
    if isinstance(x, np.ndarray):
        code = _NUMPY_CODES.get(x.dtype)
        if code is None:
            raise _C.InvalidArgumentError(
                f"tensor '{name}': NumPy dtype {x.dtype} is not one mpickpt stores")
        if not x.flags.c_contiguous:
            raise _C.InvalidArgumentError(
                f"tensor '{name}': the array is not C-contiguous; pass "
                "numpy.ascontiguousarray(...) (a copy) or a contiguous array")
        if not x.flags.writeable:
            raise _C.InvalidArgumentError(
                f"tensor '{name}': the array is read-only; restore writes into it in place")
        return x, code, tuple(x.shape)
    torch = _torch_module()
    if not isinstance(x, torch.Tensor):
        raise _C.InvalidArgumentError(f"'{name}': {type(x).__name__} is not an array")
    code = _TORCH_CODES.get(x.dtype)
    if code is None:
        raise _C.InvalidArgumentError(
            f"tensor '{name}': PyTorch dtype {x.dtype} is not one mpickpt stores")
    if x.device.type != "cpu":
        raise _C.InvalidArgumentError(
            f"tensor '{name}' is on {x.device}; mpickpt reads and writes CPU memory (move it "
            "with .cpu() and copy it back after a restore)")
    if x.layout != torch.strided:
        raise _C.InvalidArgumentError(f"tensor '{name}': layout {x.layout} is not supported")
    if not x.is_contiguous():
        raise _C.InvalidArgumentError(
            f"tensor '{name}' is not contiguous; pass tensor.contiguous() (a copy), or keep "
            "contiguous tensors in the state")
    t = x.detach()
    # NumPy has no bfloat16: its bits travel as int16, the dtype code says what they are
    view = t.view(torch.int16).numpy() if x.dtype == torch.bfloat16 else t.numpy()
    return view, code, tuple(x.shape)


# ---- walking a tree ----------------------------------------------------------------------------

def _escape(key: Any) -> str:
    s = str(key)
    return s.replace("%", "%25").replace("/", "%2F")


def unescape(part: str) -> str:
    """The key a name's part was made of (the inverse of the escaping of '/' and '%')."""
    return re.sub("%(2F|25)", lambda m: "/" if m.group(1) == "2F" else "%", part)


@dataclass
class Leaf:
    name: str
    value: Any          # the array, or the plain value
    parent: Any         # the container holding it (to put restored plain values back)
    key: Any            # its key or index in parent
    per_rank: bool
    shard: Optional[Shard] = None
    node: Optional[list] = None     # its node of the record's tree (["n"], ["T"], ["v"], ...)
    np_type: Any = None             # a NumPy scalar's type: restored as that type again
    alias: Optional[dict] = None    # set when it shares memory with another leaf (see aliases)

    @property
    def is_array(self) -> bool:
        return self.shard is not None or is_array(self.value)


@dataclass
class TupleRef:
    """A tuple of the state: restore rebuilds it (tuples cannot change) and puts the new one where
    this one was."""
    obj: tuple
    parent: Any
    key: Any
    name: str


@dataclass
class Flat:
    leaves: List[Leaf]
    tree: list                      # the record's NODE of the whole state
    tuples: List[TupleRef]          # in pre-order: parents before the tuples they hold


_PLAIN = (type(None), bool, int, float, str)

# Nesting of a state: each level of containers is three levels of JSON in the record's tree
# (["d", [[key, NODE], ...]]); _state.MAX_JSON_DEPTH bounds the record.
MAX_STATE_DEPTH = 150


def _key_ok(key: Any) -> bool:
    return type(key) is str or type(key) is int


def flatten_tree(state: Any) -> Flat:
    """Every leaf of `state` in a fixed order (dict insertion order, then list order), the
    record's tree of it, and its tuples."""
    if not isinstance(state, dict):
        raise _C.InvalidArgumentError(
            f"a state is a dict (of arrays, dicts, lists and plain values), not a "
            f"{type(state).__name__}")
    if RESERVED in state:
        raise _C.InvalidArgumentError(f"the key '{RESERVED}' is mpickpt's own")
    out: List[Leaf] = []
    tuples: List[TupleRef] = []
    seen = set()

    def visit(node: Any, name: str, parent: Any, key: Any, per_rank: bool, depth: int) -> list:
        if depth > MAX_STATE_DEPTH:
            raise _C.InvalidArgumentError(
                f"'{name}': the state is nested more than {MAX_STATE_DEPTH} deep")
        if isinstance(node, PerRank):
            if per_rank:
                raise _C.InvalidArgumentError(f"'{name}': PerRank inside PerRank")
            # the wrapper's slot holds the value: restored plain values go back into it
            return ["p", visit(node.value, name, node, "value", True, depth + 1)]
        if isinstance(node, Shard):
            if per_rank:
                raise _C.InvalidArgumentError(f"'{name}': a Shard inside PerRank")
            n = ["s", list(node.global_shape), list(node.offsets)]
            add(Leaf(name, node.local, parent, key, False, node, n))
            return n
        if isinstance(node, dict):
            items = []
            for k, v in node.items():
                child = f"{name}/{_escape(k)}" if name else _escape(k)
                if not _key_ok(k):
                    raise _C.InvalidArgumentError(
                        f"'{child}': the key {k!r} is a {type(k).__name__}; keys are str or int "
                        "(a load without targets could not rebuild it)")
                items.append([k, visit(v, child, node, k, per_rank, depth + 1)])
            return ["d", items]
        if isinstance(node, (list, tuple)):
            if isinstance(node, tuple):
                if type(node) is not tuple and not hasattr(node, "_make"):
                    raise _C.InvalidArgumentError(
                        f"'{name}': a {type(node).__name__} (a tuple subclass) cannot be "
                        "rebuilt; pass a tuple or a namedtuple")
                tuples.append(TupleRef(node, parent, key, name))
            items = [visit(v, f"{name}/{i}" if name else str(i), node, i, per_rank, depth + 1)
                     for i, v in enumerate(node)]
            return ["t" if isinstance(node, tuple) else "l", items]
        if is_array(node):
            n = ["T"] if is_tensor(node) else ["n"]
            add(Leaf(name, node, parent, key, per_rank, None, n))
            return n
        np_type = None
        if isinstance(node, np.generic):  # a NumPy scalar: its Python value
            np_type = type(node)
            node = node.item()
        if isinstance(node, _PLAIN):
            n = ["v"]
            add(Leaf(name, node, parent, key, per_rank, None, n, np_type))
            return n
        raise _C.InvalidArgumentError(
            f"'{name}': a {type(node).__name__} is neither an array nor a plain value (None, "
            "bool, int, float, str, and dicts/lists/tuples of them); mpickpt never pickles")

    def add(leaf: Leaf) -> None:
        if not leaf.name:
            raise _C.InvalidArgumentError("an empty key makes an empty name")
        if leaf.name in seen:
            raise _C.InvalidArgumentError(
                f"two keys make the name '{leaf.name}' (keys are joined by '/'; str() of "
                "different keys must differ)")
        seen.add(leaf.name)
        out.append(leaf)

    tree = visit(state, "", None, None, False, 0)
    return Flat(out, tree, tuples)


def flatten(state: Any) -> List[Leaf]:
    """Every leaf of `state` in a fixed order (dict insertion order, then list order)."""
    return flatten_tree(state).leaves


def _same(a: Any, b: Any) -> bool:
    if type(a) is not type(b):
        return False
    return a == b or (isinstance(a, float) and math.isnan(a) and math.isnan(b))


def restored_value(leaf: Leaf, value: Any) -> Any:
    """The value to put back: a NumPy scalar's type again when the checkpoint's value is exactly
    one of that type (np.float32(1.5) saved as 1.5 comes back as np.float32(1.5))."""
    if leaf.np_type is None or isinstance(value, str) or value is None:
        return value
    try:
        v = leaf.np_type(value)
    except (TypeError, ValueError, OverflowError):
        return value
    return v if _same(v.item(), value) else value


def put_back_all(flat: Flat, updates: List[Tuple[Leaf, Any]]) -> None:
    """Restores plain values into their containers (dicts, lists, PerRank wrappers) and rebuilds
    the tuples that hold changed values: a new tuple (of the same namedtuple type) goes where the
    old one was, recursively up to the first mutable container. Arrays in tuples stay the same
    objects (restored in place)."""
    items: dict = {}  # id(tuple) -> its new items

    def place(parent: Any, key: Any, value: Any) -> None:
        if isinstance(parent, tuple):
            items.setdefault(id(parent), list(parent))[key] = value
        elif isinstance(parent, PerRank):
            parent.value = value
        else:
            parent[key] = value

    for leaf, value in updates:
        place(leaf.parent, leaf.key, restored_value(leaf, value))
    for ref in reversed(flat.tuples):  # children before the tuples that hold them
        new = items.get(id(ref.obj))
        if new is None or all(a is b for a, b in zip(new, ref.obj)):
            continue
        t = type(ref.obj)
        place(ref.parent, ref.key, tuple(new) if t is tuple else t._make(new))


def put_back(leaf: Leaf, value: Any) -> None:
    """Restores one plain value into a mutable container (not a tuple: see put_back_all)."""
    if isinstance(leaf.parent, PerRank):
        leaf.parent.value = value
        return
    leaf.parent[leaf.key] = value


def iter_json(leaves: List[Leaf]) -> Iterator[Leaf]:
    return (leaf for leaf in leaves if not leaf.is_array)



# ---- shared memory: tied weights and views -----------------------------------------------------

def _extent(x: Any) -> Optional[Tuple[Any, int, int, int, Tuple[int, ...], Tuple[int, ...], int]]:
    """(code, start, lo, hi, shape, strides in elements, itemsize) of an array's memory, or None
    when it has no element or a dtype mpickpt does not store. start: the address of element 0;
    [lo, hi): the bytes its elements span."""
    if isinstance(x, np.ndarray):
        code = _NUMPY_CODES.get(x.dtype)
        if code is None or x.size == 0:
            return None
        start = x.__array_interface__["data"][0]
        item = x.itemsize
        if x.strides and any(s % item for s in x.strides):
            return None
        strides = tuple(s // item for s in x.strides)
    else:
        torch = _torch_module()
        if not isinstance(x, torch.Tensor) or not x.is_cpu or x.layout != torch.strided:
            return None
        code = _TORCH_CODES.get(x.dtype)
        if code is None:
            return None
        item = x.element_size()
        start = x.data_ptr()
        strides = x.stride()
    shape = tuple(x.shape)
    if 0 in shape:
        return None
    lo = hi = start
    for n, s in zip(shape, strides):
        if s < 0:
            lo += (n - 1) * s * item
        else:
            hi += (n - 1) * s * item
    return code, start, lo, hi + item, shape, tuple(strides), item


def _contiguous(x: Any) -> bool:
    return x.flags.c_contiguous if isinstance(x, np.ndarray) else x.is_contiguous()


def find_aliases(leaves: List[Leaf]) -> Dict[str, dict]:
    """Array leaves that share memory with another leaf of the same kind (replicated, or this
    rank's PerRank): an alias is a leaf whose elements all lie inside a contiguous leaf of the
    same dtype and library (NumPy or torch), at a whole number of elements from its start; it is
    recorded as {"of": target, "offset": bytes, "shape", "strides" (elements), "dtype", "torch"}
    and not stored. Exact ties (same start, shape, strides) alias the first leaf in the state's
    order. The target is the largest such leaf (the first of equals); targets are never aliases.
    Leaves that overlap without one containing the other (partial overlaps) are stored each.
    Sets leaf.alias and turns its tree node into ["a"]. Local; the same memory layout gives the
    same answer on every rank."""
    ext = []
    for order, leaf in enumerate(leaves):
        if leaf.shard is not None or not is_array(leaf.value):
            continue
        e = _extent(leaf.value)
        if e is not None:
            ext.append((e[2], e[3], order, leaf, e))
    if len(ext) < 2:
        return {}
    # clusters of overlapping byte ranges: almost always single leaves
    ext.sort(key=lambda t: (t[0], -t[1], t[2]))
    clusters, cur, end = [], [], -1
    for item in ext:
        if cur and item[0] < end:
            cur.append(item)
            end = max(end, item[1])
        else:
            if len(cur) > 1:
                clusters.append(cur)
            cur, end = [item], item[1]
    if len(cur) > 1:
        clusters.append(cur)
    out: Dict[str, dict] = {}
    for cl in clusters:
        for lo, hi, order, leaf, e in cl:
            code, start, _, _, shape, strides, item = e
            best = None
            for tlo, thi, torder, target, te in cl:
                if target is leaf or target.per_rank != leaf.per_rank or te[0] != code or \
                        is_tensor(target.value) != is_tensor(leaf.value) or \
                        not _contiguous(target.value):
                    continue
                if not (tlo <= lo and hi <= thi) or (start - te[1]) % item:
                    continue
                if (tlo, thi) == (lo, hi) and torder > order and _contiguous(leaf.value):
                    continue  # an equal range later in the order: this leaf is its target
                key = (-(thi - tlo), torder)
                if best is None or key < best[0]:
                    best = (key, target, te)
            if best is None:
                continue
            _, target, te = best
            leaf.alias = {"of": target.name, "offset": start - te[1], "shape": list(shape),
                          "strides": list(strides), "dtype": CODE_NAMES[code],
                          "torch": is_tensor(leaf.value)}
            out[leaf.name] = leaf.alias
    # a chosen target that is an alias itself (equal ranges of a non-contiguous leaf): none are,
    # since targets are contiguous and the largest first of equals; checked anyway
    for name, a in list(out.items()):
        if a["of"] in out:
            raise AssertionError(f"alias '{name}' of the alias '{a['of']}'")
    for leaf in leaves:
        if leaf.alias is not None:
            leaf.node[0] = "a"
            del leaf.node[1:]
    return out


def alias_view(target: Any, alias: dict) -> Any:
    """A view of `target`'s memory as `alias` describes it (as_strided), NumPy or torch as the
    target."""
    if is_tensor(target):
        torch = _torch_module()
        item = target.element_size()
        return torch.as_strided(target.detach(), alias["shape"], alias["strides"],
                                target.storage_offset() + alias["offset"] // item)
    item = target.itemsize
    flat = target.reshape(-1)
    base = flat[alias["offset"] // item:]
    return np.lib.stride_tricks.as_strided(
        base, shape=alias["shape"], strides=[s * item for s in alias["strides"]])


def not_found(msg: str, reason: Optional[str]) -> BaseException:
    """A NotFoundError whose `reason` says which kind of "not found" it is (the C library's
    ckpt_error.reason: NotFoundError.NO_TENSOR, NO_CHECKPOINT, PINNED, NO_METRICS)."""
    err = _C.NotFoundError(msg)
    err.reason = reason
    return err
