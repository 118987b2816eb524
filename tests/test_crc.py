"""The parallel CRC-32 equals zlib's on every size and starting value (its combine step is
checked against zlib itself, on random data)."""
import zlib

import numpy as np
import pytest

from proton_lite import crc


@pytest.mark.parametrize("n", [0, 1, crc.PARALLEL_MIN - 1, crc.PARALLEL_MIN, 5 * crc.BLOCK + 12345,
                               9 * crc.BLOCK])
@pytest.mark.parametrize("start", [0, 0xDEADBEEF])
@pytest.mark.parametrize("path", ["native", "zlib pool"])
def test_equals_zlib(n, start, path, monkeypatch):
    if path == "zlib pool":  # where the C checksum does not build
        monkeypatch.setattr(crc, "_native", lambda: None)
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


def test_the_folded_checksum_is_zlib_s_at_every_length_offset_and_start():
    """Carry-less folding takes 64 bytes a step, then 16, then hands the last block and the tail
    to zlib: every length from 0 to 700 (each remainder of 16 and 64, below and above the
    128 bytes where folding starts), odd offsets (unaligned loads), the running values zlib
    callers pass; and the same with folding off, the path of CPUs without it."""
    mod = _native()
    big = np.random.default_rng(11).bytes((1 << 20) + 64)
    was = mod.use_folding(True)
    try:
        for fold in (True, False):
            mod.use_folding(fold)
            for n in list(range(701)) + [4095, 65536, 65537, (1 << 20) + 13]:
                for off in ((0, 1, 15) if n < 701 else (0, 7)):
                    data = big[off:off + n]
                    for start in (0, 0xDEADBEEF, 0xFFFFFFFF):
                        assert mod.crc32(data, start, 1, 1 << 30) == zlib.crc32(data, start), (fold, n, off, start)
    finally:
        mod.use_folding(was)


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


def test_folding_can_be_turned_off_from_the_environment():
    """``PROTON_LITE_CRC_FOLDING=0``: zlib's crc32 alone, in a process of its own (the C code
    reads the variable once, at its first checksum)."""
    _native()
    import subprocess
    import sys
    code = ("from proton_lite import native_write as w; m = w.module(); m.crc32(bytes(4096), 0, 1, 1 << 30); "
            "print(m.use_folding(True))")
    outs = [subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                           env={**__import__("os").environ, "PROTON_LITE_CRC_FOLDING": v}).stdout.strip()
            for v in ("0", "1")]
    assert outs[0] == "False" and outs[1] in ("True", "False")  # False on a CPU without carry-less multiplies
