#!/usr/bin/python3
"""train_torch.py: a data-parallel PyTorch training job that checkpoints with mpickpt, can be made
to crash, handles preemption, and resumes, bit for bit on the same number of ranks.

    mpirun -np N /usr/bin/python3 jobs/train_torch.py --dir DIR [--steps T] [--ckpt-every K]
        [--keep N] [--async] [--layout per-rank|shared] [--crash-rank R --crash-step S]
        [--seed X] [--in-dim D] [--hidden H] [--layers L] [--classes C] [--batch B] [--lr LR]
        [--dropout P] [--steps-per-epoch E] [--threads 1] [--step-sleep MS]
        [--deadline-reserve S] [--hold-at S]

(PYTHONPATH=build/python, or the package installed with cmake --install; docs/python.md.)

The job: an MLP (L hidden layers of H units, ReLU, dropout) learns to classify synthetic data, a
fixed random "teacher" labelling Gaussian inputs, with torch.optim.Adam. Every rank holds the
whole model (data parallelism): the global batch of step t (B samples drawn from (seed, t) only)
is split over the ranks in contiguous blocks; each rank's gradient of (sum of its samples' losses
/ B) is summed over the ranks with MPI Allreduce on NumPy views of the gradients, so every rank
applies the same mean gradient. Dropout draws from torch's global RNG, seeded per rank: that RNG
state is per-rank state a checkpoint must hold for the run to resume exactly.

Checkpoints (mpickpt.torch.Checkpointer in DIR, `ckpt-<N>`) after every step t with t % K == 0
and after the last step: the model, Adam (its state and param_groups), this rank's RNG states
(torch, NumPy, random: per rank) and the values {"epoch": e, "config": {the run's settings},
"hash": H}; everything is restored in place (Adam's state, when the optimizer has none yet, is
created from the checkpoint: no warm-up step). A run resumes from the latest valid checkpoint in
DIR and continues at the next step; on another number of ranks the model and optimizer are
replicated values (stored once, restored everywhere), and the RNG states of each rank the
checkpoint has are restored (ranks the writer did not have keep their freshly seeded RNGs).

With --threads 1 (the default: torch.set_num_threads(1)) and torch's deterministic algorithms,
two runs on the same number of ranks print the same loss at every step, bit for bit, whether or
not one of them was killed and resumed in between (tests/python/test_train_resume.py).

Preemption: SIGTERM/SIGUSR1 (Slurm's --signal, scancel --signal) or the deadline (MPICKPT_DEADLINE,
minus --deadline-reserve seconds) is noticed at the next step boundary by a collective check;
every rank takes a final checkpoint and exits 75 (mpickpt.preemption.exit(): no MPI_ABORT message
under python -m mpi4py either), on which
mpickpt-run requeues the job under Slurm (jobs/slurm/mpickpt-run.sbatch; jobs/run-mpirun.sh
without Slurm). A halt request (`mpickpt halt DIR`) stops it the same way, for good.

Output, rank 0 (crash and errors: the rank concerned):
    fresh start
    resumed step=T epoch=E from=PREFIX world_size=W hash=H   (the restored model + optimizer)
    verified the restored model and optimizer (hash H, as when saved) ...
    step T loss L                                            (L: repr() of the global mean loss)
    checkpoint prefix=P step=T epoch=E blocking_s=B hash=H   (async: when save() returned)
    crash rank=R step=T                                      (then SIGKILL)
    holding at step=T until preempted                        (--hold-at, a fresh run)
    preempted step=T
    done step=T epoch=E hash=H
H is (the start of) a SHA-256 of the model's and the optimizer's tensors; every rank computes
it and the job fails when the replicas differ. The checkpoint stores it (a plain value) and a
resumed run checks that the restored tensors hash to it ("verified ...", else exit 1). Exit codes: 0 done, 1 error, 2 usage, 75 preempted.
"""
from __future__ import annotations

import argparse
import hashlib
import os
import random
import signal
import sys
import time
from typing import Any, Dict, List, Optional

import numpy as np
import torch
from mpi4py import MPI

import mpickpt
import mpickpt.torch

