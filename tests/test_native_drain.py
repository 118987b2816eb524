"""The C drain thread (proton_lite/native_drain.py) on its own: jobs in order, the raw chunk
format, pooled launches, zeroing, failures.  The driver is a set of ctypes callbacks over a
bytearray standing for device memory; the file it writes is read back with ``read_raw``.
(The collector's tests run it behind the simulated driver: tests/test_collector.py.)"""
from __future__ import annotations

import ctypes
import struct
import threading
import time
import zlib

import numpy as np
import pytest

from proton_lite import native_drain, native_write
from proton_lite.raw_format import BATCH, BATCH_ENTRY, BATCH_HEADER, KERNEL, RawWriter, json_payload, read_raw

mod = native_drain.module()
pytestmark = pytest.mark.skipif(mod is None, reason=f"the C drain could not be built: {native_drain.error()}")
U64, SZ, I32 = ctypes.c_uint64, ctypes.c_size_t, ctypes.c_int
_OPEN = threading.Event()
_OPEN.set()


def test_the_c_drain_builds_wherever_the_c_writer_does():
    if native_write.module() is not None:
        assert native_drain.module() is not None, native_drain.error()


class FakeDriver:
    """Device memory as a bytearray at a made-up address; every call is logged."""

    BASE = 1 << 40

    def __init__(self, device: bytes = b"", fail: dict | None = None) -> None:
        self.mem = bytearray(device)
        self.log: list[tuple] = []
        self.fail = fail or {}  # call name -> error code returned (once)
        self.modes: list[int] = []  # capture modes the thread asked for
        self.gates: dict[int, threading.Event] = {}  # event handle -> what its wait waits for

    def _call(self, name, fn):
        def call(*args):
            self.log.append((name, *args))
            code = self.fail.pop(name, 0)
            if not code:
                fn(*args)
            return code
        return call

    def table(self, without=()) -> tuple[int, ...]:
        def memcpy(dst, src, n, stream):
            ctypes.memmove(dst, bytes(self.mem[src - self.BASE:src - self.BASE + n]), n)

        def memset(ptr, value, n, stream):
            self.mem[ptr - self.BASE:ptr - self.BASE + n] = bytes([value]) * n
        fns = {"ctx_set": (ctypes.CFUNCTYPE(I32, U64), lambda h: None),
               "event_sync": (ctypes.CFUNCTYPE(I32, U64), lambda h: self.gates.get(h, _OPEN).wait(10)),
               "memcpy": (ctypes.CFUNCTYPE(I32, U64, U64, SZ, U64), memcpy),
               "memset": (ctypes.CFUNCTYPE(I32, U64, ctypes.c_ubyte, SZ, U64), memset),
               "stream_sync": (ctypes.CFUNCTYPE(I32, U64), lambda s: None),
               "capture_mode": (ctypes.CFUNCTYPE(I32, ctypes.c_void_p),
                                lambda m: self.modes.append(ctypes.cast(m, ctypes.POINTER(I32))[0])),
               "wait_event": (ctypes.CFUNCTYPE(I32, U64, U64, ctypes.c_uint), lambda s, e, f: None),
               "record": (ctypes.CFUNCTYPE(I32, U64, U64), lambda e, s: None)}
        self._keep = [proto(self._call(name, fn)) for name, (proto, fn) in fns.items()]
        return tuple(0 if name in without else ctypes.cast(cb, ctypes.c_void_p).value
                     for name, cb in zip(fns, self._keep))


def _part(a: np.ndarray) -> tuple[int, int]:
    return a.ctypes.data, a.nbytes


def _drain(tmp_path, driver: FakeDriver, **kw):
    writer = RawWriter(tmp_path / "d.plraw", {"test": 1}, native=False)
    cap = mod.open(writer.fileno(), 2, 1 << 18, driver.table(**kw))
    return writer, cap


def _done(cap) -> list[tuple]:
    mod.close(cap)
    return mod.collect(cap)


def _entry(kernel_id: int, index: int, nbytes: int, offset: int = 0) -> tuple:
    return (kernel_id, 0, index, (1, 1, 1), 1, 7, 1000 + index, offset, nbytes)


