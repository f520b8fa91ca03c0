"""`mpickpt import-tf` and `mpickpt export --format tf` on bundles that TensorFlow itself wrote
(tests/data/tf/, TensorFlow Serving's test models): every one imports with the values TensorFlow
stored (read back with `mpickpt dump --json` and with mpickpt.open), passes `mpickpt verify`, and
exports back to a bundle that is byte for byte the one TensorFlow wrote whenever TensorFlow wrote
an uncompressed index (its data file always). TensorFlow 2's object-graph string tensor is refused
by name, or left out with --skip-unsupported.

usage: MPICKPT_CLI=build/bin/mpickpt PYTHONPATH=build/python test_tf_fixtures.py OUTDIR"""
import json
import os
import sys

import numpy as np

from scriptcheck import check, finish, run_cli

import mpickpt

CLI = os.environ["MPICKPT_CLI"]
DATA = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "data", "tf")
OUT = sys.argv[1]
os.makedirs(OUT, exist_ok=True)

# name -> (values TensorFlow stored, is the index uncompressed (byte-identical on export),
#          the string tensors it holds)
F32 = np.float32
FIXTURES = {
    "counter": ({"counter": F32(0)}, True, []),
    "half_plus_three": ({"a": F32(0.5), "b": F32(3), "c": F32(3)}, True, []),
    "half_plus_two_gpu": ({"a": F32(0.5), "b": F32(2), "c": F32(3)}, True, []),
    "half_plus_two_cpu": ({"a": F32(0.5), "a2": F32(0.5), "b": F32(2), "c": F32(3),
                           "c2": F32(3)}, False, []),
    "half_plus_two_mkl": ({"a": F32(0.5), "b": F32(2), "c": F32(3),
                           "conv2d/bias": np.zeros(1, F32),
                           "conv2d/kernel": np.full((1, 1, 1, 1), -0.522395968, F32),
                           "conv2d_1/bias": np.zeros(1, F32),
                           "conv2d_1/kernel": np.full((1, 1, 1, 1), -1.04511201, F32),
                           "conv2d_2/bias": np.zeros(1, F32),
                           "conv2d_2/kernel": np.full((1, 1, 1, 1), 1.57794321, F32)},
                          True, []),
    "half_plus_two_tf2_cpu": ({"a/.ATTRIBUTES/VARIABLE_VALUE": F32(0.5),
                               "b/.ATTRIBUTES/VARIABLE_VALUE": F32(2),
                               "c/.ATTRIBUTES/VARIABLE_VALUE": F32(3)},
                              False, ["_CHECKPOINTABLE_OBJECT_GRAPH"]),
    "tf_text_regression": ({}, False, ["_CHECKPOINTABLE_OBJECT_GRAPH"]),
}


def read(path):
    with open(path, "rb") as f:
        return f.read()


def check_values(prefix, want, what):
    """The checkpoint holds exactly `want`, bit for bit, by dump --json and by mpickpt.open."""
    _, so, _ = run_cli(CLI, "inspect", "--json", prefix, rc=0)
    names = sorted(t["name"] for t in json.loads(so)["tensors"]) if so else []
    check(names == sorted(want), f"{what}: tensors {names}, expected {sorted(want)}")
    with mpickpt.open(prefix) as ck:
        for name, value in want.items():
            value = np.asarray(value)
            _, so, _ = run_cli(CLI, "dump", "--json", prefix, name, rc=0)
            doc = json.loads(so) if so else {}
            check(doc.get("dtype") == str(value.dtype) and doc.get("shape") == list(value.shape),
                  f"{what}: {name}: dump says {doc.get('dtype')} {doc.get('shape')}")
            got = np.asarray(ck[name].read())
            check(got.dtype == value.dtype and got.shape == value.shape
                  and got.tobytes() == value.tobytes(),
                  f"{what}: {name}: mpickpt.open reads {got!r}, TensorFlow stored {value!r}")


for name, (values, uncompressed, strings) in FIXTURES.items():
    src = os.path.join(DATA, name, "variables")
    imp = os.path.join(OUT, name + "-imported")
    if strings:
        # refused by name, nothing written
        _, _, se = run_cli(CLI, "import-tf", src, imp, rc=1)
        check(all(s in se for s in strings) and "DT_STRING" in se and "--skip-unsupported" in se,
              f"{name}: the refusal names the string tensor and the option: {se!r}")
        check(not os.path.exists(imp + ".index") and not os.path.exists(imp + "_temp"),
              f"{name}: a refused import left files")
        _, so, se = run_cli(CLI, "import-tf", "--skip-unsupported", "--json", src, imp, rc=0)
        doc = json.loads(so) if so else {}
        check([s["name"] for s in doc.get("skipped", [])] == strings
              and all(s["dtype"] == "DT_STRING" for s in doc["skipped"]),
              f"{name}: --json lists the skipped tensors: {doc}")
        check(all(s in se for s in strings), f"{name}: stderr names what was skipped: {se!r}")
    else:
        _, so, _ = run_cli(CLI, "import-tf", "--json", "--epoch", "3", "--step", "41",
                           "--counter", "2", src, imp, rc=0)
        doc = json.loads(so) if so else {}
        check(doc.get("tensors") == len(values) and doc.get("skipped") == []
              and doc.get("bytes") == sum(np.asarray(v).nbytes for v in values.values())
              and doc.get("files") == [imp + ".data-00000-of-00001", imp + ".index"],
              f"{name}: --json {doc}")
        _, so, _ = run_cli(CLI, "inspect", "--json", imp, rc=0)
        h = json.loads(so) if so else {}
        check((h.get("epoch"), h.get("step"), h.get("save_counter")) == (3, 41, 2),
              f"{name}: header {h}")
    check_values(imp, values, name)
    run_cli(CLI, "verify", imp, rc=0)

    # back out as a bundle: what TensorFlow wrote, byte for byte (the index when TensorFlow did
    # not compress it; mpickpt writes uncompressed indexes, as TensorFlow does since 1.2)
    exp = os.path.join(OUT, name + "-exported")
    run_cli(CLI, "export", "--format", "tf", imp, exp, rc=0)
    same_data = read(exp + ".data-00000-of-00001") == read(src + ".data-00000-of-00001")
    same_index = read(exp + ".index") == read(src + ".index")
    if strings:
        check(not same_index, f"{name}: the export without the string tensor equals the source?")
    else:
        check(same_data, f"{name}: the exported data file differs from TensorFlow's")
        check(same_index == uncompressed,
              f"{name}: exported index identical to TensorFlow's: {same_index}, expected "
              f"{uncompressed}")
    # and it imports again to the same values
    again = os.path.join(OUT, name + "-again")
    run_cli(CLI, "import-tf", exp, again, rc=0)
    check_values(again, values, name + " (exported, imported again)")

