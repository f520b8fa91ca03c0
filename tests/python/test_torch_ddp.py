"""mpickpt.torch.Checkpointer with a DistributedDataParallel model (torch.distributed's gloo
backend, set up over TCP on this host beside MPI): the checkpoint's names are the plain model's
("model/0.weight", never "model/module.0.weight"); restored into a new DDP-wrapped model and into
a plain one, with an SGD optimizer (momentum) that never stepped, the parameters and the
optimizer state come back bit for bit, and the next DDP step gives the same bits.

Usage: mpirun -np N python3 test_torch_ddp.py OUTDIR"""
import socket

import pycheck as pc
from pycheck import check, check_bits, comm, rank, say, size

torch = pc.need_torch()

import torch.distributed as dist  # noqa: E402

import mpickpt  # noqa: E402
import mpickpt.torch  # noqa: E402


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


port = comm.bcast(free_port() if rank == 0 else None)
dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank,
                        world_size=size)


def make(seed):
    torch.manual_seed(seed)
    net = torch.nn.Sequential(torch.nn.Linear(5, 8), torch.nn.ReLU(), torch.nn.Linear(8, 2))
    ddp = torch.nn.parallel.DistributedDataParallel(net)
    opt = torch.optim.SGD(ddp.parameters(), lr=0.1, momentum=0.9, dampening=0.5)
    return net, ddp, opt


def step(ddp, opt, t):
    g = torch.Generator().manual_seed(10 * t + rank)  # each rank its own data
    x = torch.randn(4, 5, generator=g)
    opt.zero_grad()
    ddp(x).pow(2).mean().backward()  # DDP averages the gradients over the ranks
    opt.step()


d = pc.outdir("ckpt")
net, ddp, opt = make(1)
with mpickpt.torch.Checkpointer(d, model=ddp, optimizer=opt) as ck:
    for t in range(3):
        step(ddp, opt, t)
    path = ck.save(3, force=True)
want = {k: v.clone() for k, v in net.state_dict().items()}
want_opt = {i: s["momentum_buffer"].clone() for i, s in opt.state_dict()["state"].items()}
step(ddp, opt, 3)
after = {k: v.clone() for k, v in net.state_dict().items()}
with mpickpt.open(path) as c:
    names = [n for n in c if n.startswith("model/")]
check(sorted(names) == ["model/0.bias", "model/0.weight", "model/2.bias", "model/2.weight"],
      f"names {names}")

net2, ddp2, opt2 = make(2)
with mpickpt.torch.Checkpointer(d, model=ddp2, optimizer=opt2) as ck:
    check(ck.restore_or_start() == 3, "did not restore step 3")
for k, v in net2.state_dict().items():
    check_bits(v, want[k], f"DDP restore: {k}")
for i, s in opt2.state_dict()["state"].items():
    check_bits(s["momentum_buffer"], want_opt[i], f"DDP restore: momentum {i}")
step(ddp2, opt2, 3)
for k, v in net2.state_dict().items():
    check_bits(v, after[k], f"DDP restore, one more step: {k}")

plain = torch.nn.Sequential(torch.nn.Linear(5, 8), torch.nn.ReLU(), torch.nn.Linear(8, 2))
with mpickpt.torch.Checkpointer(d, model=plain, rng=False) as ck:
    ck.restore_or_start(step=3, strict=False)  # a model only: not the optimizer, the RNGs
for k, v in plain.state_dict().items():
    check_bits(v, want[k], f"plain restore: {k}")
dist.destroy_process_group()
say("OK: DDP names are the plain model's; restored into DDP and plain models bit for bit")
