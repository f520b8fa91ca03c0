#!/usr/bin/python3
"""Prints fields of the latest checkpoint that `mpickpt list --json DIR` lists (read on stdin).

    mpickpt list --json DIR | /usr/bin/python3 -B latest_ckpt.py FIELD...

One line: the values of FIELD... of the last entry of "checkpoints", separated by spaces; None
for each when the list is empty or missing. Used by test_slurm.sh (epoch step) and
test_slurm_torch.sh (step).
"""
import json
import sys

j = json.load(sys.stdin)
e = j["checkpoints"][-1] if j.get("checkpoints") else {}
print(*(e.get(f) for f in sys.argv[1:]))
