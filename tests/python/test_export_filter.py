"""Export filters and the record of plain values (issue 30; docs/interop.md, docs/cli.md):

- a PyTorch model saved with other state (optimizer tensors, plain values) exported with
  only="model/", strip_prefix="model/" (mpickpt.export and `mpickpt export --only
  --strip-prefix`) to safetensors and HDF5 gives a file that a fresh model's
  load_state_dict(strict=True) takes, with every value bit for bit, and nothing else in it (no
  optimizer tensor, no "__mpickpt__/" blob);
- a tied model (an Embedding and an output Linear sharing one weight) whose checkpoint holds a
  version-2 record naming the tie as an alias: the shared weight is written once and the alias is
  in the file's metadata (safetensors __metadata__ "mpickpt_aliases", HDF5 root attribute), names
  after stripping; restoring the tie from it gives the same model (same outputs);
- a version-1 record (what the package writes today, through CheckpointManager) exports the same
  way, and without `only` the export keeps every tensor, blobs included, as before;
- `mpickpt dump PREFIX` prints the plain values of v1 and v2 records (replicated once, per-rank
  ones per rank, aliases), `dump PREFIX NAME` one of them, --json too, and `dump --slice 0:2`;
- a record that is not JSON (too deep, not UTF-8, trailing bytes) is a clear error naming the
  checkpoint and the record, in dump and export.

The checkpoints with version-2 records are written through the extension's Saver (add_replicated,
add_blob/set_blob) with records made here from the spec. Every rank exports to files of its own
and checks them. Usage: mpirun -np N python3 test_export_filter.py OUTDIR"""
import json
import os
import struct
import subprocess

import numpy as np

import pycheck as pc
from pycheck import check, check_bits, comm, rank, say, size

import mpickpt
from mpickpt import _C

torch = pc.need_torch()
import h5py  # noqa: E402

CLI = os.environ["MPICKPT_CLI"]
BLOB = "__mpickpt__/json"
CODES = {np.dtype(np.float32): _C.FLOAT32, np.dtype(np.float64): _C.FLOAT64,
         np.dtype(np.int64): _C.INT64}


def write_raw(prefix, tensors, record):
    """Collective: a checkpoint at `prefix` of `tensors` (replicated, name -> torch tensor) and
    this rank's record of plain values `record` (a dict, written as Python's json writes it)."""
    s = _C.Saver(comm, async_save=False)
    keep = []
    for name, t in tensors.items():
        a = np.array(t.detach().numpy())  # a contiguous copy; 0-d stays 0-d
        keep.append(a)
        s.add_replicated(name, a, CODES[a.dtype], list(a.shape), False)
    if record is not None:
        s.add_blob(BLOB)
        s.set_blob(BLOB, record if isinstance(record, bytes) else
                   json.dumps(record, sort_keys=True, allow_nan=True).encode())
    s.write(prefix)
    s.close()


def read_safetensors(path):
    """{name: torch tensor} and the metadata of a safetensors file (the format, read here)."""
    dt = {"F32": np.float32, "F64": np.float64, "I64": np.int64, "U8": np.uint8}
    with open(path, "rb") as f:
        blob = f.read()
    (n,) = struct.unpack("<Q", blob[:8])
    header = json.loads(blob[8:8 + n])
    meta = header.pop("__metadata__", {})
    out = {}
    for name, h in header.items():
        a, b = h["data_offsets"]
        arr = np.frombuffer(blob[8 + n + a:8 + n + b], dtype=dt[h["dtype"]]).reshape(h["shape"])
        out[name] = torch.from_numpy(arr.copy())
    return out, meta


def read_h5(path):
    out = {}
    with h5py.File(path, "r") as f:
        # np.array: a 0-d dataset reads as a NumPy scalar
        f.visititems(lambda n, o: out.__setitem__(n, torch.from_numpy(np.array(o[()])))
                     if isinstance(o, h5py.Dataset) else None)
        meta = {k: (v.decode() if isinstance(v, bytes) else v) for k, v in f.attrs.items()}
    return out, meta


