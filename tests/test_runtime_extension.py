"""The emitted file's build helper (runtime/extension.py): a failed build says why, whatever the cause."""
import pytest

from torchweld.emit.runtime import pasted


def _failing_build(message: str) -> str:
    """The message `_tw_build` raises when load_inline fails with `message`."""
    import ctypes
    import hashlib
    import inspect

    import torch
    from torch.utils import cpp_extension

    def load_inline(**kwargs):
        raise RuntimeError(message)

    scope = {"ctypes": ctypes, "hashlib": hashlib, "inspect": inspect, "torch": torch,
             "_CUDA_SRC": "// nothing", "_KERNEL_ARGS": {}}
    exec(pasted("extension").split("_LIB = ")[0], scope)  # NOTE: the helpers, not the build at import
    real = cpp_extension.load_inline
    cpp_extension.load_inline = load_inline
    try:
        with pytest.raises(RuntimeError) as failed:
            scope["_tw_build"]()
    finally:
        cpp_extension.load_inline = real
    return str(failed.value)


def test_compiler_errors_are_kept():
    msg = _failing_build("ninja: build stopped\nk.cu(3): error: identifier \"x\" is undefined\nmore noise")
    assert 'error: identifier "x" is undefined' in msg and "more noise" not in msg


def test_a_missing_toolkit_says_so():
    """No line holds "error": the cause is the message's last lines (it used to be dropped)."""
    msg = _failing_build("Could not find nvcc.\nCUDA_HOME environment variable is not set. Please set it.")
    assert "CUDA_HOME environment variable is not set" in msg and "Could not find nvcc" in msg
