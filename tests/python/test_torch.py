"""mpickpt.torch.Checkpointer: a PyTorch job's whole training state saved and restored.

- a model with a BatchNorm and tied weights, AdamW with weight decay, a LambdaLR, the RNGs (torch,
  NumPy, random) and user values (a replicated counter, a PerRank data position) saved after 3
  steps; restored into NEW objects: a model initialised otherwise, an AdamW never stepped (no
  state: created from the checkpoint, no warm-up step), a fresh scheduler, RNGs elsewhere. Then
  the parameters, every optimizer state tensor, the param_groups (lr set by the scheduler), the
  scheduler's state, the values, and the next draws of the three RNGs equal the saver's, bit for
  bit; the tie holds (one tensor; where the package stores shared storage once, the checkpoint
  holds head.weight as an alias of embed.weight); one more training step on both gives the same
  bits;
- a second save with nothing changed but the values keeps the registration (the plan is not
  rebuilt) and holds the fresh values (read back with mpickpt.open);
- a fresh start (no checkpoint) returns None and leaves the model and a never-stepped optimizer
  as they were (no state created, parameters untouched);
- every checkpoint damaged (a flipped byte in the data): CorruptError on every rank, never a
  silent fresh start with tensors that may hold parts of the checkpoint;
- `import mpickpt` alone does not import torch (checked in a subprocess).

Usage: mpirun -np N python3 test_torch.py OUTDIR"""
import os
import random
import subprocess
import sys

import numpy as np

import pycheck as pc
from nompi import flip_byte
from pycheck import check, check_bits, comm, rank, say

torch = pc.need_torch()

import mpickpt  # noqa: E402
import mpickpt.torch  # noqa: E402


class Net(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.embed = torch.nn.Embedding(11, 6)
        self.norm = torch.nn.BatchNorm1d(6)
        self.mid = torch.nn.Linear(6, 6)
        self.head = torch.nn.Linear(6, 11, bias=False)
        self.head.weight = self.embed.weight  # tied
        self.drop = torch.nn.Dropout(0.2)

    def forward(self, idx):
        return self.head(self.drop(torch.relu(self.mid(self.norm(self.embed(idx))))))


def make(seed):
    torch.manual_seed(seed)
    model = Net()
    opt = torch.optim.AdamW(model.parameters(), lr=0.05, weight_decay=0.1, betas=(0.8, 0.95))
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: 1.0 / (1 + s))
    return model, opt, sched


def train_step(model, opt, sched, t):
    g = torch.Generator().manual_seed(100 + t)  # the same data on every rank
    idx = torch.randint(0, 11, (8,), generator=g)
    model.train()
    opt.zero_grad()
    loss = torch.nn.functional.cross_entropy(model(idx), idx)
    loss.backward()
    for p in model.parameters():  # the replicas stay equal (dropout differs per rank)
        comm.Allreduce(pc.MPI.IN_PLACE, p.grad.numpy(), op=pc.MPI.SUM)
    opt.step()
    sched.step()


def draws():
    return (torch.rand(3).numpy().tobytes(), np.random.rand(3).tobytes(), random.random(),
            np.random.randn(), random.gauss(0, 1))


