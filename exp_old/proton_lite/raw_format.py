"""The raw capture file ``NAME.plraw``: copied-back buffers plus everything needed to decode them.

Layout (little-endian; full description in docs/format.md)::

    file header, 16 bytes:  8s magic b"PLRAW\\r\\n\\x1a"  u32 format_version  u32 flags (0)
    then chunks, each:      u32 type  u32 crc32(payload)  u64 payload_bytes  payload

    type 1 SESSION  JSON (utf-8): name, device, versions, options, host start time
    type 2 KERNEL   JSON: id, name, hash, num_warps, and the kernel's proton_lite metadata
    type 3 LAUNCH   56-byte header then the buffer bytes:
                      u32 kernel_id  u32 device  u64 launch_index
                      u32 grid_x  u32 grid_y  u32 grid_z  u32 num_ctas
                      u64 stream  u64 host_time_ns  u64 buffer_bytes
    type 4 END      JSON: launches, records and dropped totals, warnings
    type 5 BATCH    several launches copied back together (format version 2):
                      u32 count  u32 reserved (0)
                      count x 64-byte entries: the LAUNCH header's fields, then
                        u64 buffer_offset (into the data below)  u64 buffer_bytes
                      then the data: every entry's buffer bytes
    type 6 REPLAYS  launches that are replays of CUDA graphs (format version 3):
                      u32 count  u32 reserved (0)
                      count x 24-byte rows: u64 launch_index  u32 graph  u32 node  u64 replay

JSON and fixed binary only: a raw file is never unpickled or evaluated.  A file cut off
mid-chunk (crash, Ctrl-C) is still readable up to its last whole chunk; the reader says so.
"""
from __future__ import annotations

import json
import mmap
import os
import struct
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO, Iterator

import numpy as np

from proton_lite.crc import crc32

MAGIC = b"PLRAW\r\n\x1a"
# 2 added BATCH chunks, 3 REPLAYS chunks; version 1 files (LAUNCH chunks only) and 2 still read
FORMAT_VERSION = 3
FILE_HEADER = struct.Struct("<8sII")
CHUNK_HEADER = struct.Struct("<IIQ")
LAUNCH_HEADER = struct.Struct("<IIQIIIIQQQ")
BATCH_HEADER = struct.Struct("<II")
BATCH_ENTRY = np.dtype([("kernel_id", "<u4"), ("device", "<u4"), ("launch_index", "<u8"), ("grid", "<u4", (3, )),
                        ("num_ctas", "<u4"), ("stream", "<u8"), ("host_time_ns", "<u8"), ("buffer_offset", "<u8"),
                        ("buffer_bytes", "<u8")])
assert BATCH_ENTRY.itemsize == 64
REPLAY_ROW = np.dtype([("launch_index", "<u8"), ("graph", "<u4"), ("node", "<u4"), ("replay", "<u8")])
assert REPLAY_ROW.itemsize == 24
SESSION, KERNEL, LAUNCH, END, BATCH, REPLAYS = 1, 2, 3, 4, 5, 6
_CHUNK_NAMES = {SESSION: "SESSION", KERNEL: "KERNEL", LAUNCH: "LAUNCH", END: "END", BATCH: "BATCH",
                REPLAYS: "REPLAYS"}
MAX_JSON_CHUNK = 64 << 20
MAX_LAUNCH_INDEX = 2**32 - 1  # launch indices are u32 in a decoded profile


class RawFormatError(ValueError):
    """The file is not a (complete, uncorrupted, supported) proton_lite raw capture."""


@dataclass
class LaunchChunk:
    kernel_id: int
    device: int
    launch_index: int
    grid: tuple[int, int, int]
    num_ctas: int
    stream: int
    host_time_ns: int
    buffer: memoryview  # the copied-back profile buffer
    replay: tuple[int, int, int] | None = None  # (graph, node, replay) of a CUDA graph's replay; None: eager


