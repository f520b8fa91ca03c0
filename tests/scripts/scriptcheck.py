"""What the checks of tests/scripts/*.py share: a count of checks and failures (every failure is
printed and the run goes on, so that one run lists them all), the CLI runner, and the last line.
The scripts are run as `/usr/bin/python3 -B tests/scripts/<name>.py`: this directory is first on
sys.path, so `from scriptcheck import ...` finds this file."""
import subprocess
import sys

failures = 0
checks = 0


def check(cond, msg):
    """Counts a check; prints msg when cond is false. Returns cond."""
    global failures, checks
    checks += 1
    if not cond:
        failures += 1
        print("FAIL:", msg, file=sys.stderr)
    return cond


def run_cli(cli, *args, rc=None):
    """Runs the CLI; checks the exit code when rc is given and that no sanitizer spoke.
    Returns (exit code, stdout, stderr), decoded as UTF-8."""
    p = subprocess.run([cli, *args], capture_output=True)
    so, se = p.stdout.decode("utf-8"), p.stderr.decode("utf-8")
    if rc is not None:
        check(p.returncode == rc,
              f"mpickpt {args!r}: exit {p.returncode}, expected {rc}\nstdout: {so[:3000]}\n"
              f"stderr: {se[:3000]}")
    check("Sanitizer" not in se and "runtime error" not in se,
          f"mpickpt {args!r}: sanitizer report:\n{se}")
    return p.returncode, so, se


def finish(line):
    """Prints line(checks, failures) and exits 1 when any check failed."""
    print(line(checks, failures))
    sys.exit(1 if failures else 0)
