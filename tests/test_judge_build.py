"""Build-error summaries from compiler logs, and kernel-name discovery in candidate sources."""
from pathlib import Path

import pytest

from torchweld.judge.build import BuildError, build_failure, import_candidate, kernel_names, summarize_build_log

GCC_LOG = """\
[1/3] c++ -MMD -MF main.o.d -DTORCH_EXTENSION_NAME=conv_transpose3d_cuda -c /root/.cache/torch_extensions/py312_cu130/conv_transpose3d_cuda/main.cpp -o main.o
FAILED: main.o
/root/.cache/torch_extensions/py312_cu130/conv_transpose3d_cuda/main.cpp: In function 'void pybind11_init_conv_transpose3d_cuda(pybind11::module_&)':
/root/.cache/torch_extensions/py312_cu130/conv_transpose3d_cuda/main.cpp:6:66: error: 'conv_transpose3d_forward' was not declared in this scope
    6 | m.def("conv_transpose3d_forward", torch::wrap_pybind_function(conv_transpose3d_forward), "conv_transpose3d_forward");
      |                                                                  ^~~~~~~~~~~~~~~~~~~~~~~~
ninja: build stopped: subcommand failed.
"""
NVCC_LOG = """\
[1/2] /usr/local/cuda/bin/nvcc -c /tmp/ext/cuda.cu -o cuda.cuda.o
FAILED: cuda.cuda.o
/tmp/ext/cuda.cu(12): error: identifier "blockDimx" is undefined
/tmp/ext/cuda.cu(30): error: no instance of overloaded function "foo" matches the argument list
2 errors detected in the compilation of "/tmp/ext/cuda.cu".
"""


def test_gcc_undeclared_function():
    ext, errors, names = summarize_build_log(GCC_LOG + "\nError building extension 'conv_transpose3d_cuda'")
    assert ext == "conv_transpose3d_cuda"
    assert errors == ["main.cpp:6: error: 'conv_transpose3d_forward' was not declared in this scope"]
    assert names == ["conv_transpose3d_forward"]


def test_nvcc_errors():
    _, errors, names = summarize_build_log(NVCC_LOG)
    assert errors[0] == 'cuda.cu:12: error: identifier "blockDimx" is undefined' and len(errors) == 2
    assert names == ["blockDimx"]


def test_failure_message_is_one_line_naming_the_function():
    e = build_failure(RuntimeError("Error building extension 'conv_transpose3d_cuda'"), GCC_LOG, 12.5)
    assert isinstance(e, BuildError) and "\n" not in e.message
    assert "conv_transpose3d_cuda" in e.message and "conv_transpose3d_forward" in e.message
    assert e.seconds == 12.5


def test_undefined_symbol_at_import():
    log = "ImportError: /x/ext.so: undefined symbol: _Z3fooi"
    _, errors, names = summarize_build_log(log)
    assert names and names[0] in ("foo(int)", "_Z3fooi") and "undefined symbol" in errors[0]


def test_import_candidate_errors(tmp_path):
    log = tmp_path / "build.log"
    with pytest.raises(BuildError, match="syntax error at line 1"):
        import_candidate(tmp_path / "c.py", "def f(:\n", log)
    with pytest.raises(BuildError, match="no class ModelNew"):
        import_candidate(tmp_path / "c.py", "x = 1\n", log)
    with pytest.raises(BuildError, match="import failed: ZeroDivisionError"):
        import_candidate(tmp_path / "c.py", "print('building'); 1 / 0\n", log)
    assert "building" in log.read_text()  # what the candidate printed went to the build log
    mod, secs = import_candidate(tmp_path / "c.py", "class ModelNew: pass\n", log)
    assert mod.ModelNew.__name__ == "ModelNew" and secs >= 0


def test_system_exit_in_candidate_is_a_failed_import(tmp_path):
    with pytest.raises(BuildError, match="SystemExit"):
        import_candidate(tmp_path / "c.py", "raise SystemExit(3)\n", tmp_path / "log")


def test_kernel_names():
    src = '''
    s = """
    template <typename scalar_t>
    __global__ void conv_kernel(const scalar_t* x) {}
    __global__ __launch_bounds__(256) void fused_kernel(float* y) {}
    extern "C" __global__ void raw_kernel() {}
    """
    @triton.jit
    def add_kernel(x_ptr):
        pass
    '''
    assert kernel_names(src) == {"conv_kernel", "fused_kernel", "raw_kernel", "add_kernel"}


def test_fixture_kernels():
    fix = Path(__file__).parent / "fixtures" / "judge"
    assert kernel_names((fix / "honest_relu_bias.py").read_text()) == {"relu_bias_kernel", "poke_kernel"}
    assert kernel_names((fix / "seed002_mended.py").read_text()) == {"conv_transpose3d_kernel"}


def test_gcc_unicode_quotes():
    log = ("/x/main.cpp:6:66: error: \u2018conv_transpose3d_forward\u2019 was not declared in this scope\n"
           "Error building extension 'conv_transpose3d_cuda'")
    ext, errors, names = summarize_build_log(log)
    assert names == ["conv_transpose3d_forward"] and errors[0].startswith("main.cpp:6: error:")


def test_failure_points_at_the_candidate_line(tmp_path):
    with pytest.raises(BuildError) as e:
        import_candidate(tmp_path / "c.py", "import torch\n\nx = {}['missing']\n", tmp_path / "log")
    assert "KeyError" in e.value.message
    assert "candidate line 3: x = {}['missing']" in e.value.details