@dataclass
class RawCapture:
    path: str
    session: dict
    kernels: dict[int, dict]
    launches: list[LaunchChunk]
    end: dict | None  # None when the capture was cut off before stop()
    truncated_bytes: int  # bytes after the last whole chunk (0 for a clean file)


_ENTRY = struct.Struct("<IIQIIIIQQQQ")  # BATCH_ENTRY's bytes
assert _ENTRY.size == BATCH_ENTRY.itemsize


def pack_entry(row: tuple) -> bytes:
    """One BATCH_ENTRY from a launch's row (kernel_id, device, launch_index, grid, num_ctas,
    stream, host_time_ns, buffer_offset, buffer_bytes), a few times faster than numpy."""
    k, d, i, g, n, s, t, o, b = row
    return _ENTRY.pack(k, d, i, g[0], g[1], g[2], n, s, t, o, b)


def unpack_entries(entries) -> list[tuple]:
    """The rows that ``pack_entry`` packed, back from their bytes (any multiple of 64)."""
    return [(k, d, i, (gx, gy, gz), n, s, t, o, b) for k, d, i, gx, gy, gz, n, s, t, o, b in _ENTRY.iter_unpack(entries)]


def json_payload(data: dict) -> bytes:
    """A metadata chunk's payload (SESSION, KERNEL, END): compact JSON, keys sorted."""
    return json.dumps(data, sort_keys=True, separators=(",", ":")).encode()


class RawWriter:
    """Appends chunks to a raw file; each chunk is written whole with one write call."""

    def __init__(self, path: str | os.PathLike, session: dict, native: bool = True) -> None:
        self.path = str(path)
        # unbuffered: the C writer (proton_lite/native_write.py) writes to the same descriptor
        self._file: BinaryIO = open(self.path, "wb", buffering=0)
        self._native = None
        if native:
            from proton_lite import native_write
            self._native = native_write.module()
        self._write_all(FILE_HEADER.pack(MAGIC, FORMAT_VERSION, 0))
        self._json_chunk(SESSION, session)

    def _write_all(self, data) -> None:
        view = memoryview(data).cast("B")
        while len(view):
            view = view[self._file.write(view):]

    def _chunk(self, kind: int, parts: list[bytes | memoryview]) -> None:
        if self._native is not None:  # checksum and write in one call that releases the GIL
            from proton_lite.native_write import BLOCK, THREADS
            self._native.write_chunk(self._file.fileno(), kind, tuple(parts), THREADS, BLOCK)
            return
        crc = 0
        size = 0
        for part in parts:
            crc = crc32(part, crc)  # large payloads on several cores (proton_lite/crc.py)
            size += len(part)
        self._write_all(CHUNK_HEADER.pack(kind, crc, size))
        for part in parts:
            self._write_all(part)

    def _json_chunk(self, kind: int, data: dict) -> None:
        self._chunk(kind, [json_payload(data)])

    def fileno(self) -> int:
        """The file's descriptor: the C drain (``native_drain``) writes chunks to it too."""
        return self._file.fileno()

    def kernel(self, data: dict) -> None:
        self._json_chunk(KERNEL, data)

    def launch(self, kernel_id: int, device: int, launch_index: int, grid: tuple[int, int, int], num_ctas: int,
               stream: int, host_time_ns: int, buffer) -> None:
        buf = memoryview(buffer).cast("B")
        header = LAUNCH_HEADER.pack(kernel_id, device, launch_index, *grid, num_ctas, stream, host_time_ns, len(buf))
        self._chunk(LAUNCH, [header, buf])

    def batch(self, entries: np.ndarray, data) -> None:
        """Several launches in one chunk (one write): ``entries`` of dtype ``BATCH_ENTRY`` whose
        ``buffer_offset`` / ``buffer_bytes`` point into ``data``."""
        entries = np.ascontiguousarray(entries, dtype=BATCH_ENTRY)
        self._chunk(BATCH, [BATCH_HEADER.pack(len(entries), 0), entries.data.cast("B"), memoryview(data).cast("B")])

    def replays(self, rows: list[tuple[int, int, int, int]]) -> None:
        """Which launches are replays of CUDA graphs: (launch_index, graph, node, replay) each."""
        table = np.array(rows, dtype=REPLAY_ROW)
        self._chunk(REPLAYS, [BATCH_HEADER.pack(len(table), 0), table.data.cast("B")])

    def end(self, data: dict) -> None:
        self._json_chunk(END, data)

    def flush(self) -> None:
        self._file.flush()  # unbuffered: nothing waits in Python (kept for callers)

    def close(self) -> None:
        if not self._file.closed:
            self._file.close()