def cli(*args, code=0):
    p = subprocess.run([CLI, *args], capture_output=True, text=True)
    check(p.returncode == code, f"mpickpt {args}: exit {p.returncode}, expected {code}: "
          f"{p.stdout}{p.stderr}")
    return p.stdout, p.stderr


def exports(prefix, tag, **kw):
    """Exports prefix with kw to safetensors (mpickpt.export), HDF5 (the CLI when kw is the usual
    filter, else mpickpt.export); returns [(state dict, metadata)] of both."""
    st = pc.outdir(f"{tag}.r{rank}.safetensors")
    h5 = pc.outdir(f"{tag}.r{rank}.h5")
    mpickpt.export(prefix, st, overwrite=True, **kw)
    if kw == {"only": "model/", "strip_prefix": "model/"}:
        cli("export", "--force", "--only", "model/", "--strip-prefix", "model/", prefix, h5)
    else:
        mpickpt.export(prefix, h5, overwrite=True, **kw)
    return [read_safetensors(st), read_h5(h5)]


def same_state(got, want, what):
    check(sorted(got) == sorted(want), f"{what}: names {sorted(got)} != {sorted(want)}")
    for k in want:
        check_bits(got[k], want[k].detach(), f"{what}: {k}")


torch.manual_seed(7)

# ---- 1. an untied model, version-2 record -------------------------------------------------------
model = torch.nn.Sequential(torch.nn.Linear(5, 6), torch.nn.BatchNorm1d(6), torch.nn.ReLU(),
                            torch.nn.Linear(6, 2)).double()
model(torch.randn(8, 5, dtype=torch.float64))  # running statistics, num_batches_tracked move
sd = model.state_dict()
tensors = {f"model/{k}": v for k, v in sd.items()}
tensors["optim/state/0/exp_avg"] = torch.ones(6, 5, dtype=torch.float64)
v2 = {"mpickpt_json": 2, "replicated": {"step": 5, "lr": 0.001, "note": "caf\u00e9 \"q\"",
                                        "huge": 10 ** 40, "bad": float("nan")},
      "per_rank": {"mine": rank * 10},
      "tree": ["d", [["model", ["d", [[k, ["T"]] for k in sd]]], ["step", ["v"]]]],
      "aliases": {}}
p1 = pc.outdir("untied")
write_raw(p1, tensors, v2)
comm.Barrier()
for got, meta in exports(p1, "untied", only="model/", strip_prefix="model/"):
    same_state(got, sd, "untied export")
    check("mpickpt_aliases" not in meta, f"no alias, metadata {meta}")
    fresh = torch.nn.Sequential(torch.nn.Linear(5, 6), torch.nn.BatchNorm1d(6), torch.nn.ReLU(),
                                torch.nn.Linear(6, 2)).double()
    fresh.load_state_dict(got, strict=True)
    for k, v in fresh.state_dict().items():
        check_bits(v, sd[k], f"loaded {k}")
say("untied model: exported and loaded strict")

# several --only prefixes, no strip; an internal prefix never selected
got, _ = read_safetensors(pc.outdir(f"x.r{rank}.safetensors")) if mpickpt.export(
    p1, pc.outdir(f"x.r{rank}.safetensors"), overwrite=True,
    only=["model/0.", "optim/", "__mpickpt__/"]) else (None, None)
check(sorted(got) == sorted(["model/0.weight", "model/0.bias", "optim/state/0/exp_avg"]),
      f"several prefixes: {sorted(got)}")
pc.expect_error(mpickpt.NotFoundError, lambda: mpickpt.export(
    p1, pc.outdir(f"n.r{rank}.h5"), only="nothing/"), "no tensor's name starts with 'nothing/'")
pc.expect_error(mpickpt.InvalidArgumentError, lambda: mpickpt.export(
    p1, pc.outdir(f"n.r{rank}.h5"), only=["model/", "optim/"], strip_prefix="model/"),
    "'optim/state/0/exp_avg' does not start with --strip-prefix 'model/'")
