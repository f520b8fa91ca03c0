"""mpickpt.torch: the training state of a PyTorch job in one object (docs/python.md).

    import mpickpt.torch
    ckpt = mpickpt.torch.Checkpointer(ckpt_dir, model=model, optimizer=opt, scheduler=sched,
                                      async_save=True)
    start = ckpt.restore_or_start() or 0        # the step to resume from, or None
    for step in range(start, steps):
        ...                                      # train
        ckpt.save(step + 1, every=10, force=step + 1 == steps)   # preempted: final save, exit 75

A `Checkpointer` owns a `CheckpointManager` and builds the state tree itself at every save and
restore: the modules' state dicts (a DistributedDataParallel's inner module: its names are the
plain model's), the optimizers' state and param_groups, the LR schedulers' state dicts, this
rank's RNG states (torch CPU, CUDA when available, NumPy's global one, `random`'s) as PerRank
arrays, and `values` (a dict of the user's: step counters, a data-loader position; PerRank and
Shard wrappers allowed). The tensors are the live ones, so the saver's plan is built once and
reused while nothing changes; the RNG states are copied into buffers kept from save to save.

At a restore, an optimizer without state (never stepped) gets its state created from the
checkpoint (zeros of the checkpoint's shapes and dtypes through `optimizer.load_state_dict`,
then restored in place: no warm-up step, the parameters untouched); the hyperparameters of the
param_groups and the schedulers' state are applied (`scheduler.load_state_dict`); the RNGs are
set. Imported only by `import mpickpt.torch`: `import mpickpt` never imports PyTorch.
"""
from __future__ import annotations

import inspect
import os
import random
import sys
from typing import Any, Dict, List, Mapping, Optional, Tuple

import numpy as np
import torch

from . import (CheckpointManager, CorruptError, InvalidArgumentError, MismatchError, PerRank,
               Shard)
from . import preemption as _preemption
from . import open as _open_checkpoint
from ._state import agree, collective, uninterruptible

__all__ = ["Checkpointer", "unwrap"]

_DTYPES = {
    "float16": torch.float16, "bfloat16": torch.bfloat16, "float32": torch.float32,
    "float64": torch.float64, "int8": torch.int8, "int16": torch.int16, "int32": torch.int32,
    "int64": torch.int64, "uint8": torch.uint8, "bool": torch.bool,
}
_PARALLEL = "/parallel_component_"
# CheckpointManager's restores are strict by default once they take `strict` (without it they
# restore what matches, which is what strict=False asks for)
_HAS_STRICT = "strict" in inspect.signature(CheckpointManager.restore_or_initialize).parameters


def unwrap(module: Any) -> Any:
    """The module a DistributedDataParallel (or DataParallel) wraps; any other module itself."""
    wrappers = (torch.nn.parallel.DistributedDataParallel, torch.nn.DataParallel)
    while isinstance(module, wrappers):
        module = module.module
    return module


def _named(what: str, obj: Any) -> Dict[str, Any]:
    """{key: object}: one object under its kind's key, a mapping's under '<kind>/<name>'."""
    if obj is None:
        return {}
    if isinstance(obj, Mapping):
        for k in obj:
            if not isinstance(k, str) or not k or "/" in k:
                raise InvalidArgumentError(f"{what}: the names of a mapping are non-empty strings "
                                           f"without '/', not {k!r}")
        return dict(obj)
    return {"": obj}


def _plain_copy(x: Any, where: str) -> Any:
    """A copy of a PyTorch state dict's non-tensor part with tuples as lists (restore writes
    into lists) and callables left out (code, not state: a LambdaLR's functions, OneCycleLR's
    anneal_func; PyTorch's own state dicts leave them out too). Tensors are kept as they are."""
    if isinstance(x, dict):
        return {k: _plain_copy(v, f"{where}/{k}") for k, v in x.items() if not callable(v)}
    if isinstance(x, (list, tuple)):
        return [_plain_copy(v, f"{where}/{i}") for i, v in enumerate(x)]
    return x


