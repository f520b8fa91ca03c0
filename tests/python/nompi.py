"""Helpers of the Python tests that must not import mpi4py.MPI: the drivers that launch mpirun
themselves (test_train_resume.py, test_demo_python.py, test_doc_example.py) and
test_open_nompi.py. pycheck.py (imported by the tests that run under mpirun) re-exports them."""
import importlib.util
import os
import sys

SKIP = 77  # SKIP_RETURN_CODE of the python tests


def skip_without_torch() -> None:
    """Exit 77 (CTest: skipped) when this interpreter has no PyTorch."""
    if importlib.util.find_spec("torch") is None:
        print(f"SKIP: {sys.executable} has no PyTorch (jobs/deps.sh python installs "
              "python3-torch)", flush=True)
        sys.exit(SKIP)


def flip_byte(path: str, offset: int) -> None:
    """Inverts one byte of a file in place (and fsyncs it)."""
    with open(path, "r+b") as f:
        f.seek(offset)
        b = f.read(1)
        f.seek(offset)
        f.write(bytes([b[0] ^ 0xFF]))
        f.flush()
        os.fsync(f.fileno())
