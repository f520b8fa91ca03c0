#!/usr/bin/python3
"""The checks of test_cli_manage.sh (list, gc, diff), which runs them in an empty OUTDIR:

    /usr/bin/python3 -B test_cli_manage_checks.py OUTDIR

Environment: MPICKPT_CLI, MPICKPT_MAKE_CKPT, MPICKPT_MAKE_STATE, MPICKPT_MAKE_DIFF_CKPT.
"""
import glob
import json
import os
import shutil
import subprocess
import sys

import h5py

from scriptcheck import check, run_cli, finish

CLI = os.environ["MPICKPT_CLI"]
MAKE = os.environ["MPICKPT_MAKE_CKPT"]
MAKE_STATE = os.environ["MPICKPT_MAKE_STATE"]
MAKE_DIFF = os.environ["MPICKPT_MAKE_DIFF_CKPT"]
OUT = sys.argv[1]
os.chdir(OUT)  # relative paths, as a user would type them; absolute ones are checked too


def run(*args, rc=None):
    return run_cli(CLI, *args, rc=rc)


def run_json(*args, rc=0):
    code, so, se = run(*args, rc=rc)
    try:
        return json.loads(so), se
    except ValueError as e:
        check(False, f"mpickpt {args!r}: not JSON ({e}): {so[:2000]!r}\nstderr: {se}")
        return None, se


def make(prefix, counter, epoch=0, step=0):
    subprocess.run([MAKE, prefix, "--counter", str(counter), "--epoch", str(epoch),
                    "--step", str(step)], check=True)


def make_state(d, *opts):
    subprocess.run([MAKE_STATE, d, *opts], check=True)


def make_diff(prefix, variant, counter=None):
    extra = ["--counter", str(counter)] if counter is not None else []
    subprocess.run([MAKE_DIFF, prefix, variant, *extra], check=True)


def ckpt_bytes(prefix):
    files = [prefix + ".index"] + glob.glob(glob.escape(prefix) + ".data-*")
    return sum(os.path.getsize(f) for f in files)


def make_three(d, epochs=(1, 1, 2), steps=(100, 200, 300)):
    """ckpt-1..3 in d with distinct counters, epochs and steps; returns their prefixes."""
    os.makedirs(d, exist_ok=True)
    out = []
    for n in (1, 2, 3):
        p = os.path.join(d, f"ckpt-{n}")
        make(p, n, epochs[n - 1], steps[n - 1])
        out.append(p)
    return out


LIST_KEYS = {"prefix", "save_counter", "epoch", "step", "timestamp", "bytes", "end_of_epoch"}


def check_listing(what, doc, prefixes, end_of_epoch=False):
    """doc lists exactly `prefixes` (oldest first), each usable with inspect, with the header's
    counter/epoch/step/timestamp and the on-disk size; latest is the last one."""
    if not check(doc is not None and set(doc) >= {"latest", "checkpoints"},
                 f"{what}: bad document {doc!r}"):
        return
    got = [c.get("prefix") for c in doc["checkpoints"]]
    check(got == prefixes, f"{what}: prefixes {got}, expected {prefixes}")
    check(doc["latest"] == (prefixes[-1] if prefixes else None),
          f"{what}: latest {doc['latest']!r}, expected {prefixes[-1:]!r}")
    for c in doc["checkpoints"]:
        check(set(c) >= LIST_KEYS, f"{what}: keys {sorted(c)}")
        p = c["prefix"]
        hdr, _ = run_json("inspect", "--json", p)
        if hdr is None:
            continue
        for k in ("save_counter", "epoch", "step", "timestamp"):
            check(c.get(k) == hdr[k], f"{what}: {p} {k} {c.get(k)!r}, inspect says {hdr[k]!r}")
        check(type(c.get("timestamp")) is float, f"{what}: timestamp type {c.get('timestamp')!r}")
        check(c.get("bytes") == ckpt_bytes(p),
              f"{what}: {p} bytes {c.get('bytes')} != {ckpt_bytes(p)} on disk")
        check(c.get("end_of_epoch") is end_of_epoch, f"{what}: {p} end_of_epoch {c!r}")


# ======================================================================================
# list
# ======================================================================================

