"""Registering a state tree with a saver, and putting restored plain values back.

Every collective call is preceded by an agreement: a rank whose local preparation failed (a
non-contiguous tensor, an unsupported leaf) makes every rank raise the same error, instead of the
others entering a collective it will never join (a save hands that status to the C manager's save,
whose first collective carries it: save_state). For the same reason a KeyboardInterrupt is held
back until a collective call is over (uninterruptible).
"""
from __future__ import annotations

import contextlib
import errno as _errno
import functools
import json
import os
import re
import signal
import threading
from typing import Any, Callable, Dict, Iterator, List, Optional, Tuple, TypeVar

from . import _mpickpt as _C
from ._tree import (CODE_NAMES, JSON_BLOB, MAX_STATE_DEPTH, Flat, Leaf, alias_view, array_view,
                    find_aliases, flatten_tree, is_tensor, iter_json, not_found, put_back_all)

T = TypeVar("T")

_ERRORS = {cls.__name__: cls for cls in (
    _C.Error, _C.NotFoundError, _C.CorruptError, _C.MismatchError, _C.NoSpaceError,
    _C.InvalidArgumentError, _C.VersionError, _C.ExistsError, _C.TimeoutError, _C.BusyError,
    _C.MPIError, _C.FileSystemError, _C.PermissionDeniedError)}


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


def _error_kind(exc: BaseException) -> Tuple[str, Optional[int], Optional[str]]:
    """The mpickpt error class name a local failure is raised as on every rank, its errno (an
    OSError's: mpickpt's file-system errors are OSErrors) and its NotFoundError reason (which
    kind of "not found": NotFoundError.NO_TENSOR, ...)."""
    name = type(exc).__name__
    errno = exc.errno if isinstance(exc, OSError) and isinstance(exc.errno, int) else None
    if name not in _ERRORS:
        if isinstance(exc, OSError):
            name = ("NoSpaceError" if errno in (_errno.ENOSPC, _errno.EDQUOT) else
                    "PermissionDeniedError"
                    if errno in (_errno.EROFS, _errno.EACCES, _errno.EPERM) else
                    "FileSystemError")
        else:
            name = "InvalidArgumentError" if isinstance(exc, (ValueError, TypeError)) else "Error"
    reason = getattr(exc, "reason", None) if isinstance(exc, _C.NotFoundError) else None
    return name, errno, reason


def error_args(exc: Optional[BaseException],
               rank: int) -> Optional[Tuple[int, str, int, Optional[str]]]:
    """A local failure of this rank (`rank`) as the C library's caller error
    (ckpt_manager_save_options.error: code, message, errno, reason), which the save's first
    collective call agrees; None for none. The message is prefixed with the rank as agree's
    (the C agreement adds no second prefix to it)."""
    if exc is None:
        return None
    name, errno, reason = _error_kind(exc)
    # any text a rank can hand over: a NUL or a lone surrogate (a key from os.fsdecode) shown
    text = (str(exc) or name).encode("utf-8", "backslashreplace").decode().replace("\0", "\\0")
    return (_ERRORS[name].code, text if _RANK_PREFIX.match(text) else f"rank {rank}: {text}",
            errno or 0, reason)


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
        name, errno, reason = _error_kind(exc)
        text = str(exc)
        payload = (name, text if _RANK_PREFIX.match(text) else f"rank {lowest}: {text}", errno,
                   reason)
    name, msg, errno, reason = comm.bcast(payload, root=lowest)
    err = _ERRORS[name](msg)
    if errno is not None and isinstance(err, OSError):
        err.errno = errno
    if reason is not None and isinstance(err, _C.NotFoundError):
        err.reason = reason
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


def attempt(local: Callable[[], Any]) -> Optional[BaseException]:
    """Runs `local`; returns what it raised (None: nothing), for an agreement to carry."""
    try:
        local()
    except (KeyboardInterrupt, SystemExit):
        raise
    except BaseException as e:  # noqa: BLE001 - any local failure must reach every rank
        return e
    return None


