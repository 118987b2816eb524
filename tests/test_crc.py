"""The parallel CRC-32 equals zlib's on every size and starting value (its combine step is
checked against zlib itself, on random data)."""
import zlib

import numpy as np
import pytest

from proton_lite import crc


@pytest.mark.parametrize("n", [0, 1, crc.PARALLEL_MIN - 1, crc.PARALLEL_MIN, 5 * crc.BLOCK + 12345,
                               9 * crc.BLOCK])
@pytest.mark.parametrize("start", [0, 0xDEADBEEF])
def test_equals_zlib(n, start):
    data = np.random.default_rng(n).integers(0, 256, n, dtype=np.uint8)
    assert crc.crc32(data, start) == zlib.crc32(data.tobytes(), start)


def test_the_shift_operator_is_zlibs_combine():
    """shift(crc(A)) ^ crc(B) == crc(A || B) for a length that is not a power of two."""
    rng = np.random.default_rng(1)
    a, b = rng.bytes(1000), rng.bytes(777)
    cols = crc.shift_matrix(len(b))
    shifted = 0
    for i in range(32):
        if zlib.crc32(a) >> i & 1:
            shifted ^= cols[i]
    assert shifted ^ zlib.crc32(b) == zlib.crc32(a + b)


def test_a_raw_chunk_of_several_blocks_reads_back(tmp_path):
    from proton_lite.raw_format import BATCH_ENTRY, RawWriter, read_raw
    data = np.random.default_rng(2).integers(0, 256, 6 * crc.BLOCK, dtype=np.uint8)
    w = RawWriter(tmp_path / "c.plraw", {"name": "c"})
    w.kernel({"id": 0, "name": "k", "hash": "h", "num_warps": 4})
    w.batch(np.array([(0, 0, 0, (1, 1, 1), 1, 0, 0, 0, len(data))], dtype=BATCH_ENTRY), data)
    w.close()
    raw = (tmp_path / "c.plraw").read_bytes()
    assert read_raw(tmp_path / "c.plraw").launches[0].buffer == data.tobytes()
    flipped = bytearray(raw)
    flipped[-3 * crc.BLOCK] ^= 1  # one bit in the middle of the payload
    (tmp_path / "bad.plraw").write_bytes(bytes(flipped))
    with pytest.raises(Exception, match="BATCH chunk at byte 104 is corrupted"):
        read_raw(tmp_path / "bad.plraw")


# ---- the C writer (proton_lite/native_write.py): same checksum, same bytes, no GIL held ----

def _native():
    from proton_lite import native_write
    mod = native_write.module()
    if mod is None:
        pytest.skip(f"the C writer could not be built here: {native_write.error()}")
    return mod


@pytest.mark.parametrize("size", [0, 1, 4095, 256 << 10, (256 << 10) * 3 + 5, (9 << 20) + 17])
def test_the_c_writer_s_checksum_on_several_threads_is_zlib_s(size):
    mod = _native()
    data = np.random.default_rng(size).integers(0, 256, size, dtype=np.uint8).tobytes()
    for threads, block in ((1, 1 << 18), (8, 1 << 18), (16, 1000)):
        assert mod.crc32(data, 0, threads, block) == zlib.crc32(data)
        assert mod.crc32(data, 0xDEADBEEF, threads, block) == zlib.crc32(data, 0xDEADBEEF)


def test_the_c_writer_writes_the_same_file_as_the_python_path(tmp_path):
    _native()
    from proton_lite.raw_format import BATCH_ENTRY, RawWriter, read_raw
    rng = np.random.default_rng(7)
    paths = []
    for native in (True, False):
        path = tmp_path / f"{'c' if native else 'py'}.plraw"
        w = RawWriter(path, {"session": 1}, native=native)
        assert (w._native is not None) == native
        w.kernel({"id": 0, "name": "k"})
        offset = 0
        for nbytes in (64, 3 << 20, (1 << 18) + 3):  # one tiny, one over many checksum blocks, one odd
            data = rng.integers(0, 256, nbytes, dtype=np.uint8)
            entries = np.zeros(1, dtype=BATCH_ENTRY)
            entries["buffer_bytes"] = nbytes
            w.batch(entries, data)
            offset += nbytes
        w.end({"launches": 3})
        w.close()
        paths.append(path)
        rng = np.random.default_rng(7)
    a, b = (p.read_bytes() for p in paths)
    assert a == b and len(a) > 3 << 20
    cap = read_raw(paths[0])  # every chunk's checksum verified by the reader
    assert cap.end == {"launches": 3}
