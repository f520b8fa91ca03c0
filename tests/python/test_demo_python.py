"""jobs/demo-python.sh end to end on an existing build, with a small model.

    test_demo_python.py --build BUILD_DIR --outdir DIR [--hidden 32] [--steps 24]

Runs the demo (MPICKPT_BUILD_DIR=BUILD_DIR: no package install, no build; DEMO_DIR=DIR/demo) and
checks, besides its exit status 0, what it printed: the crash of rank 2 after step 17 on 4 ranks,
`mpickpt list` of the crashed job's checkpoints (steps 5, 10, 15), the resume on 3 ranks from the
checkpoint of step 15 written by 4 ranks and verified, the end at the last step, and a passing
`mpickpt verify` of the latest checkpoint.
"""
from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys

from nompi import skip_without_torch

HERE = os.path.dirname(os.path.abspath(__file__))
SRC = os.environ.get("MPICKPT_SOURCE_DIR", os.path.normpath(os.path.join(HERE, "..", "..")))


def main() -> int:
    skip_without_torch()
    p = argparse.ArgumentParser()
    p.add_argument("--build", required=True)
    p.add_argument("--outdir", required=True)
    p.add_argument("--hidden", type=int, default=32)
    p.add_argument("--steps", type=int, default=24)
    p.add_argument("--timeout", type=float, default=600)
    a = p.parse_args()
    env = dict(os.environ, MPICKPT_BUILD_DIR=a.build,
               DEMO_DIR=os.path.join(os.path.abspath(a.outdir), "demo"),
               DEMO_HIDDEN=str(a.hidden), DEMO_STEPS=str(a.steps))
    r = subprocess.run(["bash", os.path.join(SRC, "jobs", "demo-python.sh")], env=env,
                       stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                       timeout=a.timeout)
    sys.stdout.write(r.stdout)
    out = r.stdout
    checks = [
        (r.returncode == 0, f"demo-python.sh exited with status {r.returncode}"),
        (re.search(r"^   crash rank=2 step=17$", out, re.M), "no crash of rank 2 after step 17"),
        (re.search(r"^== 2\. .*\n(?:.*\n)*?.*ckpt-3 .* 15 .*\(latest\)$", out, re.M),
         "mpickpt list after the crash does not show ckpt-3 (step 15) as the latest"),
        (re.search(r"^   resumed step=15 epoch=1 from=\S+/ckpt-3 world_size=4 hash=[0-9a-f]+$", out,
                   re.M), "no resume on 3 ranks from the 4-rank checkpoint of step 15"),
        (re.search(r"^   verified the restored model and optimizer .* on 3 rank\(s\); the RNG "
                   r"state of rank\(s\) 0-2 restored \(written by 4 ranks\)$", out, re.M),
         "the restore was not verified on 3 ranks"),
        (re.search(rf"^   done step={a.steps} ", out, re.M), f"the run did not reach step {a.steps}"),
        (re.search(r"^   \S+/ckpt-\d+: ok \(", out, re.M), "no passing mpickpt verify"),
        (re.search(r"^== demo passed", out, re.M), "no '== demo passed'"),
    ]
    bad = [msg for ok, msg in checks if not ok]
    for msg in bad:
        print(f"FAIL: {msg}")
    if bad:
        return 1
    print("OK: crashed on 4 ranks after step 17, resumed on 3 from step 15 (verified), finished, "
          "verify passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