class Registered:
    """What a saver holds for one state tree: its leaves, and the signature that tells whether the
    next save or restore can reuse the registrations (and the saver's cached plan)."""

    def __init__(self) -> None:
        self.signature: Optional[Tuple] = None
        self.leaves: List[Leaf] = []
        self.flat: Optional[Flat] = None
        self.aliases: Dict[str, dict] = {}  # this state's leaves that share memory (find_aliases)
        self.views: List[Any] = []  # keeps the NumPy views alive (the saver holds them too)
        self.has_blob = False  # the record of plain values is registered
        # restore: the aliases the checkpoint was expected to have (names not registered)
        self.expected: Optional[Dict[str, dict]] = None
        # restore: (prefix, rank 0's record there as peek_record read it, b"": none, or None)
        self.peeked: Tuple[Optional[str], Optional[bytes]] = (None, None)

    def scan(self, state: Any) -> Dict[str, dict]:
        """Local: flattens `state` and finds its aliases; returns the replicated ones (which
        every rank must decide alike: save_state, restore_state)."""
        self.flat = flatten_tree(state)
        self.leaves = self.flat.leaves
        self.aliases = find_aliases(self.leaves)
        by = {leaf.name: leaf for leaf in self.leaves}
        return {n: a for n, a in self.aliases.items() if not by[n].per_rank}

    def unalias(self, names: Any) -> None:
        """Stores these leaves as tensors after all (their alias was not agreed, or the checkpoint
        has them as tensors)."""
        for leaf in self.leaves:
            if leaf.name in names and leaf.alias is not None:
                leaf.alias = None
                leaf.node[:] = ["T"] if is_tensor(leaf.value) else ["n"]
                self.aliases.pop(leaf.name, None)

    def prepare(self, saver: Any, state: Any = None, restore_rank: Optional[int] = None,
                skip: Any = (), record: bool = True) -> List[Leaf]:
        """(Re)registers the scanned state (scan(); or `state`, scanned here) with `saver` when its
        layout or buffers changed. Local; raises on a bad leaf before anything is registered.
        Alias leaves are not registered (their target is), nor the names in `skip`; `record`:
        False when the checkpoint to restore is known to have no record of plain values.

        A save registers this rank's record of plain values everywhere. A restore (restore_rank:
        this rank) registers it only where it is read: on rank 0 when the state has plain values
        or aliases (the replicated ones are broadcast from there) and on a rank with
        PerRank plain values or aliases. The record is per-rank data: registered on a rank the
        writer did not have, it would make every restore onto more ranks fail, even of a state
        of shards and replicated values."""
        if state is not None:
            self.scan(state)
        leaves = self.leaves
        if restore_rank is None:
            blob = True
        else:
            plain = [leaf for leaf in leaves if not leaf.is_array]
            # a checkpoint known to have no record (a C program's): aliases are read apart
            shared = [leaf for leaf in leaves if record and
                      (leaf.alias is not None or leaf.name in skip)]
            # rank 0 reads its record even without plain values: a strict restore reports the
            # checkpoint's plain values the state lacks (C skips the record when it is absent)
            blob = any(leaf.per_rank for leaf in plain + shared) or restore_rank == 0
        arrays = []
        sig = []
        for leaf in leaves:
            if not leaf.is_array:
                sig.append((leaf.name, "json", leaf.per_rank))
                continue
            if leaf.alias is not None or leaf.name in skip:
                sig.append((leaf.name, "alias"))
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
        """This rank's record of plain values, version 2: replicated, per_rank, tree, aliases
        (docs/python.md, "State trees")."""
        doc: Dict[str, Any] = {"replicated": {}, "per_rank": {}}
        for leaf in iter_json(self.leaves):
            doc["per_rank" if leaf.per_rank else "replicated"][leaf.name] = leaf.value
        doc["tree"] = self.flat.tree if self.flat is not None else ["d", []]
        doc["aliases"] = dict(self.aliases)
        return json.dumps({"mpickpt_json": 2, **doc}, sort_keys=True, allow_nan=True).encode()