# TF_PREFIX a directory: its `checkpoint` file names the checkpoint (TensorFlow 1 wrote absolute
# paths); only the last component is used, looked up in that directory, never elsewhere
import shutil  # noqa: E402
d = os.path.join(OUT, "train_dir")
os.makedirs(d, exist_ok=True)
src = os.path.join(DATA, "half_plus_two_mkl", "variables")
for suffix in (".index", ".data-00000-of-00001"):
    shutil.copyfile(src + suffix, os.path.join(d, "model.ckpt-7" + suffix))
# the same name in another directory holds other values: it must not be read
other = os.path.join(OUT, "elsewhere")
os.makedirs(other, exist_ok=True)
for suffix in (".index", ".data-00000-of-00001"):
    shutil.copyfile(os.path.join(DATA, "counter", "variables") + suffix,
                    os.path.join(other, "model.ckpt-7" + suffix))
with open(os.path.join(d, "checkpoint"), "w") as f:
    f.write(f'model_checkpoint_path: "{other}/model.ckpt-7"\n'
            f'all_model_checkpoint_paths: "{other}/model.ckpt-7"\n')
run_cli(CLI, "import-tf", d, os.path.join(OUT, "from_dir"), rc=0)
check_values(os.path.join(OUT, "from_dir"), FIXTURES["half_plus_two_mkl"][0], "directory")
with open(os.path.join(d, "checkpoint"), "w") as f:
    f.write('all_model_checkpoint_paths: "model.ckpt-7"\n')
_, _, se = run_cli(CLI, "import-tf", d, os.path.join(OUT, "from_dir2"), rc=1)
check("model_checkpoint_path" in se, f"a checkpoint file without the line: {se!r}")
os.remove(os.path.join(d, "checkpoint"))
_, _, se = run_cli(CLI, "import-tf", d, os.path.join(OUT, "from_dir2"), rc=1)
check("checkpoint" in se and "prefix" in se, f"a directory without a checkpoint file: {se!r}")
check(not os.path.exists(os.path.join(OUT, "from_dir2.index")), "a refused import wrote")

# Python: mpickpt.import_tf mirrors the command
src = os.path.join(DATA, "half_plus_two_tf2_cpu", "variables")
py_out = os.path.join(OUT, "py-imported")
try:
    mpickpt.import_tf(src, py_out)
    check(False, "mpickpt.import_tf took the string tensor")
except mpickpt.InvalidArgumentError as e:
    check("_CHECKPOINTABLE_OBJECT_GRAPH" in str(e) and "skip_unsupported" in str(e),
          f"the Python refusal names the key and the option: {e}")
try:
    mpickpt.import_tf(src, py_out, skip_unsupported=True, step=-1)
    check(False, "mpickpt.import_tf took a negative step")
except mpickpt.InvalidArgumentError as e:
    check("step" in str(e), f"negative step: {e}")
check(not os.path.exists(py_out + ".index"), "a refused import wrote")
r = mpickpt.import_tf(src, py_out, skip_unsupported=True, epoch=5, step=6, save_counter=7)
check(r == {"tensors": 3, "bytes": 12,
            "skipped": [{"name": "_CHECKPOINTABLE_OBJECT_GRAPH", "dtype": "DT_STRING",
                         "reason": "dtype DT_STRING is not supported"}]},
      f"mpickpt.import_tf returned {r}")
check_values(py_out, FIXTURES["half_plus_two_tf2_cpu"][0], "mpickpt.import_tf")
_, so, _ = run_cli(CLI, "inspect", "--json", py_out, rc=0)
h = json.loads(so) if so else {}
check((h.get("epoch"), h.get("step"), h.get("save_counter")) == (5, 6, 7), f"header {h}")
try:
    mpickpt.import_tf(src, py_out, skip_unsupported=True)
    check(False, "mpickpt.import_tf replaced an existing checkpoint without overwrite")
except mpickpt.ExistsError:
    pass
r = mpickpt.import_tf(os.path.join(DATA, "counter", "variables"), py_out, overwrite=True)
check(r["tensors"] == 1, f"overwrite=True: {r}")
check_values(py_out, FIXTURES["counter"][0], "mpickpt.import_tf overwrite")

finish(lambda c, f: f"tf fixtures: {c} checks, {f} failed")
