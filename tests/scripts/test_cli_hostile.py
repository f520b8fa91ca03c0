"""The JSON of the mpickpt tool is valid JSON in valid UTF-8 whatever the names hold.

    MPICKPT_CLI=.../mpickpt MPICKPT_MAKE_CKPT=.../make_ckpt MPICKPT_MAKE_STATE=.../make_state \
    MPICKPT_WRITE_PREFIX=.../write_prefix MPIEXEC=mpirun /usr/bin/python3 test_cli_hostile.py OUTDIR

Checkpoints (make_ckpt) live in a directory whose name holds a 0xff byte, a '"' and a '\\'; their
tensors are named with quotes, backslashes, control characters and multi-byte UTF-8. Tensor names
must be valid UTF-8: make_ckpt (the library's ckpt_writer_add) refuses byte strings that are not
(a stray 0xff, overlong forms, encoded surrogates, code points above U+10FFFF, truncated
sequences), and an index crafted to hold one is refused as corrupt by every command. Every --json
command (inspect, dump, list, diff, stats, verify, gc) runs on them, also where it fails
(missing checkpoint, corrupt index, missing data file, damaged state file, no metrics): stdout
must decode as strict UTF-8, every line must parse with json.loads and hold no lone surrogate,
and each name must come back exactly; paths that are not UTF-8 come back with every byte of an
ill-formed sequence replaced by U+FFFD. verify and gc also run without --json for their exit
codes. The saver's metrics.jsonl (write_prefix, one rank, a prefix with
'"', '\\' and 0xff) must be JSON and `mpickpt stats --json` must read it.

Run by Debian's /usr/bin/python3; exits 1 when a check fails.
"""
import json
import os
import random
import shutil
import subprocess
import sys

from scriptcheck import check, finish

CLI = os.environ["MPICKPT_CLI"].encode()
MAKE = os.environ["MPICKPT_MAKE_CKPT"].encode()
MAKE_STATE = os.environ["MPICKPT_MAKE_STATE"].encode()
WRITE_PREFIX = os.environ["MPICKPT_WRITE_PREFIX"].encode()
MPIEXEC = os.environ.get("MPIEXEC", "mpirun").encode()
OUT = os.fsencode(sys.argv[1])


def expected(b):
    """What a JSON string of the bytes b must decode to: b itself when it is UTF-8, else every
    byte that is not part of a well-formed sequence as U+FFFD (Python's strict decoder rejects
    overlongs, surrogates and code points above U+10FFFF; surrogateescape marks each rejected byte
    with one lone surrogate)."""
    s = b.decode("utf-8", "surrogateescape")
    return "".join("\ufffd" if "\udc80" <= c <= "\udcff" else c for c in s)


def strings(v):
    """Every string (keys included) inside a decoded JSON value."""
    if isinstance(v, str):
        yield v
    elif isinstance(v, list):
        for x in v:
            yield from strings(x)
    elif isinstance(v, dict):
        for k, x in v.items():
            yield k
            yield from strings(x)


def json_lines(raw, what):
    """Checks that raw (bytes) is strict UTF-8 and that each non-empty line is one JSON value
    without lone surrogates; returns the decoded values (None for a line that failed)."""
    try:
        text = raw.decode("utf-8", "strict")
    except UnicodeDecodeError as e:
        check(False, f"{what}: stdout is not UTF-8 ({e}): {raw[:400]!r}")
        return [None]
    docs = []
    # split at "\n" only: str.splitlines() would also split at U+0085, U+2028 and U+2029, which
    # JSON strings may hold raw
    for n, line in enumerate(text.split("\n"), 1):
        if not line.strip():
            continue
        try:
            d = json.loads(line)
        except ValueError as e:
            check(False, f"{what}: line {n} is not JSON ({e}): {line[:400]!r}")
            docs.append(None)
            continue
        bad = [s for s in strings(d) if any("\ud800" <= c <= "\udfff" for c in s)]
        check(not bad, f"{what}: line {n} holds lone surrogates: {bad[:3]!r}")
        docs.append(d)
    return docs


