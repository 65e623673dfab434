"""torchweld: compile a PyTorch Model into a standalone fused-CUDA ModelNew, and judge any ModelNew."""
__version__ = "0.1.0"


def compile(module, example_inputs, **options):  # noqa: A001 (named as torch.compile)
    """`module` running fused kernels for inputs like `example_inputs`: see torchweld.api.compile."""
    from torchweld.api import compile as compile_module

    return compile_module(module, example_inputs, **options)


def compile_file(problem_path, out_path=None, **options):
    """Compile a problem file into its ModelNew file (default: `<stem>_new.py` beside it); the path written."""
    from torchweld.pipeline import Options, compile_file as compile_problem_file

    return compile_problem_file(problem_path, out_path, Options(**options))
