"""minbert/atomic.py: a target is replaced whole or not at all, gets the usual permissions, and a
signal waits until the write is done."""
import os
import signal
import stat

import pytest

from minbert.atomic import atomic_path, signals_deferred, write_text_atomic


def test_written_file_has_the_umask_permissions(tmp_path):
    old = os.umask(0o022)
    try:
        write_text_atomic(tmp_path / "a.txt", "hello")
    finally:
        os.umask(old)
    assert stat.S_IMODE((tmp_path / "a.txt").stat().st_mode) == 0o644
    assert (tmp_path / "a.txt").read_text() == "hello"


def test_a_failed_write_leaves_the_old_file_and_no_temporary(tmp_path):
    target = tmp_path / "b.txt"
    target.write_text("old")
    with pytest.raises(RuntimeError):
        with atomic_path(target) as tmp:
            tmp.write_text("half")
            raise RuntimeError("crash while writing")
    assert target.read_text() == "old" and [p.name for p in tmp_path.iterdir()] == ["b.txt"]


def test_signals_held_in_a_deferred_block_arrive_after_it_once_each(tmp_path):
    """Both signals, SIGTERM twice, sent inside a ``signals_deferred`` block (what ``atomic_path`` holds
    around its rename): nothing is raised there, the block ends, then the handlers that were installed
    before run once per signal, in arrival order. A write's body is not held (tests/test_reliability4.py)."""
    seen = []
    previous = {sig: signal.signal(sig, lambda signum, frame: seen.append(signum))
                for sig in (signal.SIGTERM, signal.SIGINT)}
    try:
        with signals_deferred():
            (tmp_path / "c.txt").write_text("first half ")
            os.kill(os.getpid(), signal.SIGTERM)
            os.kill(os.getpid(), signal.SIGINT)
            os.kill(os.getpid(), signal.SIGTERM)
            assert seen == []
            with open(tmp_path / "c.txt", "a") as f:
                f.write("second half")
        assert seen == [signal.SIGTERM, signal.SIGINT]
        assert (tmp_path / "c.txt").read_text() == "first half second half"
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def test_ctrl_c_in_a_deferred_block_raises_keyboard_interrupt_after_it():
    done = []
    with pytest.raises(KeyboardInterrupt):
        with signals_deferred():
            os.kill(os.getpid(), signal.SIGINT)
            done.append("the block ran to its end")
    assert done == ["the block ran to its end"]
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler


def test_a_signal_between_two_handler_swaps_leaves_every_handler_as_it_was(monkeypatch):
    """SIGTERM arrives after Ctrl-C's handler was replaced and before SIGTERM's: it raises at once,
    and Ctrl-C's own handler is back (it used to stay the deferring one, swallowing every later Ctrl-C)."""
    real_signal = signal.signal
    swaps = []

    def terminate_before_the_second_swap(sig, handler):
        swaps.append(sig)
        if len(swaps) == 2:
            signal.raise_signal(signal.SIGTERM)  # its handler runs inside raise_signal and raises
        return real_signal(sig, handler)

    def stop(signum, frame):
        raise RuntimeError("SIGTERM")

    previous_term = real_signal(signal.SIGTERM, stop)
    previous_int = signal.getsignal(signal.SIGINT)
    monkeypatch.setattr(signal, "signal", terminate_before_the_second_swap)
    try:
        with pytest.raises(RuntimeError, match="SIGTERM"):
            with signals_deferred():
                pytest.fail("the block must not start")
    finally:
        monkeypatch.undo()
        signal.signal(signal.SIGTERM, previous_term)
    assert swaps[:2] == [signal.SIGINT, signal.SIGTERM]
    assert signal.getsignal(signal.SIGINT) is previous_int


def test_a_signal_while_the_handlers_are_put_back_still_puts_back_the_others(monkeypatch):
    """A signal arrives just after the first handler is back, and that handler raises: every other
    handler is back too (it used to stay the deferring one, so every later signal of its kind was
    swallowed)."""
    real_signal = signal.signal

    def stop(signum, frame):
        raise RuntimeError(f"signal {signum}")

    previous = {sig: real_signal(sig, stop) for sig in (signal.SIGINT, signal.SIGTERM)}
    put_back = []

    def signal_after_the_first_put_back(sig, handler):
        installed = real_signal(sig, handler)
        if handler is stop:
            put_back.append(sig)
            if len(put_back) == 1:
                signal.raise_signal(sig)  # its handler, back now, raises inside raise_signal
        return installed

    monkeypatch.setattr(signal, "signal", signal_after_the_first_put_back)
    try:
        with pytest.raises(RuntimeError, match="signal"):
            with signals_deferred():
                pass
        assert sorted(put_back) == [signal.SIGINT, signal.SIGTERM]
        assert signal.getsignal(signal.SIGINT) is stop and signal.getsignal(signal.SIGTERM) is stop
    finally:
        monkeypatch.undo()
        for sig, handler in previous.items():
            signal.signal(sig, handler)
