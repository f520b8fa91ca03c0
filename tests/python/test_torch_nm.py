"""mpickpt.torch.Checkpointer across rank counts (N -> M): written on N ranks, read on M.

    mpirun -np N python3 test_torch_nm.py write OUTDIR
    mpirun -np M python3 test_torch_nm.py read WRITERDIR N

The state: a model and Adam after one step (replicated), values with a replicated epoch, a PerRank
data position and a Shard of a 12-element global tensor (each rank a contiguous block). Read on M
ranks into new objects (Adam never stepped: its state created from the checkpoint): the model and
Adam's state equal the writer's (recomputed here: the same seed and step), the epoch is 5, the
Shard holds its block of 0..11 in the reader's tiling, rank r < N gets the position 100 + r and a
rank the writer did not have keeps its own (-1)."""
import sys

import pycheck as pc
from pycheck import check, check_bits, rank, say, size

torch = pc.need_torch()

import mpickpt  # noqa: E402
import mpickpt.torch  # noqa: E402

G = 12


def objects(n):
    torch.manual_seed(0)
    m = torch.nn.Linear(3, 2)
    o = torch.optim.Adam(m.parameters(), lr=0.1)
    lo, hi = rank * G // n, (rank + 1) * G // n
    sh = torch.full((hi - lo,), -1.0)
    vals = {"epoch": 0, "pos": mpickpt.PerRank({"b": -1}), "w": mpickpt.Shard(sh, (G,), (lo,))}
    return m, o, sh, vals, lo, hi


def one_step(m, o):
    m(torch.ones(1, 3)).sum().backward()
    o.step()


mode, d = sys.argv[1], sys.argv[2]
m, o, sh, vals, lo, hi = objects(size)
if mode == "write":
    with mpickpt.torch.Checkpointer(d, model=m, optimizer=o, values=vals) as c:
        check(c.restore_or_start() is None, "the writer restored something")
        one_step(m, o)
        vals["epoch"] = 5
        vals["pos"].value["b"] = 100 + rank
        sh[:] = torch.arange(lo, hi, dtype=torch.float32)
        c.save(1, force=True)
    say(f"OK: written on {size} ranks")
else:
    n = int(sys.argv[3])
    m0, o0, *_ = objects(size)
    one_step(m0, o0)
    with mpickpt.torch.Checkpointer(d, model=m, optimizer=o, values=vals, lock_wait=120) as c:
        check(c.restore_or_start() == 1, "did not restore step 1")
    for k, v in m.state_dict().items():
        check_bits(v, m0.state_dict()[k], f"model {k}")
    s, s0 = o.state_dict()["state"], o0.state_dict()["state"]
    check(sorted(s) == sorted(s0), f"Adam's state of params {sorted(s)}")
    for i in s0:
        for k in s0[i]:
            check_bits(s[i][k], s0[i][k], f"Adam {i}/{k}")
    check(vals["epoch"] == 5, f"epoch {vals['epoch']}")
    check_bits(sh, torch.arange(lo, hi, dtype=torch.float32), "the Shard's block")
    want = 100 + rank if rank < n else -1
    check(vals["pos"].value == {"b": want}, f"pos {vals['pos'].value}, expected {want}")
    say(f"OK: written on {n} ranks, read on {size}: model, Adam, epoch, Shard, PerRank")
