"""A small PTX interpreter for CPU tests of what the pass emits: it runs a kernel's threads
one after another on a byte-addressed global and shared memory, for the instructions that
the pass's record code and the tests' minimal kernels use.

Why: the record code's shape is checked in the PTX and its timing in the SASS, but where
each record lands (pairs, deferred stores, unrolled copies, sink slots) is a matter of
what the instructions compute. Running them here checks it on every CI run; the GPU suite
checks the same on the H100. Threads run to completion one by one (lane 0 first), which is
what the record code assumes of a warp: every lane stores the same record, or the leader
alone does, and a shared-staging epilogue reads records its lane 0 wrote before. Except at
``bar.warp.sync``: there each lane waits for the others of its warp (lanes run in turns, lane 0
first, each up to its next warp sync), so a warp that copies records its leader staged, and
then stages more in the same slots, reads what it would on the GPU.

Not a general PTX interpreter: unknown instructions raise, floating point is plain Python
floats, and the clock advances by one per instruction executed."""
from __future__ import annotations

import re
import struct
from dataclasses import dataclass, field

_LINE_RE = re.compile(r"^(?:@(!?)(%[\w]+)\s+)?([a-z][\w.:]*)\s*(.*?);\s*(?://.*)?$")
_LABEL_RE = re.compile(r"^([$\w]+):")
_WIDTH = {"8": 8, "16": 16, "32": 32, "64": 64}


class SimError(Exception):
    pass


def _bits(types: list[str]) -> int:
    for t in reversed(types):
        if t[2:] in _WIDTH:
            return _WIDTH[t[2:]]
    return 32


def _signed(v: int, bits: int) -> int:
    v &= (1 << bits) - 1
    return v - (1 << bits) if v >> (bits - 1) else v


@dataclass
class Launch:
    """What a run needs: grid and block size, the kernel parameters by name, global memory
    (one buffer at ``global_base``), dynamic shared memory per CTA."""
    grid: int
    threads: int
    params: dict[str, int]
    global_mem: bytearray
    global_base: int = 1 << 32
    shared_bytes: int = 0
    regs: dict[str, int] = field(default_factory=dict)  # initial register values (the test's loop counters)
    max_steps: int = 2_000_000
    clock_base: int = 1000  # thread 0's clock before its first instruction (%globaltimer = 10 x clock)


@dataclass
class _Function:
    """A ``.func`` the kernel calls: its parameter names, body and labels."""
    params: list[str]
    body: list[tuple]
    labels: dict[str, int]


def _parse_body(lines: list[str], at: int) -> tuple[list[tuple], dict[str, int]]:
    """The instructions and labels of the block that opens at line ``at`` (``{``), nested
    blocks (a call's parameter scope) flattened."""
    body, labels, depth = [], {}, 0
    for raw in lines[at:]:
        line = raw.strip()
        if line == "{":
            depth += 1
            continue
        if line == "}":
            depth -= 1
            if depth == 0:
                return body, labels
            continue
        if not line or line.startswith(("//", ".reg", ".loc", ".file", ".local", ".shared", ".pragma", ".param")):
            continue
        m = _LABEL_RE.match(line)
        if m:
            labels[m.group(1)] = len(body)
            continue
        m = _LINE_RE.match(line)
        if not m:
            raise SimError(f"cannot parse: {line}")
        neg, pred, op, args = m.groups()
        operands = [a.strip() for a in _split_operands(args)] if args else []
        body.append((neg == "!", pred, op, operands, line))
    raise SimError("a block that does not end")


class Kernel:
    def __init__(self, ptx: str):
        self.shared_symbols: list[str] = re.findall(r"\.extern \.shared \.align \d+ \.b8 ([$\w]+)\[\];", ptx)
        lines = ptx.split("\n")
        self.funcs: dict[str, _Function] = {}
        self.body, self.labels = None, {}
        for n, raw in enumerate(lines):
            m = re.match(r"^\s*\.func\s+([\w$]+)\s*\((.*)\)", raw)
            if m:
                start = next(j for j in range(n, len(lines)) if lines[j].strip() == "{")
                self.funcs[m.group(1)] = _Function(re.findall(r"\.param\s+\.\w+\s+([\w$]+)", m.group(2)),
                                                   *_parse_body(lines, start))
            elif re.match(r"^\s*(\.visible\s+)?\.entry\s", raw) and self.body is None:
                start = next(j for j in range(n, len(lines)) if lines[j].strip() == "{")
                self.body, self.labels = _parse_body(lines, start)
        if self.body is None:
            raise SimError("no .entry in the PTX")

    def run(self, launch: Launch, cta_order=None) -> None:
        """Every CTA (in ``cta_order``, default ascending), its threads one after another.
        ``shfl.sync.idx`` from lane 0: lane 0 runs first, and each later lane of its warp gets,
        at its n-th shuffle, what lane 0 passed at its n-th (Triton's warps do not diverge)."""
        for cta in (range(launch.grid) if cta_order is None else cta_order):
            shared = bytearray(launch.shared_bytes)
            warps = _WarpLogs()
            for warp in range(0, launch.threads, 32):
                lanes = [_Thread(self, launch, cta, tid, shared, warps).run()
                         for tid in range(warp, min(warp + 32, launch.threads))]
                while lanes:  # each lane up to its next bar.warp.sync, in turns
                    lanes = [lane for lane in lanes if next(lane, StopIteration) is not StopIteration]


