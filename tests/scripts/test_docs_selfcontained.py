#!/usr/bin/python3
"""The documentation stands alone (issue 31): nothing in the repository cites a document outside it.

    /usr/bin/python3 -B test_docs_selfcontained.py SOURCE_DIR

Over the tracked text files of SOURCE_DIR (`git ls-files`; without git, every file outside
build*/ and .git/):
  - no file cites the design brief that lived outside the repository (its name, or its sections
    as "DESIGN" followed by a section sign) nor the machine notes kept beside it: the design the
    code cites is docs/design.md;
  - every `docs/<name>.md` cited exists;
  - every `docs/design.md §N` or `§N.M` cited is a numbered heading of docs/design.md, and every
    `docs/<name>.md "Heading"` cited names a heading (or a paragraph's bold title) of that file;
  - README.md links every file of docs/, each on a line of its own.
"""
import os
import re
import subprocess
import sys

from scriptcheck import check, finish

SRC = os.path.abspath(sys.argv[1])

# Spelled in pieces so that this file does not cite them itself.
OUTSIDE = [(r"\b" + "DESIGN" + r"\s*§", "a section of the outside design brief"),
           (r"\b" + "DESIGN" + r"\.md", "the outside design brief"),
           (r"\b" + "STYLE" + r"\.md", "the outside style notes"),
           (r"\b" + "ENVIRONMENT" + r"\.md", "the outside machine notes")]
TEXT_EXT = (".c", ".h", ".py", ".pyi", ".md", ".txt", ".sh", ".cmake", ".in", ".f90", ".sbatch",
            ".proto", ".cfg", ".toml", ".yml", ".yaml")


def tracked_files():
    try:
        out = subprocess.run(["git", "-C", SRC, "ls-files", "-z"], capture_output=True,
                             check=True).stdout
        return [f for f in out.decode("utf-8", "replace").split("\0") if f]
    except (OSError, subprocess.CalledProcessError):
        files = []
        for root, dirs, names in os.walk(SRC):
            dirs[:] = [d for d in dirs if d != ".git" and not (root == SRC and
                                                               d.startswith("build"))]
            files += [os.path.relpath(os.path.join(root, n), SRC) for n in names]
        return files


def is_text(rel):
    base = os.path.basename(rel)
    return rel.endswith(TEXT_EXT) or base in ("CMakeLists.txt", "README", "LICENSE") or \
        rel.startswith("jobs/")


def headings(path):
    """The headings of a Markdown file, (level, text) without the leading #s, and its named
    paragraphs (a line that starts with a bold title), as level 9."""
    out = []
    in_code = False
    with open(path, encoding="utf-8") as f:
        for line in f:
            if line.startswith("```"):
                in_code = not in_code
            elif not in_code and line.startswith("#"):
                m = re.match(r"(#+)\s+(.*?)\s*$", line)
                if m:
                    out.append((len(m.group(1)), m.group(2)))
            elif not in_code and line.startswith("**"):  # a named paragraph: **Title.** ...
                m = re.match(r"\*\*(.+?)\*\*", line)
                if m:
                    out.append((9, m.group(1)))
    return out


files = sorted(f for f in tracked_files() if is_text(f))
contents = {}
for rel in files:
    try:
        with open(os.path.join(SRC, rel), encoding="utf-8", errors="replace") as f:
            contents[rel] = f.read()
    except (FileNotFoundError, IsADirectoryError):
        pass  # listed by git but deleted in the work tree
check(len(contents) > 100, f"found only {len(contents)} text files under {SRC}")
me = os.path.relpath(os.path.abspath(__file__), SRC)

# 1. No citation of a document outside the repository (also split over two lines).
outside = []
for rel, text in contents.items():
    if rel == me:
        continue
    for pat, what in OUTSIDE:
        for m in re.finditer(pat, text):
            outside.append(f"{rel}:{text.count(chr(10), 0, m.start()) + 1}: cites {what} "
                           f"({m.group(0)!r})")
check(not outside, "cite docs/design.md or another file of docs/ instead of a document outside "
                   "the repository:\n  " + "\n  ".join(outside))

# 2. Every docs/<name>.md cited exists; 3. sections of docs/design.md and quoted headings exist.
design = os.path.join(SRC, "docs", "design.md")
check(os.path.isfile(design), "docs/design.md is missing")
numbered = set()
if os.path.isfile(design):
    for _, h in headings(design):
        m = re.match(r"(\d+(?:\.\d+)?)\.?\s", h)
        if m:
            numbered.add(m.group(1))
check({"1", "4", "5", "10"} <= numbered, f"docs/design.md's numbered sections: {sorted(numbered)}")
heads = {}
cited = 0
for rel, text in contents.items():
    for i, line in enumerate(text.split("\n"), 1):
        for m in re.finditer(r"docs/([A-Za-z0-9_-]+)\.md", line):
            cited += 1
            name = m.group(1) + ".md"
            path = os.path.join(SRC, "docs", name)
            if not check(os.path.isfile(path), f"{rel}:{i}: cites docs/{name}, which does not "
                                               f"exist"):
                continue
            rest = line[m.end():]
            if name == "design.md":
                for sec in re.findall(r"^\s*§\s?(\d+(?:\.\d+)?)", rest) + \
                        re.findall(r"^\s*§\s?\d+(?:\.\d+)?(?:\s*(?:-|,|and)\s*§\s?(\d+(?:\.\d+)?))+",
                                   rest):
                    check(sec in numbered, f"{rel}:{i}: cites docs/design.md §{sec}, which is "
                                           f"not a section of it ({sorted(numbered)})")
            q = re.match(r'''\s*(?:,\s*)?"([^"]{3,80})"''', rest)
            if q:
                if name not in heads:
                    heads[name] = [h for _, h in headings(path)]
                check(any(q.group(1) in h for h in heads[name]),
                      f"{rel}:{i}: cites docs/{name} \"{q.group(1)}\", which is no heading of it")
check(cited > 50, f"found only {cited} citations of docs/*.md")

# 4. README.md lists every file of docs/, one line each.
readme = contents.get("README.md", "")
docs = sorted(f[len("docs/"):] for f in files if f.startswith("docs/") and f.count("/") == 1)
check(len(docs) >= 10, f"docs/ holds only {docs}")
lines = readme.split("\n")
for name in docs:
    hits = [l for l in lines if f"(docs/{name})" in l]
    check(len(hits) >= 1, f"README.md does not link docs/{name}")
    check(sum(1 for l in hits if l.lstrip().startswith(f"- [docs/{name}]")) == 1,
          f"README.md has no line of its own (\"- [docs/{name}](docs/{name}): ...\") for "
          f"docs/{name}")

finish(lambda n, f: f"test_docs_selfcontained: {n} checks, {f} failed "
                    f"({len(contents)} files, {cited} citations of docs/*.md)")
