#!/usr/bin/python3
"""`mpickpt config` (issue 17) and the one table of settings:

    /usr/bin/python3 -B test_cli_config.py OUTDIR

Environment: MPICKPT_CLI, MPICKPT_DEMO, MPIEXEC, MPICKPT_SOURCE_DIR. Every setting at its default
in an environment without MPICKPT_* variables; values set in the environment read back with their
source; invalid values flagged (INVALID, the reason naming the variable and the value, exit 1),
and the saver refusing the same value with the same words; an unknown MPICKPT_* variable listed as
a possible typo; the names of `config --all` are exactly those of docs/configuration.md's table,
and every MPICKPT_* name the sources read (lib/, mpi/, the Python package, jobs/) is among them.
"""
import glob
import json
import os
import re
import subprocess
import sys

from scriptcheck import check, finish

CLI = os.environ["MPICKPT_CLI"]
DEMO = os.environ["MPICKPT_DEMO"]
MPIEXEC = os.environ["MPIEXEC"]
SRC = os.environ["MPICKPT_SOURCE_DIR"]
OUT = sys.argv[1]
BASE = {k: v for k, v in os.environ.items() if not k.startswith("MPICKPT_")}


def config(*args, rc=None, **env):
    p = subprocess.run([CLI, "config", *args], capture_output=True, env={**BASE, **env})
    so, se = p.stdout.decode(), p.stderr.decode()
    if rc is not None:
        check(p.returncode == rc, f"config {args} {env}: exit {p.returncode}, expected {rc}\n"
                                  f"{so}\n{se}")
    return p.returncode, so, se


def config_json(*args, rc=0, **env):
    code, so, se = config("--json", *args, rc=rc, **env)
    try:
        return {s["name"]: s for s in json.loads(so)["settings"]}, json.loads(so), se
    except (ValueError, KeyError) as e:
        check(False, f"config --json: {e}: {so!r}")
        return {}, {}, se


# ---- defaults ----
rows, doc, se = config_json()
check(doc.get("ok") is True and doc.get("invalid") == 0 and doc.get("unknown") == [] and se == "",
      f"defaults: {doc} {se!r}")
for name, r in rows.items():
    check(r["source"] == "default" and r["value"] == r["default"] and r["valid"] is True and
          r["error"] is None and r["scope"] and r["read_by"] and r["meaning"], f"default {r}")
check(rows.get("MPICKPT_LAYOUT", {}).get("value") == "per-node" and
      rows.get("MPICKPT_PACK_BYTES", {}).get("value") == "1048576" and
      rows.get("MPICKPT_RESERVE", {}).get("value") == "1", f"default values: {rows}")
check("MPICKPT_BUILD_DIR" not in rows, "config without --all lists the scripts' variables")
allrows, _, _ = config_json("--all")
check(set(rows) < set(allrows) and "MPICKPT_BUILD_DIR" in allrows, "config --all")

# ---- values from the environment ----
good = {"MPICKPT_ASYNC": "yes", "MPICKPT_PACK_BYTES": "4096", "MPICKPT_LAYOUT": "shared",
        "MPICKPT_CACHE_DIR": "/tmp/c/%n", "MPICKPT_FAULT": "1:write:kill",
        "MPICKPT_DEADLINE": "1900000000", "MPICKPT_HIER_MERGE": "off",
        "MPICKPT_RANKS_PER_NODE": "2", "MPICKPT_FAILURE_GROUP": "rack 7"}
rows, doc, se = config_json(**good, MPICKPT_LOG="")
for k, v in good.items():
    r = rows.get(k, {})
    check(r.get("source") == "environment" and r.get("value") == v and r.get("valid") is True,
          f"{k}={v}: {r}")
check(rows.get("MPICKPT_LOG", {}).get("source") == "default", "an empty variable is the default")
check(rows.get("MPICKPT_REDUNDANCY", {}).get("source") == "default", "untouched: default")
code, so, se = config(rc=0, **good)
line = next((l for l in so.splitlines() if l.startswith("MPICKPT_PACK_BYTES ")), "")
check(line.split() == ["MPICKPT_PACK_BYTES", "environment", "4096"], f"text row {line!r}")
check(f"{len(good)} setting(s) from the environment, 0 invalid" in so, f"text footer:\n{so}")

