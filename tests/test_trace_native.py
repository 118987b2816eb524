"""The C event encoder (``trace/native_events.py``) writes exactly the numpy encoder's bytes.

Both paths run here: the C one as built at first use with Triton's compiler, the numpy one
with the module switched off; traces of several shapes must come out byte for byte the
same, deflated or not, in one batch per chunk or many, in one piece or many.
"""
import numpy as np
import pytest
from test_trace import _random_profile, big_profile, synthetic_profile

from proton_lite.trace import native_events
from proton_lite.trace.perfetto import write_perfetto


def _native_or_skip():
    if native_events.module() is None:
        pytest.skip(f"the C encoder did not build here: {native_events.error()}")


def _write(profile, path, monkeypatch, native: bool, compress: bool) -> bytes:
    if not native:
        monkeypatch.setattr(native_events, "module", lambda: None)
    write_perfetto(profile, path, compress=compress, workers=2)
    monkeypatch.undo()
    return path.read_bytes()


@pytest.mark.parametrize("compress", [True, False])
@pytest.mark.parametrize("small", [False, True])
def test_c_encoder_writes_the_numpy_encoders_bytes(tmp_path, monkeypatch, compress, small):
    _native_or_skip()
    import proton_lite.trace.perfetto_pieces as pp
    noted = synthetic_profile()  # notes on scopes (passes/pipelining.py): an extra annotation on BEGINs
    noted.kernels[0].meta["pipelined"] = [{"scope": "mma", "message": "scope 'mma': a note"}]
    noted.kernels[1].meta["pipelined"] = [{"scope": "consumer", "message": "scope 'consumer': another"}]
    profiles = [synthetic_profile(), noted, _random_profile(5), _random_profile(7),
                big_profile(n_ctas=300, warps=4, iters=3, sms=16, seed=1), big_profile(n_ctas=500, sms=20, seed=2)]
    for k, p in enumerate(profiles):
        if small:  # many pieces, many chunks per piece, many batches per chunk
            for name, value in (("PIECE", 64), ("CHUNK", 100), ("MAX_RAW_BATCH", 300)):
                monkeypatch.setattr(pp, name, value)
        c = _write(p, tmp_path / f"c{k}.pftrace", monkeypatch, True, compress)
        if small:
            for name, value in (("PIECE", 64), ("CHUNK", 100), ("MAX_RAW_BATCH", 300)):
                monkeypatch.setattr(pp, name, value)
        py = _write(p, tmp_path / f"py{k}.pftrace", monkeypatch, False, compress)
        assert len(c) > 1000 and c == py, f"profile {k}: {len(c)} vs {len(py)} bytes"


def test_c_encoder_refuses_events_of_no_interval():
    _native_or_skip()
    z = np.zeros(3, np.int64)
    with pytest.raises(IndexError, match="event of no interval"):
        native_events.encode(3, np.array([0, 5]), np.zeros(2, np.uint8), np.zeros(2, np.int64), z, z, z, z,
                             np.zeros(3, np.uint8), z, True, 1 << 20)
    with pytest.raises(ValueError, match="different lengths"):
        native_events.encode(3, np.array([0]), np.zeros(1, np.uint8), np.zeros(1, np.int64), z, z[:2], z, z,
                             np.zeros(3, np.uint8), z, True, 1 << 20)
