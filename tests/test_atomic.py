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


def test_sigterm_and_ctrl_c_during_a_write_arrive_after_it_once_each(tmp_path):
    """Both signals, SIGTERM twice, sent inside the block: nothing is raised there, the file is
    complete, then the handlers that were installed before run once per signal, in arrival order."""
    seen = []
    previous = {sig: signal.signal(sig, lambda signum, frame: seen.append(signum))
                for sig in (signal.SIGTERM, signal.SIGINT)}
    try:
        with atomic_path(tmp_path / "c.txt") as tmp:
            tmp.write_text("first half ")
            os.kill(os.getpid(), signal.SIGTERM)
            os.kill(os.getpid(), signal.SIGINT)
            os.kill(os.getpid(), signal.SIGTERM)
            assert seen == []
            with open(tmp, "a") as f:
                f.write("second half")
        assert seen == [signal.SIGTERM, signal.SIGINT]
        assert (tmp_path / "c.txt").read_text() == "first half second half"
        assert [p.name for p in tmp_path.iterdir()] == ["c.txt"]
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