def _digest(text: bytes) -> int:
    """A 63-bit digest of `text` (an int64 whose negation fits in one)."""
    import hashlib

    return int.from_bytes(hashlib.blake2b(text, digest_size=8).digest(), "little",
                          signed=True) >> 1


def _alias_text(mine: Dict[str, dict]) -> bytes:
    return json.dumps(mine, sort_keys=True).encode()


def _names_text(names: List[str]) -> bytes:
    return "\0".join(sorted(names)).encode("utf-8", "surrogatepass")


def unalias_disagreed(comm: Any, reg: Registered, mine: Dict[str, dict]) -> None:
    """Collective (one allgather): the replicated aliases some rank does not have alike are
    registered as tensors everywhere (they decide which names are read) and leave `mine`. After a
    restore found their digests unlike (restore_state)."""
    everyone = comm.allgather(mine)
    keep = {n for n, a in mine.items() if all(e.get(n) == a for e in everyone)}
    reg.unalias(set(mine) - keep)
    for n in set(mine) - keep:
        mine.pop(n)


def _ranks(ranks: List[int]) -> str:
    return f"rank {ranks[0]}" if len(ranks) == 1 else "ranks " + ", ".join(map(str, ranks))


def replicated_names_mismatch(every: List[List[str]]) -> None:
    """After the ranks' replicated plain values' names (`every`: each rank's) were found unlike:
    raises the MismatchError naming one that some rank lacks, the same on every rank."""
    everyone = [set(n) for n in every]
    name = min(set().union(*everyone) - set.intersection(*everyone))
    have = [r for r, n in enumerate(everyone) if name in n]
    lack = [r for r, n in enumerate(everyone) if name not in n]
    raise _C.MismatchError(
        f"the plain value '{name}' is on {_ranks(have)} but not on {_ranks(lack)}: replicated "
        "values must have the same keys on every rank (wrap a rank's own in mpickpt.PerRank)")


def save_state(comm: Any, reg: Registered, saver: Any, state: Any,
               save: Callable[[Any, int], T]) -> T:
    """Collective: registers `state`, sets this rank's plain values and saves them with `save`
    (error, check) -> T, the C manager's save (ckpt_manager_save_options).

    No collective call of its own when every rank prepared alike (docs/python.md, "Collective
    calls"): each rank scans and registers its state, then the save's first collective call
    carries this rank's failure (error) and a digest of its replicated aliases and of its
    replicated plain values' names (check). Only when the checks differ (a MismatchError whose
    reason is CHECK, on every rank, nothing saved) does more follow, one allgather: unlike
    names are a MismatchError naming one; aliases some rank does not share are stored as tensors
    (registered again) and the save is made once more."""
    mine: Dict[str, dict] = {}
    names: List[str] = []
    digest = [0]

    def local() -> None:
        reg.prepare(saver)
        saver.set_blob(JSON_BLOB, reg.json_bytes())
        digest[0] = _digest(_alias_text(mine) + b"\0\1" + _names_text(names)) & ((1 << 64) - 1)

    def first() -> None:
        mine.update(reg.scan(state))
        names.extend(leaf.name for leaf in iter_json(reg.leaves) if not leaf.per_rank)
        local()

    err = attempt(first)
    try:
        return save(error_args(err, comm.rank), 0 if err is not None else digest[0])
    except _C.MismatchError as e:
        if e.reason != _C.MismatchError.CHECK:
            raise
        # every rank has this error (agreed, no rank failed): every rank looks into it alike
        everyone = comm.allgather((mine, names))
        if any(sorted(n) != sorted(names) for _, n in everyone):
            replicated_names_mismatch([n for _, n in everyone])
        if all(a == mine for a, _ in everyone):
            raise  # a digest's collision: cannot happen in practice
    keep = {n for n, a in mine.items() if all(e.get(n) == a for e, _ in everyone)}
    reg.unalias(set(mine) - keep)
    for n in set(mine) - keep:
        mine.pop(n)
    err = attempt(local)
    return save(error_args(err, comm.rank), 0 if err is not None else digest[0])


