"""The CPU emulator for every kernel kind: an emitted ModelNew whose CUDA source g++ builds against
tests/emu/ (each block's threads are fibers that switch at __syncthreads and warp shuffles), its
wrappers fed CPU tensors. Exact enough to check index math, block reductions, barriers and NaN/inf
rules without a GPU.

Every value a kernel should not read is poison (0xff bytes: NaN in any float type): a tensor from
torch.empty*, a `__shared__` array at the start of each block, the bytes around each launch's copy
of its operands; pages past those copies are unmapped. An element read before it is written, or
just outside its tensor, is NaN in whatever it reaches; a write outside, or a read further out,
fails the launch.
"""
from __future__ import annotations

import atexit
import ctypes
import hashlib
import mmap
import re
import shutil
import subprocess
import tempfile
import types
from pathlib import Path

import torch

from torchweld.emit.repeats import repeats
from torchweld.pipeline import compile_problem
from torchweld.problem import load_module, load_problem

EMU = Path(__file__).parent / "emu"
GXX = shutil.which("g++")
# NOTE: -fno-gnu-unique: each library keeps its own statics (the dynamic linker shares GNU-unique ones)
FLAGS = ["-std=c++20", "-O1", "-fno-strict-aliasing", "-fno-gnu-unique", "-shared", "-fPIC", "-w"]
_LAUNCH = re.compile(r"(\w+)(<\d+>)?<<<([^,]+), ([^,]+), 0, [^>]+>>>\((.*)\);")
_BOUNDS = re.compile(r"__launch_bounds__\((\d+)\)\s+(\w+)\(")
_SHARED = re.compile(r"__shared__ ((?:__align__\(\d+\) )?\w+) (\w+)((?:\[[^\]]+\])+);")
_CACHE = Path(tempfile.mkdtemp(prefix="tw_emu_"))  # NOTE: one build per source for the whole session
atexit.register(shutil.rmtree, _CACHE, True)


def emu_source(cuda: str) -> str:
    """The CUDA source with each `k<<<blocks, threads, 0, stream>>>(args)` an emulated launch (checked
    against the kernel's __launch_bounds__) and each `__shared__` array poisoned at a block's start."""
    bounds = {name: int(n) for n, name in _BOUNDS.findall(cuda)}

    def launch(m):
        name, targs, blocks, threads, args = m[1], m[2] or "", m[3], m[4], m[5]
        return (f'tw_emu::launch("{name}{targs}", {bounds.get(name, 1024)}u, {blocks}, {threads}, '
                f'[&] {{ {name}{targs}({args}); }});')

    def shared(m):
        return (f"__shared__ {m[1]} {m[2]}{m[3]}; static unsigned long {m[2]}_tw_stamp; "
                f"tw_emu::fresh({m[2]}, sizeof({m[2]}), {m[2]}_tw_stamp);")

    src = _SHARED.sub(shared, _LAUNCH.sub(launch, cuda))
    if "<<<" in src or src.count("__shared__") != src.count("tw_emu::fresh("):
        raise ValueError("the emulator does not know a launch or `__shared__` form of this source")
    return src


def build(cuda: str, *flags: str) -> ctypes.CDLL:
    """The emulated library of a CUDA source (built once per content and flags for the session)."""
    src = emu_source(cuda)
    key = hashlib.sha256("\n".join([src, (EMU / "cuda_runtime.h").read_text(), *flags]).encode()).hexdigest()[:16]
    lib = _CACHE / f"emu_{key}.so"
    if not lib.exists():
        cc = lib.with_suffix(".cc")
        cc.write_text(src)
        tmp = lib.with_suffix(".tmp")
        proc = subprocess.run([GXX, *FLAGS, *flags, f"-I{EMU}", str(cc), "-o", str(tmp)], capture_output=True, text=True)
        if proc.returncode:
            raise RuntimeError(f"g++ failed on {cc}:\n{proc.stderr[-3000:]}")
        tmp.rename(lib)
    return ctypes.CDLL(str(lib))


def emulated_model(problem_path: Path, workdir: Path | None = None, vec: bool = True):
    """(ModelNew class running on the emulator, the compile result); vec=False: the scalar builds."""
    return emulate(compile_problem(load_problem(problem_path)), workdir, vec)


