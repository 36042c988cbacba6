"""Shared fixtures. The tests run against the library named by
$ATTNHOST_LIB (CTest points it at build/lib/libattnhost.so, whose plugins
sit beside it); without it they look where the package does and skip when
no library is found."""

import os
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import attnhost  # noqa: E402


def pytest_configure(config):
    try:
        attnhost.library_path()
    except attnhost.LibraryNotFoundError as e:
        if os.environ.get("ATTNHOST_LIB"):
            raise
        pytest.exit(f"skipping the attnhost Python tests: {e}", returncode=0)


@pytest.fixture(scope="session")
def host():
    h = attnhost.Host(cache_path="")
    yield h
    h.close()


@pytest.fixture(scope="session")
def cpu_amx(host):
    p = host.plugin("cpu_amx")
    if p is None or not p.available:
        pytest.skip("the cpu_amx plugin is not built or not usable here")
    return p


def fp32_spec(**kw):
    base = dict(num_q_heads=4, num_kv_heads=2, head_size=32, dtype="fp32", block_size=16)
    base.update(kw)
    return attnhost.LayerSpec(**base)
