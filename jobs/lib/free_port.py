#!/usr/bin/python3
"""A TCP port nothing listens on now (the kernel's pick), for jobs/slurm/local-slurm.sh.

    /usr/bin/python3 -B jobs/lib/free_port.py
"""
import socket, sys
s = socket.socket()
s.bind(("", 0))
print(s.getsockname()[1])