MASK = (1 << 64) - 1


def mix(*xs: int) -> int:
    """A 63-bit seed from integers (splitmix64 steps): the same on every machine and run."""
    h = 0x9E3779B97F4A7C15
    for x in xs:
        h = (h ^ (x & MASK)) * 0xBF58476D1CE4E5B9 & MASK
        h = (h ^ (h >> 31)) * 0x94D049BB133111EB & MASK
        h ^= h >> 29
    return h >> 1


def parse_args(argv: Optional[List[str]] = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        prog="train_torch.py", description=__doc__.split("\n\n")[0],
        formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--dir", required=True, help="checkpoint directory (ckpt-<N> in it)")
    p.add_argument("--steps", type=int, default=60, help="steps to train in all (default 60)")
    p.add_argument("--ckpt-every", type=int, default=10,
                   help="checkpoint after every K-th step (0: only after the last; default 10)")
    p.add_argument("--keep", type=int, default=3, help="checkpoints kept (0: all; default 3)")
    p.add_argument("--async", dest="async_save", action="store_true",
                   help="asynchronous saves: save() returns once the tensors are copied")
    p.add_argument("--layout", choices=["per-rank", "shared"], default=None,
                   help="data files: one per rank (default) or one shared file")
    p.add_argument("--crash-rank", type=int, default=None, help="this rank ...")
    p.add_argument("--crash-step", type=int, default=None,
                   help="... kills itself (SIGKILL) after this step, before its checkpoint")
    p.add_argument("--seed", type=int, default=1234, help="model, data and RNG seed")
    p.add_argument("--in-dim", type=int, default=32, help="input features (default 32)")
    p.add_argument("--hidden", type=int, default=64, help="units per hidden layer (default 64)")
    p.add_argument("--layers", type=int, default=2, help="hidden layers (default 2)")
    p.add_argument("--classes", type=int, default=10, help="classes (default 10)")
    p.add_argument("--batch", type=int, default=64, help="global batch size (default 64)")
    p.add_argument("--lr", type=float, default=1e-2, help="Adam's learning rate (default 0.01)")
    p.add_argument("--dropout", type=float, default=0.1, help="dropout probability")
    p.add_argument("--steps-per-epoch", type=int, default=10, help="steps per epoch (default 10)")
    p.add_argument("--threads", type=int, default=1,
                   help="torch threads per rank (default 1: bit-reproducible runs)")
    p.add_argument("--step-sleep", type=float, default=0.0, metavar="MS",
                   help="sleep MS milliseconds in every step (to preempt a run on demand)")
    p.add_argument("--deadline-reserve", type=float, default=30.0, metavar="S",
                   help="stop S seconds before the deadline (MPICKPT_DEADLINE; default 30)")
    p.add_argument("--hold-at", type=int, default=None, metavar="S",
                   help="a fresh run waits after step S (and its checkpoint) until it is "
                   "preempted; a resumed run does not (tests: the signal cannot come too late)")
    a = p.parse_args(argv)
    if (a.crash_rank is None) != (a.crash_step is None):
        p.error("--crash-rank and --crash-step go together")
    for name in ("steps", "batch", "in_dim", "hidden", "classes", "steps_per_epoch", "threads"):
        if getattr(a, name) < 1:
            p.error(f"--{name.replace('_', '-')} must be >= 1")
    if a.ckpt_every < 0 or a.keep < 0 or a.layers < 0:
        p.error("--ckpt-every, --keep and --layers must be >= 0")
    return a


class MLP(torch.nn.Module):
    def __init__(self, a: argparse.Namespace) -> None:
        super().__init__()
        dims = [a.in_dim] + [a.hidden] * a.layers
        self.hidden = torch.nn.ModuleList(
            torch.nn.Linear(i, o) for i, o in zip(dims[:-1], dims[1:]))
        self.drop = torch.nn.Dropout(a.dropout)
        self.out = torch.nn.Linear(dims[-1], a.classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for layer in self.hidden:
            x = self.drop(torch.relu(layer(x)))
        return self.out(x)


class Job:
    def __init__(self, a: argparse.Namespace, comm: Any) -> None:
        self.a = a
        self.comm = comm
        self.rank, self.size = comm.rank, comm.size
        # The global batch split in contiguous blocks, the first B % size ranks one sample more.
        q, r = divmod(a.batch, self.size)
        self.lo = self.rank * q + min(self.rank, r)
        self.hi = self.lo + q + (1 if self.rank < r else 0)
        g = torch.Generator().manual_seed(mix(a.seed, 1))
        self.teacher = torch.randn(a.in_dim, a.classes, generator=g)
        # The fresh start: the model from the seed, Adam as PyTorch makes it (its state appears
        # at its first step, or comes from the checkpoint: mpickpt.torch creates it), this
        # rank's RNG (dropout) from (seed, rank). A restore overwrites all three.
        torch.manual_seed(mix(a.seed, 2))
        self.model = MLP(a)
        self.optim = torch.optim.Adam(self.model.parameters(), lr=a.lr)
        torch.manual_seed(mix(a.seed, 3, self.rank))
        np.random.seed(mix(a.seed, 5, self.rank) % (1 << 32))  # unused, but checkpointed:
        random.seed(mix(a.seed, 6, self.rank))                 # deterministic too

    def config(self) -> Dict[str, Any]:
        """What must match for a checkpoint to continue this run (stored as JSON)."""
        a = self.a
        return {"seed": a.seed, "in_dim": a.in_dim, "hidden": a.hidden, "layers": a.layers,
                "classes": a.classes, "batch": a.batch, "dropout": a.dropout,
                "steps_per_epoch": a.steps_per_epoch}

    def batch(self, t: int):
        """This rank's block of the global batch of step t: a function of (seed, t) only."""
        g = torch.Generator().manual_seed(mix(self.a.seed, 4, t))
        x = torch.randn(self.a.batch, self.a.in_dim, generator=g)
        y = torch.argmax(x @ self.teacher, dim=1)
        return x[self.lo:self.hi], y[self.lo:self.hi]

    def step(self, t: int) -> float:
        """One data-parallel step; returns the global mean loss (the same on every rank)."""
        x, y = self.batch(t)
        self.model.train()
        self.optim.zero_grad(set_to_none=False)
        loss_sum = torch.nn.functional.cross_entropy(self.model(x), y, reduction="sum")
        (loss_sum / self.a.batch).backward()
        # Sum the gradients over the ranks in place (NumPy views of the same memory): each
        # rank's is of (its losses / B), so the sum is the gradient of the global mean loss.
        for p in self.model.parameters():
            self.comm.Allreduce(MPI.IN_PLACE, p.grad.numpy(), op=MPI.SUM)
        self.optim.step()
        total = np.array([loss_sum.item()], dtype=np.float64)
        self.comm.Allreduce(MPI.IN_PLACE, total, op=MPI.SUM)
        return float(total[0]) / self.a.batch

    def digest(self) -> str:
        """SHA-256 of the model's and the optimizer's tensors, checked equal on every rank."""
        h = hashlib.sha256()
        sd = self.optim.state_dict()["state"]
        for name, t in list(self.model.state_dict().items()) + [
                (f"optim/{i}/{k}", v) for i, s in sorted(sd.items())
                for k, v in sorted(s.items())]:
            h.update(name.encode())
            h.update(t.detach().contiguous().numpy().tobytes())
        mine = h.hexdigest()[:16]
        every = self.comm.allgather(mine)
        if any(d != mine for d in every):
            raise RuntimeError(f"the model replicas differ across ranks: {every}")
        return mine


def emit(line: str) -> None:
    """One line in one write (mpirun merges the ranks' output: no line may be split)."""
    sys.stdout.write(line + "\n")
    sys.stdout.flush()


def main(argv: Optional[List[str]] = None) -> int:
    a = parse_args(argv)
    torch.set_num_threads(a.threads)
    torch.use_deterministic_algorithms(True)
    comm = MPI.COMM_WORLD
    rank = comm.rank

    def say(line: str) -> None:
        if rank == 0:
            emit(line)

    job = Job(a, comm)
    # The checkpointed state: the model, Adam (state and param_groups), this rank's RNG states
    # (mpickpt.torch takes them), and the values below; restored in place into all of them.
    values: Dict[str, Any] = {
        "epoch": 0,
        "config": job.config(),
        "hash": "",  # digest() of the model and optimizer when saved: checked after a restore
    }
    ckpt = mpickpt.torch.Checkpointer(
        a.dir, model=job.model, optimizer=job.optim, values=values, max_to_keep=a.keep or None,
        async_save=a.async_save, layout=a.layout, deadline_reserve=a.deadline_reserve,
        exit_on_preemption=False)  # this job says "preempted step=T" first
    try:
        restored = ckpt.restore_or_start()
        if restored is None:
            start = 1
            say("fresh start")
        else:
            info = ckpt.restored
            if values["config"] != job.config():
                diff = {k: (v, job.config()[k]) for k, v in values["config"].items()
                        if job.config().get(k) != v}
                if rank == 0:
                    print(f"train_torch.py: {info['prefix']} was written with other settings "
                          f"(checkpoint, now): {diff}", file=sys.stderr, flush=True)
                return 1
            start = restored + 1
            got = job.digest()
            say(f"resumed step={restored} epoch={values['epoch']} from={info['prefix']} "
                f"world_size={info['world_size']} hash={got}")
            if got != values["hash"]:
                if rank == 0:
                    print(f"train_torch.py: verification failed: the restored model and "
                          f"optimizer hash to {got}, they hashed to {values['hash']} when saved",
                          file=sys.stderr, flush=True)
                return 1
            have = min(info["world_size"], comm.size)
            say(f"verified the restored model and optimizer (hash {got}, as when saved) on "
                f"{comm.size} rank(s); the RNG state of rank(s) 0-{have - 1} restored"
                + (f", rank(s) {have}-{comm.size - 1} (not in the checkpoint) keep a fresh one"
                   if have < comm.size else "")
                + (f" (written by {info['world_size']} ranks)"
                   if info["world_size"] != comm.size else ""))

        def save(t: int) -> None:
            values["epoch"] = (t - 1) // a.steps_per_epoch
            values["hash"] = job.digest()
            t0 = time.perf_counter()
            path = ckpt.save(t, force=True, epoch=values["epoch"],
                             end_of_epoch=t % a.steps_per_epoch == 0)
            blocking = time.perf_counter() - t0
            say(f"checkpoint prefix={path} step={t} epoch={values['epoch']} "
                f"blocking_s={blocking:.3f} hash={values['hash']}")

        t = start - 1
        for t in range(start, a.steps + 1):
            if a.step_sleep:
                time.sleep(a.step_sleep / 1000.0)
            loss = job.step(t)
            say(f"step {t} loss {loss!r}")
            if t == a.crash_step and rank == a.crash_rank:
                emit(f"crash rank={rank} step={t}")
                sys.stderr.flush()
                os.kill(os.getpid(), signal.SIGKILL)
            due = t == a.steps or bool(a.ckpt_every and t % a.ckpt_every == 0)
            if due:
                save(t)
            if t == a.hold_at and start == 1 and t < a.steps:
                say(f"holding at step={t} until preempted")
                while not ckpt.reached_preemption(t):  # collective
                    time.sleep(0.1)
            if t < a.steps and (ckpt.preempted or ckpt.reached_preemption(t)):  # collective
                if not due:
                    save(t)
                ckpt.wait_until_finished()  # the final checkpoint must be committed
                say(f"preempted step={t}")
                ckpt.close()
                mpickpt.preemption.exit()  # 75; no MPI_ABORT banner under python -m mpi4py
        ckpt.wait_until_finished()
        say(f"done step={max(t, start - 1)} epoch={values['epoch']} hash={job.digest()}")
    finally:
        ckpt.close()
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except mpickpt.Error as e:
        # the same error on every rank: rank 0 says it
        if MPI.COMM_WORLD.rank == 0:
            print(f"train_torch.py: {type(e).__name__}: {e}", file=sys.stderr, flush=True)
        sys.exit(1)
