"""Give freed memory back to the system (glibc's malloc only; elsewhere a no-op).

glibc serves an allocation of 128 KiB or more with its own mmap, returned to the system
when freed, but after the first such free it raises that threshold to the freed size
(up to 32 MiB): the next large buffers of that size come from the heap, and the heap
keeps them when they are freed. compare makes many such buffers and frees them (the
index's columns while a run is read, numpy temporaries, each chunk of pairs). With the
threshold moving, reading one side of 100,000 prompts x 2 repeats left 50 MB resident
for 8.7 MB of live data; fixed at 128 KiB, 25 MB (measured on this machine).
"""

from __future__ import annotations

import ctypes
import ctypes.util

M_MMAP_THRESHOLD = -3  # glibc's mallopt parameter
MMAP_THRESHOLD = 128 * 1024


def return_freed_memory() -> bool:
    """Fix glibc's mmap threshold for this process (and the workers it forks); whether
    it was set."""
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        mallopt = libc.mallopt
    except (OSError, AttributeError):
        return False
    return bool(mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD))