def _json(payload: memoryview, where: str) -> dict:
    if len(payload) > MAX_JSON_CHUNK:
        raise RawFormatError(f"{where}: metadata chunk of {len(payload)} bytes is implausibly large")
    try:
        data = json.loads(bytes(payload).decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise RawFormatError(f"{where}: metadata is not valid JSON ({e.__class__.__name__})") from None
    if not isinstance(data, dict):
        raise RawFormatError(f"{where}: metadata is not a JSON object")
    return data


def iter_chunks(data: memoryview, path: str) -> Iterator[tuple[int, memoryview, int]]:
    """Yield (type, payload, offset) for each whole chunk; stop at the first partial one."""
    offset = FILE_HEADER.size
    while offset + CHUNK_HEADER.size <= len(data):
        kind, crc, size = CHUNK_HEADER.unpack_from(data, offset)
        start = offset + CHUNK_HEADER.size
        if start + size > len(data):
            return
        payload = data[start:start + size]
        if kind not in _CHUNK_NAMES:
            raise RawFormatError(f"{path}: unknown chunk type {kind} at byte {offset}; the file is corrupted "
                                 "or written by a newer proton-lite")
        if crc32(payload) != crc:
            raise RawFormatError(f"{path}: {_CHUNK_NAMES[kind]} chunk at byte {offset} is corrupted (checksum "
                                 "mismatch)")
        yield kind, payload, offset
        offset = start + size


def read_raw(path: str | os.PathLike) -> RawCapture:
    """Read a raw capture (memory-mapped: buffers are not copied)."""
    path = str(path)
    try:
        size = os.path.getsize(path)
    except OSError as e:
        raise RawFormatError(f"{path}: cannot read ({e.strerror})") from None
    if size < FILE_HEADER.size:
        raise RawFormatError(f"{path}: {'empty file' if size == 0 else 'too short'}; not a proton-lite raw capture")
    with open(path, "rb") as f:
        data = memoryview(mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ))
    magic, version, _flags = FILE_HEADER.unpack_from(data, 0)
    if magic != MAGIC:
        raise RawFormatError(f"{path}: not a proton-lite raw capture (bad magic)")
    if version > FORMAT_VERSION:
        raise RawFormatError(f"{path}: raw format version {version} is newer than this proton-lite supports "
                             f"({FORMAT_VERSION}); upgrade proton-lite")
    session, kernels, launches, end, replays = None, {}, [], None, {}
    last_end = FILE_HEADER.size
    for kind, payload, offset in iter_chunks(data, path):
        last_end = offset + CHUNK_HEADER.size + len(payload)
        where = f"{path} (byte {offset})"
        if kind == SESSION:
            session = _json(payload, where)
        elif kind == KERNEL:
            k = _json(payload, where)
            if not isinstance(k.get("id"), int):
                raise RawFormatError(f"{where}: kernel chunk without an integer id")
            kernels[k["id"]] = k
        elif kind == LAUNCH:
            if len(payload) < LAUNCH_HEADER.size:
                raise RawFormatError(f"{where}: launch chunk too short")
            kid, dev, idx, gx, gy, gz, nctas, stream, host_ns, nbytes = LAUNCH_HEADER.unpack_from(payload, 0)
            if nbytes != len(payload) - LAUNCH_HEADER.size:
                raise RawFormatError(f"{where}: launch chunk size does not match its buffer size")
            if kid not in kernels:
                raise RawFormatError(f"{where}: launch refers to unknown kernel {kid}")
            if idx > MAX_LAUNCH_INDEX:
                raise RawFormatError(f"{where}: launch index {idx} is out of range; the file is corrupted")
            launches.append(LaunchChunk(kid, dev, idx, (gx, gy, gz), nctas, stream, host_ns,
                                        payload[LAUNCH_HEADER.size:]))
        elif kind == BATCH:
            launches.extend(_batch_launches(payload, where, kernels))
        elif kind == REPLAYS:
            replays.update(_replay_rows(payload, where))
        elif kind == END:
            end = _json(payload, where)
    if session is None:
        raise RawFormatError(f"{path}: no session header; the file is truncated or not a proton-lite capture")
    # batches of different streams reach the file in the order their copies finished
    launches.sort(key=lambda launch: launch.launch_index)
    for launch in launches if replays else ():
        launch.replay = replays.get(launch.launch_index)
    return RawCapture(path, session, kernels, launches, end, len(data) - last_end)


