#!/usr/bin/python3
"""The man pages (issue 17): generated at build time from the programs' own help text.

    /usr/bin/python3 -B test_manpage.py OUTDIR

Environment: MPICKPT_CLI, MPICKPT_BINARY_DIR, MPICKPT_SOURCE_DIR. mpickpt(1) holds every
command's synopsis (as `mpickpt help CMD` prints it) and every line of its help; it renders with
`man -l` (or groff, when man is missing; skipped when neither is) with the synopses in the output;
the install rule puts it in share/man/man1. The generator's --help mode (a program with only
--help, as the launcher) keeps the text verbatim: backslashes and lines that start with '.'.
"""
import os
import re
import shutil
import subprocess
import sys

from scriptcheck import check, finish

CLI = os.environ["MPICKPT_CLI"]
BUILD = os.environ["MPICKPT_BINARY_DIR"]
SRC = os.environ["MPICKPT_SOURCE_DIR"]
OUT = sys.argv[1]
PAGE = os.path.join(BUILD, "man", "man1", "mpickpt.1")


def render(page):
    """The page as text, or None when this machine has no formatter."""
    env = dict(os.environ, MANWIDTH="200", LC_ALL="C.UTF-8")
    if shutil.which("man"):
        cmd = ["man", "-l", page]
    elif shutil.which("groff"):
        cmd = ["groff", "-man", "-Tutf8", page]
    else:
        return None
    p = subprocess.run(cmd, capture_output=True, env=env)
    check(p.returncode == 0, f"{cmd}: exit {p.returncode}: {p.stderr.decode()[:500]}")
    text = p.stdout.decode(errors="replace")
    return re.sub(r".\x08", "", text)  # overstrike (bold, underline) when not on a terminal


def unroff(s):
    return s.replace("\\e", "\\").replace("\\&", "")


check(os.path.isfile(PAGE), f"no {PAGE}")
with open(PAGE) as f:
    page = f.read()
lines = [unroff(l) for l in page.splitlines()]
main = subprocess.run([CLI, "help"], capture_output=True, check=True).stdout.decode()
cmds = re.findall(r"^  ([a-z][a-z0-9-]*) ", main.split("commands:", 1)[1], re.M)
check(len(cmds) >= 10 and all(c in cmds for c in ("config", "verify", "pin", "drop", "halt")),
      f"commands: {cmds}")
synopsis = page.split(".SH SYNOPSIS", 1)[-1].split(".SH ", 1)[0]
for c in cmds:
    h = subprocess.run([CLI, "help", c], capture_output=True, check=True).stdout.decode()
    usage = h.splitlines()[0]
    check(usage.startswith(f"usage: mpickpt {c}"), f"help {c}: {usage!r}")
    check(unroff(usage[len("usage: "):]) in [unroff(l) for l in synopsis.splitlines()],
          f"synopsis of {c} missing: {usage!r}")
    check(f".SS {c}" in page, f"no section for {c}")
    for l in h.splitlines():
        check(l in lines, f"help {c}: line {l!r} not in the page")
for l in main.splitlines():
    check(l in lines, f"help: line {l!r} not in the page")

text = render(PAGE)
if text is None:
    print("test_manpage: no man or groff here: rendering not checked")
else:
    check("MPICKPT(1)" in text and "command-line tool for mpickpt checkpoints" in text,
          f"rendered head: {text[:300]!r}")
    for c in ("mpickpt config [--json] [--all]", "mpickpt verify [--json] PREFIX|DIR...",
              "mpickpt gc [--dry-run] [--json] [--wait SECONDS] DIR"):
        check(c in text, f"rendered page lacks {c!r}")

# installed to share/man/man1
with open(os.path.join(BUILD, "lib", "cli", "cmake_install.cmake")) as f:
    inst = f.read()
check(re.search(r"man/man1.*mpickpt\.1|mpickpt\.1.*man/man1", inst, re.S) is not None,
      "no install rule for mpickpt.1 in share/man/man1")

# mpickpt-run(1): every line of `mpickpt-run --help`, rendered, installed
RUN = os.path.join(BUILD, "bin", "mpickpt-run")
RUN_PAGE = os.path.join(BUILD, "man", "man1", "mpickpt-run.1")
check(os.path.isfile(RUN_PAGE), f"no {RUN_PAGE}")
if os.path.isfile(RUN_PAGE):
    with open(RUN_PAGE) as f:
        rlines = [unroff(l) for l in f.read().splitlines()]
    rhelp = subprocess.run([RUN, "--help"], capture_output=True, check=True).stdout.decode()
    check(len(rhelp.splitlines()) > 20 and "--max-runs" in rhelp, f"mpickpt-run --help: {rhelp!r}")
    for l in rhelp.splitlines():
        check(l in rlines, f"mpickpt-run --help: line {l!r} not in the page")
    rtext = render(RUN_PAGE)
    if rtext is not None:
        check("MPICKPT-RUN(1)" in rtext and "--max-runs" in rtext, f"mpickpt-run(1): {rtext[:300]!r}")
check(re.search(r"man/man1.*mpickpt-run\.1|mpickpt-run\.1.*man/man1", inst, re.S) is not None,
      "no install rule for mpickpt-run.1 in share/man/man1")

# --help mode: verbatim text, roff escapes
prog = os.path.join(OUT, "fake-run")
with open(prog, "w") as f:
    f.write("#!/bin/sh\n[ \"$1\" = --help ] || exit 3\n"
            "cat <<'END'\nusage: fake-run [--runs N] -- COMMAND...\n.starts with a dot\n"
            "'starts with a quote\nback\\slash \\fB not bold\n  --runs N   relaunches (MPICKPT_RUNS)\nEND\n")
os.chmod(prog, 0o755)
out = os.path.join(OUT, "fake-run.1")
p = subprocess.run(["cmake", f"-DEXE={prog}", "-DNAME=fake-run", "-DSECTION=1", "-DMODE=help",
                    "-DSUMMARY=a fake launcher", "-DVERSION=9.9", f"-DOUT={out}", "-P",
                    os.path.join(SRC, "lib", "cmake", "MpickptManpageGen.cmake")],
                   capture_output=True)
check(p.returncode == 0 and os.path.isfile(out), f"generator --help mode: {p.stderr.decode()}")
if os.path.isfile(out):
    text = render(out)
    if text is not None:
        for want in ("FAKE-RUN(1)", "fake-run - a fake launcher", ".starts with a dot",
                     "'starts with a quote", "back\\slash \\fB not bold",
                     "--runs N   relaunches (MPICKPT_RUNS)", "mpickpt 9.9"):
            check(want in text, f"--help mode: {want!r} not in\n{text}")
p = subprocess.run(["cmake", f"-DEXE={os.path.join(OUT, 'missing')}", "-DNAME=x", "-DSECTION=1",
                    "-DMODE=help", "-DSUMMARY=x", "-DVERSION=1", f"-DOUT={OUT}/x.1", "-P",
                    os.path.join(SRC, "lib", "cmake", "MpickptManpageGen.cmake")],
                   capture_output=True)
check(p.returncode != 0 and not os.path.exists(f"{OUT}/x.1"), "a failing program made a page")

finish(lambda c, f: f"test_manpage: {c - f}/{c} checks passed")
