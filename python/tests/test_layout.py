"""The ctypes structures match the C headers: sizes and field offsets from
a C program compiled against them (built by CTest as attnhost_py_layout,
named by $ATTNHOST_LAYOUT_BIN); and model.DTYPES, indexed by ah_dtype
value, names each dtype as the C header does."""

import ctypes
import json
import os
import subprocess

import pytest

from attnhost import _ffi
from attnhost.model import DTYPES


def test_struct_layout():
    exe = os.environ.get("ATTNHOST_LAYOUT_BIN")
    if not exe or not os.path.exists(exe):
        pytest.skip("ATTNHOST_LAYOUT_BIN is not set (CTest builds and sets it)")
    want = json.loads(subprocess.run([exe], capture_output=True, text=True, check=True).stdout)
    assert tuple(want.pop("ah_dtype")) == DTYPES
    assert set(want) == set(_ffi.STRUCTS)
    for name, cls in _ffi.STRUCTS.items():
        got = {f[0]: getattr(cls, f[0]).offset for f in cls._fields_}
        assert got == want[name]["fields"], name
        assert ctypes.sizeof(cls) == want[name]["size"], name
