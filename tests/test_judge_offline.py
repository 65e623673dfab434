"""Build-only judging without a GPU: the recorded import, load_inline's layout, the compiler runs, the link check.

The compilers here are stand-ins (`sh`) or tiny C++ files; tests/test_judge_nogpu.py builds the seeds for real."""
import os
import shutil
import subprocess
import time
from pathlib import Path

import pytest
import torch.utils.cpp_extension as cpp_extension

from torchweld.judge import offline, symbols
from torchweld.judge.layout import command, write_units
from torchweld.judge.offline import piece_line
from torchweld.judge.record import Extension, Unbuilt, import_recorded, needs_gpu

CPP = "torch::Tensor twice(torch::Tensor x);\n"
CUDA = """
__global__ void twice_kernel(const float* x, float* y, long n) {
    long i = blockIdx.x * (long)blockDim.x + threadIdx.x;
    if (i < n) y[i] = 2.f * x[i];
}

torch::Tensor twice(torch::Tensor x) {
    auto y = torch::empty_like(x);
    twice_kernel<<<(x.numel() + 255) / 256, 256>>>(x.data_ptr<float>(), y.data_ptr<float>(), x.numel());
    return y;
}
"""
CANDIDATE = f'''import torch
from torch.utils.cpp_extension import load_inline

cuda_src = """{CUDA}"""
cpp_src = "{CPP.strip()}"

ext = load_inline(
    name="twice_ext",
    cpp_sources=[cpp_src],
    cuda_sources=cuda_src,
    functions=["twice"],
    extra_cuda_cflags=["-O3"],
)
twice = ext.twice  # taken at import, called in forward


class ModelNew(torch.nn.Module):
    def forward(self, x):
        return twice(x)
'''


def recorded(tmp_path, source=CANDIDATE):
    path = tmp_path / "cand.py"
    path.write_text(source)
    return import_recorded(path, source, tmp_path / "build.log")


def test_the_import_records_load_inline_and_builds_nothing(tmp_path):
    got = recorded(tmp_path)
    assert got.error is None and isinstance(got.module.ModelNew, type)
    (ext,) = got.extensions
    call = CANDIDATE.splitlines().index("ext = load_inline(") + 1
    assert (ext.kind, ext.name, ext.line) == ("load_inline", "twice_ext", call)
    assert ext.cpp_sources == (CPP.strip(),) and ext.cuda_sources == (CUDA,)
    assert ext.functions == (("twice", "twice"),) and ext.extra_cuda_cflags == ("-O3",) and ext.cuda
    assert isinstance(got.module.ext, Unbuilt)
    with pytest.raises(RuntimeError, match="not built"):
        got.module.twice(1)
    assert cpp_extension.load_inline.__module__ == "torch.utils.cpp_extension"  # put back after the import


def test_load_records_its_files(tmp_path):
    source = ("import torch.utils.cpp_extension as ce\nm = ce.load('ext2', sources=['a.cpp', 'k.cu'])\n"
              "class ModelNew:\n    pass\n")
    (ext,) = recorded(tmp_path, source).extensions
    assert ext.kind == "load" and ext.files == (os.path.abspath("a.cpp"), os.path.abspath("k.cu")) and ext.cuda


def test_what_only_says_there_is_no_gpu():
    assert needs_gpu(AssertionError("Torch not compiled with CUDA enabled"))
    assert needs_gpu(RuntimeError("Found no NVIDIA driver on your system."))
    assert needs_gpu(ModuleNotFoundError("No module named 'triton'"))
    assert needs_gpu(NameError("name 'fused_cuda' is not defined")) is None
    assert needs_gpu(ZeroDivisionError("division by zero")) is None


def test_main_cpp_and_cuda_cu_are_what_load_inline_writes(tmp_path, monkeypatch):
    """torch's own load_inline lays the files out (its compile step stubbed); ours must match byte for byte."""
    monkeypatch.setattr(cpp_extension, "_jit_compile", lambda *a, **k: None)
    theirs = tmp_path / "theirs"
    theirs.mkdir()
    for handling in (True, False):
        cpp_extension.load_inline("twice_ext", [CPP, "// second piece\n"], CUDA, functions={"twice": "doc"},
                                  build_directory=str(theirs), with_pytorch_error_handling=handling)
        ext = Extension("load_inline", "twice_ext", 1, (CPP, "// second piece\n"), (CUDA,), (("twice", "doc"),),
                        error_handling=handling)
        units = write_units(ext, tmp_path / f"ours{handling}")
        assert [u.name for u in units] == ["main.cpp", "cuda.cu"]
        for u in units:
            assert u.path.read_text() == (theirs / u.name).read_text()
    main, cu = units
    assert main.origin(1) is None  # #include <torch/extension.h>
    assert main.origin(2) == ("cpp_sources", 0, 0) and main.origin(4) == ("cpp_sources", 1, 0)
    assert main.origin(7) == ("functions", "twice")
    assert cu.origin(4) == ("cuda_sources", 0, 0) and cu.origin(6) == ("cuda_sources", 0, 2)


