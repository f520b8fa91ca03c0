"""Smoke test of the Python package: a PyTorch model and optimizer, a bfloat16 tensor, PerRank and
Shard values and JSON leaves saved through a CheckpointManager, clobbered, restored in place and
read back with mpickpt.open. Usage: mpirun -np N python3 test_smoke.py OUTDIR"""
import numpy as np, torch, sys, os
from mpi4py import MPI
import mpickpt
comm = MPI.COMM_WORLD
r, n = comm.rank, comm.size
d = os.path.join(sys.argv[1], "ck")
torch.manual_seed(0)
model = torch.nn.Linear(4, 3)
opt = torch.optim.Adam(model.parameters(), lr=0.01)
model(torch.ones(2, 4)).sum().backward(); opt.step()
local = np.arange(10, dtype=np.float32) + 10 * r
state = {"model": model.state_dict(), "optim": opt.state_dict(), "epoch": 3, "name": "x",
         "bf": torch.arange(6, dtype=torch.bfloat16).reshape(2, 3),
         "rng": mpickpt.PerRank(torch.get_rng_state()), "who": mpickpt.PerRank({"rank": r}),
         "shard": mpickpt.Shard(local, (10 * n,), (10 * r,))}
with mpickpt.CheckpointManager(d, max_to_keep=2) as mgr:
    p = mgr.save(5, state)
    if r == 0: print("saved", p)
    w0 = model.weight.detach().clone()
    with torch.no_grad():
        model.weight.zero_()
    local[:] = -1
    state["epoch"] = 0; state["who"].value = {"rank": -1}
    state["bf"].zero_()
    info = mgr.restore(state)
    assert torch.equal(model.weight, w0), "weights"
    assert state["epoch"] == 3 and state["who"].value == {"rank": r}, state
    assert np.array_equal(local, np.arange(10, dtype=np.float32) + 10 * r)
    assert torch.equal(state["bf"], torch.arange(6, dtype=torch.bfloat16).reshape(2, 3))
    if r == 0: print("restored", info)
ck = mpickpt.open(p)
if r == 0:
    print(ck, list(ck)[:5], ck.json)
    print(ck["shard"][5:15], ck["bf"].to_torch())
