"""Launches captured into CUDA graphs: each replay's records kept, with no host work per replay.

A launch captured into a graph gets scratch of its own (the graph keeps its address), and
right after its kernel node the capture gets a *copy node* (``graph_copy.py``): at every
replay it moves the scratch into the next free slot of the node's ring and publishes it.
A poller thread here reads the node headers of all captured launches of a device in one
copy, copies the published slots to the host, tells the device how far it drained
(``consumed``) and hands the replays to the drain's writer as ordinary launches, numbered
in the order they ran (each slot carries the time it was published), with a REPLAYS row
each (graph, node, replay index: docs/format.md §2.5b).

Bounded memory: a ring has ``slots`` slots; a replay that finds it full (the poller fell
behind) is counted in the node's ``overruns`` and reported at stop, never written over an
undrained slot.  At stop the nodes are closed (later replays only clear the scratch and
count themselves as ``discarded``), the rings drained one last time and freed; the
scratch and the 64-byte headers stay for the life of the process, as the graph may
outlive the session (docs/design.md, "CUDA graphs").
"""
from __future__ import annotations

import os
import threading
import time

import numpy as np

from proton_lite.raw_format import BATCH_ENTRY
from proton_lite.runtime import cuda_api, cuda_graph, graph_copy, graph_earlier
from proton_lite.runtime.graph_copy import NODE_HEADER_BYTES, SLOT_HEADER_BYTES
from proton_lite.runtime.graph_ring import (HEADER_DTYPE, RING_BUDGET_MAX, RING_BUDGET_SHARE, SLOT_HEADER_DTYPE,
                                            launch_bytes, new_header, ring_slots, slot_bytes_for, slot_data_bytes)

POLL_MIN_S, POLL_MAX_S = 0.0005, 0.002  # the poller waits less while rings fill, more while idle
POLL_BYTES = 32 << 20  # slots copied per poll: the GIL is held while they cross PCIe (~1.5 ms)
BACKLOG_BYTES = 256 << 20  # replays waiting for the disk in host memory; past it the rings wait (then overrun)
ARENA_NODES = 512  # node headers per device allocation (read in one copy)


# each copy node also waits for the capture's previous one, so the copies form one chain beside
# the kernels instead of a leaf per kernel: replays 0.8-0.9% faster on the H100 machine
# (tests/benchmarks/graphs.py --leaf-copies times the leaves beside it, docs/benchmarks.md)
CHAIN_COPIES = True


class _Arena:
    """Node headers of one device, in one allocation (kept for the life of the process)."""

    def __init__(self, device: int) -> None:
        self.device = device
        self.ptr = cuda_api.mem_alloc(ARENA_NODES * NODE_HEADER_BYTES)
        self.used = 0


_arenas: dict[int, list[_Arena]] = {}  # device -> arenas; process-wide, as graphs outlive sessions
_arenas_lock = threading.Lock()


def _header_slot(device: int) -> tuple[_Arena, int]:
    with _arenas_lock:
        arenas = _arenas.setdefault(device, [])
        if not arenas or arenas[-1].used == ARENA_NODES:
            arenas.append(_Arena(device))
        arena = arenas[-1]
        arena.used += 1
        return arena, arena.used - 1


class CapturedLaunch:
    """One instrumented launch captured into a graph (one kernel node and its copy node)."""

    __slots__ = ("device", "stream", "scratch", "nbytes", "pool", "kernel_id", "grid", "num_ctas",
                 "graph", "node", "arena", "index", "ring", "slots", "slot_bytes", "consumed", "final")

    def __init__(self, device: int, stream: int, scratch: int, nbytes: int, pool) -> None:
        self.device, self.stream, self.scratch, self.nbytes, self.pool = device, stream, scratch, nbytes, pool
        self.kernel_id = self.num_ctas = None
        self.grid = (1, 1, 1)
        self.graph = self.node = 0
        self.arena, self.index = None, 0
        self.ring = 0
        self.slots = self.slot_bytes = self.consumed = 0
        self.final = None  # the header at stop

    @property
    def header(self) -> int:
        return self.arena.ptr + self.index * NODE_HEADER_BYTES


