#!/usr/bin/python3
"""`mpickpt verify --json`, `mpickpt gc --json` and verify's progress on a terminal (issue 17):

    /usr/bin/python3 -B test_cli_obs.py OUTDIR

Environment: MPICKPT_CLI, MPICKPT_MAKE_CKPT. verify --json on a good checkpoint, on one with a
flipped data byte (the bad piece named in "bad_pieces", the same as on stderr), on a missing
prefix and on an empty DIR ("errors"); gc --json listing what a dry run would remove and what it
removed (the paths gone afterwards) and a refusal ("ok": false, "error"); the progress line on a
pseudo-terminal (drawn, then erased), never through a pipe or with --json.
"""
import json
import os
import pty
import shutil
import subprocess
import sys

from scriptcheck import check, flip_piece_byte, run_cli, finish

CLI = os.environ["MPICKPT_CLI"]
MAKE = os.environ["MPICKPT_MAKE_CKPT"]
OUT = sys.argv[1]
KERNEL = "model/dense/kernel/.ATTRIBUTES/VARIABLE_VALUE"


def run(*args, rc=None):
    return run_cli(CLI, *args, rc=rc)


def run_json(*args, rc=0):
    code, so, se = run(*args, rc=rc)
    check(so.count("\n") == 1, f"{args}: not one line: {so!r}")
    try:
        return json.loads(so), se
    except ValueError as e:
        check(False, f"mpickpt {args!r}: not JSON ({e}): {so[:2000]!r}\nstderr: {se}")
        return {}, se


def on_pty(*args):
    """Runs the CLI with stderr on a pseudo-terminal; returns (exit code, stdout, stderr bytes)."""
    master, slave = pty.openpty()
    p = subprocess.Popen([CLI, *args], stdout=subprocess.PIPE, stderr=slave)
    os.close(slave)
    err = b""
    while True:
        try:
            chunk = os.read(master, 65536)
        except OSError:  # EIO: the child closed its end
            break
        if not chunk:
            break
        err += chunk
    so = p.stdout.read().decode()
    p.wait()
    os.close(master)
    return p.returncode, so, err


good_dir = os.path.join(OUT, "good")
os.makedirs(good_dir)
GOOD = os.path.join(good_dir, "ckpt-1")
subprocess.run([MAKE, GOOD, "--counter", "1"], check=True)
subprocess.run([MAKE, os.path.join(good_dir, "ckpt-2"), "--counter", "2"], check=True)
doc = json.loads(run("inspect", "--json", GOOD, rc=0)[1])
total = sum(p["bytes"] for t in doc["tensors"] for p in t["pieces"])
npieces = sum(len(t["pieces"]) for t in doc["tensors"])

# ---- verify --json ----
v, se = run_json("verify", "--json", GOOD)
check(v.get("ok") is True and v.get("errors") == [], f"verify --json good: {v}")
c = (v.get("checkpoints") or [{}])[0]
check(c == {"prefix": GOOD, "tensors": len(doc["tensors"]), "pieces": npieces, "bytes": total,
            "bad_pieces": [], "ok": True, "error": None}, f"verify --json entry: {c}")
check(se == "", f"verify --json good: stderr {se!r}")
v, _ = run_json("verify", "--json", good_dir)
check([c.get("prefix") for c in v.get("checkpoints", [])] ==
      [GOOD, os.path.join(good_dir, "ckpt-2")], f"verify --json DIR: {v}")

bad_dir = os.path.join(OUT, "bad")
shutil.copytree(good_dir, bad_dir)
BAD = os.path.join(bad_dir, "ckpt-1")
j, p = flip_piece_byte(CLI, BAD, KERNEL, [2, 0])
v, se = run_json("verify", "--json", bad_dir, rc=1)
cks = v.get("checkpoints") or [{}, {}]
check(v.get("ok") is False and len(cks) == 2, f"verify --json bad: {v}")
b = cks[0]
check(b.get("ok") is False and b.get("prefix") == BAD and "bad piece" in (b.get("error") or ""),
      f"verify --json bad entry: {b}")