def test_commands_follow_torchs_build(tmp_path):
    ext = Extension("load_inline", "twice_ext", 1, (CPP,), (CUDA,), (("twice", "twice"),),
                    extra_cflags=("-O3",), extra_cuda_cflags=("-O3",))
    main, cu = write_units(ext, tmp_path)
    cxx = command(ext, main, tmp_path / "main.o")
    if cxx is not None:
        assert "-DTORCH_EXTENSION_NAME=twice_ext" in cxx and "-std=c++20" in cxx
        assert cxx.index("-O3") < cxx.index("-O0")  # ours last: checking needs no optimised code
        assert cpp_extension.include_paths()[0] in cxx
    nvcc = command(ext, cu, tmp_path / "cuda.o")
    if nvcc is not None:
        assert "-gencode=arch=compute_90,code=sm_90" in nvcc and "--expt-relaxed-constexpr" in nvcc
        own = Extension("load_inline", "x", 1, (CPP,), (CUDA,), extra_cuda_cflags=("-arch=sm_80",))
        assert "-gencode=arch=compute_90,code=sm_90" not in command(own, cu, tmp_path / "c.o")


def test_the_line_a_source_string_came_from():
    source = 'a = 1\nsrc = """\nint f();\nint g();\n"""\n'
    assert piece_line(source, "\nint f();\nint g();\n", 2) == 4
    # a string with escapes is not in the file verbatim: its line's text still finds it, if unique
    escaped = 's = """\nprintf("a\\n");\n  int h(); // x\n"""\n'
    assert piece_line(escaped, '\nprintf("a\n");\n  int h(); // x\n', 3) == 3
    assert piece_line('s = "int h();\\n"\n', "int h();\n", 0) is None


def fake_compilers(monkeypatch, scripts: dict):
    """The compiler for each file is a shell script (by unit name)."""
    monkeypatch.setattr(offline, "command", lambda ext, unit, obj: ["sh", "-c", scripts[unit.name], str(obj)])


def test_the_first_failure_stops_the_other_compiler(tmp_path, monkeypatch):
    fake_compilers(monkeypatch, {"main.cpp": "sleep 1; echo 'main.cpp:2:5: error: boom'; exit 1",
                                 "cuda.cu": "sleep 60"})
    ext = Extension("load_inline", "e", 5, (CPP,), (CUDA,), (("twice", "twice"),))
    source = f'cpp = """{CPP}"""\n'
    t0 = time.monotonic()
    built = offline.build(ext, source, tmp_path, time.monotonic() + 120)
    assert time.monotonic() - t0 < 30
    assert [s.status for s in built.steps] == ["failed", "stopped"]
    assert built.error == "extension e failed to build: main.cpp:2: error: boom"
    assert built.details[0] == 'main.cpp:2 is line 1 of cpp_sources[0]: candidate line 1: cpp = """' + CPP.strip()


def test_the_deadline_kills_the_compilers_and_what_they_started(tmp_path, monkeypatch):
    pid_file = tmp_path / "grandchild.pid"
    fake_compilers(monkeypatch, {"main.cpp": f"sleep 60 & echo $! > {pid_file}; wait", "cuda.cu": "sleep 60"})
    ext = Extension("load_inline", "e", 5, (CPP,), (CUDA,))
    built = offline.build(ext, "", tmp_path, time.monotonic() + 1.0)
    assert built.timed_out and [s.status for s in built.steps] == ["timeout", "timeout"]
    assert "did not finish in time" in built.error
    pid = int(pid_file.read_text())
    for _ in range(50):
        if not Path(f"/proc/{pid}").exists() or " Z " in Path(f"/proc/{pid}/stat").read_text():
            break
        time.sleep(0.1)
    else:
        pytest.fail("a process the compiler started outlived the deadline")


@pytest.mark.skipif(not (shutil.which("c++") and shutil.which("nm")), reason="needs a C++ compiler and nm")
def test_a_declaration_no_file_defines_is_a_link_error(tmp_path):
    (tmp_path / "main.cpp").write_text("int scale(int x, float s);\nint use() { return scale(1, 2.f); }\n")
    (tmp_path / "cuda.cpp").write_text("int scale(int x, double s) { return x * s; }\n")
    for name in ("main", "cuda"):
        subprocess.run(["c++", "-c", f"{name}.cpp", "-o", f"{name}.o"], cwd=tmp_path, check=True)
    objects = [("main.cpp", tmp_path / "main.o"), ("cuda.cu", tmp_path / "cuda.o")]
    (line,) = symbols.unresolved(objects, "int scale(int x, float s);")
    assert line.startswith("main.cpp calls scale(int, float), which no file defines")
    assert line.endswith("cuda.cu defines scale(int, double)")
    assert symbols.unresolved(objects, "no such name here") == []  # not the candidate's: the libraries'


def test_a_missing_compiler_is_said_not_taken_for_the_candidates_fault(tmp_path, monkeypatch):
    monkeypatch.setattr(offline, "command", lambda ext, unit, obj: None if unit.cuda else ["true"])
    ext = Extension("load_inline", "e", 5, (CPP,), (CUDA,))
    built = offline.build(ext, "", tmp_path, time.monotonic() + 60)
    assert built.error is None and [s.status for s in built.steps] == ["ok", "missing"]
    assert offline._said([built], "", None) == ["partly builds", "cuda.cu not compiled: no nvcc here"]
