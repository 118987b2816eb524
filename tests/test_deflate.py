"""``trace/deflate.py``'s encoder (compiled into ``native_events``): every output must be a
zlib stream that zlib itself inflates to the input, for inputs that exercise each part of
the encoder (no match, long matches, the window's edge, both block kinds, many threads)."""
import random
import zlib
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest

from proton_lite.trace import native_events


@pytest.fixture()
def mod():
    m = native_events.module()
    if m is None:
        pytest.skip(f"the C extension did not build here: {native_events.error()}")
    return m


def _packets(n: int, seed: int) -> bytes:
    """TracePacket-like bytes: a fixed skeleton with varint timestamps and ids."""
    rng = np.random.default_rng(seed)
    out = bytearray()
    while len(out) < n:
        ts = int(rng.integers(0, 1 << 21))
        var = bytearray()
        while ts > 0x7F:
            var.append(ts & 0x7F | 0x80)
            ts >>= 7
        var.append(ts)
        out += b"\x0a" + bytes([len(var) + 9]) + b"\x40" + var + b"\x50\x09\x5a\x05\x48\x01\x58" + \
            bytes([int(rng.integers(1, 100))])
    return bytes(out[:n])


def _inputs():
    r = random.Random(7)
    yield b""
    for n in range(1, 20):
        yield bytes(r.getrandbits(8) for _ in range(n))
    yield b"a" * 258
    yield b"a" * 259
    yield b"abc" * 100_000  # matches of the longest length, back-to-back
    block = bytes(r.getrandbits(8) for _ in range(32768))
    yield block + block  # a match exactly at the window's distance
    far = bytes(r.getrandbits(8) for _ in range(32769))
    yield far + far[:1000]  # just past the window: must not be referenced
    yield bytes(r.getrandbits(8) for _ in range(200_000))  # incompressible
    yield bytes(r.choice(b"ab") for _ in range(50_000))  # two literals only
    yield bytes(min(255, int(r.expovariate(0.05))) for _ in range(100_000))  # skewed literals: deep codes
    yield _packets(1 << 20, 1)


def test_every_output_inflates_to_its_input_and_stays_within_the_bound(mod):
    kinds = set()
    for data in _inputs():
        z = mod.deflate(data)
        assert zlib.decompress(z) == data, len(data)
        assert len(z) <= len(data) + len(data) // 8 + 16
        assert z[:2] == b"\x78\x01"
        kinds.add(z[2] >> 1 & 3)  # BTYPE of the (only) block: 1 fixed, 2 own code
    assert kinds == {1, 2}


def test_it_compresses_trace_packets_at_least_as_well_as_zlib_level_1(mod):
    data = _packets(1 << 20, 2)
    ours, zlibs = len(mod.deflate(data)), len(zlib.compress(data, 1))
    assert ours <= zlibs * 1.05, (ours, zlibs)
    assert len(mod.deflate(b"x" * 100_000)) < 1000


def test_threads_deflating_at_once_each_get_their_own_input_back(mod):
    inputs = [_packets(300_000 + 1000 * k, k) for k in range(16)]
    with ThreadPoolExecutor(8) as pool:
        outs = list(pool.map(mod.deflate, inputs * 2))
    assert [zlib.decompress(z) for z in outs] == inputs * 2


def test_without_the_extension_zlib_deflates(monkeypatch):
    data = _packets(10_000, 3)
    monkeypatch.setattr(native_events, "module", lambda: None)
    assert native_events.deflate(data) == zlib.compress(data, 1)


def test_an_input_larger_than_the_kept_buffers_deflates_on_buffers_of_its_own(mod):
    """Inputs over 4 MiB (the metadata's CTA columns of a large trace) do not go through the
    thread's kept buffers; before and after one, batch-sized inputs still come out right."""
    small, big = _packets(200_000, 4), _packets(6 << 20, 5)
    outs = [mod.deflate(small), mod.deflate(big), mod.deflate(small)]
    assert [zlib.decompress(z) for z in outs] == [small, big, small] and outs[0] == outs[2]
