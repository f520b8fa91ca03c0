#!/usr/bin/python3
"""The checks of test_hostile_cli.sh, on the checkpoints test_hostile_h5 --make left in OUTDIR:

    /usr/bin/python3 -B test_hostile_cli_checks.py OUTDIR

Environment: MPICKPT_CLI.
"""
import os
import re
import struct
import subprocess
import sys

from scriptcheck import check, finish

CLI = os.environ["MPICKPT_CLI"]
OUT = sys.argv[1]
DATA = "ck.data-00000-of-00001"
FOUND = {
    "ext-passwd": "has external storage",
    "ext-fifo": "has external storage",
    "elink-fifo": "is an external link",
    "vds-fifo": "is a virtual dataset",
}
with open("/etc/passwd", "rb") as f:
    secret = f.read()
# w is int32 [4, 4]: what dump would print if it read /etc/passwd's first 64 bytes
secret_ints = struct.unpack("<16i", secret[:64])
secret_lines = [l for l in secret.decode("utf-8", "replace").splitlines() if len(l) >= 8]


def leaks(text):
    """Whether text shows any of /etc/passwd: one of its lines, or one of the int32 values its
    first 64 bytes make."""
    if any(l in text for l in secret_lines):
        return True
    nums = set(int(t) for t in re.findall(r"-?\d+", text))
    return any(v in nums for v in secret_ints)


base = os.path.join(OUT, "base", "ck")
for kind, found in FOUND.items():
    prefix = os.path.join(OUT, kind, "ck")
    for args in (["dump", prefix, "w"], ["dump", "--json", prefix, "w"],
                 ["dump", "--slice", "1,2:-", prefix, "w"], ["verify", prefix],
                 ["inspect", prefix], ["inspect", "--json", prefix], ["diff", base, prefix]):
        p = subprocess.run([CLI, *args], capture_output=True)
        so = p.stdout.decode("utf-8", "replace")
        se = p.stderr.decode("utf-8", "replace")
        what = f"{kind}: mpickpt {' '.join(args[:-2] if args[0] == 'diff' else args[:-1])}"
        check(p.returncode == 1, f"{what}: exit {p.returncode}, expected 1\nstdout: {so[:2000]}\n"
              f"stderr: {se[:2000]}")
        check(f"dataset /tensors/w in {DATA} {found}" in se,
              f"{what}: stderr should say 'dataset /tensors/w in {DATA} {found}': {se[:2000]}")
        check(not leaks(so) and not leaks(se), f"{what}: printed bytes of /etc/passwd:\n{so}\n{se}")
        check("Sanitizer" not in se and "runtime error" not in se,
              f"{what}: sanitizer report:\n{se}")
    # inspect still shows the index, w included
    p = subprocess.run([CLI, "inspect", prefix], capture_output=True)
    check(re.search(r"^w +int32 +\[4, 4\]", p.stdout.decode(), re.M) is not None,
          f"{kind}: inspect should still list w: {p.stdout.decode()[:2000]}")

# The checkpoint they were made from is good for every command.
for args in (["dump", base, "w"], ["verify", base], ["inspect", base]):
    p = subprocess.run([CLI, *args], capture_output=True)
    check(p.returncode == 0, f"base: mpickpt {args[0]}: exit {p.returncode}: "
          f"{p.stderr.decode()[:2000]}")

finish(lambda c, f: f"test_hostile_cli: {c} checks, {f} failed")
