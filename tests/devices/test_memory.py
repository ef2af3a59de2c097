"""How much host memory is left (devices/_memory.py): MemAvailable, bounded by a control group's limit."""

from __future__ import annotations

import sys

import pytest

from pipeline.devices._memory import gib, host_memory_available

GIB = 1 << 30


def _machine(tmp_path, available_kb=None, v2=None, v1=None, own="0::/job\n"):
    """A /proc/meminfo, a cgroup tree (v2 ``(max, current)`` in the process's own group, v1
    ``(limit, usage)`` at the root) and a /proc/self/cgroup, as files."""
    tmp_path.mkdir(parents=True, exist_ok=True)
    meminfo, cgroup, own_file = tmp_path / "meminfo", tmp_path / "cgroup", tmp_path / "own"
    lines = ["MemTotal:       32000000 kB"] + ([f"MemAvailable:   {available_kb} kB"] if available_kb else [])
    meminfo.write_text("\n".join(lines) + "\n")
    own_file.write_text(own)
    if v2 is not None:
        (cgroup / "job").mkdir(parents=True)
        (cgroup / "job" / "memory.max").write_text(f"{v2[0]}\n")
        (cgroup / "job" / "memory.current").write_text(f"{v2[1]}\n")
    if v1 is not None:
        (cgroup / "memory").mkdir(parents=True)
        (cgroup / "memory" / "memory.limit_in_bytes").write_text(f"{v1[0]}\n")
        (cgroup / "memory" / "memory.usage_in_bytes").write_text(f"{v1[1]}\n")
    return {"meminfo": meminfo, "cgroup": cgroup, "own_cgroup": own_file}


def test_mem_available_where_no_control_group_limits_it(tmp_path):
    assert host_memory_available(**_machine(tmp_path, available_kb=8 * 1024 * 1024)) == 8 * GIB
    assert host_memory_available(**_machine(tmp_path / "a", available_kb=1024, v2=("max", 5))) == 1 << 20
    no_limit_v1 = _machine(tmp_path / "b", available_kb=1024, v1=(9223372036854771712, 5))  # v1's "none"
    assert host_memory_available(**no_limit_v1) == 1 << 20


def test_a_control_groups_limit_leaves_less_than_the_machine_has(tmp_path):
    container = _machine(tmp_path, available_kb=64 * 1024 * 1024, v2=(4 * GIB, GIB))
    assert host_memory_available(**container) == 3 * GIB  # the limit less what the group uses
    v1 = _machine(tmp_path / "v1", available_kb=64 * 1024 * 1024, v1=(2 * GIB, GIB // 2))
    assert host_memory_available(**v1) == GIB + GIB // 2
    over = _machine(tmp_path / "over", available_kb=64 * 1024 * 1024, v2=(GIB, 2 * GIB))
    assert host_memory_available(**over) == 0


def test_nothing_known_is_none(tmp_path):
    assert host_memory_available(tmp_path / "no meminfo", tmp_path / "no cgroup", tmp_path / "no own") is None
    assert host_memory_available(**_machine(tmp_path, available_kb=None)) is None  # a kernel before 3.14


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="MemAvailable is Linux's")
def test_this_machine_says_how_much_is_left():
    available = host_memory_available()
    assert available is not None and 0 < available < 1 << 50


def test_sizes_are_written_for_people():
    assert gib(3 * GIB // 2) == "1.5 GiB" and gib(12 << 20) == "12.0 MiB" and gib(2300 * GIB) == "2,300.0 GiB"