def peek_record(comm: Any, prefix: Optional[str], per_rank: bool) -> Tuple[
        Optional[Dict[str, dict]], bool, Optional[bytes]]:
    """Collective (one broadcast): the aliases of the checkpoint at `prefix` (rank 0's record,
    and this rank's own when `per_rank`), read without MPI before a restore decides what to
    register; whether it has a record at all; and rank 0's record as read (its bytes, b"" for
    none: restore_finish's when the restore reads this checkpoint). (None, True, None) when there
    is no prefix or it cannot be read (the restore then reports the problem)."""
    def read(rank: int) -> Optional[bytes]:
        """This rank's record's bytes; b"" when the checkpoint has none; None: unreadable."""
        try:
            r = _C.Reader(prefix)
            try:
                info = next((t for t in r.tensors() if t["name"] == f"{JSON_BLOB}/rank_{rank}"),
                            None)
                if info is None:
                    return b""
                import numpy as np

                raw = np.empty(info["shape"][0], dtype=np.uint8)
                r.read(info["name"], raw, _C.UINT8)
            finally:
                r.close()
            return raw.tobytes()
        except _C.Error:
            return None

    def aliases(raw: Optional[bytes], rank: int) -> Optional[Dict[str, dict]]:
        try:
            return None if raw is None else load_record(raw, prefix, rank).get("aliases", {})
        except _C.Error:
            return None

    if prefix is None:
        return None, True, None
    first = comm.bcast(read(0) if comm.rank == 0 else None, root=0)
    if first == b"":  # no record (a C program's checkpoint)
        return {}, False, b""
    out = aliases(first, 0)  # parsed on every rank: the same bytes, the same outcome
    if out is None:
        return None, True, None
    out = dict(out)
    if per_rank and comm.rank != 0:
        out.update(aliases(read(comm.rank), comm.rank) or {})
    return out, True, first


def restore_state(comm: Any, reg: Registered, saver: Any, state: Any, prefix: Optional[str],
                  restore: Callable[[Any, int, bool], T]) -> Tuple[T, bool]:
    """Collective: registers `state` (restore writes into its arrays), forgets old blobs and
    restores with `restore` (error, check, lenient) -> info, the C manager's restore
    (ckpt_manager_restore_options); returns (info, whether this rank's state has aliases: leaves
    sharing another's memory, not registered, whose names C did not compare when some rank had
    them: restore_finish does). `prefix`: the checkpoint the restore will most likely read: its
    aliases are not registered (restore_aliases gives them their values after the restore), and
    this state's contiguous aliases that it stored as tensors are (read in place; the others:
    restore_aliases).

    One collective call of its own: the broadcast of rank 0's record of the checkpoint
    (peek_record: what to register). This rank's failure (error), a digest of its replicated
    aliases (check) and whether it has aliases (lenient: C then compares no names) ride the C
    restore's first collective. Only when the digests differ (a MismatchError whose reason is
    CHECK on every rank, nothing read) does more follow: the aliases some rank does not share are
    registered as tensors (unalias_disagreed, one allgather) and the restore made again."""
    mine: Dict[str, dict] = {}
    err = attempt(lambda: mine.update(reg.scan(state)))
    per_rank = err is None and any(leaf.per_rank and leaf.is_array for leaf in reg.leaves)
    expected, has_record, first = peek_record(comm, prefix, per_rank)
    reg.peeked = (prefix, first)

    def local() -> None:
        skip: Any = ()
        if expected is not None:
            skip = set(expected) & {leaf.name for leaf in reg.leaves if leaf.is_array}
            # stored apart in the checkpoint: read as tensors in place when contiguous (the
            # same memory gets the same bytes twice when they were tied at the save too)
            reg.unalias({leaf.name for leaf in reg.leaves if leaf.alias is not None and
                         leaf.name not in expected and _contiguous_array(leaf.value)})
        reg.expected = expected
        reg.prepare(saver, restore_rank=comm.rank, skip=skip, record=has_record)
        saver.reset_blobs()

    def call(err: Optional[BaseException]) -> Tuple[T, bool]:
        aliased = err is None and any(leaf.alias is not None for leaf in reg.leaves)
        check = 0 if err is not None else _digest(_alias_text(mine)) & ((1 << 64) - 1)
        return restore(error_args(err, comm.rank), check, aliased), aliased

    if err is None:
        err = attempt(local)
    try:
        return call(err)
    except _C.MismatchError as e:
        if e.reason != _C.MismatchError.CHECK:
            raise
    # every rank has this error (no rank failed): every rank looks into it alike
    unalias_disagreed(comm, reg, mine)
    return call(attempt(local))