def run(*args, rc=None, json_out=True):
    """Runs the CLI with bytes arguments. Checks the exit code when rc is given, that no sanitizer
    spoke, and (json_out) that stdout is valid JSON lines in UTF-8 -- also when the command fails.
    Returns (exit code, decoded JSON documents or raw stdout, stderr bytes)."""
    what = b"mpickpt " + b" ".join(args)
    what = what.decode("utf-8", "backslashreplace")
    p = subprocess.run([CLI, *args], capture_output=True)
    if rc is not None:
        check(p.returncode == rc, f"{what}: exit {p.returncode}, expected {rc}\n"
                                  f"stdout: {p.stdout[:2000]!r}\nstderr: {p.stderr[:2000]!r}")
    check(b"Sanitizer" not in p.stderr and b"runtime error" not in p.stderr,
          f"{what}: sanitizer report:\n{p.stderr.decode(errors='replace')}")
    if json_out:
        return p.returncode, json_lines(p.stdout, what), p.stderr
    return p.returncode, p.stdout, p.stderr


def one_doc(docs, what):
    good = [d for d in docs if d is not None]
    check(len(docs) == 1 and len(good) == 1, f"{what}: expected one JSON document, got {docs!r}")
    return good[0] if good else {}


def make(prefix, *names, counter=1, must_fail=False):
    args = [MAKE, prefix, b"--counter", str(counter).encode()]
    for n in names:
        args += [b"--name", n]
    p = subprocess.run(args, capture_output=True)
    if must_fail:
        return p
    if p.returncode != 0:
        sys.exit(f"make_ckpt {prefix!r} failed: {p.stderr.decode(errors='replace')}")


def crc32c(data):
    crc = 0xFFFFFFFF
    for b in data:
        crc ^= b
        for _ in range(8):
            crc = (crc >> 1) ^ (0x82F63B78 if crc & 1 else 0)
    return crc ^ 0xFFFFFFFF


# Names that are valid UTF-8 (round-trip exactly) and byte strings that are not.
VALID = [
    'quote"inside', 'back\\slash', '\\"both\\"', "ctl\x01\x1f\n\r\t\b\f", "del\x7f",
    "c1\u0080\u0085\u009f", "caf\u00e9", "\u65e5\u672c\u8a9e/\u540d\u524d", "emoji\U0001f600",
    "max\U0010ffff", "repl\ufffd", "sep\u2028\u2029", "bmp\uffff\ufeff", "2byte\u07ff3byte\u0800",
]
INVALID = [
    b"ff\xff", b"fe\xfe", b"overlong\xc0\xaf", b"overlong\xc1\xbf", b"overlong3\xe0\x80\xaf",
    b"overlong4\xf0\x8f\xbf\xbf", b"surrogate\xed\xa0\x80", b"surrogate\xed\xbf\xbf",
    b"above\xf4\x90\x80\x80", b"f5\xf5\x80\x80\x80", b"trunc2\xc3", b"trunc3\xe2\x82",
    b"trunc4\xf0\x9f\x98", b"cont\x80\xbf", b"mixed\xe2\x82A\xc3\xa9\xff\xe2\x82\xac",
    b"\xff\"q\\\x01", b"lead\xe2\x82\xe2\x82\xac",
]
NAMES = [n.encode() for n in VALID]
for b in INVALID:  # the list above must really be ill-formed
    try:
        b.decode("utf-8")
        sys.exit(f"test bug: {b!r} is valid UTF-8")
    except UnicodeDecodeError:
        pass

DIR = os.path.join(OUT, b'dir\xff"q\\x')
shutil.rmtree(OUT, ignore_errors=True)
os.makedirs(DIR)
A = os.path.join(DIR, b"ckpt-1")
B = os.path.join(DIR, b"ckpt-2")
make(A, *NAMES, counter=1)
# B: the first name only in A, a name only in B, the rest with values shifted by one position
ONLY_B = b"only-b\xc3\xa9"
make(B, *(NAMES[1:] + [ONLY_B]), counter=2)
subprocess.run([MAKE_STATE, DIR], check=True, capture_output=True)

# ---- inspect --json: every name comes back as expected; files and datasets are strings ----
rc, docs, _ = run(b"inspect", b"--json", A, rc=0)
doc = one_doc(docs, "inspect A")
names = [t.get("name") for t in doc.get("tensors", [])]
for raw in NAMES:
    check(expected(raw) in names, f"inspect: {raw!r} is not listed as {expected(raw)!r}")
for v in VALID:
    check(v in names, f"inspect: the valid name {v!r} did not round-trip")
check(all(isinstance(p.get("file"), str) and isinstance(p.get("dataset"), str)
          for t in doc.get("tensors", []) for p in t.get("pieces", [])), "inspect: piece strings")

