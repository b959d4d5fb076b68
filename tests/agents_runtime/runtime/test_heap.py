"""Freed memory is given back to the system after the snapshot writer's
large copies (glibc's malloc_trim, where there is one)."""

from __future__ import annotations

import platform

import pytest

from agents_runtime.runtime.heap import give_back


@pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="malloc_trim is glibc's")
def test_the_heap_is_trimmed_on_glibc() -> None:
    assert give_back() is True