def _contiguous_array(x: Any) -> bool:
    return x.is_contiguous() if is_tensor(x) else x.flags.c_contiguous


# A record of plain values nests its tree (["d", [[key, NODE], ...]]: 3 levels of JSON per level of
# the state, which flatten bounds by MAX_STATE_DEPTH); its tables are 2 deep. Deeper nesting is
# refused before the JSON parser sees it: its recursion would end in a RecursionError (200,000
# levels), not an error naming the checkpoint.
MAX_JSON_DEPTH = 3 * MAX_STATE_DEPTH + 8
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
        raise _C.CorruptError(f"{what} is nested more than {MAX_JSON_DEPTH} deep")
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
    version = doc.get("mpickpt_json", 1)
    if type(version) is not int or version < 1:
        raise _C.CorruptError(f"{what}: its version {version!r} is not a version")
    if version > 2:
        raise _C.VersionError(f"{what} is of version {version}; this mpickpt reads 1 and 2")
    if version >= 2 and not isinstance(doc.get("tree"), list):
        raise _C.CorruptError(f"{what}: its \"tree\" is missing or not an array")
    aliases = doc.get("aliases", {})
    if not isinstance(aliases, dict):
        raise _C.CorruptError(f"{what}: its \"aliases\" is not an object")
    for name, a in aliases.items():
        if not (isinstance(a, dict) and isinstance(a.get("of"), str) and
                type(a.get("offset")) is int and a["offset"] >= 0 and
                _int_list(a.get("shape"), 0) and _int_list(a.get("strides"), None) and
                len(a["shape"]) == len(a["strides"]) and a.get("dtype") in _DTYPE_NAMES and
                isinstance(a.get("torch"), bool)):
            raise _C.CorruptError(f"{what}: the alias '{name}' is not an alias ({{\"of\", "
                                  "\"offset\", \"shape\", \"strides\", \"dtype\", \"torch\"})")
    return doc


_DTYPE_NAMES = set(CODE_NAMES.values())


def _int_list(x: Any, low: Optional[int]) -> bool:
    return isinstance(x, list) and all(type(v) is int and (low is None or v >= low) for v in x)


def _same_memory(a: Any, b: Any) -> bool:
    if is_tensor(a) != is_tensor(b):
        return False
    if is_tensor(a):
        return (a.data_ptr() == b.data_ptr() and tuple(a.shape) == tuple(b.shape) and
                tuple(a.stride()) == tuple(b.stride()))
    return (a.__array_interface__["data"][0] == b.__array_interface__["data"][0] and
            a.shape == b.shape and a.strides == b.strides)


def _copy_into(dst: Any, src: Any) -> None:
    if is_tensor(dst):
        import torch

        with torch.no_grad():
            dst.copy_(src if is_tensor(src) else torch.from_numpy(src))
    else:
        import numpy as np

        np.copyto(dst, src.detach().numpy() if is_tensor(src) else src)


