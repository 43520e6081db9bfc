"""Run a piece of a test under an address-space limit, so a blow-up fails the test instead of the machine."""

from __future__ import annotations

import contextlib
import resource
from collections.abc import Iterator

__all__ = ["address_space_limit", "vm_size"]


def vm_size() -> int:
    """This process's current virtual memory size in bytes (Linux /proc), 0 where unknown."""
    try:
        with open("/proc/self/status", encoding="ascii") as status:
            for line in status:
                if line.startswith("VmSize:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


@contextlib.contextmanager
def address_space_limit(extra_bytes: int) -> Iterator[None]:
    """Cap the address space at what the process uses now plus `extra_bytes`; the old limit comes back after.

    An allocation past the cap raises MemoryError inside the block (where the code under test must
    not need it); where the platform has no RLIMIT_AS or /proc, the block runs unlimited.
    """
    current = vm_size()
    soft, hard = resource.getrlimit(resource.RLIMIT_AS)
    if not current:
        yield
        return
    cap = current + extra_bytes
    if hard != resource.RLIM_INFINITY:
        cap = min(cap, hard)
    resource.setrlimit(resource.RLIMIT_AS, (cap, hard))
    try:
        yield
    finally:
        resource.setrlimit(resource.RLIMIT_AS, (soft, hard))