class GraphRecorder:
    """The captured launches of one session, their rings and the poller that drains them."""

    def __init__(self, owner, slots: int | None = None) -> None:
        self.owner = owner  # the Collector: contexts, launch numbering, drain, errors
        self.slots = slots
        self.nodes: list[CapturedLaunch] = []
        self._graphs: dict[int, int] = {}  # capture id -> graph number in this session (1, 2, ...)
        self._lock = threading.Lock()
        self._streams: dict[int, int] = {}  # device -> the poller's stream
        self._setup_streams: dict[int, int] = {}  # device -> the capturing threads' setup stream
        self._host: dict[int, tuple[int, int]] = {}  # device -> pinned (pointer, bytes) for the poller
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.drain_lock = threading.Lock()  # held by each poll (and by tests that keep the poller out)
        self.driver = cuda_graph.PollDriver()
        self.recorded = 0
        self.errors: list[str] = []
        self._budget: int | None = None  # device bytes the rings may still take (set at the first capture)
        self._last_copy: dict[int, object] = {}  # capture id -> its last copy node (CHAIN_COPIES)
        # graphs that earlier sessions captured: their replays while this session runs are counted
        self._earlier = graph_earlier.read()
        self.earlier_replays: dict[str, int] = {}

    # -- capturing thread ------------------------------------------------------------------
    def scratch(self, nbytes: int, device: int, stream: int, pool, prefix: tuple = ()) -> CapturedLaunch:
        """Zeroed scratch for a launch being captured (its kernel writes there at every replay),
        its first words set to ``prefix`` once, outside the graph: no replay changes them
        (kernels read them; the copy node only reads the scratch), so the graph needs no
        memset node before the kernel for them."""
        ptr = cuda_api.mem_alloc_zeroed_while_capturing(max(nbytes, 256), prefix)
        return CapturedLaunch(device, stream, ptr, nbytes, pool)

    def add(self, launch: CapturedLaunch, kernel_id: int, grid: tuple, num_ctas: int) -> None:
        """The launch's kernel node is in the graph: give it a ring and the copy node after it."""
        launch.kernel_id, launch.grid, launch.num_ctas = kernel_id, grid, num_ctas
        capture_id, graph, deps = cuda_graph.capture_info(launch.stream)
        launch.nbytes = slot_data_bytes(launch.nbytes, launch.pool)
        launch.slot_bytes = slot_bytes_for(launch.nbytes)
        if self._budget is None:
            free, _ = cuda_api.mem_get_info()
            self._budget = min(RING_BUDGET_MAX, free // RING_BUDGET_SHARE)
        launch.slots = ring_slots(launch.slot_bytes, self.slots, self._budget)
        self._budget = max(0, self._budget - launch.slots * launch.slot_bytes)
        with cuda_api.relaxed_capture():
            launch.arena, launch.index = _header_slot(launch.device)
            launch.ring = cuda_api.mem_alloc(launch.slots * launch.slot_bytes)
            try:
                self._write_header(launch, 0, new_header(launch.slots), self._setup_stream(launch.device))
                if os.environ.get("PROTON_LITE_GRAPH_NO_COPY") == "1":  # measurement aid (benchmarks/graphs.py):
                    raise RuntimeError("PROTON_LITE_GRAPH_NO_COPY=1")  # the instrumented kernels alone
                last = self._last_copy.get(capture_id) if CHAIN_COPIES else None
                node = graph_copy.add_node(graph, deps + ([last] if last is not None else []), launch.device,
                                           launch.header, launch.scratch, launch.ring, launch.nbytes,
                                           launch.slot_bytes, launch.pool)
                self._last_copy[capture_id] = node
            except BaseException:
                cuda_api.mem_free(launch.ring)
                raise
        with self._lock:
            launch.graph = self._graphs.setdefault(capture_id, len(self._graphs) + 1)
            launch.node = sum(1 for n in self.nodes if n.graph == launch.graph)
            self.nodes.append(launch)
            if self._thread is None:
                self._thread = threading.Thread(target=self._poller, name="proton_lite-graphs", daemon=True)
                self._thread.start()

    @staticmethod
    def _write_header(n: CapturedLaunch, offset: int, values: np.ndarray, stream: int) -> None:
        """Host values into a node header, on a non-blocking stream of ours: a copy on the
        legacy stream would join (or break) a capture in progress."""
        cuda_graph.memcpy_htod_async(n.header + offset, values.ctypes.data, values.nbytes, stream)
        cuda_api.stream_synchronize(stream)

    def _setup_stream(self, device: int) -> int:
        stream = self._setup_streams.get(device)
        if stream is None:
            stream = self._setup_streams[device] = cuda_api.stream_create()
        return stream

    # -- poller ------------------------------------------------------------------------------
    def _poller(self) -> None:
        cuda_graph.relax_this_thread()
        wait = POLL_MIN_S
        while not self._stop.wait(wait):
            try:
                with self.drain_lock:
                    busy = self.poll()
            except cuda_api.CudaError as e:  # a kernel fault: the session reports it; stop polling
                self.owner._failed(e)
                return
            wait = POLL_MIN_S if busy else min(POLL_MAX_S, wait * 2)

    def poll(self, final: bool = False) -> bool:
        """Drain the published slots (at most ``POLL_BYTES`` of them, all of them when
        ``final``); True when some ring was at least half full or more is waiting."""
        self.owner._drain.collect()  # the C drain's finished batches (nothing else takes them while no chunk is sealed)
        if not final and self.owner._drain.graph_backlog > BACKLOG_BYTES:  # the disk is behind: host memory
            return True  # stays bounded, and replays that find a full ring are counted
        with self._lock:
            nodes = list(self.nodes)
        busy = False
        by_device: dict[int, list[CapturedLaunch]] = {}
        for n in nodes:
            by_device.setdefault(n.device, []).append(n)
        found = []  # (published_ns, node, replay, data)
        for device, group in by_device.items():
            cuda_api.set_context(self.owner._contexts[device])
            heads = self._read_headers(device, group)
            want = []
            for n, h in zip(group, heads):
                if final:
                    n.final = h
                pending = int(h["written"]) - n.consumed
                if pending > 0:
                    busy = busy or pending * 2 >= n.slots
                    want.append((n, pending))
            while want:
                want, more = self._take_slots(device, want, found, final)
                busy = busy or more
                if not final:
                    break
        if found:
            self._hand_over(found)
        return busy

    def _read_headers(self, device: int, group: list[CapturedLaunch]) -> np.ndarray:
        """The headers of ``group`` (one copy per arena they use)."""
        stream = self._stream(device)
        out = np.zeros(len(group), HEADER_DTYPE)
        spans: dict[int, tuple[_Arena, int, int]] = {}
        for n in group:
            a, lo, hi = spans.get(id(n.arena), (n.arena, n.index, n.index))
            spans[id(n.arena)] = (a, min(lo, n.index), max(hi, n.index))
        host, _ = self._pinned(device, sum((hi - lo + 1) * NODE_HEADER_BYTES for _, lo, hi in spans.values()))
        offsets, at = {}, 0
        for key, (a, lo, hi) in spans.items():
            self.driver.dtoh_async(host + at, a.ptr + lo * NODE_HEADER_BYTES, (hi - lo + 1) * NODE_HEADER_BYTES,
                                   stream)
            offsets[key] = (at, lo)
            at += (hi - lo + 1) * NODE_HEADER_BYTES
        self.driver.synchronize(stream)
        view = cuda_api.host_view(host, at)
        for i, n in enumerate(group):
            base, lo = offsets[id(n.arena)]
            start = base + (n.index - lo) * NODE_HEADER_BYTES
            out[i] = view[start:start + NODE_HEADER_BYTES].view(HEADER_DTYPE)[0]
        return out

    def _take_slots(self, device: int, want: list, found: list, final: bool) -> tuple[list, bool]:
        """Copy published slots of the nodes in ``want`` ((node, pending) each) to the host in
        one synchronized batch of at most ``POLL_BYTES`` (the GIL is held meanwhile), then tell
        the device how far each ring was drained.  Returns what is left and whether any is."""
        stream = self._stream(device)
        plan, left, size = [], [], 0
        for n, pending in want:
            take = min(pending, max(1, (POLL_BYTES - size) // n.slot_bytes)) if size < POLL_BYTES else 0
            if take:
                plan.append((n, take, size))
                size += take * n.slot_bytes
            if pending > take:
                left.append((n, pending - take))
        host, _ = self._pinned(device, size + 8 * len(plan))
        for n, take, at in plan:
            first = n.consumed % n.slots
            head = min(take, n.slots - first)  # the slots up to the ring's end, then from its start
            self.driver.dtoh_async(host + at, n.ring + first * n.slot_bytes, head * n.slot_bytes, stream)
            if take > head:
                self.driver.dtoh_async(host + at + head * n.slot_bytes, n.ring, (take - head) * n.slot_bytes, stream)
        self.driver.synchronize(stream)
        data = cuda_api.host_view(host, size).copy()
        counters = cuda_api.host_view(host + size, 8 * len(plan)).view("<u8")
        for i, (n, take, at) in enumerate(plan):
            n.consumed += take
            counters[i] = n.consumed
            self.driver.htod_async(n.header + graph_copy.CONSUMED, host + size + 8 * i, 8, stream)
            for k in range(take):
                slot = data[at + k * n.slot_bytes:at + (k + 1) * n.slot_bytes]
                head_row = slot[:SLOT_HEADER_BYTES].view(SLOT_HEADER_DTYPE)[0]
                found.append((int(head_row["published_ns"]), n, int(head_row["replay"]),
                              slot[SLOT_HEADER_BYTES:SLOT_HEADER_BYTES + n.nbytes]))
        self.driver.synchronize(stream)  # the pinned words are reused by the next poll
        return left, bool(left)

    def _hand_over(self, found: list) -> None:
        """The drained replays, in the order they ran, as one batch for the raw file."""
        found.sort(key=lambda f: f[0])
        now = time.time_ns()
        owner = self.owner
        with owner._lock:
            owner._sync(seal=False)
            first = owner._launch_index
            owner._launch_index += len(found)
            owner._launches += len(found)
            self.recorded += len(found)
        rows, replays, parts, offset = [], [], [], 0
        for i, (_, n, replay, body) in enumerate(found):
            nbytes = launch_bytes(body, n.nbytes, n.pool)
            rows.append((n.kernel_id, n.device, first + i, n.grid, n.num_ctas, n.stream, now, offset, nbytes))
            replays.append((first + i, n.graph, n.node, replay))
            parts.append(body[:nbytes])
            offset += nbytes
        owner._drain.graph_batch(np.array(rows, dtype=BATCH_ENTRY), np.concatenate(parts), replays)

    def _stream(self, device: int) -> int:
        stream = self._streams.get(device)
        if stream is None:
            stream = self._streams[device] = cuda_api.stream_create()
        return stream

    def _pinned(self, device: int, size: int) -> tuple[int, int]:
        ptr, have = self._host.get(device, (0, 0))
        if size > have:
            if ptr:
                cuda_api.host_free(ptr)
            have = max(size, 1 << 20)
            ptr = cuda_api.host_alloc(have)
            self._host[device] = (ptr, have)
        return ptr, have

    # -- stop ----------------------------------------------------------------------------------
    def finish(self) -> None:
        """Close every node, drain the rings one last time and free them (collector's stop)."""
        if self._thread is not None:
            self._stop.set()
            self._thread.join()
        if self.owner.failed:
            return
        if self._earlier:
            self.earlier_replays = graph_earlier.replays_between(self._earlier, graph_earlier.read())
        if not self.nodes:
            return
        closed = np.ones(1, "<u4")
        for n in self.nodes:  # later replays only clear their scratch and count themselves
            cuda_api.set_context(self.owner._contexts[n.device])
            self._write_header(n, graph_copy.CLOSED, closed, self._stream(n.device))
        self._sync_devices()
        self.poll(final=True)
        never = np.full(1, -1, "<i4")
        for n in self.nodes:  # a slot chosen before the close is not written either
            cuda_api.set_context(self.owner._contexts[n.device])
            self._write_header(n, graph_copy.NEXT_SLOT, never, self._stream(n.device))
        self._sync_devices()
        for device, group in self._by_device().items():
            cuda_api.set_context(self.owner._contexts[device])
            heads = self._read_headers(device, group)
            for n, h in zip(group, heads):
                # published after the last drain (another thread replayed during stop): not kept
                h["discarded"] += max(0, int(h["written"]) - n.consumed)
                n.final = h
                cuda_api.mem_free(n.ring)
                n.ring = 0
        graph_earlier.remember([(self.owner._contexts[n.device], n.header, self.owner.kernel_name(n.kernel_id))
                                for n in self.nodes])
        for device, (ptr, _) in self._host.items():
            cuda_api.host_free(ptr)
        self._host.clear()
        for streams in (self._streams, self._setup_streams):
            for device, stream in streams.items():
                cuda_api.set_context(self.owner._contexts[device])
                cuda_api.stream_destroy(stream)
            streams.clear()

    def _by_device(self) -> dict[int, list[CapturedLaunch]]:
        out: dict[int, list[CapturedLaunch]] = {}
        for n in self.nodes:
            out.setdefault(n.device, []).append(n)
        return out

    def _sync_devices(self) -> None:
        for device in self._by_device():
            cuda_api.set_context(self.owner._contexts[device])
            cuda_graph.ctx_synchronize()

    def stats(self) -> dict:
        """The END chunk's ``graphs``: per captured launch, what its replays left."""
        nodes = []
        for n in self.nodes:
            h = n.final
            nodes.append({"graph": n.graph, "node": n.node, "kernel": n.kernel_id, "slots": n.slots,
                          "slot_bytes": n.slot_bytes, "recorded": n.consumed,
                          "replays": int(h["replays"]) if h is not None else None,
                          "overruns": int(h["overruns"]) if h is not None else None,
                          "discarded": int(h["discarded"]) if h is not None else None})
        return {"graphs": len(self._graphs), "captured_launches": len(self.nodes), "recorded": self.recorded,
                "overruns": sum(x["overruns"] or 0 for x in nodes), "nodes": nodes, "errors": self.errors,
                "earlier_replays": self.earlier_replays}
