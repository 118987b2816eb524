"""BATCH chunks of the raw format: several launches copied back together (format version 2).

The collector writes a burst's launches as one BATCH chunk; older captures hold one LAUNCH
chunk per launch.  Both must read back to the same launches, and a batch whose table does
not fit its data is refused with one line, never read out of bounds.
"""
import glob
import os

import numpy as np
import pytest

from proton_lite.decode import decode
from proton_lite.raw_format import (BATCH, BATCH_ENTRY, BATCH_HEADER, FORMAT_VERSION, RawFormatError, RawWriter,
                                    read_raw)

DATA = os.path.join(os.path.dirname(__file__), "data")
CAPTURE = sorted(glob.glob(os.path.join(DATA, "*.plraw")))[0]


def _entries(launches, offsets):
    entries = np.zeros(len(launches), BATCH_ENTRY)
    for e, la, off in zip(entries, launches, offsets):
        e["kernel_id"], e["device"], e["launch_index"], e["grid"] = la.kernel_id, la.device, la.launch_index, la.grid
        e["num_ctas"], e["stream"], e["host_time_ns"] = la.num_ctas, la.stream, la.host_time_ns
        e["buffer_offset"], e["buffer_bytes"] = off, len(la.buffer)
    return entries


def _rewrite(cap, path, batches):
    """Write ``cap`` again, its launches grouped into BATCH chunks as ``batches`` (lists of
    positions), each batch's buffers laid out with 256-byte gaps as the collector's slices are."""
    w = RawWriter(str(path), dict(cap.session))
    for kid in sorted(cap.kernels):
        w.kernel(cap.kernels[kid])
    for positions in batches:
        launches = [cap.launches[i] for i in positions]
        offsets, data = [], bytearray()
        for la in launches:
            offsets.append(len(data))
            data += bytes(la.buffer) + b"\0" * 256
        w.batch(_entries(launches, offsets), data)
    w.end(dict(cap.end or {}))
    w.close()
    return read_raw(str(path))


def test_launches_written_in_batches_read_back_as_the_same_launches(tmp_path):
    cap = read_raw(CAPTURE)
    n = len(cap.launches)
    assert n >= 2
    # batches out of launch order (as streams finish in any order): the reader sorts them
    again = _rewrite(cap, tmp_path / "b.plraw", [list(range(n // 2, n)), list(range(n // 2))])
    assert [la.launch_index for la in again.launches] == [la.launch_index for la in cap.launches]
    for a, b in zip(cap.launches, again.launches):
        assert (a.kernel_id, a.device, a.grid, a.num_ctas, a.stream, a.host_time_ns) == \
               (b.kernel_id, b.device, b.grid, b.num_ctas, b.stream, b.host_time_ns)
        assert bytes(a.buffer) == bytes(b.buffer)
    p1, p2 = decode(cap), decode(again)
    assert (p1.intervals == p2.intervals).all() and (p1.ctas == p2.ctas).all()
    with open(tmp_path / "b.plraw", "rb") as f:
        assert int.from_bytes(f.read(12)[8:], "little") == FORMAT_VERSION == 3


def _write_raw_batch(cap, path, table: bytes, data: bytes):
    w = RawWriter(str(path), dict(cap.session))
    for kid in sorted(cap.kernels):
        w.kernel(cap.kernels[kid])
    w._chunk(BATCH, [table, data])
    w.close()


@pytest.mark.parametrize("damage, message", [
    ("offset", "points past the chunk's data"),
    ("bytes", "points past the chunk's data"),
    ("count", "too short for their table"),
    ("kernel", "unknown kernel"),
])
def test_a_batch_whose_table_does_not_fit_is_refused_in_one_line(tmp_path, damage, message):
    cap = read_raw(CAPTURE)
    la = cap.launches[0]
    entries = _entries([la], [0])
    if damage == "offset":
        entries["buffer_offset"] = 2**64 - 8  # would wrap around in u64 arithmetic
    elif damage == "bytes":
        entries["buffer_bytes"] = len(la.buffer) + 1
    elif damage == "kernel":
        entries["kernel_id"] = 999
    count = len(la.buffer) // BATCH_ENTRY.itemsize + 2 if damage == "count" else 1  # a table longer than the chunk
    _write_raw_batch(cap, tmp_path / "x.plraw", BATCH_HEADER.pack(count, 0) + entries.tobytes(), bytes(la.buffer))
    with pytest.raises(RawFormatError, match=message) as e:
        read_raw(tmp_path / "x.plraw")
    assert "\n" not in str(e.value)