def _like(value: Any, template: Any) -> Any:
    """`value` (restored, lists) with the tuples of `template` (the live object) back."""
    if isinstance(template, tuple) and isinstance(value, list):
        return tuple(_like(v, t) for v, t in zip(value, template)) if len(value) == len(
            template) else tuple(value)
    if isinstance(template, dict) and isinstance(value, dict):
        return {k: _like(v, template.get(k)) for k, v in value.items()}
    if isinstance(template, list) and isinstance(value, list) and len(value) == len(template):
        return [_like(v, t) for v, t in zip(value, template)]
    return value


class _Rng:
    """This rank's RNG states in buffers kept from save to save (one registration)."""

    def __init__(self, cuda: bool) -> None:
        self.torch = torch.get_rng_state().clone()
        self.cuda = ([t.clone() for t in torch.cuda.get_rng_state_all()] if cuda else None)
        self.np_keys = np.zeros(624, dtype=np.uint32)
        self.np_ints = np.zeros(2, dtype=np.int64)        # pos, has_gauss
        self.np_gauss = np.zeros(1, dtype=np.float64)     # cached_gaussian
        self.py_ints = np.zeros(627, dtype=np.int64)      # version, has gauss_next, 625 words
        self.py_gauss = np.zeros(1, dtype=np.float64)     # gauss_next
        self.capture()

    def capture(self) -> None:
        self.torch.copy_(torch.get_rng_state())
        if self.cuda is not None:
            for buf, t in zip(self.cuda, torch.cuda.get_rng_state_all()):
                buf.copy_(t)
        name, keys, pos, has_gauss, cached = np.random.get_state()
        if name != "MT19937" or len(keys) != 624:
            raise InvalidArgumentError(f"NumPy's global RNG is {name}, not MT19937")
        self.np_keys[:] = keys
        self.np_ints[:] = (pos, has_gauss)
        self.np_gauss[0] = cached
        version, words, gauss_next = random.getstate()
        self.py_ints[0] = version
        self.py_ints[1] = gauss_next is not None
        self.py_ints[2:] = words
        self.py_gauss[0] = 0.0 if gauss_next is None else gauss_next

    def tree(self) -> Dict[str, Any]:
        t: Dict[str, Any] = {"torch": self.torch,
                             "numpy": {"keys": self.np_keys, "ints": self.np_ints,
                                       "gauss": self.np_gauss},
                             "random": {"ints": self.py_ints, "gauss": self.py_gauss}}
        if self.cuda is not None:
            t["cuda"] = list(self.cuda)
        return t

    def apply(self) -> None:
        torch.set_rng_state(self.torch)
        if self.cuda is not None:
            torch.cuda.set_rng_state_all(self.cuda)
        np.random.set_state(("MT19937", self.np_keys.copy(), int(self.np_ints[0]),
                             int(self.np_ints[1]), float(self.np_gauss[0])))
        random.setstate((int(self.py_ints[0]), tuple(int(w) for w in self.py_ints[2:]),
                         float(self.py_gauss[0]) if self.py_ints[1] else None))


def _unescape(s: str) -> str:
    return s.replace("%2F", "/").replace("%25", "%")


