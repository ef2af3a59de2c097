"""How much host memory is left, for the check of a pipeline's buffers before they are made.

NOTE [ buffers that do not fit ]: a pipeline allocates ``depth`` slots of every
kind of buffer at its batch size before the first batch.  Too large a batch size
(or depth) does not fail there cleanly: Linux gives out host memory it does not
have (a numpy array is only backed as it is written), so the run is killed by
the kernel's OOM killer halfway, with no word; page-locked memory, and a GPU's,
fail with CUDA's bare "out of memory" from deep inside an allocation.  So the
buffers' total is compared first with what is left - here the host's (Linux's
``MemAvailable``, bounded by the memory limit of the process's control group,
as a container has), in the CUDA device the GPU's - and a batch that cannot fit
is refused, saying how much it needs and how much there is.  The check is of
ortpipe's own buffers: ORT's working memory comes on top of them, and an
allocation failure that still comes is reported with the same figures.
"""

from __future__ import annotations

from pathlib import Path

_MEMINFO = Path("/proc/meminfo")
_CGROUP = Path("/sys/fs/cgroup")
_OWN_CGROUP = Path("/proc/self/cgroup")
#: what cgroup v1 reports as its limit where there is none (near 2**63)
_NO_LIMIT = 1 << 62


def host_memory_available(
    meminfo: Path = _MEMINFO, cgroup: Path = _CGROUP, own_cgroup: Path = _OWN_CGROUP
) -> int | None:
    """Bytes of host memory this process can still take without swapping: Linux's
    ``MemAvailable``, or less where its control group's limit leaves less (a container);
    None where neither is known (not Linux)."""
    known = [size for size in (_mem_available(meminfo), _cgroup_room(cgroup, own_cgroup)) if size is not None]
    return min(known) if known else None


def _mem_available(meminfo: Path) -> int | None:
    try:
        for line in meminfo.read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024  # in kB
    except (OSError, ValueError, IndexError):
        pass
    return None


def _cgroup_room(cgroup: Path, own_cgroup: Path) -> int | None:
    """What the memory limit of this process's control group leaves (v2, then v1), or None."""
    v2 = _own_cgroup_v2(cgroup, own_cgroup)
    for limit_file, usage_file in (
        (v2 / "memory.max", v2 / "memory.current"),
        (cgroup / "memory" / "memory.limit_in_bytes", cgroup / "memory" / "memory.usage_in_bytes"),
    ):
        try:
            limit_text = limit_file.read_text().strip()
            if limit_text == "max" or int(limit_text) >= _NO_LIMIT:
                continue
            return max(int(limit_text) - int(usage_file.read_text().strip()), 0)
        except (OSError, ValueError):
            continue
    return None


def _own_cgroup_v2(cgroup: Path, own_cgroup: Path) -> Path:
    """The folder of this process's control group in the v2 hierarchy (``0::/path``)."""
    try:
        for line in own_cgroup.read_text().splitlines():
            if line.startswith("0::"):
                return cgroup / line[3:].lstrip("/")
    except OSError:
        pass
    return cgroup


def gib(nbytes: int) -> str:
    """``nbytes`` for a message: "1.5 GiB", "12.0 MiB"."""
    if nbytes >= 1 << 30:
        return f"{nbytes / (1 << 30):,.1f} GiB"
    return f"{nbytes / (1 << 20):,.1f} MiB"