def test_jobs_are_written_in_order_as_raw_chunks_that_read_raw_reads(tmp_path):
    driver = FakeDriver()
    writer, cap = _drain(tmp_path, driver)
    mod.push(cap, 0, KERNEL, 11, 0, (json_payload({"id": 3, "name": "k"}), ), None, None, None)  # an object part
    host = np.arange(96, dtype=np.uint8)  # "pinned" memory holding two launches' slices
    entries = np.array([_entry(3, 0, 32), _entry(3, 1, 64, 32)], dtype=BATCH_ENTRY)
    head = np.frombuffer(BATCH_HEADER.pack(2, 0), dtype=np.uint8)
    mod.push(cap, 1, BATCH, 11, 22, (_part(head), _part(entries), _part(host)), None, (host.ctypes.data, 96), None)
    assert [r[:2] for r in _done(cap)] == [(0, 0), (1, 0)]
    writer.end({})
    writer.close()
    capture = read_raw(tmp_path / "d.plraw")  # checks every chunk's CRC
    assert capture.kernels[3]["name"] == "k"
    assert [bytes(ln.buffer) for ln in capture.launches] == [bytes(range(32)), bytes(range(32, 96))]
    assert not host.any()  # zeroed after the write, for the pinned buffer's next copy
    assert ("ctx_set", 11) in driver.log and ("event_sync", 22) in driver.log  # once each: the context stays
    assert [c[0] for c in driver.log].count("ctx_set") == 1
    assert driver.modes == [2]  # CU_STREAM_CAPTURE_MODE_RELAXED: a capture on another thread forbids nothing here


def test_a_chunk_of_more_parts_than_one_writev_takes_is_written_whole(tmp_path):
    driver = FakeDriver()
    writer, cap = _drain(tmp_path, driver)
    data = np.random.default_rng(1).integers(0, 256, 1000, dtype=np.uint8)
    parts = tuple((data.ctypes.data + i * 5, 5) for i in range(200))
    mod.push(cap, 0, 9, 0, 0, parts, None, None, None)
    mod.push(cap, 1, native_drain.NO_WRITE, 0, 0, (), None, None, None)  # waits for its event, writes nothing
    assert [r[1] for r in _done(cap)] == [0, 0]
    writer.close()
    raw = (tmp_path / "d.plraw").read_bytes()
    kind, crc, size = struct.unpack_from("<IIQ", raw, len(raw) - 16 - 1000)
    assert (kind, size) == (9, 1000) and raw[-1000:] == data.tobytes() and crc == zlib.crc32(data.tobytes())


def test_a_pooled_launch_copies_the_chunks_its_units_took_and_clears_them(tmp_path):
    blocks, chunk_bytes, chunks = 64, 32, 4
    device = bytearray(range(blocks)) + bytes(range(100, 100 + chunks * chunk_bytes))
    device[12:16] = (3).to_bytes(4, "little")  # the pool's counter: 3 chunks taken
    driver = FakeDriver(bytes(device))
    writer, cap = _drain(tmp_path, driver)
    host = np.frombuffer(bytes(device[:blocks]), dtype=np.uint8).copy()  # the prefix the launching thread copied
    entries = bytearray(np.array([_entry(1, 0, blocks)], dtype=BATCH_ENTRY).tobytes())  # an object part: held
    head = BATCH_HEADER.pack(1, 0)
    pooled = (2, FakeDriver.BASE, blocks, chunks, chunk_bytes, 5, 1, BATCH_ENTRY.fields["buffer_bytes"][1])
    mod.push(cap, 0, BATCH, 0, 0, (head, entries, _part(host)), pooled, None, None)
    with pytest.raises(BufferError):
        entries.append(0)  # the C thread may still write into it: it cannot be resized until collected
    (job, ) = _done(cap)
    assert job[:4] == (0, 0, 3, 3 * chunk_bytes)  # id, status, chunks taken, bytes copied beyond the prefix
    assert np.frombuffer(entries, BATCH_ENTRY)["buffer_bytes"][0] == blocks + 3 * chunk_bytes
    entries.append(0)  # collected: released
    del entries[-1]
    assert driver.mem[blocks:blocks + 3 * chunk_bytes] == bytes(3 * chunk_bytes)  # cleared for reuse
    assert driver.mem[blocks + 3 * chunk_bytes:] == device[blocks + 3 * chunk_bytes:]  # the 4th untouched
    assert ("stream_sync", 5) in driver.log
    writer.close()
    raw = (tmp_path / "d.plraw").read_bytes()
    payload = head + bytes(entries) + bytes(device[:blocks + 3 * chunk_bytes])
    assert raw.endswith(payload) and struct.unpack_from("<IIQ", raw, len(raw) - len(payload) - 16) == (
        BATCH, zlib.crc32(payload), len(payload))


