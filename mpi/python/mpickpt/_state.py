"""Registering a state tree with a saver, and putting restored plain values back.

Every collective call is preceded by an agreement: a rank whose local preparation failed (a
non-contiguous tensor, an unsupported leaf) makes every rank raise the same error, instead of the
others entering a collective it will never join. For the same reason a KeyboardInterrupt is held
back until a collective call is over (uninterruptible).
"""
from __future__ import annotations

import contextlib
import functools
import json
import re
import signal
import threading
from typing import Any, Callable, Dict, Iterator, List, Optional, Tuple, TypeVar

from . import _mpickpt as _C
from ._tree import JSON_BLOB, Leaf, array_view, check_put_back, flatten, iter_json, put_back

T = TypeVar("T")

_ERRORS = {cls.__name__: cls for cls in (
    _C.Error, _C.NotFoundError, _C.CorruptError, _C.MismatchError, _C.NoSpaceError,
    _C.InvalidArgumentError, _C.VersionError, _C.ExistsError, _C.TimeoutError, _C.BusyError,
    _C.MPIError)}


@contextlib.contextmanager
def deferred_interrupts() -> Iterator[None]:
    """Holds SIGINT back while the block runs, then hands it to the handler that was installed
    (KeyboardInterrupt by default). A rank that left a collective call half-way, between two of
    its collectives or before the C call, would leave the others waiting in it forever; the C call
    itself is never cut (the signal only sets a flag while it runs). Only the main thread of the
    main interpreter receives Python signal handlers: elsewhere this does nothing."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    pending: List[int] = []
    try:
        previous = signal.getsignal(signal.SIGINT)
        if previous is None:  # installed outside Python: leave it alone
            raise ValueError
        signal.signal(signal.SIGINT, lambda signum, frame: pending.append(signum))
    except ValueError:
        yield
        return
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)
        if pending:
            signal.raise_signal(signal.SIGINT)


def uninterruptible(fn: Callable[..., T]) -> Callable[..., T]:
    """Decorates a collective method: a KeyboardInterrupt waits until it returned."""
    @functools.wraps(fn)
    def wrapper(*args: Any, **kw: Any) -> T:
        with deferred_interrupts():
            return fn(*args, **kw)

    return wrapper


# A message that already names the rank it comes from: the C library's agreed errors ("rank 2
# (host h): ...") and this module's own ("rank 2: ..."), met again by a later agreement.
_RANK_PREFIX = re.compile(r"rank \d+(?: \(host [^)]*\))?: ")


def agree(comm: Any, exc: Optional[BaseException]) -> None:
    """Collective over comm: returns when no rank failed; otherwise every rank raises the same
    mpickpt error, with the message of the lowest failing rank (prefixed with it, unless the
    message names its rank already: an error agreed on before, by C or here, keeps the rank
    that failed first, once)."""
    from mpi4py import MPI

    failed = comm.allreduce(0 if exc is None else 1, op=MPI.SUM)
    if not failed:
        return
    lowest = comm.allreduce(comm.rank if exc is not None else comm.size, op=MPI.MIN)
    payload = None
    if comm.rank == lowest:
        name = type(exc).__name__
        if name not in _ERRORS:
            name = "InvalidArgumentError" if isinstance(exc, (ValueError, TypeError)) else "Error"
        text = str(exc)
        payload = (name, text if _RANK_PREFIX.match(text) else f"rank {lowest}: {text}")
    name, msg = comm.bcast(payload, root=lowest)
    err = _ERRORS[name](msg)
    if exc is not None and comm.rank == lowest:
        raise err from exc
    raise err


def collective(comm: Any, local: Callable[[], T]) -> T:
    """Runs `local` on every rank, then agrees on its outcome (see agree)."""
    try:
        result = local()
    except (KeyboardInterrupt, SystemExit):
        raise
    except BaseException as e:  # noqa: BLE001 - any local failure must reach every rank
        agree(comm, e)
        raise AssertionError("unreachable")
    agree(comm, None)
    return result


class Registered:
    """What a saver holds for one state tree: its leaves, and the signature that tells whether the
    next save or restore can reuse the registrations (and the saver's cached plan)."""

    def __init__(self) -> None:
        self.signature: Optional[Tuple] = None
        self.leaves: List[Leaf] = []
        self.views: List[Any] = []  # keeps the NumPy views alive (the saver holds them too)
        self.has_blob = False  # the record of plain values is registered

    def prepare(self, saver: Any, state: Any, restore_rank: Optional[int] = None) -> List[Leaf]:
        """Flattens `state` and (re)registers it with `saver` when its layout or buffers changed.
        Local; raises on a bad leaf before anything is registered.

        A save registers this rank's record of plain values everywhere. A restore (restore_rank:
        this rank) registers it only where it is read: on rank 0 when the state has plain values
        (the replicated ones are broadcast from there) and on a rank with PerRank plain values.
        The record is per-rank data: registered on a rank the writer did not have, it would make
        every restore onto more ranks fail, even of a state of shards and replicated values."""
        leaves = flatten(state)
        if restore_rank is None:
            blob = True
        else:
            plain = [leaf for leaf in leaves if not leaf.is_array]
            # rank 0 reads its record even without plain values: a strict restore reports the
            # checkpoint's plain values the state lacks (C skips the record when it is absent)
            blob = any(leaf.per_rank for leaf in plain) or restore_rank == 0
        arrays = []
        sig = []
        for leaf in leaves:
            if not leaf.is_array:
                sig.append((leaf.name, "json", leaf.per_rank))
                continue
            view, code, shape = array_view(leaf.value, leaf.name)
            if leaf.shard is not None:
                sh = leaf.shard
                if len(sh.global_shape) != len(shape):
                    raise _C.InvalidArgumentError(
                        f"tensor '{leaf.name}': a {len(shape)}-d block of a "
                        f"{len(sh.global_shape)}-d global shape")
                kind = ("slice", sh.global_shape, sh.offsets)
            else:
                kind = ("component" if leaf.per_rank else "replicated",)
            arrays.append((leaf, view, code, shape, kind))
            sig.append((leaf.name, kind, code, shape, view.__array_interface__["data"][0]))
        sig.append(("record of plain values", blob))
        signature = tuple(sig)
        self.leaves = leaves
        if signature == self.signature:
            return leaves
        saver.clear()  # waits for a save in flight first
        self.signature = None
        self.has_blob = False
        self.views = []
        for leaf, view, code, shape, kind in arrays:
            if kind[0] == "slice":
                saver.add_slice(leaf.name, view, code, kind[1], kind[2], shape)
            else:
                saver.add_replicated(leaf.name, view, code, shape, kind[0] == "component")
            self.views.append(view)
        if blob:
            saver.add_blob(JSON_BLOB)
        self.has_blob = blob
        self.signature = signature
        return leaves

    def json_bytes(self) -> bytes:
        """This rank's plain values: {"replicated": {...}, "per_rank": {...}}."""
        doc: Dict[str, Dict[str, Any]] = {"replicated": {}, "per_rank": {}}
        for leaf in iter_json(self.leaves):
            doc["per_rank" if leaf.per_rank else "replicated"][leaf.name] = leaf.value
        return json.dumps({"mpickpt_json": 1, **doc}, sort_keys=True, allow_nan=True).encode()


def _ranks(ranks: List[int]) -> str:
    return f"rank {ranks[0]}" if len(ranks) == 1 else "ranks " + ", ".join(map(str, ranks))


def agree_replicated_names(comm: Any, names: List[str]) -> None:
    """Collective: every rank has the same replicated plain values (by name), else every rank
    raises the same MismatchError naming one that some rank lacks. Restore reads them from rank
    0's record: one that only another rank saved could never be restored, so the save refuses it
    as the C plan refuses an array registered on some ranks only."""
    import hashlib

    import numpy as np
    from mpi4py import MPI

    digest = hashlib.blake2b("\0".join(sorted(names)).encode(), digest_size=8).digest()
    h = int.from_bytes(digest, "little", signed=True) >> 1  # -h fits in an int64
    both = np.array([h, -h], dtype=np.int64)
    comm.Allreduce(MPI.IN_PLACE, both, op=MPI.MIN)
    if both[0] == -both[1]:
        return
    everyone = [set(n) for n in comm.allgather(names)]
    name = min(set().union(*everyone) - set.intersection(*everyone))
    have = [r for r, n in enumerate(everyone) if name in n]
    lack = [r for r, n in enumerate(everyone) if name not in n]
    raise _C.MismatchError(
        f"the plain value '{name}' is on {_ranks(have)} but not on {_ranks(lack)}: replicated "
        "values must have the same keys on every rank (wrap a rank's own in mpickpt.PerRank)")


def save_prepare(comm: Any, reg: Registered, saver: Any, state: Any) -> None:
    """Collective: registers `state` and sets this rank's plain values for the next save."""
    def local() -> List[str]:
        reg.prepare(saver, state)
        saver.set_blob(JSON_BLOB, reg.json_bytes())
        return [leaf.name for leaf in iter_json(reg.leaves) if not leaf.per_rank]

    agree_replicated_names(comm, collective(comm, local))


def restore_prepare(comm: Any, reg: Registered, saver: Any, state: Any) -> None:
    """Collective: registers `state` (restore writes into its arrays) and forgets old blobs."""
    def local() -> None:
        reg.prepare(saver, state, restore_rank=comm.rank)
        saver.reset_blobs()

    collective(comm, local)


# A record of plain values is 2 deep ({"replicated": {name: value}, ...}: values are None, bool,
# int, float or str). Deeper nesting is refused before the JSON parser sees it: its recursion
# would end in a RecursionError (200,000 levels), not an error naming the checkpoint.
MAX_JSON_DEPTH = 64
_JSON_STRING = re.compile(rb'"[^"\\]*(?:\\.[^"\\]*)*"', re.S)
_JSON_NESTING = re.compile(rb"[\[\]{}]")
_JSON_KINDS = {dict: "an object", list: "an array"}


def _nesting_ok(raw: bytes) -> bool:
    """Whether the JSON text `raw` nests at most MAX_JSON_DEPTH deep (brackets inside strings
    do not count). Linear, stops at the first bracket too deep."""
    depth = 0
    for m in _JSON_NESTING.finditer(_JSON_STRING.sub(b'""', raw)):
        if m.group() in (b"[", b"{"):
            depth += 1
            if depth > MAX_JSON_DEPTH:
                return False
        else:
            depth -= 1
    return True


def load_record(raw: bytes, where: str, rank: int) -> Dict[str, Dict[str, Any]]:
    """Rank `rank`'s record of plain values in checkpoint `where`, checked: a JSON object whose
    "replicated" and "per_rank" are objects of plain values. Anything else, nesting deeper than
    MAX_JSON_DEPTH included, is a CorruptError naming the checkpoint and the record."""
    what = f"{where}: the record of plain values of rank {rank} ('{JSON_BLOB}/rank_{rank}')"
    if not _nesting_ok(raw):
        raise _C.CorruptError(f"{what} is nested more than {MAX_JSON_DEPTH} deep (a record is "
                              "2 deep)")
    try:
        doc = json.loads(raw)
    except (ValueError, RecursionError) as e:  # UnicodeDecodeError is a ValueError
        raise _C.CorruptError(f"{what} does not parse ({e})") from None
    if not isinstance(doc, dict):
        raise _C.CorruptError(f"{what} is {_JSON_KINDS.get(type(doc), 'a plain value')}, not "
                              "an object")
    for part in ("replicated", "per_rank"):
        table = doc.get(part)
        if not isinstance(table, dict):
            raise _C.CorruptError(f"{what}: its \"{part}\" is "
                                  f"{'missing' if table is None else 'not an object'}")
        for name, value in table.items():
            if isinstance(value, (dict, list)):
                raise _C.CorruptError(f"{what}: '{name}' is {_JSON_KINDS[type(value)]}, not a "
                                      "plain value (None, bool, int, float or str)")
    return doc


def _fmt_names(names: List[str], limit: int = 12) -> str:
    """Names for a message: all of them when few, else grouped by their parent
    ('opt/state/3/*' (3 names)), then cut."""
    def render(items: List[str]) -> str:
        shown = items[:limit]
        more = f", and {len(items) - limit} more" if len(items) > limit else ""
        return ", ".join(shown) + more
    items = [f"'{n}'" for n in names]
    for strip in range(1, 8):
        if len(items) <= limit:
            break
        groups: Dict[str, List[str]] = {}
        for n in names:
            parts = n.split("/")
            key = "/".join(parts[:max(1, len(parts) - strip)])
            groups.setdefault(key, []).append(n)
        items = [f"'{ns[0]}'" if len(ns) == 1 else f"'{k}/*' ({len(ns)} names)"
                 for k, ns in groups.items()]
    return render(items)


def mismatch_message(where: str, missing: List[str], unexpected: List[str],
                     what: str = "plain values") -> str:
    """The strict restore's error: every missing and unexpected name (grouped when many)."""
    return (f"{where} does not match the state ({what}): {len(missing)} missing (in the state, "
            f"not in the checkpoint){': ' + _fmt_names(missing) if missing else ''}; "
            f"{len(unexpected)} unexpected (in the checkpoint, not in the state)"
            f"{': ' + _fmt_names(unexpected) if unexpected else ''}. The arrays were restored, "
            "no plain value was put back; restore(..., strict=False) restores what matches")


def compare_plain(leaves: List[Leaf], replicated: Optional[Dict[str, Any]],
                  own: Optional[Dict[str, Any]], skip_missing_per_rank: bool
                  ) -> Tuple[List[Tuple[Leaf, Any]], List[str], List[str]]:
    """This rank's plain-value leaves against the records (replicated: rank 0's; own: this
    rank's per-rank values, None when this rank has no record): (the values to put back, the
    missing names, the unexpected names). A PerRank leaf of a rank without a record is skipped
    under skip_missing_per_rank, else missing. Local."""
    updates, missing = [], []
    for leaf in leaves:
        if leaf.per_rank:
            if own is None:
                if not skip_missing_per_rank:
                    missing.append(leaf.name)
                continue
            table = own
        else:
            table = replicated
        if table is None or leaf.name not in table:
            missing.append(leaf.name)
            continue
        check_put_back(leaf, table[leaf.name])
        updates.append((leaf, table[leaf.name]))
    unexpected = []
    if replicated is not None:
        have = {leaf.name for leaf in leaves if not leaf.per_rank}
        unexpected += [name for name in replicated if name not in have]
    if own is not None:
        have = {leaf.name for leaf in leaves if leaf.per_rank}
        unexpected += [name for name in own if name not in have]
    return updates, missing, unexpected


def restore_finish(comm: Any, reg: Registered, saver: Any, skip_missing_per_rank: bool,
                   where: str, strict: bool = True) -> Tuple[List[str], List[str]]:
    """Collective, after a successful C restore: puts the plain values back into the state.
    Replicated values come from rank 0's record (every rank gets the same), per-rank ones from
    this rank's; a rank the writer did not have keeps its own when skip_missing_per_rank.
    The state's plain values are compared with the records (compare_plain): strict, any missing
    or unexpected one is a MismatchError on every rank listing them all, and nothing is put
    back; else what matches is put back. Returns the (missing, unexpected) names of every rank."""
    mine = saver.get_blob(JSON_BLOB) if reg.has_blob else None
    first = comm.bcast(mine if comm.rank == 0 else None, root=0)

    def local() -> Tuple[List[Tuple[Leaf, Any]], List[str], List[str]]:
        leaves = list(iter_json(reg.leaves))
        replicated = load_record(first, where, 0)["replicated"] if first is not None else None
        own = load_record(mine, where, comm.rank)["per_rank"] if mine is not None else None
        if first is None and leaves and strict:
            raise _C.NotFoundError(
                f"{where} holds no plain values (it was not written by the Python package), but "
                f"the state has {len(leaves)}, e.g. '{leaves[0].name}'")
        return compare_plain(leaves, replicated, own, skip_missing_per_rank)

    updates, missing, unexpected = collective(comm, local)
    every = comm.allgather((missing, unexpected))
    missing = sorted(set().union(*(m for m, _ in every)))
    unexpected = sorted(set().union(*(u for _, u in every)))
    if strict and (missing or unexpected):
        raise _C.MismatchError(mismatch_message(where, missing, unexpected))
    for leaf, value in updates:
        put_back(leaf, value)
    return missing, unexpected