bp = b.get("bad_pieces") or [{}]
check(len(bp) == 1 and bp[0].get("tensor") == KERNEL and bp[0].get("piece") == j and
      bp[0].get("file") == p["file"] and "checksum" in bp[0].get("error", ""),
      f"verify --json bad piece: {bp}")
check(f"piece {j}" in se and KERNEL in se, f"verify --json bad: stderr still names it: {se!r}")
check(cks[1].get("ok") is True, f"verify --json: the good one of the DIR: {cks[1]}")

missing = os.path.join(OUT, "nothing-here")
v, se = run_json("verify", "--json", missing, rc=1)
m = (v.get("checkpoints") or [{}])[0]
check(v.get("ok") is False and m.get("ok") is False and m.get("tensors") is None and
      m.get("bad_pieces") == [] and "does not exist" in (m.get("error") or "") + se,
      f"verify --json missing: {v} {se!r}")
empty = os.path.join(OUT, "empty")
os.makedirs(empty)
v, se = run_json("verify", "--json", empty, rc=1)
check(v.get("checkpoints") == [] and len(v.get("errors", [])) == 1 and
      "no checkpoints" in v["errors"][0] and v.get("ok") is False, f"verify --json empty: {v}")
run("verify", "--json", "--bogus", GOOD, rc=2)

# ---- progress: on a terminal only, erased at the end; never in a pipe or with --json ----
rc, so, err = on_pty("verify", good_dir)
check(rc == 0 and so.count(": ok (") == 2, f"verify on a pty: {rc} {so!r}")
text = err.decode(errors="replace")
check(f"verify {GOOD}: 100% (" in text and " MiB)" in text, f"no progress line on a pty: {text!r}")
check(text.endswith("\r\x1b[K"), f"the progress line is not erased: {text[-80:]!r}")
rc, so, err = on_pty("verify", "--json", good_dir)
check(rc == 0 and err == b"", f"verify --json on a pty printed progress: {err!r}")
rc, so, err = on_pty("verify", bad_dir)
text = err.decode(errors="replace")
check(rc == 1 and "\r\x1b[Kmpickpt: verify: " in text, f"bad piece after progress: {text!r}")
rc, so, se = run("verify", good_dir, rc=0)
check(se == "", f"verify through a pipe: stderr {se!r}")

# ---- gc --json ----
gdir = os.path.join(OUT, "gc")
shutil.copytree(good_dir, gdir)
temp = os.path.join(gdir, "ckpt-3_temp")
os.makedirs(temp)
orphan = os.path.join(gdir, "ckpt-9.data-00000-of-00001")
open(orphan, "wb").close()
g, se = run_json("gc", "--json", "--dry-run", gdir)
removed = sorted(r.get("path") for r in g.get("removed", []))
check(g.get("dir") == gdir and g.get("dry_run") is True and g.get("ok") is True and
      g.get("error") is None and removed == sorted([temp, orphan]) and g.get("count") == 2,
      f"gc --json --dry-run: {g}")
check(all(r.get("why") for r in g.get("removed", [])), f"gc --json: every path has a why: {g}")
check(os.path.exists(temp) and os.path.exists(orphan), "gc --dry-run removed something")
g, se = run_json("gc", "--json", gdir + "/")
check(g.get("dry_run") is False and g.get("count") == 2 and g.get("ok") is True and
      sorted(r.get("path") for r in g.get("removed", [])) == sorted([temp, orphan]),
      f"gc --json: {g}")
check(not os.path.exists(temp) and not os.path.exists(orphan), "gc --json did not remove")
g, _ = run_json("gc", "--json", gdir)
check(g.get("removed") == [] and g.get("count") == 0 and g.get("ok") is True, f"gc again: {g}")
other = os.path.join(OUT, "not-a-checkpoint-dir")
os.makedirs(other)
open(os.path.join(other, "notes.txt"), "w").close()
g, se = run_json("gc", "--json", other, rc=1)
check(g.get("ok") is False and g.get("error") and g.get("removed") == [] and
      se.startswith("mpickpt: gc: "), f"gc --json refused: {g} {se!r}")
check(os.path.exists(os.path.join(other, "notes.txt")), "gc --json removed a stranger's file")

finish(lambda c, f: f"test_cli_obs: {c - f}/{c} checks passed")