def _read_apart(leaf: Leaf, where: str, rank: int) -> None:
    """Reads the tensor of `leaf` from checkpoint `where` into it (not in place: a temporary, then
    copied, since the leaf need not be contiguous). Local."""
    import numpy as np

    from ._tree import CODE_NUMPY, _extent

    name = leaf.name if not leaf.per_rank or rank == 0 else \
        f"{leaf.name}/parallel_component_{rank}"
    code = _extent(leaf.value)[0]
    tmp = np.empty(tuple(leaf.value.shape), dtype=CODE_NUMPY[code])
    r = _C.Reader(where)
    try:
        info = next((t for t in r.tensors() if t["name"] == name), None)
        if info is None:
            raise not_found(f"tensor '{name}' is not in {where}", "no_tensor")
        if tuple(info["shape"]) != tmp.shape or info["dtype"] != code:
            raise _C.MismatchError(
                f"tensor '{leaf.name}': {CODE_NAMES[code]} {list(tmp.shape)}, the checkpoint's "
                f"{CODE_NAMES.get(info['dtype'], '?')} {list(info['shape'])}")
        r.read(name, tmp, code)
    finally:
        r.close()
    if is_tensor(leaf.value):
        import torch

        src = torch.from_numpy(tmp.view(np.int16)).view(torch.bfloat16) \
            if leaf.value.dtype == torch.bfloat16 else torch.from_numpy(tmp)
        _copy_into(leaf.value, src)
    else:
        _copy_into(leaf.value, tmp)