# ---- names that are not UTF-8 are refused at registration, naming the bytes ----
for raw in INVALID:
    p = make(os.path.join(DIR, b"refused"), raw, must_fail=True)
    check(p.returncode != 0 and b"not valid UTF-8" in p.stderr,
          f"make_ckpt accepted the name {raw!r}: exit {p.returncode} {p.stderr!r}")
    check(not os.path.exists(os.path.join(DIR, b"refused.index")), f"{raw!r}: an index was written")

# ---- an index crafted to hold such a name (same length as a valid one, container CRC fixed) is
# refused as corrupt; stdout stays valid JSON (nothing) ----
X = os.path.join(DIR, b"crafted")
make(X, b"NAME\xc3\xa9")
with open(X + b".index", "rb") as f:
    data = bytearray(f.read())
for bad in (b"NAME\xff\xfe", b"NAME\xc0\xaf", b"NAM\xed\xa0\x80"):
    i = data.find(b"NAME\xc3\xa9") if b"NAME\xc3\xa9" in data else data.find(b"NAM")
    patched = bytearray(data)
    at = patched.find(b"NAME\xc3\xa9")
    check(at > 0, "test bug: the name is not in the index")
    patched[at:at + 6] = bad
    patched[-4:] = crc32c(bytes(patched[:-4])).to_bytes(4, "little")
    with open(X + b".index", "wb") as f:
        f.write(patched)
    for args in ([b"inspect", b"--json", X], [b"dump", b"--json", X, b"x"]):
        rc, docs, se = run(*args, rc=1)
        check(docs == [] and b"UTF-8" in se, f"{args!r} with the name {bad!r}: {docs!r} {se!r}")
    run(b"verify", X, rc=1, json_out=False)

# ---- random byte strings of single bytes around UTF-8's boundaries and of whole sequences (so
# that valid and ill-formed ones touch): the valid ones round-trip exactly, in byte order, and
# ill-formed ones are refused ----
rng = random.Random(20251121)
TOKENS = [bytes([b]) for b in (0x01, 0x1f, 0x22, 0x5c, 0x41, 0x7f, 0x80, 0x8f, 0x90, 0x9f, 0xa0,
                               0xbf, 0xc0, 0xc1, 0xc2, 0xdf, 0xe0, 0xe1, 0xec, 0xed, 0xee, 0xef,
                               0xf0, 0xf1, 0xf3, 0xf4, 0xf5, 0xf7, 0xf8, 0xfe, 0xff)]
TOKENS += [c.encode() for c in ("\u0080", "\u07ff", "\u0800", "\ud7ff", "\ue000", "\ufffd",
                                "\uffff", "\U00010000", "\U0010ffff", "\u00e9", "\u20ac")]
ALL_RANDOM = sorted({b"r" + b"".join(rng.choice(TOKENS) for _ in range(rng.randint(1, 8)))
                     for _ in range(600)})


def is_utf8(b):
    try:
        b.decode("utf-8")
        return True
    except UnicodeDecodeError:
        return False


# valid ones: from the tokens that are whole sequences (or ASCII) only
VALID_TOKENS = [t for t in TOKENS if is_utf8(t)]
RANDOM = sorted({b"r" + b"".join(rng.choice(VALID_TOKENS) for _ in range(rng.randint(1, 8)))
                 for _ in range(400)})
for raw in [b for b in ALL_RANDOM if not is_utf8(b)][:40]:
    p = make(os.path.join(DIR, b"refused"), raw, must_fail=True)
    check(p.returncode != 0 and b"not valid UTF-8" in p.stderr, f"make_ckpt accepted {raw!r}")
R = os.path.join(DIR, b"random-\xff")
make(R, *RANDOM)
rc, docs, _ = run(b"inspect", b"--json", R, rc=0)
got = [t.get("name") for t in one_doc(docs, "inspect R").get("tensors", [])]
got = [n for n in got if isinstance(n, str) and n.startswith("r")]
want = [expected(b) for b in RANDOM]
check(got == want, "inspect R: names differ from the strict decoder's: " +
      repr([(g, w) for g, w in zip(got, want) if g != w][:5]) + f" ({len(got)} vs {len(want)})")
check(len(RANDOM) > 100 and sum(any(ord(c) > 0x7f for c in w) for w in want) > 100,
      "test bug: RANDOM is not varied enough")

