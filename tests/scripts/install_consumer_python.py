#!/usr/bin/python3
"""The installed Python package, under mpirun (install_consumer.sh):

    PYTHONPATH=SITE mpirun -np 2 /usr/bin/python3 -B install_consumer_python.py SITE WORKDIR

mpickpt must come from SITE/mpickpt (the install, not the build tree); a CheckpointManager in
WORKDIR/pyck saves an array, and restores it into zeros, exactly.
"""
import os
import sys

import numpy as np
import mpickpt
from mpi4py import MPI

site, work = sys.argv[1], sys.argv[2]
assert os.path.dirname(mpickpt.__file__) == os.path.join(site, 'mpickpt'), mpickpt.__file__
a = np.arange(6, dtype=np.float64)
with mpickpt.CheckpointManager(os.path.join(work, 'pyck')) as m:
    m.save(1, {'a': a}); a[:] = 0; m.restore({'a': a})
assert a.tolist() == [0, 1, 2, 3, 4, 5], a
print('installed python package: ok' if MPI.COMM_WORLD.rank == 0 else '', end='')