def _split_operands(args: str) -> list[str]:
    out, depth, cur = [], 0, ""
    for ch in args:
        if ch in "[{":
            depth += 1
        elif ch in "]}":
            depth -= 1
        if ch == "," and depth == 0:
            out.append(cur)
            cur = ""
        else:
            cur += ch
    return out + [cur]


class _WarpLogs:
    """What lane 0 of each warp of a CTA did, for its other lanes to see as one warp: the
    values it passed at each shuffle, and the clock it read at each instruction fetch."""

    def __init__(self) -> None:
        self.shuffles: dict[int, list[int]] = {}  # warp -> values, in shuffle order
        self.clocks: dict[int, dict] = {}  # warp -> {(function, pc, times fetched): clock}


class _Thread:
    SHARED_BASE = 1 << 20  # shared addresses (the dynamic shared symbol) start here

    def __init__(self, kernel: Kernel, launch: Launch, cta: int, tid: int, shared: bytearray,
                 warps: _WarpLogs | None = None):
        self.k, self.l, self.cta, self.tid, self.shared = kernel, launch, cta, tid, shared
        self.warps = warps if warps is not None else _WarpLogs()
        self.n_shuffles = 0
        self.regs: dict[str, int] = dict(launch.regs)
        self.clock = launch.clock_base + 7 * tid
        self.at = None  # (function, pc, times this lane fetched it): the instruction being run
        self.fetched: dict[tuple, int] = {}
        self.outgoing: dict[str, int] = {}  # st.param of a call sequence
        self.incoming: dict[str, int] | None = None  # a called function's parameters

    def now(self) -> int:
        """The clock this instruction reads: lane 0's when lane 0 ran the same instruction the
        same number of times (a warp issues an instruction once, for all its lanes, which
        then store the same record), else this lane's own."""
        log = self.warps.clocks.setdefault(self.tid // 32, {})
        if self.tid % 32 == 0:
            log[self.at] = self.clock
        return log.get(self.at, self.clock)

    def value(self, operand: str, bits: int) -> int:
        o = operand.strip()
        if o.startswith("%"):
            clock = self.now() if o.startswith(("%clock", "%globaltimer")) else self.clock
            special = {"%tid.x": self.tid, "%ctaid.x": self.cta, "%ctaid.y": 0, "%ctaid.z": 0,
                       "%nctaid.x": self.l.grid, "%ntid.x": self.l.threads, "%nctaid.y": 1, "%nctaid.z": 1, "%smid": self.cta % 132,
                       "%laneid": self.tid % 32, "%clock": clock & 0xFFFFFFFF, "%clock64": clock,
                       "%clock_hi": clock >> 32, "%globaltimer": 10 * clock,
                       "%globaltimer_lo": (10 * clock) & 0xFFFFFFFF}
            if o in special:
                return special[o] & ((1 << bits) - 1)
            return self.regs.get(o, 0) & ((1 << bits) - 1)
        if o in self.k.shared_symbols:
            return self.SHARED_BASE
        if o.startswith(("0f", "0F")):
            return struct.unpack("<I", bytes.fromhex(o[2:])[::-1])[0]
        return int(o, 0) & ((1 << bits) - 1)

    def address(self, operand: str) -> int:
        inner = operand.strip()[1:-1].strip()
        m = re.match(r"^([%$\w.]+)\s*(?:\+\s*(-?\d+))?$", inner)
        if not m:
            raise SimError(f"address {operand}")
        return self.value(m.group(1), 64) + int(m.group(2) or 0)

    def memory(self, space: str, addr: int, size: int) -> tuple[bytearray, int]:
        if space == "shared":
            off = addr - self.SHARED_BASE
            mem = self.shared
        else:
            off = addr - self.l.global_base
            mem = self.l.global_mem
        if off < 0 or off + size > len(mem):
            raise SimError(f"{space} access of {size} bytes at offset {off} outside 0..{len(mem)}")
        if off % size and size <= 8:
            raise SimError(f"misaligned {space} access of {size} bytes at offset {off}")
        return mem, off

    def set(self, reg: str, v: int, bits: int) -> None:
        self.regs[reg] = v & ((1 << bits) - 1)

    def run(self):
        """A generator: it yields at each ``bar.warp.sync`` and ends with the thread."""
        yield from self._run(self.k.body, self.k.labels, "kernel")

    def _call(self, ops: list[str]):
        """``call.uni f, (a, b, ...)``: f runs with registers of its own and the values stored
        in a, b, ... as its parameters."""
        func = self.k.funcs[ops[0]]
        args = [o.strip().strip("()").strip() for o in ops[1:]]
        saved = self.regs, self.incoming
        self.regs, self.incoming = {}, dict(zip(func.params, (self.outgoing[a] for a in args)))
        try:
            yield from self._run(func.body, func.labels, ops[0])
        finally:
            self.regs, self.incoming = saved

    def _run(self, body: list[tuple], labels: dict[str, int], where: str):
        pc, steps = 0, 0
        while pc < len(body):
            steps += 1
            if steps > self.l.max_steps:
                raise SimError("too many steps (a loop that does not end?)")
            neg, pred, op, ops, line = body[pc]
            key = (where, pc)
            self.fetched[key] = self.fetched.get(key, 0) + 1
            self.at = (where, pc, self.fetched[key])
            pc += 1
            self.clock += 1
            if pred is not None and bool(self.regs.get(pred, 0)) == neg:
                continue
            parts = op.split(".")
            name, types = parts[0], ["." + t for t in parts[1:]]
            bits = _bits(types)
            if name == "ret":
                return
            if name == "bra":
                pc = labels[ops[0]]
                continue
            if name == "call":
                yield from self._call(ops)
                continue
            if name == "st" and ".param" in types:
                self.outgoing[ops[0].strip()[1:-1]] = self.value(ops[1], 64)
                continue
            if name == "bar" and ".warp" in types:  # the warp's other lanes catch up (Kernel.run)
                yield
                continue
            if name in ("bar", "membar"):  # threads run one after another: ordered anyway
                continue
            if name == "ld" and ".param" in types:
                param = ops[1].strip()[1:-1]
                self.set(ops[0], self.incoming[param] if self.incoming is not None else self.l.params[param], 64)
                continue
            try:
                if name in ("st", "ld"):
                    self._memory_op(name, types, ops)
                    continue
                if name == "atom":
                    self._atomic(types, ops)
                    continue
                if name == "shfl":
                    self._shuffle(types, ops)
                    continue
                self._alu(name, types, bits, ops, line)
            except SimError as e:
                raise SimError(f"{e} (CTA {self.cta}, thread {self.tid}: {line})") from None
        raise SimError(f"fell off the end of the {where}")

    def _memory_op(self, name: str, types: list[str], ops: list[str]) -> None:
        space = "shared" if ".shared" in types else "global"
        vec = 2 if ".v2" in types else 4 if ".v4" in types else 1
        bits = _bits(types)
        size = bits // 8
        if name == "st":
            addr = self.address(ops[0])
            srcs = [s.strip() for s in ops[1].strip("{} ").split(",")] if vec > 1 else [ops[1]]
            mem, off = self.memory(space, addr, size * vec)
            for i, s in enumerate(srcs):
                mem[off + i * size:off + (i + 1) * size] = self.value(s, bits).to_bytes(size, "little")
        else:
            addr = self.address(ops[1])
            dsts = [s.strip() for s in ops[0].strip("{} ").split(",")] if vec > 1 else [ops[0]]
            mem, off = self.memory(space, addr, size * vec)
            for i, d in enumerate(dsts):
                self.set(d, int.from_bytes(mem[off + i * size:off + (i + 1) * size], "little"), bits)

    def _atomic(self, types: list[str], ops: list[str]) -> None:
        if ".add" not in types or ".global" not in types:
            raise SimError(f"atomic not simulated: atom{''.join(types)}")
        bits = _bits(types)
        size = bits // 8
        mem, off = self.memory("global", self.address(ops[1]), size)
        old = int.from_bytes(mem[off:off + size], "little")
        mem[off:off + size] = ((old + self.value(ops[2], bits)) & ((1 << bits) - 1)).to_bytes(size, "little")
        self.set(ops[0], old, bits)

    def _shuffle(self, types: list[str], ops: list[str]) -> None:
        if ".idx" not in types or ops[2].strip() != "0":
            raise SimError("only shfl.sync.idx from lane 0 is simulated")
        bits = _bits(types)
        log = self.warps.shuffles.setdefault(self.tid // 32, [])
        if self.tid % 32 == 0:
            log.append(self.value(ops[1], bits))
        if self.n_shuffles >= len(log):
            raise SimError("a lane shuffled more often than lane 0 of its warp (diverged)")
        self.set(ops[0], log[self.n_shuffles], bits)
        self.n_shuffles += 1

    def _alu(self, name: str, types: list[str], bits: int, ops: list[str], line: str) -> None:
        if name == "mov" and ops[0].startswith("{"):  # mov.b64 {%lo, %hi}, %d: the halves unpacked, low first
            x = self.value(ops[1], bits)
            for i, h in enumerate(ops[0].strip("{} ").split(",")):
                self.set(h.strip(), x >> (i * bits // 2), bits // 2)
            return
        if name == "mov" and ops[1].startswith("{"):  # mov.b64 %d, {%lo, %hi}: the halves packed, low first
            lo, hi = (self.value(h.strip(), bits // 2) for h in ops[1].strip("{} ").split(","))
            self.set(ops[0], lo | hi << (bits // 2), bits)
            return
        signed = any(t.startswith(".s") for t in types)
        v = [self.value(o, 64 if name in ("mad", "mul") and ".wide" in types else bits) for o in ops[1:]]
        sv = [_signed(x, bits) for x in v] if signed else v
        d = ops[0]
        if name == "mov":
            if ".pred" in types:
                self.regs[d] = bool(self.regs.get(ops[1], 0)) if ops[1].startswith("%") else bool(int(ops[1]))
                return
            self.set(d, v[0], bits)
        elif name in ("add", "sub"):
            self.set(d, sv[0] + sv[1] if name == "add" else sv[0] - sv[1], bits)
        elif name == "mul":
            if ".wide" in types:
                self.set(d, self.value(ops[1], bits) * self.value(ops[2], bits), 2 * bits)
            else:
                self.set(d, sv[0] * sv[1], bits)
        elif name == "mad":
            if ".wide" in types:
                self.set(d, self.value(ops[1], bits) * self.value(ops[2], bits) + self.value(ops[3], 2 * bits),
                         2 * bits)
            else:
                self.set(d, sv[0] * sv[1] + sv[2], bits)
        elif name == "rem":
            self.set(d, (abs(sv[0]) % abs(sv[1])) * (1 if sv[0] >= 0 else -1) if signed else v[0] % v[1], bits)
        elif name in ("min", "max"):
            self.set(d, (min if name == "min" else max)(sv[0], sv[1]), bits)
        elif name in ("and", "or", "xor"):
            self.set(d, {"and": v[0] & v[1], "or": v[0] | v[1], "xor": v[0] ^ v[1]}[name], bits)
        elif name == "shr":
            self.set(d, (sv[0] >> v[1]) if signed else v[0] >> v[1], bits)
        elif name == "shl":
            self.set(d, v[0] << v[1], bits)
        elif name == "cvt":
            dst_bits, src_bits = _WIDTH[types[-2][2:]], _WIDTH[types[-1][2:]]
            x = self.value(ops[1], src_bits)
            if types[-1].startswith(".s"):
                x = _signed(x, src_bits)
            self.set(d, x, dst_bits)
        elif name == "setp":
            cmp = types[0][1:]
            a, b = sv[0], sv[1]
            r = {"eq": a == b, "ne": a != b, "lt": a < b, "le": a <= b, "gt": a > b, "ge": a >= b}[cmp]
            if ".and" in types:
                r = r and bool(self.regs.get(ops[3].strip(), 0)) != ops[3].strip().startswith("!")
            self.regs[d] = r
        elif name == "selp":
            self.set(d, v[0] if self.regs.get(ops[3].strip(), 0) else v[1], bits)
        elif name == "fma":
            f = [struct.unpack("<f", self.value(o, 32).to_bytes(4, "little"))[0] for o in ops[1:]]
            self.set(d, struct.unpack("<I", struct.pack("<f", f[0] * f[1] + f[2]))[0], 32)
        else:
            raise SimError(f"instruction not simulated: {line}")