# ---- dump --json of every hostile name: the name and the values (k, -k) ----
for k, raw in enumerate(NAMES, 1):
    rc, docs, _ = run(b"dump", b"--json", A, raw, rc=0)
    d = one_doc(docs, f"dump {raw!r}")
    check(d.get("name") == expected(raw) and d.get("values") == [k, -k],
          f"dump {raw!r}: {d!r}, want name {expected(raw)!r} values {[k, -k]}")

# ---- list --json: prefixes hold the directory's bytes ----
rc, docs, _ = run(b"list", b"--json", DIR, rc=0)
d = one_doc(docs, "list")
check(d.get("latest") == expected(B), f"list: latest {d.get('latest')!r}, want {expected(B)!r}")
check([c.get("prefix") for c in d.get("checkpoints", [])] == [expected(A), expected(B)],
      f"list: prefixes {d.get('checkpoints')!r}")
check(expected(DIR).count("\ufffd") == 1 and '"q\\x' in expected(DIR), "test bug: DIR")

# ---- diff --json: only_in_a, only_in_b, changed ----
rc, docs, _ = run(b"diff", b"--json", A, B, rc=1)
d = one_doc(docs, "diff")
check(d.get("identical") is False, f"diff: {d!r}")
check(d.get("only_in_a") == [expected(NAMES[0])], f"diff only_in_a: {d.get('only_in_a')!r}")
check(d.get("only_in_b") == [expected(ONLY_B)], f"diff only_in_b: {d.get('only_in_b')!r}")
changed = {c.get("name") for c in d.get("changed", [])}
check(changed == {expected(n) for n in NAMES[1:]}, f"diff changed: {sorted(changed)!r}")
check(d.get("header") == {"save_counter": {"a": 1, "b": 2}}, f"diff header: {d.get('header')!r}")
rc, docs, _ = run(b"diff", b"--json", A, A, rc=0)
check(one_doc(docs, "diff A A").get("identical") is True, "diff A A: not identical")

# ---- failures: stdout stays valid (empty, or the document printed before the failure) ----
MISSING = os.path.join(DIR, b"missing\xff-9")
for args in ([b"inspect", b"--json", MISSING], [b"dump", b"--json", MISSING, NAMES[0]],
             [b"diff", b"--json", A, MISSING], [b"dump", b"--json", A, b"no such \xff name"]):
    rc, docs, se = run(*args, rc=1)
    check(docs == [], f"{args!r}: stdout {docs!r}, want nothing")
    check(se.startswith(b"mpickpt: "), f"{args!r}: stderr {se!r}")