def emulate(result, workdir: Path | None = None, vec: bool = True):
    """emulated_model for a problem already compiled (`result`: what compile_problem returned)."""
    src = result.source
    src = src.replace("_LIB = _tw_build() if torch.cuda.is_available() else None", "_LIB = None")
    src = re.sub(r" or not \w+\.is_cuda", "", src)
    src = re.sub(r" or \w+\.get_device\(\) != torch\.cuda\.current_device\(\)", "", src)
    src = src.replace(" or not all(t.is_cuda for t in tensors)", "")  # runtime/shape_note.py's autograd note
    src = src.replace('if dev.type == "cuda" and dev.index != torch.cuda.current_device():', "if False:")
    # the launchers get the tensors themselves, so that each launch can run on guarded copies
    src = re.sub(r"_LIB\.tw_launch_\w+\(.*", lambda m: re.sub(r"(\w+)\.data_ptr\(\)(?=[,)])", r"\1", m[0]), src)
    workdir = Path(workdir or tempfile.mkdtemp())
    path = workdir / f"{result.problem.path.stem}_emu.py"
    path.write_text(src)
    module = load_module(path, src, prefix="tw_emu")
    module._LIB = Launchers(build(module._CUDA_SRC), module._KERNEL_ARGS, vec)
    module._tw_stream = lambda dev: None
    module.torch = poisoned_torch()
    return module.ModelNew, result


def poisoned_torch() -> types.ModuleType:
    """torch, its empty tensors filled with 0xff bytes (True for bool)."""
    def poisoned(make):
        def fn(*args, **kwargs):
            t = make(*args, **kwargs)
            s = t.untyped_storage()
            ctypes.memset(s.data_ptr(), 1 if t.dtype == torch.bool else 0xFF, s.nbytes())
            return t
        return staticmethod(fn)

    class Poisoned(types.ModuleType):
        empty, empty_like, empty_strided = map(poisoned, (torch.empty, torch.empty_like, torch.empty_strided))

        def __getattr__(self, name):
            return getattr(torch, name)

    return Poisoned("torch")


class Launchers:
    """The emulated library as the emitted file calls it; records each launch by kernel name in
    `launched`, and with vec=False passes 0 as every launch's vector flag (the scalar builds)."""

    def __init__(self, lib: ctypes.CDLL, kernels: dict[str, int], vec: bool):
        lib.tw_error_string.argtypes, lib.tw_error_string.restype = [ctypes.c_int], ctypes.c_char_p
        self.tw_error_string, self.launched = lib.tw_error_string, []
        for kernel, n_ptrs in kernels.items():
            fn = getattr(lib, "tw_launch_" + kernel)
            fn.argtypes = [ctypes.c_void_p] * n_ptrs + [ctypes.c_int, ctypes.c_void_p]
            fn.restype = ctypes.c_int
            setattr(self, "tw_launch_" + kernel, self._guarded(kernel, fn, vec))

    def _guarded(self, kernel, fn, vec):
        def launch(*args):
            self.launched.append(kernel)
            *operands, flag, stream = args
            tensors = [t for t in operands if isinstance(t, torch.Tensor)]
            # NOTE: an int is a size passed by value (a runtime batch's element count), not an operand
            assert all(isinstance(t, (torch.Tensor, int)) for t in operands), f"{kernel}: an operand is not a tensor"
            spans: dict[int, list[int]] = {}
            for t in tensors:
                if t.numel():
                    lo, hi = _extent(t)
                    span = spans.setdefault(t.untyped_storage().data_ptr(), [lo, hi])
                    span[:] = min(span[0], lo), max(span[1], hi)
            copies = {key: Guarded(lo, hi) for key, (lo, hi) in spans.items()}
            ptrs = [t if isinstance(t, int) else copies[t.untyped_storage().data_ptr()].at(t.data_ptr()) if t.numel()
                    else None for t in operands]
            try:
                err = fn(*ptrs, flag if vec else 0, stream)
            finally:
                spilled = [c.close() for c in copies.values()]
            assert not any(spilled), f"{kernel} wrote outside its operands: {[s for s in spilled if s]}"
            return err
        return launch


def _extent(t: torch.Tensor) -> tuple[int, int]:
    """The bytes [lo, hi) of host memory that a tensor's elements span."""
    low = sum((n - 1) * s for n, s in zip(t.shape, t.stride()) if s < 0)
    high = sum((n - 1) * s for n, s in zip(t.shape, t.stride()) if s > 0)
    return t.data_ptr() + low * t.element_size(), t.data_ptr() + (high + 1) * t.element_size()


_LIBC = ctypes.CDLL(None)
_LIBC.mmap.restype, _LIBC.mmap.argtypes = ctypes.c_void_p, [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int,
                                                            ctypes.c_int, ctypes.c_int, ctypes.c_long]
