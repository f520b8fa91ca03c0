"""The job of test_torch_preempt.py:
    mpirun -np N python3 [-m mpi4py] torch_preempt_job.py DIR [signal | halt CLI]

Trains a tiny model for 20 steps with mpickpt.torch.Checkpointer (a checkpoint every 5 steps).
A fresh run is stopped after step 7: its last rank sends itself SIGUSR1 (`signal`, the default),
or rank 0 runs `CLI halt DIR` (`halt`); save(7) sees it on every rank, takes the final
checkpoint and exits 75. Prints `start=S` and `done step=20`."""
import os
import signal
import subprocess
import sys

import torch
from mpi4py import MPI

import mpickpt.torch

comm = MPI.COMM_WORLD
torch.manual_seed(0)
model = torch.nn.Linear(4, 1)
opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
ckpt = mpickpt.torch.Checkpointer(sys.argv[1], model=model, optimizer=opt)
start = ckpt.restore_or_start() or 0
if comm.rank == 0:
    print(f"start={start}", flush=True)
for step in range(start, 20):
    x = torch.full((2, 4), float(step))
    opt.zero_grad()
    model(x).sum().backward()
    opt.step()
    if start == 0 and step + 1 == 7:
        if len(sys.argv) > 3 and sys.argv[2] == "halt":
            if comm.rank == 0:
                subprocess.run([sys.argv[3], "halt", sys.argv[1]], check=True)
            comm.Barrier()
        elif comm.rank == comm.size - 1:
            os.kill(os.getpid(), signal.SIGUSR1)
    ckpt.save(step + 1, every=5, force=step + 1 == 20)
if comm.rank == 0:
    print("done step=20", flush=True)
