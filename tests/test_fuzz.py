"""Fuzz the reader and decoder with mutated real H100 captures: they must return a profile
or raise RawFormatError (one line for the user), never crash or hang.

Two kinds of mutation: raw bytes of the file (mostly caught by the chunk checksums), and
the bytes of a launch's buffer re-written with valid checksums (so the decoder itself
sees corrupt records, headers, magics and counts). CI runs a short budget; the benchmark
run sets PROTON_LITE_FUZZ_SECONDS=600 (see docs/reliability.md).
"""
import glob
import os
import time

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from proton_lite.decode import decode
from proton_lite.raw_format import RawFormatError, RawWriter, read_raw
from proton_lite.viewer.summary import summarize

DATA = os.path.join(os.path.dirname(__file__), "data")
CAPTURES = sorted(glob.glob(os.path.join(DATA, "*.plraw")))
SECONDS = float(os.environ.get("PROTON_LITE_FUZZ_SECONDS", "0"))
EXAMPLES = 40 if not SECONDS else 10**9
SETTINGS = settings(max_examples=EXAMPLES, deadline=None, derandomize=not SECONDS,
                    suppress_health_check=list(HealthCheck))
_started: dict = {}  # per test: each gets a third of the budget

mutations = st.lists(st.tuples(st.floats(0, 1, exclude_max=True), st.integers(0, 255)), min_size=1, max_size=64)


def _out_of_time(test):
    start = _started.setdefault(test, time.monotonic())
    if SECONDS and time.monotonic() - start > SECONDS / 3:
        pytest.skip("fuzz time budget used")


def _decode_or_format_error(path):
    try:
        prof = decode(read_raw(path))
    except RawFormatError as e:
        assert "\n" not in str(e) and str(e)
        return None
    summarize(prof)  # what `proton-lite summary` does next
    return prof


@SETTINGS
@given(which=st.integers(0, len(CAPTURES) - 1), muts=mutations, cut=st.floats(0.0, 1.0))
def test_mutated_file_bytes(tmp_path_factory, which, muts, cut):
    _out_of_time("file")
    data = bytearray(open(CAPTURES[which], "rb").read())
    for where, value in muts:
        data[int(where * len(data))] = value
    if cut < 0.3:
        data = data[:int(len(data) * cut / 0.3)]
    path = tmp_path_factory.mktemp("fz") / "m.plraw"
    path.write_bytes(bytes(data))
    _decode_or_format_error(str(path))


@SETTINGS
@given(which=st.integers(0, len(CAPTURES) - 1), muts=mutations)
def test_mutated_buffers_with_valid_checksums(tmp_path_factory, which, muts):
    _out_of_time("buffers")
    cap = read_raw(CAPTURES[which])
    path = tmp_path_factory.mktemp("fz") / "b.plraw"
    w = RawWriter(str(path), dict(cap.session))
    for kid in sorted(cap.kernels):
        w.kernel(cap.kernels[kid])
    for la in cap.launches:
        buf = bytearray(la.buffer)
        for where, value in muts:
            buf[int(where * len(buf))] = value
        w.launch(la.kernel_id, la.device, la.launch_index, la.grid, la.num_ctas, la.stream, la.host_time_ns, buf)
    w.end(dict(cap.end or {}))
    w.close()
    prof = _decode_or_format_error(str(path))
    if prof is not None:  # whatever survived is consistent
        assert (prof.intervals["end_ns"] >= prof.intervals["start_ns"]).all()
        assert np.isfinite(prof.ctas["cycles_per_ns"]).all()


def _batch_parts(cap):
    """A capture's launches as the parts of one BATCH chunk (what the collector writes)."""
    from proton_lite.raw_format import BATCH_ENTRY, BATCH_HEADER
    entries = np.zeros(len(cap.launches), BATCH_ENTRY)
    offset = 0
    for e, la in zip(entries, cap.launches):
        e["kernel_id"], e["device"], e["launch_index"], e["grid"] = la.kernel_id, la.device, la.launch_index, la.grid
        e["num_ctas"], e["stream"], e["host_time_ns"] = la.num_ctas, la.stream, la.host_time_ns
        e["buffer_offset"], e["buffer_bytes"] = offset, len(la.buffer)
        offset += len(la.buffer)
    data = b"".join(bytes(la.buffer) for la in cap.launches)
    return bytearray(BATCH_HEADER.pack(len(entries), 0) + entries.tobytes()), data


@SETTINGS
@given(which=st.integers(0, len(CAPTURES) - 1), muts=mutations)
def test_mutated_batch_tables_with_valid_checksums(tmp_path_factory, which, muts):
    """The BATCH chunk's count and launch table (offsets, sizes, kernel ids) corrupted."""
    from proton_lite.raw_format import BATCH
    _out_of_time("batch")
    cap = read_raw(CAPTURES[which])
    table, data = _batch_parts(cap)
    for where, value in muts:
        table[int(where * len(table))] = value
    path = tmp_path_factory.mktemp("fz") / "t.plraw"
    w = RawWriter(str(path), dict(cap.session))
    for kid in sorted(cap.kernels):
        w.kernel(cap.kernels[kid])
    w._chunk(BATCH, [bytes(table), data])
    w.end(dict(cap.end or {}))
    w.close()
    _decode_or_format_error(str(path))