pc.expect_error(mpickpt.InvalidArgumentError, lambda: mpickpt.export(
    p1, pc.outdir(f"n.r{rank}.h5"), only=""), "non-empty")
check(not os.path.exists(pc.outdir(f"n.r{rank}.h5")), "a failed export left a file")

# dump: plain values of the v2 record
out, _ = cli("dump", p1)
lines = out.splitlines()
for want in ["step = 5", "lr = 0.001", 'note = "caf\u00e9 \\"q\\""', "huge = " + str(10 ** 40),
             "bad = NaN"] + [f"[rank {r}] mine = {r * 10}" for r in range(size)]:
    check(want in lines, f"dump: {want!r} not in {lines}")
out, _ = cli("dump", "--json", p1)
doc = json.loads(out)
check(doc["replicated"]["huge"] == 10 ** 40 and doc["replicated"]["bad"] == "NaN" and
      doc["records"] == [{"rank": r, "version": 2} for r in range(size)] and
      doc["per_rank"] == [{"rank": r, "values": {"mine": r * 10}} for r in range(size)],
      f"dump --json: {doc}")
out, _ = cli("dump", p1, "mine")
check(out.splitlines() == [f"[rank {r}] mine = {r * 10}" for r in range(size)], f"mine: {out}")
out, _ = cli("dump", "--json", p1, "step")
check(json.loads(out) == {"prefix": p1, "name": "step", "value": 5}, f"step: {out}")
_, err = cli("dump", p1, "nothing", code=1)
check('no tensor and no plain value named "nothing"' in err, err)
# start:stop slices
out, _ = cli("dump", "--json", "--slice", "1:3,:2", p1, "model/0.weight")
got = np.array(json.loads(out)["values"]).reshape(2, 2)
check(np.array_equal(got, sd["0.weight"].numpy()[1:3, :2]), f"slice 1:3,:2: {got}")
out, _ = cli("dump", "--json", "--slice", "-2:", p1, "model/0.bias")
check(json.loads(out)["values"] == sd["0.bias"].numpy()[-2:].tolist(), f"slice -2: {out}")
out, _ = cli("dump", "--json", "--slice", "0,2:-", p1, "model/0.weight")  # extents still work
check(json.loads(out)["shape"] == [2, 5], f"extents: {out}")

# ---- 2. a tied model: the alias in the metadata ---------------------------------------------


