"""The graph copy kernel (proton_lite/runtime/graph_copy.py) without a GPU: ptxas assembles
it, and the PTX interpreter (tests/ptx_sim.py) runs it replay after replay on memory laid
out as docs/format.md §4 says (node header, the launch's scratch, the ring), with the host's
side (draining, closing) written here from that layout, not from graphs.py's dtypes."""
import struct
import subprocess

import pytest

from proton_lite.runtime import graph_copy
from proton_lite.runtime import graph_ring as graphs
from ptx_sim import Kernel, Launch

BASE = 1 << 32
HDR, SRC = 0, 256


def _layout(nbytes: int, slots: int):
    slot_bytes = -(-(16 + nbytes) // 256) * 256
    ring = SRC + -(-nbytes // 256) * 256
    mem = bytearray(ring + slots * slot_bytes)
    header = bytearray(64)
    struct.pack_into("<iI", header, 44, 0, 0)  # next_slot 0, closed 0
    struct.pack_into("<I", header, 52, slots)
    mem[HDR:HDR + 64] = header
    return mem, ring, slot_bytes


def _field(mem, offset, fmt="<Q"):
    return struct.unpack_from(fmt, mem, HDR + offset)[0]


def _replay(kernel, mem, ring, nbytes, slot_bytes, payload: bytes, ctas=3, pool=(0, 0, 0)):
    """The instrumented kernel writes its scratch, then the copy node runs."""
    mem[SRC:SRC + len(payload)] = payload
    params = {"p_hdr": BASE + HDR, "p_src": BASE + SRC, "p_ring": BASE + ring, "p_words": nbytes // 8,
              "p_slot_bytes": slot_bytes, "p_pool_at": pool[0], "p_chunk_bytes": pool[1], "p_chunk_cap": pool[2]}
    kernel.run(Launch(grid=ctas, threads=1, params=params, global_mem=mem, global_base=BASE))


def _payload(i: int, nbytes: int) -> bytes:
    return bytes((i * 7 + j) % 251 + 1 for j in range(nbytes))


@pytest.fixture(scope="module")
def kernel():
    return Kernel(graph_copy.PTX)


def test_ptxas_assembles_the_copy_kernel(tmp_path):
    from triton.backends.nvidia.compiler import get_ptxas
    ptx = tmp_path / "copy.ptx"
    ptx.write_text(graph_copy.PTX)
    for arch in ("sm_80", "sm_90"):
        r = subprocess.run([get_ptxas(90).path, f"-arch={arch}", "-v", str(ptx), "-o", str(tmp_path / f"{arch}.cubin")],
                           capture_output=True, text=True)
        assert r.returncode == 0, r.stderr
        assert "0 bytes spill" in r.stderr


def test_every_replay_lands_in_its_own_slot(kernel):
    nbytes, slots = 200, 8
    mem, ring, slot_bytes = _layout(nbytes, slots)
    for i in range(5):
        _replay(kernel, mem, ring, nbytes, slot_bytes, _payload(i, nbytes))
        assert mem[SRC:SRC + nbytes] == _payload(i, nbytes)  # read only: the next replay writes over it
    assert (_field(mem, 0), _field(mem, 8), _field(mem, 24), _field(mem, 32)) == (5, 5, 0, 0)
    assert _field(mem, 40, "<I") == 0 and _field(mem, 44, "<i") == 5
    for i in range(5):
        slot = ring + i * slot_bytes
        replay, published = struct.unpack_from("<QQ", mem, slot)
        assert replay == i and published > 0
        assert mem[slot + 16:slot + 16 + nbytes] == _payload(i, nbytes)


def test_a_full_ring_counts_overruns_and_never_overwrites_an_undrained_slot(kernel):
    nbytes, slots = 64, 4
    mem, ring, slot_bytes = _layout(nbytes, slots)
    for i in range(10):
        _replay(kernel, mem, ring, nbytes, slot_bytes, _payload(i, nbytes))
    assert (_field(mem, 0), _field(mem, 8), _field(mem, 24)) == (10, 4, 6)
    assert _field(mem, 44, "<i") == -1
    assert [struct.unpack_from("<Q", mem, ring + k * slot_bytes)[0] for k in range(4)] == [0, 1, 2, 3]
    assert [mem[ring + k * slot_bytes + 16:ring + k * slot_bytes + 16 + nbytes] for k in range(4)] == \
        [_payload(k, nbytes) for k in range(4)]  # replays 4..9 went nowhere
    # the host drains the four slots: the slot for the next replay was chosen while the ring
    # was full, so replay 10 is one more overrun; replay 11 takes slot 0 (written 4 % 4)
    struct.pack_into("<Q", mem, HDR + 16, 4)
    _replay(kernel, mem, ring, nbytes, slot_bytes, _payload(10, nbytes))
    assert (_field(mem, 8), _field(mem, 24), _field(mem, 44, "<i")) == (4, 7, 0)
    _replay(kernel, mem, ring, nbytes, slot_bytes, _payload(11, nbytes))
    assert (_field(mem, 0), _field(mem, 8), _field(mem, 24)) == (12, 5, 7)
    assert struct.unpack_from("<Q", mem, ring)[0] == 11
    assert mem[ring + 16:ring + 16 + nbytes] == _payload(11, nbytes)


def test_a_closed_node_discards_replays_after_the_host_took_the_slot_back(kernel):
    nbytes, slots = 64, 4
    mem, ring, slot_bytes = _layout(nbytes, slots)
    _replay(kernel, mem, ring, nbytes, slot_bytes, _payload(0, nbytes))
    struct.pack_into("<I", mem, HDR + 48, 1)  # stop: closed, then no slot for the next replay
    struct.pack_into("<i", mem, HDR + 44, -1)
    before = bytes(mem[ring:])
    for i in range(1, 4):
        _replay(kernel, mem, ring, nbytes, slot_bytes, _payload(i, nbytes))
    assert bytes(mem[ring:]) == before  # the ring (freed at stop) is never touched
    assert (_field(mem, 0), _field(mem, 8), _field(mem, 24), _field(mem, 32)) == (4, 1, 0, 3)


def test_host_side_layout_matches_the_kernel():
    assert graphs.HEADER_DTYPE.fields["next_slot"][1] == graph_copy.NEXT_SLOT == 44
    assert graphs.HEADER_DTYPE.fields["consumed"][1] == graph_copy.CONSUMED == 16
    assert graphs.HEADER_DTYPE.fields["closed"][1] == graph_copy.CLOSED == 48
    assert graphs.slot_bytes_for(200) == 256 and graphs.slot_bytes_for(241) == 512
    assert graphs.ring_slots(1 << 20) == graphs.RING_BYTES >> 20 and graphs.ring_slots(64 << 20) == graphs.MIN_SLOTS
    assert graphs.ring_slots(256) == graphs.MAX_SLOTS and graphs.ring_slots(1 << 20, 3) == 3
    assert graphs.ring_slots(1 << 20, budget=20 << 20) == 20  # what is left of the session's budget
    assert graphs.ring_slots(1 << 20, budget=0) == graphs.MIN_SLOTS
    assert graph_copy.copy_grid(1) == 1 and graph_copy.copy_grid(10 ** 9) == graph_copy.MAX_CTAS


def test_a_pooled_replay_keeps_its_blocks_and_the_chunks_taken():
    import numpy as np
    data = np.zeros(1000, np.uint8)
    data[4:8] = np.frombuffer(struct.pack("<I", 5), np.uint8)  # chunks in the pool
    data[12:16] = np.frombuffer(struct.pack("<I", 3), np.uint8)  # taken
    pool = (5, 1, 400, 100)  # chunks, epoch, bytes before the pool, bytes per chunk
    assert graphs.launch_bytes(data, 900, pool) == 700
    data[12:16] = np.frombuffer(struct.pack("<I", 9), np.uint8)  # more asked for than the pool had
    assert graphs.launch_bytes(data, 900, pool) == 900
    assert struct.unpack_from("<I", data, 4)[0] == 5  # the slot held the whole pool: the prefix as it was
    assert graphs.launch_bytes(data, 900, None) == 900
    # a slot that holds 2 of the 5 chunks: the prefix says 2, the decoder counts the rest dropped
    assert graphs.launch_bytes(data, 600, pool) == 600 and struct.unpack_from("<I", data, 4)[0] == 2
    assert graphs.slot_data_bytes(900, pool) == 900 and graphs.slot_data_bytes(900, None) == 900
    huge = (131072, 1, 4096, 2064)  # 256 MiB of chunks: the slot holds what fits POOL_SLOT_BYTES
    assert graphs.slot_data_bytes(4096 + 131072 * 2064, huge) == 4096 + (graphs.POOL_SLOT_BYTES - 4096) // 2064 * 2064


def test_more_copy_ctas_than_pairs_and_an_odd_last_word(kernel):
    nbytes, slots = 24, 2  # one 16-byte pair and one word; five CTAs, three with nothing to move
    mem, ring, slot_bytes = _layout(nbytes, slots)
    for i in range(3):
        _replay(kernel, mem, ring, nbytes, slot_bytes, _payload(i, nbytes), ctas=5)
        if i < 2:
            assert mem[ring + i * slot_bytes + 16:ring + i * slot_bytes + 16 + nbytes] == _payload(i, nbytes)
        assert _field(mem, 40, "<I") == 0
    assert (_field(mem, 0), _field(mem, 8), _field(mem, 24)) == (3, 2, 1)


def test_a_pooled_launch_moves_its_blocks_and_only_the_chunks_taken(kernel):
    blocks, chunk, chunks = 48, 32, 4  # prefix (16) + CTA blocks, then 4 chunks of 32 bytes
    nbytes = blocks + chunks * chunk
    mem, ring, slot_bytes = _layout(nbytes, 3)
    for taken, kept, cap in ((1, 1, 4), (9, 4, 4), (3, 2, 2)):  # more than the pool has, or the slot holds
        payload = bytearray(_payload(taken, nbytes))
        struct.pack_into("<III", payload, 4, chunks, 1, taken)
        mem[ring:ring + slot_bytes] = bytes(slot_bytes)
        struct.pack_into("<q", mem, HDR + 16, _field(mem, 8))  # drained: the slot is free
        slot = _field(mem, 44, "<i")
        _replay(kernel, mem, ring, nbytes, slot_bytes, bytes(payload), pool=(blocks, chunk, cap))
        data = mem[ring + slot * slot_bytes + 16:ring + slot * slot_bytes + 16 + nbytes]
        moved = blocks + kept * chunk
        assert data[:moved] == payload[:moved] and data[moved:] == bytes(nbytes - moved)