# a corrupt index (a flipped byte, and a truncated one)
for how in ("flipped", "truncated"):
    c = os.path.join(DIR, b"corrupt-" + how.encode() + b"\xfe")
    make(c, *NAMES)
    with open(c + b".index", "r+b") as f:
        data = bytearray(f.read())
        if how == "flipped":
            data[len(data) // 2] ^= 0x5A
        else:
            data = data[: len(data) // 2]
        f.seek(0)
        f.truncate()
        f.write(data)
    for args in ([b"inspect", b"--json", c], [b"dump", b"--json", c, NAMES[0]],
                 [b"diff", b"--json", A, c]):
        rc, docs, se = run(*args, rc=1)
        check(docs == [], f"{args!r} ({how} index): stdout {docs!r}, want nothing")
    run(b"verify", c, rc=1, json_out=False)

# a missing data file: inspect still prints the whole index, then fails
m = os.path.join(DIR, b"nodata\xff")
make(m, *NAMES)
for f in os.listdir(DIR):
    if f.startswith(b"nodata\xff.data-"):
        os.unlink(os.path.join(DIR, f))
rc, docs, se = run(b"inspect", b"--json", m, rc=1)
d = one_doc(docs, "inspect without data")
check(expected(NAMES[0]) in [t.get("name") for t in d.get("tensors", [])],
      f"inspect without data: {d!r}"[:600])

# list: the state file names checkpoints that are gone or damaged (warnings on stderr)
rc, docs, se = run(b"list", b"--json", DIR, rc=0)
check(one_doc(docs, "list after the damage").get("latest") == expected(B), "list: latest")
os.unlink(B + b".index")
rc, docs, se = run(b"list", b"--json", DIR, rc=0)
d = one_doc(docs, "list, latest index deleted")
check(b"warning" in se and d.get("latest") == expected(B), f"list, deleted index: {d!r} {se!r}")
# (the data file of the un-committed B is not the writer's to replace: it goes too)
os.unlink(B + b".data-00000-of-00001")
make(B, *(NAMES[1:] + [ONLY_B]), counter=2)
# a damaged state file: the checkpoints are listed by scanning
with open(os.path.join(DIR, b"checkpoint"), "wb") as f:
    f.write(b"\xff" * 40)
rc, docs, se = run(b"list", b"--json", DIR, rc=0)
d = one_doc(docs, "list, damaged state")
prefixes = [c.get("prefix") for c in d.get("checkpoints", [])]
check(b"warning" in se and expected(A) in prefixes and expected(B) in prefixes,
      f"list, damaged state: {prefixes!r} {se!r}")
rc, docs, se = run(b"list", b"--json", os.path.join(DIR, b"no\xffdir"), rc=1)
check(docs == [], f"list of a missing dir: {docs!r}")

# verify and gc have no --json: they must still handle the names and paths
run(b"verify", A, rc=0, json_out=False)
for junk in (b"ckpt-9_temp", b"ckpt-9.data-00000-of-00001", b"ckpt-1.index.tmp-12345"):
    p = os.path.join(DIR, junk)
    if junk.endswith(b"_temp"):
        os.mkdir(p)
    else:
        open(p, "wb").close()
rc, so, se = run(b"gc", b"--dry-run", DIR, rc=0, json_out=False)
check(sum(l.startswith(b"would remove " + DIR + b"/") for l in so.split(b"\n")) == 3 and
      so.endswith(b"gc " + DIR + b": would remove 3 path(s)\n"), f"gc --dry-run: {so!r}")
# their --json (issue 17): the same paths, as JSON strings
rc, docs, se = run(b"gc", b"--json", b"--dry-run", DIR, rc=0)
d = one_doc(docs, "gc --json")
check(d.get("dir") == expected(DIR) and d.get("count") == 3 and
      all(r.get("path", "").startswith(expected(DIR) + "/") for r in d.get("removed", [])),
      f"gc --json: {d!r}")
rc, docs, se = run(b"verify", b"--json", A, rc=0)
d = one_doc(docs, "verify --json")
check(d.get("ok") is True and [c.get("prefix") for c in d.get("checkpoints", [])] == [expected(A)],
      f"verify --json: {d!r}")

# ---- stats --json and the saver's metrics.jsonl ----
rc, docs, se = run(b"stats", b"--json", DIR, rc=1)  # no metrics.jsonl yet
check(docs == [], f"stats without metrics: {docs!r}")
base = b'we"ird\\ck\xff\xc3\xa9'
env = dict(os.environ)
p = subprocess.run([MPIEXEC, b"-np", b"1", WRITE_PREFIX, os.path.join(DIR, base)],
                   capture_output=True, env=env, timeout=240)
check(p.returncode == 0, f"write_prefix: exit {p.returncode}\n{p.stdout!r}\n{p.stderr!r}")
mpath = os.path.join(DIR, b"metrics.jsonl")
if check(os.path.exists(mpath), "write_prefix wrote no metrics.jsonl"):
    with open(mpath, "rb") as f:
        raw = f.read()
    lines = json_lines(raw, "metrics.jsonl")
    check(len(lines) == 1 and lines[0] is not None and lines[0].get("prefix") == expected(base),
          f"metrics.jsonl: {raw!r}")
    if lines and lines[0]:
        check(list(lines[0])[:3] == ["prefix", "mode", "bytes"] and lines[0].get("mode") == "sync"
              and lines[0].get("ranks") == 1, f"metrics.jsonl fields: {lines[0]!r}")
    # a handwritten line whose prefix has escapes the tool must decode
    hand = dict(lines[0] or {}) if lines else {}
    hand["prefix"] = 'hand "made" \\ \u00e9 \U0001f600'
    with open(mpath, "a") as f:
        f.write(json.dumps(hand) + "\n")
    rc, docs, se = run(b"stats", b"--json", DIR, rc=0)
    d = one_doc(docs, "stats")
    check(d.get("path") == expected(mpath) and d.get("saves") == 2 and d.get("skipped_lines") == 0,
          f"stats --json: {d!r} {se!r}")
    rc, so, se = run(b"stats", DIR, rc=0, json_out=False)
    check(expected(base).encode() in so and hand["prefix"].encode() in so,
          f"stats: the prefixes are not shown as decoded: {so!r}")

finish(lambda c, f: f"test_cli_hostile: {c - f}/{c} checks passed")