def test_a_failed_driver_call_stops_the_thread_s_work_and_the_rest_comes_back_unrun(tmp_path):
    driver = FakeDriver(fail={"event_sync": 700})
    writer, cap = _drain(tmp_path, driver)
    host = np.ones(16, dtype=np.uint8)
    size_before = (tmp_path / "d.plraw").stat().st_size
    for i in range(3):
        mod.push(cap, i, BATCH, 0, 5, (_part(host), ), None, (host.ctypes.data, 16), None)
    assert [r[:2] for r in _done(cap)] == [(0, 700), (1, native_drain.SKIPPED), (2, native_drain.SKIPPED)]
    assert (tmp_path / "d.plraw").stat().st_size == size_before and host.all()  # nothing written or zeroed
    assert [c[0] for c in driver.log if c[0] != "capture_mode"] == ["event_sync"]


def test_a_job_that_needs_a_driver_function_not_given_fails_by_name(tmp_path):
    driver = FakeDriver()
    writer, cap = _drain(tmp_path, driver, without=("event_sync", ))
    mod.push(cap, 0, BATCH, 0, 5, (), None, None, None)
    assert [r[1] for r in _done(cap)] == [native_drain.NOT_LOADED]


def test_wait_returns_when_a_job_is_done_and_not_before(tmp_path):
    driver = FakeDriver()
    writer, cap = _drain(tmp_path, driver)
    assert mod.wait(cap, 0.05) is False
    mod.push(cap, 0, native_drain.NO_WRITE, 0, 0, (), None, None, None)
    assert mod.wait(cap, 5.0) is True
    assert [r[0] for r in mod.collect(cap)] == [0] and mod.collect(cap) == []
    mod.close(cap)
    mod.close(cap)  # twice: nothing left to stop


def test_the_thread_enqueues_each_copy_and_those_queued_behind_before_it_writes(tmp_path):
    """A job with ``copy``: after its wait event, the copy into pinned memory, the chunk's
    clearing, then its own event, on the drain's stream; the copies of jobs queued behind it
    are enqueued before it is waited for and written, so they overlap its write."""
    device = bytes(range(200))
    driver = FakeDriver(device)
    gate = driver.gates[99] = threading.Event()
    writer, cap = _drain(tmp_path, driver)
    mod.push(cap, 0, native_drain.NO_WRITE, 0, 99, (), None, None, None)  # holds the thread until the gate opens
    deadline = time.time() + 10
    while ("event_sync", 99) not in driver.log and time.time() < deadline:
        time.sleep(0.001)
    hosts = [np.zeros(50, dtype=np.uint8) for _ in range(2)]
    for i, host in enumerate(hosts):
        copy = (7, 30 + i, host.ctypes.data, FakeDriver.BASE + 100 * i, 50, 60)  # stream, wait, dst, src, bytes, clear
        mod.push(cap, 1 + i, BATCH, 0, 40 + i, (_part(host), ), None, (host.ctypes.data, 50), copy)
    gate.set()
    assert [r[:2] for r in _done(cap)] == [(0, 0), (1, 0), (2, 0)]
    calls = [c for c in driver.log if c[0] != "capture_mode"]
    assert calls[0] == ("event_sync", 99)
    assert calls[1:5] == [("wait_event", 7, 30, 0), ("memcpy", hosts[0].ctypes.data, FakeDriver.BASE, 50, 7),
                          ("memset", FakeDriver.BASE, 0, 60, 7), ("record", 40, 7)]
    assert calls[5:9] == [("wait_event", 7, 31, 0), ("memcpy", hosts[1].ctypes.data, FakeDriver.BASE + 100, 50, 7),
                          ("memset", FakeDriver.BASE + 100, 0, 60, 7), ("record", 41, 7)]
    assert calls[9:] == [("event_sync", 40), ("event_sync", 41)]  # each waited for only once copies are queued
    writer.close()
    raw = (tmp_path / "d.plraw").read_bytes()
    assert raw.endswith(struct.pack("<IIQ", BATCH, zlib.crc32(device[:50]), 50) + device[:50]
                        + struct.pack("<IIQ", BATCH, zlib.crc32(device[100:150]), 50) + device[100:150])
    assert not hosts[0].any() and not hosts[1].any()  # zeroed after their writes
    assert driver.mem[:60] == bytes(60) and driver.mem[100:160] == bytes(60)  # cleared on the device


def test_a_pooled_job_must_patch_a_writable_object_part(tmp_path):
    writer, cap = _drain(tmp_path, FakeDriver())
    head = np.zeros(16, dtype=np.uint8)
    with pytest.raises(ValueError, match="patch"):  # an (address, length) part: nothing holds it writable
        mod.push(cap, 0, BATCH, 0, 0, (_part(head), _part(head)), (0, 0, 16, 1, 8, 0, 1, 0), None, None)
    with pytest.raises(BufferError):  # bytes are read-only
        mod.push(cap, 0, BATCH, 0, 0, (_part(head), bytes(64)), (0, 0, 16, 1, 8, 0, 1, 0), None, None)
    mod.close(cap)
