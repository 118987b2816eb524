"""``host_scale.py`` with another device chunk size (GPU): which chunk size costs launches least.

The collector seals a chunk of launches and hands it to its copier and writer threads;
each chunk costs those threads a wake-up and some Python that competes with the launching
thread for the GIL, so the chunk size trades host time per launch against device memory
and pinned memory.  This runs ``host_scale.py`` (same arguments) with
``runtime.chunks.CHUNK_BYTES`` set to MIB mebibytes; run it once per size, in one call, to
compare them on one machine.

Usage: python tests/benchmarks/host_scale_chunks.py MIB [host_scale.py arguments]
"""
import os
import runpy
import sys

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
sys.path.insert(0, ROOT)
mib = int(sys.argv.pop(1))
import proton_lite.runtime.chunks as chunks  # noqa: E402
import proton_lite.runtime.collector as collector  # noqa: E402

chunks.CHUNK_BYTES = collector.CHUNK_BYTES = mib << 20
script = os.path.join(os.path.dirname(os.path.abspath(__file__)), "host_scale.py")
sys.argv[0] = script
runpy.run_path(script, run_name="__main__")
