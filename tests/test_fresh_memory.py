"""``fresh_memory.empty``: the decode's large scratch arrays go back to the system when freed,
also where a thread's heap would keep them (glibc's thread arenas), and tracemalloc sees them."""
import gc
import os
import re
import subprocess
import sys
import tracemalloc

import numpy as np
import pytest

from proton_lite import fresh_memory

needs_proc = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc/self/status")


def _anon_mib() -> float:
    with open("/proc/self/status") as f:
        return int(re.search(r"RssAnon:\s+(\d+)", f.read()).group(1)) / 1024


def test_large_arrays_are_mapped_zeroed_and_small_ones_are_numpys():
    big = fresh_memory.empty(300_000, np.int64)
    assert big.dtype == np.int64 and big.shape == (300_000,) and big.flags.writeable and big.flags.c_contiguous
    assert not big.any()  # fresh pages
    big[-1] = 7
    assert big[-1] == 7 and big[: 10].sum() == 0
    view = big[5:9]
    del big
    gc.collect()
    view[:] = 3  # a view keeps the mapping alive
    assert view.tolist() == [3, 3, 3, 3]
    small = fresh_memory.empty(100, np.uint32)
    assert small.dtype == np.uint32 and small.shape == (100,) and small.base is None
    assert fresh_memory.empty(0, np.float64).shape == (0,)


_THREAD_PROBE = r"""
import gc, re, sys, threading
import numpy as np
from proton_lite import fresh_memory
make = np.empty if sys.argv[1] == "heap" else fresh_memory.empty

def anon():
    with open("/proc/self/status") as f:
        return int(re.search(r"RssAnon:\s+(\d+)", f.read()).group(1)) / 1024

def work():
    block = np.empty(2 << 20, np.int64)  # 16 MiB freed: glibc's mmap threshold rises past 8 MiB
    block.fill(1)
    del block
    before = anon()
    a = make(1 << 20, np.int64)
    a.fill(1)  # every page touched
    del a
    gc.collect()
    print(anon() - before)
t = threading.Thread(target=work)
t.start()
t.join()
"""


def _kept_by_a_thread(how: str) -> float:
    """MiB of anonymous memory a worker thread's freed 8 MiB array leaves behind, in a fresh
    process (the allocator's thresholds and arenas are per process, and reused)."""
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    out = subprocess.run([sys.executable, "-c", _THREAD_PROBE, how], capture_output=True, text=True, cwd=root,
                         env={**os.environ, "PYTHONPATH": root}, timeout=60)
    assert out.returncode == 0, out.stderr[-2000:]
    return float(out.stdout.split()[-1])


@needs_proc
def test_a_threads_freed_array_goes_back_where_its_heap_would_keep_it():
    kept_by_heap = _kept_by_a_thread("heap")
    if kept_by_heap < 6:
        pytest.skip(f"this allocator gave an 8 MiB block back by itself ({kept_by_heap:.1f} MiB kept)")
    assert _kept_by_a_thread("fresh") < 2


def test_tracemalloc_counts_a_mapped_array_while_it_lives():
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        a = fresh_memory.empty(1 << 20, np.int64)
        assert tracemalloc.get_traced_memory()[0] - before >= 8 << 20
        del a
        gc.collect()
        assert tracemalloc.get_traced_memory()[0] - before < 1 << 20
    finally:
        tracemalloc.stop()