def _batch_launches(payload: memoryview, where: str, kernels: dict) -> list[LaunchChunk]:
    if len(payload) < BATCH_HEADER.size:
        raise RawFormatError(f"{where}: batch chunk too short")
    count, _reserved = BATCH_HEADER.unpack_from(payload, 0)
    table_end = BATCH_HEADER.size + count * BATCH_ENTRY.itemsize
    if table_end > len(payload):
        raise RawFormatError(f"{where}: batch chunk says {count} launches but is too short for their table")
    entries = np.frombuffer(payload, BATCH_ENTRY, count, BATCH_HEADER.size)
    data = payload[table_end:]
    ends = entries["buffer_offset"].astype(object) + entries["buffer_bytes"].astype(object)  # no u64 wrap
    if count and max(ends) > len(data):
        raise RawFormatError(f"{where}: a launch in a batch chunk points past the chunk's data")
    if count and int(entries["launch_index"].max()) > MAX_LAUNCH_INDEX:
        raise RawFormatError(f"{where}: launch index {int(entries['launch_index'].max())} is out of range; the file "
                             "is corrupted")
    unknown = sorted(set(entries["kernel_id"].tolist()) - set(kernels))
    if unknown:
        raise RawFormatError(f"{where}: launch refers to unknown kernel {unknown[0]}")
    return [LaunchChunk(int(e["kernel_id"]), int(e["device"]), int(e["launch_index"]), tuple(int(g) for g in e["grid"]),
                        int(e["num_ctas"]), int(e["stream"]), int(e["host_time_ns"]),
                        data[int(e["buffer_offset"]):int(e["buffer_offset"]) + int(e["buffer_bytes"])])
            for e in entries]


def _replay_rows(payload: memoryview, where: str) -> dict[int, tuple[int, int, int]]:
    if len(payload) < BATCH_HEADER.size:
        raise RawFormatError(f"{where}: replays chunk too short")
    count, _reserved = BATCH_HEADER.unpack_from(payload, 0)
    if BATCH_HEADER.size + count * REPLAY_ROW.itemsize != len(payload):
        raise RawFormatError(f"{where}: replays chunk says {count} rows but holds {len(payload)} bytes")
    rows = np.frombuffer(payload, REPLAY_ROW, count, BATCH_HEADER.size)
    return {int(r["launch_index"]): (int(r["graph"]), int(r["node"]), int(r["replay"])) for r in rows}


def is_raw_file(path: str | os.PathLike) -> bool:
    try:
        with open(path, "rb") as f:
            return f.read(len(MAGIC)) == MAGIC
    except OSError:
        return False


def default_path(name: str, ext: str) -> Path:
    p = Path(name)
    return p if p.suffix == ext else p.with_name(p.name + ext)