def restore_aliases(reg: Registered, aliases: Optional[Dict[str, dict]], where: str,
                    missing_rank: bool, rank: int) -> None:
    """After the C restore: every array leaf that was not read (an alias in the state or in the
    checkpoint) gets its values from its target in the checkpoint's aliases: nothing to do when
    it shares that memory in the state too (a tie), else copied. missing_rank: this rank has no
    record of its own (its PerRank aliases are left as they are)."""
    by = {leaf.name: leaf for leaf in reg.leaves}
    unread = [leaf for leaf in reg.leaves if leaf.is_array and
              (leaf.alias is not None or (reg.expected is not None and leaf.name in reg.expected))]
    for leaf in unread:
        if leaf.per_rank and missing_rank:
            continue
        a = (aliases or {}).get(leaf.name)
        if a is None and leaf.alias is not None:
            # tied in the state, stored apart in the checkpoint (saved untied, or before
            # aliases): its own bytes, read now with the reader (checksums checked)
            _read_apart(leaf, where, rank)
            continue
        if a is None:
            raise _C.MismatchError(
                f"'{leaf.name}': {where} is not the checkpoint the restore expected (its aliases "
                "changed while restoring); restore again")
        target = by.get(a["of"])
        if target is None or target.shard is not None or not target.is_array or \
                target.alias is not None or target.name in (reg.expected or ()):
            raise not_found(
                f"'{leaf.name}' is an alias of '{a['of']}' in {where}, which the state does not "
                "hold as a restored array", "no_tensor")
        view = alias_view(target.value, a)
        if tuple(view.shape) != tuple(leaf.value.shape):
            raise _C.MismatchError(
                f"tensor '{leaf.name}': shape {list(leaf.value.shape)}, the checkpoint's "
                f"{list(view.shape)} (an alias of '{a['of']}')")
        if view.dtype != leaf.value.dtype and str(view.dtype).replace("torch.", "") != \
                str(leaf.value.dtype).replace("torch.", ""):
            raise _C.MismatchError(
                f"tensor '{leaf.name}': dtype {leaf.value.dtype}, the checkpoint's {a['dtype']} "
                f"(an alias of '{a['of']}')")
        if not _same_memory(view, leaf.value):
            _copy_into(leaf.value, view)


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
                   where: str, strict: bool = True,
                   arrays: Optional[Tuple[List[str], List[str], bool]] = None
                   ) -> Tuple[List[str], List[str]]:
    """Collective, after a successful C restore: puts the plain values back into the state
    (tuples rebuilt) and the values of aliases (see restore_aliases). Replicated values come from
    rank 0's record (every rank gets the same), per-rank ones from this rank's; a rank the writer
    did not have keeps its own when skip_missing_per_rank. The state's plain values are compared
    with the records (compare_plain): strict, any missing or unexpected one is a MismatchError on
    every rank listing them all, and nothing is put back; else what matches is put back. Returns
    the (missing, unexpected) names of every rank. `arrays` (a strict restore): this rank's
    missing and unexpected arrays and whether its state has aliases; when some rank's has, C
    compared no names (restore_state) and they are compared here: a MismatchError listing every
    rank's before anything else.

    One collective call: an allgather of every rank's outcome and names. Rank 0's record is the
    one restore_state read (peek_record) when the restore read that checkpoint (rank 0 checks
    that the restore read the same bytes, else it is an error on every rank: restore again);
    else it is broadcast first, a second call."""
    mine = saver.get_blob(JSON_BLOB) if reg.has_blob else None
    peeked_at, peeked = reg.peeked
    reg.peeked = (None, None)  # one restore's (the record may be large)
    if peeked is not None and peeked_at is not None and \
            os.path.normpath(peeked_at) == os.path.normpath(where):
        first: Optional[bytes] = peeked or None
        changed = comm.rank == 0 and mine is not None and mine != peeked
    else:
        first = comm.bcast(mine if comm.rank == 0 else None, root=0)
        changed = False

    def local() -> Tuple[List[Tuple[Leaf, Any]], List[str], List[str]]:
        if changed:
            raise _C.MismatchError(f"{where}: its record of plain values changed while restoring; "
                                   "restore again")
        leaves = list(iter_json(reg.leaves))
        unread = any(leaf.is_array and (leaf.alias is not None or leaf.name in (reg.expected or ()))
                     for leaf in reg.leaves)
        if first is None:  # no record (a C program's)
            if leaves and strict:
                raise not_found(
                    f"{where} holds no plain values (it was not written by the Python package), "
                    f"but the state has {len(leaves)}, e.g. '{leaves[0].name}'", "no_tensor")
            if unread:  # aliases read apart
                restore_aliases(reg, {}, where, False, comm.rank)
            return compare_plain(leaves, None, None, skip_missing_per_rank)
        doc0 = load_record(first, where, 0)
        replicated = doc0["replicated"]
        own_doc = load_record(mine, where, comm.rank) if mine is not None else None
        own = own_doc["per_rank"] if own_doc is not None else None
        aliases = {n: a for n, a in doc0.get("aliases", {}).items()}
        if own_doc is not None:
            aliases.update(own_doc.get("aliases", {}))
        if own is None and any(leaf.per_rank for leaf in leaves) and not skip_missing_per_rank \
                and strict:
            name = next(leaf.name for leaf in leaves if leaf.per_rank)
            raise not_found(
                f"'{name}' is per-rank and {where} was written by fewer ranks (no "
                "values of this rank); set skip_missing_per_rank to keep this rank's own",
                "no_tensor")
        updates, missing, unexpected = compare_plain(leaves, replicated, own,
                                                     skip_missing_per_rank)
        # aliases of the checkpoint (tied weights stored once) that the state lacks: neither
        # tensors (C does not list them) nor plain values
        have = {leaf.name for leaf in reg.leaves}
        unexpected += [name for name in aliases if name not in have]
        restore_aliases(reg, aliases, where, own is None, comm.rank)
        return updates, missing, unexpected

    out: List[Any] = []
    err = attempt(lambda: out.extend(local()))
    # one allgather: every rank's arrays' names, and its plain values' (None when its local step
    # failed)
    every = comm.allgather((arrays, None if err is not None else (out[1], out[2])))
    if arrays is not None and any(a[2] for a, _ in every):
        t_miss = sorted(set().union(*(a[0] for a, _ in every)))
        t_extra = sorted(set().union(*(a[1] for a, _ in every)))
        if t_miss or t_extra:
            raise _C.MismatchError(mismatch_message(where, t_miss, t_extra, "arrays"))
    if any(e is None for _, e in every):
        agree(comm, err)
    every = [e for _, e in every]
    updates = out[0]
    missing = sorted(set().union(*(m for m, _ in every)))
    unexpected = sorted(set().union(*(u for _, u in every)))
    if strict and (missing or unexpected):
        raise _C.MismatchError(mismatch_message(where, missing, unexpected))
    put_back_all(reg.flat, updates)
    return missing, unexpected
