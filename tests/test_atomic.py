"""minbert/atomic.py: a target is replaced whole or not at all, and gets the usual permissions."""
import os
import stat

import pytest

from minbert.atomic import atomic_path, write_text_atomic


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
