"""The stop's threads: every core this process may run on (at most 16) unless
PROTON_LITE_THREADS says otherwise, and both the decode and the trace writer take it."""
import os
from concurrent.futures import ThreadPoolExecutor

import pytest
from test_decode_memory import _lifetimes

import proton_lite.decode as D
from proton_lite.stop_threads import stop_threads
from proton_lite.trace import perfetto


def test_by_default_every_core_this_process_may_use_at_most_16(monkeypatch):
    monkeypatch.delenv("PROTON_LITE_THREADS", raising=False)
    assert stop_threads() == max(1, min(len(os.sched_getaffinity(0)), 16))


@pytest.mark.parametrize("raw, threads", [("3", 3), (" 5 ", 5), ("32", 32)])
def test_the_setting_is_taken_as_given(monkeypatch, raw, threads):
    monkeypatch.setenv("PROTON_LITE_THREADS", raw)
    assert stop_threads() == threads


@pytest.mark.parametrize("raw", ["0", "two", "-1", "1.5"])
def test_a_setting_that_is_not_a_count_is_an_error_that_names_it(monkeypatch, raw):
    monkeypatch.setenv("PROTON_LITE_THREADS", raw)
    with pytest.raises(ValueError, match=r"PROTON_LITE_THREADS must be a whole number of at least 1.*unset it"):
        stop_threads()


def test_the_decode_and_the_trace_writer_run_on_that_many_threads(tmp_path, monkeypatch):
    capture = _lifetimes(tmp_path / "t.plraw")  # 8 launches of 40 CTAs
    monkeypatch.setenv("PROTON_LITE_THREADS", "3")
    monkeypatch.setattr(D, "DECODE_WORKERS", None)
    monkeypatch.setattr(D, "BATCH_BYTES", 40 * 32)  # a batch per launch
    pools = []

    class Recorded(ThreadPoolExecutor):
        def __init__(self, max_workers=None, *args, **kwargs):
            pools.append(max_workers)
            super().__init__(max_workers, *args, **kwargs)
    monkeypatch.setattr(D, "ThreadPoolExecutor", Recorded)
    monkeypatch.setattr(perfetto, "ThreadPoolExecutor", Recorded)
    profile = D.decode(capture)
    assert pools == [3]
    perfetto.write_perfetto(profile, tmp_path / "t.pftrace")
    assert pools[1] == 3


def test_a_bad_setting_fails_at_start_not_at_stop(monkeypatch):
    """The setting is read when a session's options are made, so a bad value is an error at
    ``proton_lite.start()``'s line, not at stop after the run; a session that does not decode
    at stop does not read it."""
    from proton_lite.session import SessionOptions
    from proton_lite.stop_threads import SettingError
    monkeypatch.setenv("PROTON_LITE_THREADS", "lots")
    with pytest.raises(SettingError, match="PROTON_LITE_THREADS must be a whole number"):
        SessionOptions()
    SessionOptions(decode=False)


def test_the_cli_names_the_setting_not_a_broken_file(capsys, monkeypatch):
    """``proton-lite summary`` with a bad setting: one error line about the setting (the
    capture is fine), not "the file is corrupted"."""
    from pathlib import Path

    from proton_lite.viewer import cli
    monkeypatch.setenv("PROTON_LITE_THREADS", "0")
    capture = Path(__file__).parent / "data" / "matmul.plraw"
    rc = cli.main(["summary", str(capture)])
    err = capsys.readouterr().err.strip()
    assert rc == 2 and err.startswith("proton-lite: error: PROTON_LITE_THREADS must be a whole number"), err
    assert "corrupted" not in err and len(err.splitlines()) == 1


def test_merged_captures_share_the_threads_between_their_processes(tmp_path, monkeypatch):
    """Several captures decoded in processes of their own (pipeline.load_profiles): at most
    as many processes as the stop's threads, each decoding on its share, so that the setting
    bounds a merged stop too; what they decode is what one-by-one decoding gives."""
    import concurrent.futures

    import numpy as np

    from proton_lite import pipeline
    paths = [str(tmp_path / f"r{i}.plraw") for i in range(3)]
    for path in paths:
        _lifetimes(path)
    monkeypatch.setattr(pipeline, "PARALLEL_DECODE_BYTES", 0)
    monkeypatch.setenv("PROTON_LITE_THREADS", "5")
    pools = []

    class Recorded(concurrent.futures.ProcessPoolExecutor):
        def __init__(self, max_workers=None, *args, **kwargs):
            pools.append((max_workers, kwargs.get("initargs")))
            super().__init__(max_workers, *args, **kwargs)
    monkeypatch.setattr(concurrent.futures, "ProcessPoolExecutor", Recorded)
    merged = pipeline.load_profiles(paths)
    assert pools == [(3, (1, ))]  # 3 captures on 5 threads: 3 processes of 1 thread
    one_by_one = pipeline.load_profiles(paths, processes=1)
    assert len(pools) == 1
    for a, b in zip(merged, one_by_one):
        assert np.array_equal(a.ctas, b.ctas) and np.array_equal(a.launches, b.launches)
    monkeypatch.setenv("PROTON_LITE_THREADS", "8")
    pipeline.load_profiles(paths[:2])
    assert pools[-1] == (2, (4, ))
    monkeypatch.setenv("PROTON_LITE_THREADS", "1")  # one thread: decoded here, one after the other
    assert len(pipeline.load_profiles(paths)) == 3 and len(pools) == 2
    monkeypatch.setenv("PROTON_LITE_THREADS", "many")
    with pytest.raises(ValueError, match="PROTON_LITE_THREADS must be a whole number"):
        pipeline.load_profiles(paths)
    assert len(pools) == 2
