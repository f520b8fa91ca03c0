"""What test_nm.py's writer stores, shared with the readers (test_nm.py read, test_open_nompi.py,
which must not import mpi4py.MPI): the sharded tensors and their global values."""
import math

import numpy as np

# name: (global shape, dtype, how it is split: "1d" | "rows" | "cols" | "grid")
SHARDS = {
    "v1": ((23,), np.float64, "1d"),
    "rows": ((11, 6), np.float32, "rows"),
    "cols": ((5, 13), np.int32, "cols"),
    "grid": ((9, 10), np.int16, "grid"),
    "tiny": ((3,), np.uint8, "1d"),
}
LAYOUTS = ("per-rank", "shared")
STEP = 42
EPOCH = 5


def global_values(name):
    shape, dtype, _ = SHARDS[name]
    n = math.prod(shape)
    v = (np.arange(n, dtype=np.int64) * 7 + 3 * len(name)) % 251 - 100
    return (v * 0.5 if np.dtype(dtype).kind == "f" else v).astype(dtype).reshape(shape)


def per_rank(r):
    """Rank r's PerRank values: an array, a dict, a scalar."""
    return (np.full(4, 100 + r, dtype=np.int64), {"rank": r, "pos": 1000 * r + 7, "tag": f"r{r}"},
            r * 1.5)
