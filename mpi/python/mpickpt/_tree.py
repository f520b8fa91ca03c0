"""State trees: nested dicts, lists and tuples (a PyTorch ``state_dict()``, an optimizer's state)
flattened to names joined by ``/``.

Leaves are arrays (NumPy arrays, PyTorch CPU tensors), stored zero-copy, or plain values (None,
bool, int, float, str), stored as JSON, never pickle. ``PerRank`` and ``Shard`` wrappers say how
an array (or a subtree) is spread over the ranks.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Iterator, List, Optional, Sequence, Tuple

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


@dataclass
class Leaf:
    name: str
    value: Any          # the array, or the plain value
    parent: Any         # the container holding it (to put restored plain values back)
    key: Any            # its key or index in parent
    per_rank: bool
    shard: Optional[Shard] = None

    @property
    def is_array(self) -> bool:
        return self.shard is not None or is_array(self.value)


_PLAIN = (type(None), bool, int, float, str)


def flatten(state: Any) -> List[Leaf]:
    """Every leaf of `state` in a fixed order (dict insertion order, then list order)."""
    if not isinstance(state, dict):
        raise _C.InvalidArgumentError(
            f"a state is a dict (of arrays, dicts, lists and plain values), not a "
            f"{type(state).__name__}")
    if RESERVED in state:
        raise _C.InvalidArgumentError(f"the key '{RESERVED}' is mpickpt's own")
    out: List[Leaf] = []
    seen = set()

    def visit(node: Any, name: str, parent: Any, key: Any, per_rank: bool) -> None:
        if isinstance(node, PerRank):
            if per_rank:
                raise _C.InvalidArgumentError(f"'{name}': PerRank inside PerRank")
            # the wrapper's slot holds the value: restored plain values go back into it
            visit(node.value, name, node, "value", True)
            return
        if isinstance(node, Shard):
            if per_rank:
                raise _C.InvalidArgumentError(f"'{name}': a Shard inside PerRank")
            add(Leaf(name, node.local, parent, key, False, node))
            return
        if isinstance(node, dict):
            for k, v in node.items():
                visit(v, f"{name}/{_escape(k)}" if name else _escape(k), node, k, per_rank)
            return
        if isinstance(node, (list, tuple)):
            for i, v in enumerate(node):
                visit(v, f"{name}/{i}" if name else str(i), node, i, per_rank)
            return
        if is_array(node):
            add(Leaf(name, node, parent, key, per_rank))
            return
        if isinstance(node, np.generic):  # a NumPy scalar: its Python value
            node = node.item()
        if isinstance(node, _PLAIN):
            add(Leaf(name, node, parent, key, per_rank))
            return
        raise _C.InvalidArgumentError(
            f"'{name}': a {type(node).__name__} is neither an array nor a plain value (None, "
            "bool, int, float, str, and dicts/lists of them); mpickpt never pickles")

    def add(leaf: Leaf) -> None:
        if not leaf.name:
            raise _C.InvalidArgumentError("an empty key makes an empty name")
        if leaf.name in seen:
            raise _C.InvalidArgumentError(
                f"two keys make the name '{leaf.name}' (keys are joined by '/'; str() of "
                "different keys must differ)")
        seen.add(leaf.name)
        out.append(leaf)

    visit(state, "", None, None, False)
    return out


def _same(a: Any, b: Any) -> bool:
    return a == b or (isinstance(a, float) and isinstance(b, float) and math.isnan(a)
                      and math.isnan(b))


def check_put_back(leaf: Leaf, value: Any) -> None:
    """Raises when `value` cannot be put back where `leaf` was (a tuple cannot change)."""
    if isinstance(leaf.parent, tuple) and not _same(leaf.parent[leaf.key], value):
        raise _C.MismatchError(
            f"'{leaf.name}' lives in a tuple, which cannot be updated in place (it holds "
            f"{leaf.parent[leaf.key]!r}, the checkpoint {value!r}); use a list")


def put_back(leaf: Leaf, value: Any) -> None:
    """Restores a plain value into its container (dicts, lists, the PerRank wrapper)."""
    if isinstance(leaf.parent, tuple):
        return  # checked equal by check_put_back
    if isinstance(leaf.parent, PerRank):
        leaf.parent.value = value
        return
    leaf.parent[leaf.key] = value


def iter_json(leaves: List[Leaf]) -> Iterator[Leaf]:
    return (leaf for leaf in leaves if not leaf.is_array)

