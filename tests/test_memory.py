"""training/harness/memory.py: glibc accepts the malloc settings; a user's own MALLOC_* settings win."""
import platform

import pytest

from training.harness.memory import keep_freed_memory


@pytest.mark.skipif(platform.system() != "Linux" or platform.libc_ver()[0] != "glibc", reason="glibc only")
def test_glibc_accepts_the_settings():
    assert keep_freed_memory() is True   # mallopt returned 1 for every setting


def test_user_malloc_variables_are_left_alone(monkeypatch):
    monkeypatch.setenv("MALLOC_TRIM_THRESHOLD_", "0")
    assert keep_freed_memory() is False
