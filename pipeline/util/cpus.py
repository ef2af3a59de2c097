"""How many CPUs this process may run on (its affinity, where the OS has one)."""

from __future__ import annotations

import os


def usable_cpus() -> int:
    """CPUs this process may use: ``taskset``/cgroup affinity on Linux, else all of them."""
    if hasattr(os, "sched_getaffinity"):
        return len(os.sched_getaffinity(0))
    return os.cpu_count() or 1