# 1. No state file: scan, with a warning; still exit 0.
scan = make_three("scan")
doc, se = run_json("list", "--json", "scan")
check_listing("list scan", doc, scan)
check("warning" in se and "scan" in se and "no state file" in se, f"list scan stderr: {se!r}")
rc, so, se = run("list", "scan", rc=0)
lines = so.splitlines()
check(lines[0].split()[:2] == ["PREFIX", "COUNTER"], f"list text header: {so!r}")
rows = [l for l in lines[1:] if "ckpt-" in l and not l.startswith("latest")]
check(len(rows) == 3 and rows[2].startswith("* scan/ckpt-3") and "(latest)" in rows[2] and
      all(r.startswith("  scan/ckpt-") for r in rows[:2]), f"list text rows: {so!r}")
check(lines[-1] == "latest: scan/ckpt-3", f"list text latest: {so!r}")
check(str(ckpt_bytes(scan[0])) in rows[0] and " UTC" not in rows[0] and "-" in rows[0],
      f"list text row: {rows[0]!r}")
# Absolute paths and a trailing slash give usable prefixes too.
doc, _ = run_json("list", "--json", os.path.join(OUT, "scan") + "/")
check_listing("list absolute", doc, [os.path.join(OUT, p) for p in scan])

# 2. A state file (written by make_state: scan + ckpt__state_write) is what list shows: here it
#    keeps only the newest two (retention) and marks them end-of-epoch; no warning.
state = make_three("state")
make_state("state", "--keep", "2", "--end-of-epoch")
doc, se = run_json("list", "--json", "state")
check_listing("list state", doc, state[1:], end_of_epoch=True)
check(se == "", f"list state stderr: {se!r}")
doc, _ = run_json("list", "--json", "state/")
check_listing("list state/", doc, state[1:], end_of_epoch=True)

# 3. DIR/chief: a training state's backup directory.
os.makedirs("train/chief")
train = make_three("train/chief")
make_state("train/chief")
doc, se = run_json("list", "--json", "train")
check_listing("list train", doc, train)
check(se == "", f"list train stderr: {se!r}")
os.makedirs("train2/chief")  # no state file in chief/: scan it
make("train2/chief/ckpt-1", 1)
os.makedirs("train2/workertemp_1")
doc, se = run_json("list", "--json", "train2")
check_listing("list train2", doc, ["train2/chief/ckpt-1"])
check("warning" in se and "train2/chief" in se, f"list train2 stderr: {se!r}")

# 4. A damaged state file: warning naming it, then the scan (all three checkpoints).
def damaged_copy(name, damage):
    shutil.copytree("state", name)
    damage(os.path.join(name, "checkpoint"))
    return [os.path.join(name, f"ckpt-{n}") for n in (1, 2, 3)]