# ---- invalid values ----
bad = {"MPICKPT_PACK_BYTES": "abc", "MPICKPT_LAYOUT": "striped", "MPICKPT_ASYNC": "maybe",
       "MPICKPT_DEADLINE": "-5", "MPICKPT_CACHE_DIR": "/x/%q", "MPICKPT_FAULT": "x",
       "MPICKPT_RANKS_PER_NODE": "0", "MPICKPT_LOG": "loud"}
rows, doc, se = config_json(rc=1, **bad)
check(doc.get("ok") is False and doc.get("invalid") == len(bad), f"invalid count: {doc}")
for k, v in bad.items():
    r = rows.get(k, {})
    check(r.get("valid") is False and r.get("value") == v and r.get("source") == "environment" and
          f"{k}='{v}'" in (r.get("error") or ""), f"{k}={v}: {r}")
    check(f"mpickpt: config: {k}='{v}'" in se, f"{k}: not on stderr: {se!r}")
code, so, se = config(rc=1, MPICKPT_LAYOUT="striped")
line = next((l for l in so.splitlines() if l.startswith("MPICKPT_LAYOUT ")), "")
check("INVALID: MPICKPT_LAYOUT='striped' is not one of: per-rank, shared, per-node" in line,
      f"text INVALID row {line!r}")

# the saver refuses the same value with the same words
for k, v in (("MPICKPT_LAYOUT", "striped"), ("MPICKPT_PACK_BYTES", "abc")):
    err = json.loads(config("--json", **{k: v})[1])
    want = next(s["error"] for s in err["settings"] if s["name"] == k)
    p = subprocess.run([MPIEXEC, "-np", "1", DEMO, "--dir", os.path.join(OUT, "demo"),
                        "--epochs", "1", "--mb", "1"], capture_output=True, timeout=120,
                       env={**os.environ, k: v})
    check(p.returncode != 0 and want in p.stderr.decode(),
          f"demo with {k}={v}: exit {p.returncode}, stderr {p.stderr.decode()[-600:]!r}, "
          f"expected {want!r}")

# ---- an unknown variable ----
rows, doc, se = config_json(rc=0, MPICKPT_LAYUOT="shared")
check(doc.get("unknown") == ["MPICKPT_LAYUOT"] and doc.get("ok") is True and
      "MPICKPT_LAYUOT is not an mpickpt setting" in se, f"unknown: {doc.get('unknown')} {se!r}")
code, so, se = config(rc=0, MPICKPT_LAYUOT="shared")
check(re.search(r"^MPICKPT_LAYUOT\s+environment\s+\(not an mpickpt setting", so, re.M),
      f"unknown in text:\n{so}")
config("--bogus", rc=2)
config("extra", rc=2)
p = subprocess.run([CLI, "help"], capture_output=True)
check(re.search(rb"^  config ", p.stdout, re.M), f"help lists config: {p.stdout!r}")

# ---- one table: the code's array, the doc's rows, the sources ----
with open(os.path.join(SRC, "docs", "configuration.md")) as f:
    md = f.read()
section = md.split("## Environment variables", 1)[1].split("\n## ", 1)[0]
doc_names = set()
for row in section.splitlines():
    if row.startswith("| `MPICKPT_"):
        first_cell = row.split("|")[1]
        doc_names |= set(re.findall(r"`(MPICKPT_[A-Z0-9_]+)", first_cell))
check(doc_names == set(allrows),
      f"docs/configuration.md and `config --all` differ: only in the doc "
      f"{sorted(doc_names - set(allrows))}, only in the code {sorted(set(allrows) - doc_names)}")
read = set()
files = (glob.glob(os.path.join(SRC, "lib", "**", "*.c"), recursive=True) +
         glob.glob(os.path.join(SRC, "mpi", "**", "*.c"), recursive=True) +
         glob.glob(os.path.join(SRC, "mpi", "python", "mpickpt", "*.py")))
for path in files:
    with open(path, errors="replace") as f:
        read |= set(re.findall(r'"(MPICKPT_[A-Z0-9_]+)"', f.read()))
for path in glob.glob(os.path.join(SRC, "jobs", "**", "*"), recursive=True):
    if os.path.isfile(path):
        with open(path, errors="replace") as f:
            read |= set(re.findall(r"\b(MPICKPT_[A-Z0-9_]*[A-Z0-9])\b", f.read()))
check(read <= set(allrows), f"read by the sources but not in the table: {sorted(read - set(allrows))}")

finish(lambda c, f: f"test_cli_config: {c - f}/{c} checks passed")