_LIBC.munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
_LIBC.mprotect.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
PAGE = mmap.PAGESIZE


class Guarded:
    """A copy of host bytes [lo, hi) that ends as near an unmapped page as its alignment (that of lo
    modulo 64, which vector flags were decided by) allows, with poison before it back to another."""

    def __init__(self, lo: int, hi: int):
        self.lo, self.n = lo, hi - lo
        body = -(-(self.n + 64) // PAGE) * PAGE
        self.size = body + 2 * PAGE
        self.base = _LIBC.mmap(None, self.size, mmap.PROT_READ | mmap.PROT_WRITE,
                               mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS, -1, 0)
        assert self.base not in (None, ctypes.c_void_p(-1).value), "mmap failed"
        self.first, self.end = self.base + PAGE, self.base + PAGE + body
        self.start = (self.end - self.n - lo % 64) // 64 * 64 + lo % 64
        ctypes.memset(self.first, 0xFF, body)
        ctypes.memmove(self.start, lo, self.n)
        _LIBC.mprotect(self.base, PAGE, 0)  # PROT_NONE
        _LIBC.mprotect(self.end, PAGE, 0)

    def at(self, address: int) -> int:
        return self.start + (address - self.lo)

    def close(self) -> str:
        """Copies the bytes back and unmaps; where poison was overwritten, says where."""
        before = ctypes.string_at(self.first, self.start - self.first)
        after = ctypes.string_at(self.start + self.n, self.end - self.start - self.n)
        ctypes.memmove(self.lo, self.start, self.n)
        _LIBC.munmap(self.base, self.size)
        bad = [f"byte {i - len(before)} of {self.n}" for i, b in enumerate(before) if b != 0xFF][:1]
        bad += [f"byte {self.n + i} of {self.n}" for i, b in enumerate(after) if b != 0xFF][:1]
        return ", ".join(bad)


def launching(plan) -> set[str]:
    """The kernels a call through the fast path launches: each, but one whose code repeats another's
    launches that one (emit/repeats.py)."""
    same = repeats(plan)
    return {k.name for k in plan.kernels if k.name not in same}


def mismatch(got: torch.Tensor, want: torch.Tensor, rtol: float, atol: float | None = None) -> str:
    """'' where `got` is `want` (shape and dtype equal, floats within tolerance and NaN where it has
    NaN, other dtypes exactly); else the first places that differ, with both values."""
    if got.shape != want.shape or got.dtype != want.dtype:
        return f"{tuple(got.shape)} {got.dtype}, want {tuple(want.shape)} {want.dtype}"
    g, w = got.double(), want.double()
    close = torch.isclose(g, w, rtol=rtol, atol=rtol if atol is None else atol, equal_nan=True) \
        if want.is_floating_point() else g == w
    if close.all():
        return ""
    where = (~close).nonzero()[:3].tolist()
    return f"at {where} got {[g[tuple(i)].item() for i in where]}, want {[w[tuple(i)].item() for i in where]}"


def force_conv_layout(model, channels_last: bool) -> None:
    """Make every `_tw_conv` site of an emulated ModelNew run channels-last (channels_last_3d for a
    3-d convolution), or as the original does, without measuring (which needs a GPU)."""
    def pick(x, w, args, fmt, to):
        return ((fmt if channels_last else None), False), []

    type(model).forward.__globals__["_tw_pick"] = pick
    model.__dict__.pop("_tw_conv_plans", None)
    model.__dict__.pop("_tw_conv_packed", None)


def write_problem(tmp: Path, name: str, body: str) -> Path:
    path = tmp / f"{name}.py"
    path.write_text(body)
    return path


def one_input_problem(tmp: Path, name: str, body: str, init: str, inputs: str) -> Path:
    """A problem file whose Model has constructor line `init`, returns `body` of its one input x, and takes `inputs`."""
    return write_problem(tmp, name, f"""import torch


class Model(torch.nn.Module):
    def __init__(self):
        super().__init__()
        {init}

    def forward(self, x):
        return {body}


def get_inputs():
    return [{inputs}]


def get_init_inputs():
    return []
""")


def reference_and_new(problem_path: Path, new_cls, seed: int = 0):
    """(the problem's Model, new_cls() holding its weights), both built after torch.manual_seed(seed)."""
    namespace: dict = {}
    exec(problem_path.read_text(), namespace)
    torch.manual_seed(seed)
    ref = namespace["Model"]()
    new = new_cls()
    new.load_state_dict(ref.state_dict())
    return ref, new