def flip(path):
    with open(path, "r+b") as f:
        f.seek(os.path.getsize(path) // 2)
        b = f.read(1)
        f.seek(-1, 1)
        f.write(bytes([b[0] ^ 0x20]))


def truncate(path):
    os.truncate(path, 7)


def garbage(path):
    with open(path, "w") as f:
        f.write("model_checkpoint_path: \"ckpt-3\"\n")


for name, damage in (("dmg_flip", flip), ("dmg_trunc", truncate), ("dmg_text", garbage)):
    prefixes = damaged_copy(name, damage)
    doc, se = run_json("list", "--json", name)
    check_listing(f"list {name}", doc, prefixes)
    check("warning" in se and os.path.join(name, "checkpoint") in se and "scan" in se,
          f"list {name} stderr: {se!r}")
    rc, so, se = run("list", name, rc=0)
    check("latest: " + prefixes[-1] in so, f"list {name} text: {so!r}")

# A damaged state file and no checkpoint: an error.
os.makedirs("dmg_empty")
garbage("dmg_empty/checkpoint")
rc, so, se = run("list", "dmg_empty", rc=1)
check("dmg_empty" in se and so == "", f"list dmg_empty: {so!r} {se!r}")

# 5. A valid state file with no entries: latest null, no checkpoints, exit 0.
os.makedirs("emptystate")
make("emptystate/ckpt-1", 1)
make_state("emptystate", "--keep", "0")
doc, se = run_json("list", "--json", "emptystate")
check(doc == {"latest": None, "restart_from": None, "checkpoints": []},
      f"list emptystate: {doc!r}")
rc, so, se = run("list", "emptystate", rc=0)
check(so == "no checkpoints\n", f"list emptystate text: {so!r}")

# 6. A state file listing a checkpoint that is gone: warning, still listed.
shutil.copytree("state", "stale")
for f in glob.glob("stale/ckpt-2.*"):
    os.unlink(f)
doc, se = run_json("list", "--json", "stale")
check(doc and [c["prefix"] for c in doc["checkpoints"]] == ["stale/ckpt-2", "stale/ckpt-3"],
      f"list stale: {doc!r}")
check("warning" in se and "stale/ckpt-2" in se, f"list stale stderr: {se!r}")

# 7. Errors and usage.
os.makedirs("nothing/chief")
for args, want in ((["nothing"], "no state file"), (["missing"], "missing"),
                   (["scan/ckpt-1.index"], "not a directory")):
    rc, so, se = run("list", *args, rc=1)
    check(se.startswith("mpickpt: list: ") and want in se and so == "", f"list {args}: {se!r}")
for args in ([], ["scan", "state"], ["--frob", "scan"]):
    rc, so, se = run("list", *args, rc=2)
    check("usage: mpickpt list" in se, f"list usage {args}: {se!r}")
run("list", "--help", rc=0)

# ======================================================================================
# gc
# ======================================================================================

def tree(root):
    """Every file and directory under root, relative."""
    out = set()
    for d, dirs, files in os.walk(root):
        for n in dirs + files:
            out.add(os.path.relpath(os.path.join(d, n), root))
    return out


def with_garbage(root):
    """root/chief/ckpt-1..3 with a state file, plus the debris of failed saves. Returns the
    garbage as {reported path: files/dirs it covers}."""
    os.makedirs(os.path.join(root, "chief"))
    make_three(os.path.join(root, "chief"))
    make_state(os.path.join(root, "chief"))
    chief = os.path.join(root, "chief")
    os.makedirs(os.path.join(chief, "ckpt-9_temp"))
    with open(os.path.join(chief, "ckpt-9_temp", "ckpt-9.data-00000-of-00001"), "wb") as f:
        f.write(b"partial")
    with open(os.path.join(chief, "ckpt-8.data-00000-of-00001"), "wb") as f:
        f.write(b"\x89HDF\r\n\x1a\n orphan")  # gc removes only what looks like HDF5 (or is empty)
    with open(os.path.join(chief, "x.index.tmp-123"), "wb") as f:
        f.write(b"tmp")
    os.makedirs(os.path.join(root, "workertemp_3"))
    with open(os.path.join(root, "workertemp_3", "ckpt-9.data-00003-of-00004"), "wb") as f:
        f.write(b"worker")
    return {
        os.path.join(chief, "ckpt-9_temp"): {"chief/ckpt-9_temp",
                                              "chief/ckpt-9_temp/ckpt-9.data-00000-of-00001"},
        os.path.join(chief, "ckpt-8.data-00000-of-00001"): {"chief/ckpt-8.data-00000-of-00001"},
        os.path.join(chief, "x.index.tmp-123"): {"chief/x.index.tmp-123"},
        os.path.join(root, "workertemp_3"): {"workertemp_3/ckpt-9.data-00003-of-00004"},
    }


def reported(so, verb):
    """Paths of the 'VERB PATH (why)' lines."""
    out = []
    for l in so.splitlines():
        if l.startswith(verb + " "):
            rest = l[len(verb) + 1:]
            out.append(rest.split(" (", 1)[0] if rest.endswith(")") else rest)
    return out


def paths_match(got, garbage):
    """Every garbage entry reported once: the path itself, or (for workertemp_*) files in it."""
    ok = len(got) == len(set(got))
    for g in garbage:
        ok &= any(p == g or p.startswith(g + "/") for p in got)
    ok &= all(any(p == g or p.startswith(g + "/") for g in garbage) for p in got)
    return ok


# gc DIR (also DIR/chief), gc DIR/chief (also the workertemp_* next to it), with a trailing slash.
for root, target in (("gcrun", "gcrun"), ("gcchief", "gcchief/chief"),
                     ("gcslash", "gcslash/chief/")):
    garbage_paths = with_garbage(root)
    before = tree(root)
    removed_set = set().union(*garbage_paths.values())

    rc, so, se = run("gc", "--dry-run", target, rc=0)
    got = reported(so, "would remove")
    check(paths_match(got, garbage_paths), f"gc --dry-run {target}: {so!r}")
    check(so.splitlines()[-1] == f"gc {target.rstrip('/')}: would remove {len(got)} path(s)",
          f"gc --dry-run summary: {so!r}")
    check(all(l.endswith(")") for l in so.splitlines()[:-1]), f"gc --dry-run reasons: {so!r}")
    check(tree(root) == before, f"gc --dry-run {target} changed the tree: "
          f"{sorted(before ^ tree(root))}")

    rc, so, se = run("gc", target, rc=0)
    got = reported(so, "removed")
    check(paths_match(got, garbage_paths), f"gc {target}: {so!r}")
    check(so.splitlines()[-1] == f"gc {target.rstrip('/')}: removed {len(got)} path(s)",
          f"gc summary: {so!r}")
    after = tree(root)
    # Exactly the garbage went (an emptied workertemp_3/ directory may stay); gc made the lock
    # of chief/, whose state file it served, and left it.
    check(after - {"workertemp_3", "chief/lock"} == before - removed_set - {"workertemp_3"},
          f"gc {target}: removed {sorted(before - after)}, expected {sorted(removed_set)}; "
          f"added {sorted(after - before)}")
    rc, so, se = run("verify", root, rc=0)
    check(so.count(": ok (") == 3, f"verify after gc {target}: {so!r}")
    doc, se = run_json("list", "--json", root)
    check_listing(f"list after gc {target}", doc,
                  [os.path.join(root, "chief", f"ckpt-{n}") for n in (1, 2, 3)])
    check(se == "", f"list after gc stderr: {se!r}")
    rc, so, se = run("gc", target, rc=0)
    check(so == f"gc {target.rstrip('/')}: removed 0 path(s)\n", f"gc again {target}: {so!r}")

# A plain checkpoint directory (no chief/): its own debris only.
os.makedirs("gcplain")
make("gcplain/ckpt-1", 1)
with open("gcplain/ckpt-1.index.tmp-99", "wb") as f:
    f.write(b"x")
with open("gcplain/checkpoint.tmp-42", "wb") as f:
    f.write(b"x")
rc, so, se = run("gc", "gcplain", rc=0)
check(sorted(reported(so, "removed")) == ["gcplain/checkpoint.tmp-42",
                                          "gcplain/ckpt-1.index.tmp-99"]
      and so.endswith("gc gcplain: removed 2 path(s)\n"), f"gc plain: {so!r}")
check(sorted(os.listdir("gcplain")) == ["ckpt-1.data-00000-of-00001", "ckpt-1.index", "lock"],
      f"gc plain left {os.listdir('gcplain')}")
run("verify", "gcplain/ckpt-1", rc=0)

rc, so, se = run("gc", "missing", rc=1)
check(se.startswith("mpickpt: gc: ") and "missing" in se, f"gc missing: {se!r}")
for args in ([], ["a", "b"], ["--bogus", "gcplain"]):
    rc, so, se = run("gc", *args, rc=2)
    check("usage: mpickpt gc" in se, f"gc usage {args}: {se!r}")

# ======================================================================================
# diff
# ======================================================================================

def diff(a, b, *opts, rc):
    return run_json("diff", "--json", *opts, a, b, rc=rc)


def check_identical(what, doc, header=None):
    check(doc is not None and doc.get("identical") is True and doc.get("only_in_a") == [] and
          doc.get("only_in_b") == [] and doc.get("changed") == [], f"{what}: {doc!r}")
    if doc is not None and header is not None:
        check(doc.get("header") == header, f"{what}: header {doc.get('header')!r}, "
              f"expected {header!r}")


os.makedirs("d1")
make("d1/a", 1, 1, 10)
shutil.copytree("d1", "d2")           # an identical copy (same base name, other directory)
make("d1/b", 2, 5, 99)                # same data, other header
doc, _ = diff("d1/a", "d2/a", rc=0)
check_identical("diff copy", doc, header={})
doc, _ = diff("d1/a", "d1/b", rc=0)
check_identical("diff header only", doc, header={
    "save_counter": {"a": 1, "b": 2}, "epoch": {"a": 1, "b": 5}, "step": {"a": 10, "b": 99}})
rc, so, se = run("diff", "d1/a", "d1/b.index", rc=0)
check("header epoch: 1 (A) vs 5 (B)" in so and so.splitlines()[-1].startswith("identical data"),
      f"diff header text: {so!r}")

os.makedirs("dd")
make_diff("dd/base", "base", 1)
make_diff("dd/relayout", "relayout", 2)
make_diff("dd/values", "values", 3)
make_diff("dd/schema", "schema", 4)
BLOCKS = ([], ["--block-bytes", "1"], ["--block-bytes", "1000"], ["--block-bytes", "2K"])

# The same data stored as other pieces: identical.
for opts in BLOCKS:
    doc, _ = diff("dd/base", "dd/relayout", *opts, rc=0)
    check_identical(f"diff relayout {opts}", doc, header={"save_counter": {"a": 1, "b": 2}})

# Values: count and first flat index per tensor, whatever the block size and piece layout.
WANT_VALUES = {"w/matrix": (3, 250), "w/cube": (4, 1), "w/vec": (2, 4999), "w/scalar": (1, 0),
               "w/special": (1, 2)}
for a, opts in [("dd/base", o) for o in BLOCKS] + [("dd/relayout", o) for o in BLOCKS[:3]]:
    doc, _ = diff(a, "dd/values", *opts, rc=1)
    if not check(doc is not None and doc.get("identical") is False, f"diff values: {doc!r}"):
        continue
    check(doc["only_in_a"] == [] and doc["only_in_b"] == [], f"diff values sets: {doc!r}")
    got = {c["name"]: (c["differing_elements"], c["first_index"]) for c in doc["changed"]}
    check(got == WANT_VALUES, f"diff {a} values {opts}: {got}, expected {WANT_VALUES}")
    check(all(c["reason"] == "values" for c in doc["changed"]), f"diff values reasons: {doc!r}")
    check([c["name"] for c in doc["changed"]] == sorted(WANT_VALUES), f"diff order: {doc!r}")
rc, so, se = run("diff", "dd/base", "dd/values", rc=1)
check("values differ: w/matrix: 3 of 6400 elements, the first at flat index 250" in so and
      so.splitlines()[-1] == "data differ: 0 only in A, 0 only in B, 5 changed",
      f"diff values text: {so!r}")

# Tensor sets, dtypes and shapes.
doc, _ = diff("dd/base", "dd/schema", rc=1)
if check(doc is not None, "diff schema"):
    check(doc["identical"] is False and doc["only_in_a"] == ["only/base"] and
          doc["only_in_b"] == ["only/other"], f"diff schema sets: {doc!r}")
    got = {c["name"]: c for c in doc["changed"]}
    check(set(got) == {"w/parts", "w/scalar"}, f"diff schema changed: {doc['changed']!r}")
    p, s = got.get("w/parts", {}), got.get("w/scalar", {})
    check(p.get("reason") == "shape" and p.get("a", {}).get("shape") == [6, 4] and
          p.get("b", {}).get("shape") == [4, 6] and p.get("differing_elements") is None,
          f"diff schema shape: {p!r}")
    check(s.get("reason") == "dtype" and s.get("a", {}).get("dtype") == "float64" and
          s.get("b", {}).get("dtype") == "float32", f"diff schema dtype: {s!r}")
rc, so, se = run("diff", "dd/schema", "dd/base", rc=1)
check("only in A: only/other (int8 [3])" in so and "only in B: only/base (int8 [2])" in so and
      "shape differ: w/parts: int16 [4, 6] (A) vs int16 [6, 4] (B)" in so and
      "dtype differ: w/scalar: float32 [] (A) vs float64 [] (B)" in so, f"diff schema text: {so!r}")

# Entirely different tensor sets (a tensor present in only one checkpoint).
doc, _ = diff("d1/a", "dd/base", rc=1)
check(doc is not None and "w/matrix" in doc["only_in_b"] and "dtype/int8" in doc["only_in_a"],
      f"diff disjoint: {doc!r}")

# A checkpoint that cannot be read: exit 1 naming it.
rc, so, se = run("diff", "d1/a", "d1/nothing", rc=1)
check("d1/nothing" in se and so == "", f"diff missing: {se!r}")
shutil.copytree("dd", "ddbad")
hdr, _ = run_json("inspect", "--json", "ddbad/values")
piece = next(t for t in hdr["tensors"] if t["name"] == "w/scalar")["pieces"][0]
with h5py.File(os.path.join("ddbad", piece["file"]), "r") as f:
    off = f[piece["dataset"]].id.get_offset() + piece["pack_offset"]
with open(os.path.join("ddbad", piece["file"]), "r+b") as f:
    f.seek(off)
    b = f.read(1)
    f.seek(off)
    f.write(bytes([b[0] ^ 0x01]))
rc, so, se = run("diff", "--json", "ddbad/base", "ddbad/values", rc=1)
check("w/scalar" in se and "checksum" in se and so == "", f"diff corrupt: {so!r} {se!r}")
os.truncate("ddbad/relayout.data-00000-of-00001", 100)
rc, so, se = run("diff", "ddbad/relayout", "ddbad/base", rc=1)
check("relayout.data-00000-of-00001" in se, f"diff truncated: {se!r}")

for args in ([], ["d1/a"], ["d1/a", "d1/b", "d2/a"], ["--block-bytes", "0", "d1/a", "d1/b"],
             ["--block-bytes", "12Q", "d1/a", "d1/b"], ["--block-bytes", "-5", "d1/a", "d1/b"]):
    rc, so, se = run("diff", *args, rc=2)
    check("usage: mpickpt diff" in se, f"diff usage {args}: {se!r}")

# pin and drop: the restart control (docs/operations.md "Choosing the restart point").
os.makedirs("pd")
pd = [os.path.join("pd", f"ckpt-{n}") for n in (1, 2, 3, 4)]
for n, p in enumerate(pd, 1):
    make(p, n, 0, n * 10)
make_state("pd")
doc, se = run_json("pin", "--json", "pd")
check(doc == {"dir": "pd", "pinned": None, "set_aside": [], "dropped": [], "restart_from": "ckpt-4"},
      f"pin (show, nothing pinned): {doc!r}")
check(not os.path.exists("pd/restart"), "pin (show) wrote pd/restart")
doc, se = run_json("pin", "--json", "pd", "ckpt-2")
check(doc == {"dir": "pd", "pinned": "ckpt-2", "set_aside": ["ckpt-3", "ckpt-4"], "dropped": [],
              "restart_from": "ckpt-2"}, f"pin ckpt-2: {doc!r}")
with open("pd/restart") as f:
    lines = [ln for ln in f.read().splitlines() if not ln.startswith("#")]
check(lines == ["pin ckpt-2 2 4"], f"pd/restart after pin: {lines!r}")
doc, se = run_json("list", "--json", "pd")
marks = [(c["prefix"], c["restart"]) for c in doc["checkpoints"]]
check(marks == [(pd[0], None), (pd[1], "pinned"), (pd[2], "set_aside"), (pd[3], "set_aside")]
      and doc["restart_from"] == pd[1] and doc["latest"] == pd[3], f"list after pin: {doc!r}")
rc, so, se = run("list", "pd", rc=0)
check("restart from: pd/ckpt-2" in so and so.count("(set aside)") == 2 and "(pinned)" in so,
      f"list text after pin: {so!r}")
# a path or the index file name the same checkpoint
doc, se = run_json("drop", "--json", "pd", "pd/ckpt-4.index", "ckpt-3")
check(doc == {"dir": "pd", "pinned": "ckpt-2", "set_aside": [], "dropped": ["ckpt-3", "ckpt-4"],
              "restart_from": "ckpt-2"}, f"drop ckpt-4 ckpt-3: {doc!r}")
rc, so, se = run("drop", "pd", "ckpt-2", rc=1)
check("pinned" in se and "pin --clear" in se, f"drop the pinned one: {se!r}")
rc, so, se = run("drop", "pd", "ckpt-9", rc=1)
check("no checkpoint 'ckpt-9'" in se, f"drop an unknown one: {se!r}")
rc, so, se = run("pin", "pd", "ckpt-3", rc=1)
check("dropped" in se and "--undo" in se, f"pin a dropped one: {se!r}")
doc, se = run_json("drop", "--json", "--undo", "pd", "ckpt-3")
check(doc["dropped"] == ["ckpt-4"] and doc["set_aside"] == ["ckpt-3"], f"drop --undo: {doc!r}")
doc, se = run_json("pin", "--json", "--clear", "pd")
check(doc == {"dir": "pd", "pinned": None, "set_aside": [], "dropped": ["ckpt-4"],
              "restart_from": "ckpt-3"}, f"pin --clear: {doc!r}")
# dropping every checkpoint warns that the next start begins from scratch
rc, so, se = run("drop", "pd", "ckpt-1", "ckpt-2", "ckpt-3", rc=0)
check("from scratch" in se and "restart from: nothing" in so, f"drop all: {so!r} {se!r}")
run("drop", "--undo", "pd", "ckpt-1", "ckpt-2", "ckpt-3", "ckpt-4", rc=0)
check(not os.path.exists("pd/restart"), "an empty control leaves no pd/restart")
# a checkpoint that does not read back whole is not pinned; nothing is written
os.truncate(glob.glob("pd/ckpt-3.data-*")[0], 10)
rc, so, se = run("pin", "pd", "ckpt-3", rc=1)
check("cannot pin ckpt-3" in se and not os.path.exists("pd/restart"), f"pin damaged: {se!r}")
# a checkpoint committed after the state file was written (a chief that died in between: the
# manager adopts it at its start) is newer than the pin too: set aside with the listed ones
os.makedirs("pdn")
make("pdn/ckpt-1", 1)
make("pdn/ckpt-2", 2)
make_state("pdn")
make("pdn/ckpt-3", 3)
run("pin", "pdn", "ckpt-1", rc=0)
with open("pdn/restart") as f:
    lines = [ln for ln in f.read().splitlines() if not ln.startswith("#")]
check(lines == ["pin ckpt-1 1 3"], f"pin with an unlisted newer checkpoint: {lines!r}")
# a training state's DIR: the control goes next to chief/checkpoint
os.makedirs("pdt/chief")
make("pdt/chief/ckpt-1", 1)
make("pdt/chief/ckpt-2", 2)
make_state("pdt/chief")
doc, se = run_json("pin", "--json", "pdt", "ckpt-1")
check(doc and doc["dir"] == "pdt/chief" and os.path.isfile("pdt/chief/restart")
      and not os.path.exists("pdt/restart"), f"pin in a training dir: {doc!r}")
# a control that is not a record, or not a regular file: a clear error, nothing changed
for bad in ("pin ckpt-1\n", "drop ckpt-1 x\n", "hello\n"):
    with open("pdt/chief/restart", "w") as f:
        f.write(bad)
    rc, so, se = run("pin", "pdt", "ckpt-2", rc=1)
    check("not a restart record" in se, f"pin with a damaged control {bad!r}: {se!r}")
    with open("pdt/chief/restart") as f:
        check(f.read() == bad, f"a damaged control {bad!r} was rewritten")
    rc, so, se = run("list", "pdt", rc=0)
    check("not a restart record" in se and "ckpt-2" in so, f"list with a damaged control: {se!r}")
os.unlink("pdt/chief/restart")
with open("elsewhere-control", "w") as f:
    f.write("pin ckpt-1 1 2\n")
os.symlink(os.path.abspath("elsewhere-control"), "pdt/chief/restart")
rc, so, se = run("drop", "pdt", "ckpt-1", rc=1)
check("symbolic link" in se, f"drop with a linked control: {se!r}")
os.unlink("pdt/chief/restart")
os.mkfifo("pdt/chief/restart")
rc, so, se = run("pin", "pdt", "ckpt-1", rc=1)  # never blocks on the FIFO
check("FIFO" in se, f"pin with a FIFO control: {se!r}")
os.unlink("pdt/chief/restart")
for args in (["pin"], ["pin", "--clear", "pd", "ckpt-1"], ["pin", "pd", "a", "b"], ["drop", "pd"]):
    rc, so, se = run(*args, rc=2)
    check(f"usage: mpickpt {args[0]}" in se, f"{args}: {se!r}")

# help lists the new commands.
rc, so, se = run("help", rc=0)
check(all(f"  {c} " in so for c in ("list", "gc", "diff", "pin", "drop")), f"help: {so!r}")

finish(lambda c, f: f"test_cli_manage: {c} checks, {f} failed")
