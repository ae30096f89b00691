"""Giving the C heap's freed memory back to the system.

CPython hands every object over 512 bytes (dicts, lists, long strings, the caches' packed
bodies) to the C library's malloc. glibc keeps what is freed for reuse and returns it only from
the top of a heap, so the operator's start-up peak (every ScheduledJob, Execution and Workflow
listed, decoded and slimmed at once) stayed resident long after it was freed, and each thread
that met a locked heap got a heap of its own to fragment. Two calls bound that:

* `limit_arenas` caps the number of heaps, once, before the threads start;
* `trim` returns the free pages inside every heap, not only its top (``malloc_trim(0)``); the
  runtime calls it once the caches hold their first full lists and then on a slow period.

Both are glibc's. Elsewhere (musl, macOS) they do nothing and say so once in the log.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
import logging

log = logging.getLogger(__name__)

M_ARENA_MAX = -8  # mallopt's parameter number (glibc's malloc.h)
ARENAS = 2  # heaps for all threads: the operator's threads mostly wait on I/O, never many allocating at once
TRIM_EVERY_SECONDS = 60.0  # a trim walks the free lists in a few milliseconds


@functools.cache
def _glibc() -> ctypes.CDLL | None:
    name = ctypes.util.find_library("c")
    try:
        libc = ctypes.CDLL(name or "libc.so.6")
        libc.malloc_trim.argtypes = [ctypes.c_size_t]
        libc.mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
    except (OSError, AttributeError):
        log.info("no glibc malloc here: freed heap memory is left to the C library")
        return None
    return libc


def limit_arenas(arenas: int = ARENAS) -> bool:
    """Cap glibc's heaps at `arenas`; whether it took. Call before starting threads."""
    libc = _glibc()
    return libc is not None and bool(libc.mallopt(M_ARENA_MAX, arenas))


def trim() -> bool:
    """Return the free pages of every heap to the system; whether any were returned."""
    libc = _glibc()
    return libc is not None and bool(libc.malloc_trim(0))