class Checkpointer:
    """The training state of a PyTorch job, saved and restored with one call each. Collective
    over `comm` (default MPI.COMM_WORLD): every rank calls every method, in the same order.

    model, optimizer, scheduler: one object each, or a mapping of names to them (several models
    or optimizers), or None; a module or an optimizer may be wrapped in mpickpt.PerRank when
    each rank has its own (not replicated). values: a dict of the user's state (plain values,
    arrays, PerRank and Shard wrappers; the dict itself is kept as `ckpt.values`, restored in
    place). rng: save and restore this rank's RNG states (torch CPU and CUDA, NumPy's global
    RNG, `random`), per rank. preemption: install mpickpt.preemption's handlers (SIGTERM,
    SIGUSR1, the deadline) and check for preemption and halt requests at every save(); with
    exit_on_preemption a preempted save() takes the final checkpoint, waits for it and ends the
    process with exit status 75 (mpickpt.preemption.exit: clean under `python -m mpi4py`).
    The other arguments are CheckpointManager's (max_to_keep, async_save, layout, ...);
    skip_missing_per_rank defaults to True here: on more ranks than wrote, the extra ranks keep
    their own RNG states."""

    @uninterruptible
    def __init__(self, directory: str, model: Any = None, optimizer: Any = None,
                 scheduler: Any = None, values: Optional[Dict[str, Any]] = None, *,
                 comm: Any = None, rng: bool = True, preemption: bool = True,
                 exit_on_preemption: bool = True, max_to_keep: Optional[int] = 3,
                 async_save: bool = False, skip_missing_per_rank: bool = True,
                 deadline_reserve: float = 30.0, **manager_options: Any) -> None:
        self._models = {k: self._wrapped(v, "model") for k, v in _named("model", model).items()}
        self._optims = {k: self._wrapped(v, "optimizer")
                        for k, v in _named("optimizer", optimizer).items()}
        self._scheds = _named("scheduler", scheduler)
        for k, (m, _) in self._models.items():
            if not isinstance(m, torch.nn.Module):
                raise InvalidArgumentError(f"model{'/' + k if k else ''} is a "
                                           f"{type(m).__name__}, not a torch.nn.Module")
        for k, (o, _) in self._optims.items():
            if not isinstance(o, torch.optim.Optimizer):
                raise InvalidArgumentError(f"optimizer{'/' + k if k else ''} is a "
                                           f"{type(o).__name__}, not a torch.optim.Optimizer")
        for k, s in self._scheds.items():
            if not (hasattr(s, "state_dict") and hasattr(s, "load_state_dict")):
                raise InvalidArgumentError(f"scheduler{'/' + k if k else ''} has no "
                                           "state_dict/load_state_dict")
        if values is not None and not isinstance(values, dict):
            raise InvalidArgumentError(f"values is a {type(values).__name__}, not a dict")
        self.values: Dict[str, Any] = {} if values is None else values
        self._rng = _Rng(torch.cuda.is_available()) if rng else None
        self._exit = bool(exit_on_preemption)
        self._watch = bool(preemption)
        if self._watch:
            _preemption.install(reserve_s=deadline_reserve)
        self._mgr = CheckpointManager(directory, comm=comm, max_to_keep=max_to_keep,
                                      async_save=async_save,
                                      skip_missing_per_rank=skip_missing_per_rank,
                                      **manager_options)
        self.restored: Optional[Dict[str, Any]] = None
        self.preempted = False
        self.last_saved_step: Optional[int] = None

    @staticmethod
    def _wrapped(obj: Any, what: str) -> Tuple[Any, bool]:
        if isinstance(obj, PerRank):
            return obj.value, True
        if isinstance(obj, Shard):
            raise InvalidArgumentError(f"a whole {what} cannot be a Shard: put Shard leaves in "
                                       "values")
        return obj, False

    # ---- the state tree --------------------------------------------------------------------

    @property
    def manager(self) -> CheckpointManager:
        """The CheckpointManager underneath (latest_step(), all_steps(), directory, comm)."""
        return self._mgr

    @property
    def comm(self) -> Any:
        return self._mgr.comm

    def _put(self, tree: Dict[str, Any], kind: str, key: str, value: Any, per_rank: bool) -> None:
        value = PerRank(value) if per_rank else value
        if key:
            tree.setdefault(kind, {})[key] = value
        else:
            tree[kind] = value

    def state(self) -> Dict[str, Any]:
        """The state tree as save() writes it now: {"model", "optim", "sched", "rng",
        "values"} (a mapping of models: "model/<name>/..."). Its tensors are the live ones."""
        tree: Dict[str, Any] = {}
        for k, (m, pr) in self._models.items():
            self._put(tree, "model", k, unwrap(m).state_dict(), pr)
        self._groups: Dict[str, List[Dict[str, Any]]] = {}
        for k, (o, pr) in self._optims.items():
            sd = o.state_dict()  # "state": the optimizer's own dicts and tensors
            groups = _plain_copy(sd["param_groups"], "param_groups")
            self._groups[k] = groups
            self._put(tree, "optim", k, {"state": sd["state"], "param_groups": groups}, pr)
        self._sched_sd: Dict[str, Any] = {}
        for k, s in self._scheds.items():
            sd = _plain_copy(s.state_dict(), "scheduler")
            self._sched_sd[k] = sd
            self._put(tree, "sched", k, sd, False)
        if self._rng is not None:
            tree["rng"] = PerRank(self._rng.tree())
        tree["values"] = self.values
        return tree

    # ---- save ------------------------------------------------------------------------------

    def reached_preemption(self, step: Optional[int] = None) -> bool:
        """Collective: a preemption signal, a due halt request or the deadline on any rank."""
        return self._mgr.reached_preemption(step)

    @uninterruptible
    def save(self, step: int, every: Optional[int] = None, force: bool = False,
             epoch: Optional[int] = None, end_of_epoch: bool = False) -> Optional[str]:
        """Collective; call it at every step with the number of steps done. Saves when `force`,
        or when `every` is given and step % every == 0, or when preemption was reached (a
        preemption signal, a halt request or the deadline, on any rank: checked here at every
        call). Returns the checkpoint's path, or None when it did not save. After a preemption
        it waits for the checkpoint, closes, and ends the process with exit status 75
        (exit_on_preemption; else `ckpt.preempted` is True and the caller exits)."""
        step = int(step)
        due = bool(force) or bool(every and step % int(every) == 0)
        stop = self._watch and self._mgr.reached_preemption(step)
        path = None
        if (due or stop) and self.last_saved_step != step:
            path = self._save(step, epoch, end_of_epoch, force=stop or bool(force))
        if stop:
            self.preempted = True
            self._mgr.wait_until_finished()  # the final checkpoint must be committed
            if self._exit:
                if self._mgr.comm.rank == 0:
                    print(f"mpickpt.torch: preempted at step {step}: final checkpoint saved, "
                          f"exiting with status {_preemption.EXIT_CODE}", file=sys.stderr,
                          flush=True)
                self.close()
                _preemption.exit()
        return path

    def _save(self, step: int, epoch: Optional[int], end_of_epoch: bool,
              force: bool) -> str:
        if self._rng is not None:
            self._rng.capture()
        path = self._mgr.save(step, self.state(), epoch=epoch, end_of_epoch=end_of_epoch,
                              force=force)
        self.last_saved_step = step
        return path

    def wait_until_finished(self) -> None:
        """Waits for an async save in flight; raises its failure (on every rank)."""
        self._mgr.wait_until_finished()

    # ---- restore ---------------------------------------------------------------------------

    def _optimizer_templates(self, step: Optional[int]) -> None:
        """Collective: gives every optimizer that has no state yet the state the checkpoint that
        restore() starts from holds for it (zeros of its shapes and dtypes, and its plain
        values), through optimizer.load_state_dict. Rank 0 reads the checkpoint's index."""
        empty = [k for k, (o, _) in self._optims.items() if not o.state]
        comm = self._mgr.comm
        # every rank must agree which optimizers are empty (a replicated tree)
        if not comm.allreduce(len(empty)):
            return
        found: Optional[Dict[str, Any]] = None
        err: Optional[BaseException] = None
        if comm.rank == 0:
            try:
                r = self._mgr._mgr.restorable()
                entries, start = r["entries"], r["start"]
                if step is not None:  # restore(step=...): that one
                    start = next((i for i, e in enumerate(entries) if e["step"] == step), None)
                    entries = entries[:start + 1] if start is not None else []
                if start is not None:
                    found = self._read_templates(entries, start, empty)
            except Exception as e:  # noqa: BLE001 - reported on every rank by agree
                err = e
        agree(comm, err)
        found = comm.bcast(found, root=0)
        if not found:
            return

        def create() -> None:  # local; agreed below: a rank that fails makes every rank raise
            for k in empty:
                tmpl = found.get(k)
                if not tmpl:
                    continue
                o = self._optims[k][0]
                state: Dict[int, Dict[str, Any]] = {}
                for pid, entries in tmpl.items():
                    state[pid] = {key: (torch.zeros(v[1], dtype=_DTYPES[v[2]]) if v[0] == "t"
                                        else v[1]) for key, v in entries.items()}
                nparams = sum(len(g["params"]) for g in o.param_groups)
                bad = [pid for pid in state if not 0 <= pid < nparams]
                if bad:
                    raise MismatchError(f"optimizer{'/' + k if k else ''}: the checkpoint has "
                                        f"state for parameter {bad[0]}, the optimizer has "
                                        f"{nparams} parameters")
                sd = o.state_dict()
                o.load_state_dict({"state": state, "param_groups": sd["param_groups"]})

        collective(comm, create)

    def _read_templates(self, entries: List[Dict[str, Any]], start: int,
                        empty: List[str]) -> Optional[Dict[str, Any]]:
        """{optimizer key: {param id: {state key: ("t", shape, dtype) or ("v", value)}}} from
        the newest readable checkpoint at or before `start` (rank 0, no MPI)."""
        for e in reversed(entries[:start + 1]):
            try:
                ck = _open_checkpoint(os.path.join(self._mgr.directory, e["prefix"]))
            except Exception:  # noqa: BLE001 - a damaged one: restore skips it too
                continue
            try:
                arrays = {n: (list(ck[n].shape), ck[n].dtype_name) for n in ck}
                plain = ck.json
                try:  # a record of version 2 has the tree: the keys in the saver's order
                    record = ck._json(0)
                except Exception:  # noqa: BLE001 - the restore reports a damaged record
                    record = None
            finally:
                ck.close()
            out: Dict[str, Any] = {}
            for k in empty:
                prefix = ("optim/" + (k + "/" if k else "")) + "state/"
                got: Dict[int, Dict[str, Any]] = {}
                for name, (shape, dtype) in arrays.items():
                    if name.startswith(prefix):
                        if _PARALLEL in name:
                            name = name[:name.index(_PARALLEL)]
                        self._template_entry(got, name[len(prefix):], ("t", shape, dtype))
                for name, value in plain.items():
                    if name.startswith(prefix):
                        self._template_entry(got, name[len(prefix):], ("v", value))
                out[k] = self._ordered(got, record, ["optim"] + ([k] if k else []) + ["state"])
            return out
        return None

    @staticmethod
    def _ordered(got: Dict[int, Dict[str, Any]], record: Optional[Dict[str, Any]],
                 path: List[Any]) -> Dict[int, Dict[str, Any]]:
        """`got` with each parameter's state keys in the order the saver's optimizer had them
        (PyTorch's, e.g. step, exp_avg, exp_avg_sq), when the record has its tree (version 2);
        else as found."""
        def child(node: Any, key: Any) -> Any:
            while isinstance(node, list) and node and node[0] == "p":
                node = node[1]
            if not (isinstance(node, list) and len(node) == 2 and node[0] == "d"):
                return None
            return next((n for kk, n in node[1] if kk == key), None)

        node = record.get("tree") if isinstance(record, dict) else None
        for key in path:
            node = child(node, key)
        if node is None:
            return got
        out: Dict[int, Dict[str, Any]] = {}
        for pid, entries in got.items():
            sub = child(node, pid)
            order = ([kk for kk, _ in sub[1]] if isinstance(sub, list) and len(sub) == 2
                     and sub[0] == "d" else [])
            keys = [kk for kk in order if kk in entries] + [kk for kk in entries
                                                              if kk not in order]
            out[pid] = {kk: entries[kk] for kk in keys}
        return out

    @staticmethod
    def _template_entry(got: Dict[int, Dict[str, Any]], rest: str, v: Tuple) -> None:
        parts = rest.split("/")
        if len(parts) != 2:
            return  # nested optimizer state: left to the restore to report
        try:
            pid = int(parts[0])
        except ValueError:
            return
        got.setdefault(pid, {})[_unescape(parts[1])] = v

    @uninterruptible
    def restore_or_start(self, step: Optional[int] = None,
                         strict: bool = True) -> Optional[int]:
        """Collective: restores the newest valid checkpoint (or the one of `step`) into the
        model, optimizers, schedulers, RNGs and values, and returns its step, the step to resume
        from; None when there is none (a fresh start: everything is left as it was, also after
        a damaged checkpoint was tried). `ckpt.restored` is the restore's info (prefix, step,
        epoch, world_size, ...), or None. strict=False restores what the checkpoint and the
        state have in common (a model alone from a training checkpoint), as
        CheckpointManager.restore(strict=False) does."""
        kw = {} if strict or not _HAS_STRICT else {"strict": False}
        had_state = {k: bool(o.state) for k, (o, _) in self._optims.items()}
        self._optimizer_templates(step)
        if self._rng is not None:
            self._rng.capture()
        def forget_created() -> None:  # the optimizer state made from the checkpoint above
            for k, (o, _) in self._optims.items():
                if not had_state[k]:
                    o.state.clear()

        listed = step is None and self._mgr.latest_step() is not None
        try:
            tree = self.state()
            if step is not None:
                info = self._mgr.restore(tree, step=step, **kw)
            else:
                info = self._mgr.restore_or_initialize(tree, **kw)
        except BaseException:
            forget_created()  # a failed restore leaves no zero moments behind
            raise
        if info is None:
            forget_created()
            self.restored = None
            if listed:
                # The C restore reads replicated and sharded tensors in place and checks them
                # there: a rejected checkpoint may have left parts of itself in the model and
                # the optimizer. Not a fresh start, and no silent one (keeping a copy of every
                # tensor to put back would cost more than the restore itself).
                raise CorruptError(
                    f"no checkpoint of {self._mgr.directory} could be restored (every one "
                    "listed was damaged: see the warnings above), and the model's and "
                    "optimizers' tensors may hold parts of them: this is not a fresh start. "
                    "Retire the damaged checkpoints (mpickpt drop DIR NAME...) or remove them, "
                    "then start again")
            return None
        self._apply()
        self.restored = info
        self.last_saved_step = int(info["step"])
        return int(info["step"])

    def _apply(self) -> None:
        """After a restore: what PyTorch keeps outside the restored tensors."""
        for k, (o, _) in self._optims.items():
            saved = self._groups[k]
            name = "optimizer" + ("/" + k if k else "")
            if len(saved) != len(o.param_groups) or any(
                    len(s["params"]) != len(g["params"]) for s, g in zip(saved, o.param_groups)):
                raise MismatchError(f"{name}: the checkpoint's parameter groups do not match "
                                    "the optimizer's")
            # what optimizer.load_state_dict does to the groups, without copying the state
            # tensors it would replace (they were restored in place and stay registered)
            for g, s in zip(o.param_groups, saved):
                for key, v in s.items():
                    if key != "params":
                        g[key] = _like(v, g.get(key))
        for k, s in self._scheds.items():
            s.load_state_dict(_like(self._sched_sd[k], s.state_dict()))
        if self._rng is not None:
            self._rng.apply()

    # ---- end -------------------------------------------------------------------------------

    @uninterruptible
    def close(self) -> None:
        """Waits for a save in flight, then frees everything. Collective."""
        self._mgr.close()

    def __enter__(self) -> "Checkpointer":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