def main():
    d = pc.outdir("ckpt")
    # ---- the job that saves ----------------------------------------------------------------
    model, opt, sched = make(1)
    torch.manual_seed(7 + rank)
    np.random.seed(70 + rank)
    random.seed(700 + rank)
    np.random.randn()  # a cached Gaussian in NumPy's state (has_gauss = 1)
    random.gauss(0, 1)  # and in random's (gauss_next set)
    values = {"epoch": 2, "pos": mpickpt.PerRank({"batch": 10 * rank + 3})}
    ckpt = mpickpt.torch.Checkpointer(d, model=model, optimizer=opt, scheduler=sched,
                                      values=values, async_save=True)
    check(ckpt.restore_or_start() is None, "an empty directory restored something")
    for t in range(3):
        train_step(model, opt, sched, t)
    path = ckpt.save(3, every=10)
    check(path is None, "save(3, every=10) saved")
    path = ckpt.save(3, every=3)
    check(path is not None and path.endswith("ckpt-1"), f"save(3, every=3): {path}")
    reg = ckpt.manager._reg
    sig = reg.signature
    after = draws()  # what the RNGs give next after the save
    want_model = {k: v.clone() for k, v in model.state_dict().items()}
    want_opt = {i: {k: v.clone() if torch.is_tensor(v) else v for k, v in s.items()}
                for i, s in opt.state_dict()["state"].items()}
    want_groups = [{k: v for k, v in g.items() if k != "params"} for g in opt.param_groups]
    want_sched = {k: v for k, v in sched.state_dict().items() if k != "lr_lambdas"}
    # a second save: nothing changed but a value and the RNG; the plan is kept
    values["epoch"] = 3
    values["pos"].value["batch"] += 1
    p2 = ckpt.save(4, force=True)
    check(reg.signature is sig, "the second save registered the state again")
    ckpt.wait_until_finished()
    with mpickpt.open(p2) as ck:
        check(ck.json["values/epoch"] == 3, f"second checkpoint: values/epoch {ck.json}")
        check(ck.json_of_rank(rank)["values/pos/batch"] == 10 * rank + 4,
              f"second checkpoint: pos {ck.json_of_rank(rank)}")
        names = list(ck)
        aliases = getattr(ck, "aliases", None)  # the record of version 2 (shared storage once)
    if aliases is not None:
        check("model/head.weight" not in names and
              aliases.get("model/head.weight", {}).get("of") == "model/embed.weight",
              f"the tied weight is stored twice: {names}, aliases {aliases}")
    check("model/embed.weight" in names and "optim/state/0/exp_avg" in names
          and "rng/torch" in names, f"tensor names {names}")
    check(not any("module." in n for n in names), f"names {names}")
    train_step(model, opt, sched, 3)
    next_params = {k: v.clone() for k, v in model.state_dict().items()}
    ckpt.close()
    # ---- a new process's objects, restored --------------------------------------------------
    model2, opt2, sched2 = make(2)
    check(not opt2.state, "a fresh AdamW has state")
    torch.manual_seed(99)
    np.random.seed(99)
    random.seed(99)
    values2 = {"epoch": 0, "pos": mpickpt.PerRank({"batch": -1})}
    ckpt2 = mpickpt.torch.Checkpointer(d, model=model2, optimizer=opt2, scheduler=sched2,
                                       values=values2)
    got = ckpt2.restore_or_start(step=3)
    check(got == 3, f"restore_or_start(step=3) returned {got}")
    check(ckpt2.restored["prefix"] == path, f"restored {ckpt2.restored}")
    check(model2.head.weight is model2.embed.weight, "the tie is gone")
    for k, v in model2.state_dict().items():
        check_bits(v, want_model[k], f"model {k}")
    sd = opt2.state_dict()["state"]
    check(sorted(sd) == sorted(want_opt), f"optimizer state of params {sorted(sd)}")
    for i, s in want_opt.items():
        check(sorted(sd[i]) == sorted(s), f"optimizer state {i}: keys {sorted(sd[i])}")
        if aliases is not None:  # a record with its tree: PyTorch's own key order
            check(list(sd[i]) == list(s), f"optimizer state {i}: keys in the order {list(sd[i])}")
        for k, v in s.items():
            check_bits(sd[i][k], v, f"optimizer state {i}/{k}")
    got_groups = [{k: v for k, v in g.items() if k != "params"} for g in opt2.param_groups]
    check(got_groups == want_groups, f"param_groups {got_groups} != {want_groups}")
    check(isinstance(opt2.param_groups[0]["betas"], tuple), "betas is no longer a tuple")
    got_sched = {k: v for k, v in sched2.state_dict().items() if k != "lr_lambdas"}
    check(got_sched == want_sched, f"scheduler {got_sched} != {want_sched}")
    check(values2 == {"epoch": 2, "pos": values2["pos"]} and values2["pos"].value ==
          {"batch": 10 * rank + 3}, f"values {values2}")
    check(draws() == after, "the RNGs do not continue as after the save")
    train_step(model2, opt2, sched2, 3)
    for k, v in model2.state_dict().items():
        check_bits(v, next_params[k], f"after one more step: model {k}")
    # the latest (step 4) by default
    ckpt2.close()
    model3, opt3, sched3 = make(3)
    with mpickpt.torch.Checkpointer(d, model=model3, optimizer=opt3, scheduler=sched3,
                                    values={"epoch": 0, "pos": mpickpt.PerRank({"batch": 0})}
                                    ) as c3:
        check(c3.restore_or_start() == 4, "the latest checkpoint is not step 4")
        check(c3.values["epoch"] == 3, f"values {c3.values}")
    say("restored into new objects: model, tie, AdamW created from the checkpoint, "
        "param_groups, LambdaLR, RNGs, values: bit for bit")
    # ---- a fresh start leaves everything as it was ----------------------------------------
    model4, opt4, sched4 = make(4)
    before = {k: v.clone() for k, v in model4.state_dict().items()}
    with mpickpt.torch.Checkpointer(pc.outdir("empty"), model=model4, optimizer=opt4,
                                    scheduler=sched4) as c4:
        check(c4.restore_or_start() is None, "restored from an empty directory")
    check(not opt4.state, "a fresh start created optimizer state")
    for k, v in model4.state_dict().items():
        check_bits(v, before[k], f"fresh start: model {k}")
    # ---- every checkpoint damaged: an error, not a silent fresh start ---------------------
    bad = pc.outdir("damaged")
    model5, opt5, sched5 = make(5)
    with mpickpt.torch.Checkpointer(bad, model=model5, optimizer=opt5) as c5:
        train_step(model5, opt5, sched5, 0)
        c5.save(1, force=True)
    comm.Barrier()
    if rank == 0:
        data = [os.path.join(bad, f) for f in sorted(os.listdir(bad))
                if f.startswith("ckpt-1.data")]
        hit = [(f, ds) for f in data for ds in pc.datasets(f)
               if ds.startswith(("/packs/", "/tensors/model"))]
        check(hit, f"no model data in {data}")
        for f, ds in hit:  # a byte of every piece of the model's data
            flip_byte(f, pc.data_offset(f, ds))
    comm.Barrier()
    model6, opt6, _ = make(6)
    c6 = mpickpt.torch.Checkpointer(bad, model=model6, optimizer=opt6)
    pc.expect_error(mpickpt.CorruptError, c6.restore_or_start, "could be restored",
                    "not a fresh start")
    check(not opt6.state, "the failed restore left optimizer state")
    c6.close()
    # ---- import mpickpt does not import torch -----------------------------------------------
    if rank == 0:
        r = subprocess.run([sys.executable, "-c", "import sys, mpickpt; "
                            "print('torch' in sys.modules)"], capture_output=True, text=True)
        check(r.returncode == 0 and r.stdout.strip() == "False",
              f"import mpickpt: {r.returncode} {r.stdout} {r.stderr[-500:]}")
    comm.Barrier()
    say("OK")


main()
