"""mpickpt.export() (docs/interop.md) of a real PyTorch state dict saved with the package: a model
(Linear, BatchNorm1d with its int64 counter, Embedding), float16 and bfloat16 layers, a bool mask,
uint8 and int64 scalars, and float16/bfloat16 tensors with NaN, infinities, -0.0 and subnormals,
saved by a CheckpointManager on N ranks; every rank exports the checkpoint to two HDF5 files and
to safetensors, in three threads at once (the export releases the GIL); the HDF5 files read
with h5py and the safetensors file with a reader written here from the format's description give
back every tensor: torch.equal to the state dict's (bit for bit where NaNs make equal() false),
the bfloat16 ones from their uint16 bits.

Usage: mpirun -np N python3 test_export.py OUTDIR"""
import json
import os
import struct
import threading

import numpy as np

import pycheck as pc
from pycheck import check, check_bits, comm, rank, say

import mpickpt

torch = pc.need_torch()
import h5py  # noqa: E402

torch.manual_seed(1234)
model = torch.nn.Sequential(torch.nn.Linear(5, 7), torch.nn.BatchNorm1d(7), torch.nn.ReLU(),
                            torch.nn.Linear(7, 3))
model(torch.randn(8, 5))  # the running statistics and num_batches_tracked move
half = torch.nn.Linear(4, 2).to(torch.float16)
brain = torch.nn.Linear(4, 2).to(torch.bfloat16)
emb = torch.nn.Embedding(6, 3)
special16 = torch.tensor([float("nan"), float("inf"), -float("inf"), -0.0, 2.0 ** -24, 65504.0],
                         dtype=torch.float16)
special_bf = torch.tensor([float("nan"), float("inf"), -float("inf"), -0.0, 2.0 ** -133, 3.0e38],
                          dtype=torch.bfloat16)
state = {
    "model": model.state_dict(),
    "half": half.state_dict(),
    "brain": brain.state_dict(),
    "emb": emb.state_dict(),
    "mask": torch.tensor([True, False, True, True]),
    "u8": torch.arange(10, dtype=torch.uint8),
    "count": torch.tensor(7, dtype=torch.int64),
    "special16": special16,
    "special_bf": special_bf,
}
flat = {}
for key, value in state.items():
    if isinstance(value, dict):
        flat.update({f"{key}/{k}": v for k, v in value.items()})
    else:
        flat[key] = value
check(any(v.dtype == torch.bfloat16 for v in flat.values()) and
      flat["model/1.num_batches_tracked"].dtype == torch.int64, "the state's dtypes")

directory = pc.outdir("ck")
mgr = mpickpt.CheckpointManager(directory)
mgr.save(5, state, epoch=2)
mgr.close()
prefix = os.path.join(directory, "ckpt-1")
comm.Barrier()


def to_torch(a, dtype_name):
    """A tensor of an export's values (bfloat16 from its bits)."""
    a = np.array(a)  # a copy; 0-d stays 0-d (ascontiguousarray would make it 1-d)
    if dtype_name == "bfloat16":
        return torch.from_numpy(a.view(np.int16)).view(torch.bfloat16)
    return torch.from_numpy(a)


def same(got, want, what):
    check(got.dtype == want.dtype and tuple(got.shape) == tuple(want.shape),
          f"{what}: {got.dtype}{tuple(got.shape)}, expected {want.dtype}{tuple(want.shape)}")
    if not (want.is_floating_point() and torch.isnan(want.float()).any()):
        check(torch.equal(got, want), f"{what}: values differ")
    check_bits(got, want, what)  # NaN payloads and -0.0 too


def read_safetensors(path):
    """u64 little-endian N, N bytes of JSON padded with spaces, then the data (offsets from its
    first byte, contiguous)."""
    codes = {"BOOL": np.bool_, "U8": np.uint8, "I8": np.int8, "I16": "<i2", "U16": "<u2",
             "F16": "<f2", "BF16": "<u2", "I32": "<i4", "U32": "<u4", "F32": "<f4", "F64": "<f8",
             "I64": "<i8", "U64": "<u8"}
    names = {"BF16": "bfloat16"}
    with open(path, "rb") as fh:
        raw = fh.read()
    (n,) = struct.unpack("<Q", raw[:8])
    check(n % 8 == 0 and 8 + n <= len(raw), f"{path}: header length {n}")
    header = json.loads(raw[8:8 + n].decode("utf-8"))
    meta = header.pop("__metadata__")
    data, at, out = raw[8 + n:], 0, {}
    for name, e in sorted(header.items(), key=lambda kv: kv[1]["data_offsets"]):
        begin, end = e["data_offsets"]
        dt = np.dtype(codes[e["dtype"]])
        check(begin == at and end - begin == int(np.prod(e["shape"])) * dt.itemsize,
              f"{path}: {name}: offsets {e['data_offsets']}")
        out[name] = to_torch(np.frombuffer(data[begin:end], dtype=dt).reshape(e["shape"]),
                             names.get(e["dtype"]))
        at = end
    check(at == len(data), f"{path}: {len(data) - at} bytes after the last tensor")
    return meta, out


# every rank exports; each rank's exports run at once in three threads (two HDF5 files: the
# library's HDF5 calls take turns under its lock)
h5 = pc.outdir(f"state-{rank}.h5")
h5b = pc.outdir(f"state-{rank}-b.h5")
st = pc.outdir(f"state-{rank}.safetensors")
results, errors = {}, []


def run(key, out):
    try:
        results[key] = mpickpt.export(prefix, out)
    except Exception as e:  # noqa: BLE001 - reported below
        errors.append(e)


threads = [threading.Thread(target=run, args=("h5", h5)),
           threading.Thread(target=run, args=("h5b", h5b)),
           threading.Thread(target=run, args=("st", st))]
for t in threads:
    t.start()
for t in threads:
    t.join()
check(not errors, f"export: {errors}")
n_arrays = len(flat) + pc.size  # plus the package's JSON record of each rank
check(results["h5"]["files"] == [h5] and results["st"]["files"] == [st] and
      results["h5"]["tensors"] == results["st"]["tensors"] == n_arrays,
      f"export's results {results}, {n_arrays} tensors expected")
with mpickpt.open(prefix) as ck:  # the JSON records: uint8 vectors
    record_bytes = sum(t["shape"][0] for t in ck._r.tensors()
                       if t["name"].startswith("__mpickpt__/"))
check(results["h5"]["bytes"] == results["st"]["bytes"] ==
      sum(v.numel() * v.element_size() for v in flat.values()) + record_bytes,
      f"bytes {results}")

check(results["h5b"] == dict(results["h5"], files=[h5b]), f"export's results {results}")
for path in (h5, h5b):
    with h5py.File(path, "r") as f:
        check((f.attrs["epoch"], f.attrs["step"], f.attrs["save_counter"]) == (2, 5, 1),
              f"{path}: attributes {dict(f.attrs)}")
        for name, want in flat.items():
            ds = f[name]
            same(to_torch(ds[()], ds.attrs["dtype"]), want, f"{path}:{name}")
meta, got = read_safetensors(st)
check((meta["epoch"], meta["step"], meta["save_counter"]) == ("2", "5", "1"), f"{st}: {meta}")
for name, want in flat.items():
    same(got[name], want, f"{st}:{name}")
comm.Barrier()
say(f"export of a PyTorch state dict at {pc.size} ranks: {len(flat)} tensors equal")