class Tied(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = torch.nn.Embedding(10, 4)
        self.head = torch.nn.Linear(4, 10)
        self.head.weight = self.emb.weight  # tied

    def forward(self, x):
        return self.head(self.emb(x))


tied = Tied()
tsd = tied.state_dict()
check(tsd["head.weight"].data_ptr() == tsd["emb.weight"].data_ptr(), "the model is tied")
record = {"mpickpt_json": 2, "replicated": {"step": 9}, "per_rank": {},
          "tree": ["d", [["model", ["d", [["emb.weight", ["T"]], ["head.weight", ["a"]],
                                          ["head.bias", ["T"]]]]], ["step", ["v"]]]],
          "aliases": {"model/head.weight": {"of": "model/emb.weight", "offset": 0,
                                            "shape": [10, 4], "strides": [4, 1],
                                            "dtype": "float32", "torch": True}}}
p2 = pc.outdir("tied")
write_raw(p2, {"model/emb.weight": tsd["emb.weight"], "model/head.bias": tsd["head.bias"]},
          record)
comm.Barrier()
x = torch.tensor([[1, 2, 3], [9, 0, 4]])
for got, meta in exports(p2, "tied", only="model/", strip_prefix="model/"):
    check(sorted(got) == ["emb.weight", "head.bias"], f"tied: written {sorted(got)}")
    aliases = json.loads(meta["mpickpt_aliases"])
    check(aliases == {"head.weight": "emb.weight"}, f"tied: aliases {aliases}")
    for alias, target in aliases.items():  # the tie restored
        got[alias] = got[target]
    fresh = Tied()
    fresh.load_state_dict(got, strict=True)
    check(fresh.head.weight is fresh.emb.weight, "the tie survives the load")
    check(torch.equal(fresh(x), tied(x)), "the reloaded tied model computes the same")
say("tied model: weight written once, alias in the metadata, same model")
out, _ = cli("dump", p2)
check("model/head.weight -> alias of model/emb.weight" in out.splitlines() and
      "step = 9" in out.splitlines(), f"dump of the tied record: {out}")
out, _ = cli("dump", "--json", p2)
check(json.loads(out)["aliases"] == {"model/head.weight": "model/emb.weight"}, out)
# without --strip-prefix the names stay whole; without --only the alias is recorded too
got, meta = read_safetensors(pc.outdir(f"t2.r{rank}.safetensors")) if mpickpt.export(
    p2, pc.outdir(f"t2.r{rank}.safetensors"), overwrite=True) else (None, None)
check(json.loads(meta["mpickpt_aliases"]) == {"model/head.weight": "model/emb.weight"} and
      "__mpickpt__/json/rank_0" in got, f"default export: {sorted(got)} {meta}")

# ---- 3. a version-1 record, written by the package itself -----------------------------------
opt = {"exp_avg": torch.zeros(3, dtype=torch.float64)}
mgr = mpickpt.CheckpointManager(pc.outdir("v1"))
mgr.save(3, {"model": model.state_dict(), "optim": opt, "step": 3, "name": "run-a",
             "mine": mpickpt.PerRank(f"r{rank}")})
mgr.close()
p3 = os.path.join(pc.outdir("v1"), "ckpt-1")
comm.Barrier()
for got, meta in exports(p3, "v1", only="model/", strip_prefix="model/"):
    same_state(got, sd, "v1 export")
    check("mpickpt_aliases" not in meta, f"v1: metadata {meta}")
    fresh = torch.nn.Sequential(torch.nn.Linear(5, 6), torch.nn.BatchNorm1d(6), torch.nn.ReLU(),
                                torch.nn.Linear(6, 2)).double()
    fresh.load_state_dict(got, strict=True)
# the default export is as before: every tensor, the records included
res = mpickpt.export(p3, pc.outdir(f"all.r{rank}.safetensors"), overwrite=True)
got, _ = read_safetensors(pc.outdir(f"all.r{rank}.safetensors"))
check(all(f"__mpickpt__/json/rank_{r}" in got for r in range(size)) and
      "optim/exp_avg" in got and res["tensors"] == len(got), f"default export: {sorted(got)}")
out, _ = cli("dump", p3)
lines = out.splitlines()
for want in ["step = 3", 'name = "run-a"'] + [f'[rank {r}] mine = "r{r}"' for r in range(size)]:
    check(want in lines, f"dump v1: {want!r} not in {lines}")
say("v1 record: exported, loaded strict, dumped")

# ---- 4. records that are not JSON ------------------------------------------------------------
bad = {"deep": b"[" * 100 + b"]" * 100, "utf8": b'{"mpickpt_json": 1, "replicated": {"a": "\xff"}}',
       "trailing": b'{"mpickpt_json": 1} x', "future": b'{"mpickpt_json": 3}'}
for tag, blob in bad.items():
    p = pc.outdir(f"bad_{tag}")
    write_raw(p, {"model/w": torch.ones(2)}, blob)
    comm.Barrier()
    _, err = cli("dump", p, code=1)
    check(p in err and "__mpickpt__/json/rank_" in err and "mpickpt: dump: mpickpt" not in err,
          f"bad {tag}: {err}")
    want = {"deep": "deeper than 64", "utf8": "not valid UTF-8", "trailing": "trailing bytes",
            "future": "record version 3"}[tag]
    check(want in err, f"bad {tag}: {err!r} lacks {want!r}")
    cls = mpickpt.VersionError if tag == "future" else mpickpt.CorruptError
    e = pc.expect_error(cls, lambda p=p: mpickpt.export(
        p, pc.outdir(f"bad_{tag}.r{rank}.h5"), only="model/"), want)
    out, _ = cli("dump", p, "model/w")  # tensors still dump
say("OK")
