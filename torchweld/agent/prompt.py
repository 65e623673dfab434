"""What the model is asked: the task, the problem's source, the output contract, and where to start from."""
from __future__ import annotations

import hashlib
from dataclasses import dataclass

SYSTEM = """\
You are an expert in CUDA and PyTorch. You make PyTorch models faster by writing custom CUDA kernels, and you \
answer with complete, working Python files."""

CONTRACT = """\
What your answer must be:
- One complete Python file in a single ```python fenced block: imports, the CUDA source, and `class ModelNew`. \
Nothing else is run, so no test code and no `get_inputs` is needed.
- `ModelNew(nn.Module)` takes exactly the constructor arguments `Model` takes and creates the same parameters \
and buffers, with the same names and shapes, so that `ModelNew(*args).load_state_dict(Model(*args).state_dict())` \
works. Its `forward` takes the same inputs and returns the same outputs (same shapes and dtypes).
- The speed-up comes from your own CUDA kernels, built with `torch.utils.cpp_extension.load_inline` when the \
file is imported. Every host function named in `functions=[...]` must be declared in `cpp_sources` (the \
bindings are generated into a C++ file that sees only `cpp_sources`); the definitions go in `cuda_sources`. \
Library calls (cuBLAS, cuDNN through PyTorch) may stay where you cannot beat them: fuse the work around them.
- Numerics: fp32 stays fp32 (no TF32, no half precision unless the model uses it); the answer is compared \
with the original in float64 on fresh random inputs.
- It must be right for every valid input, not only the example sizes: other batch and spatial sizes, and \
other values of constructor arguments such as stride, padding, kernel size and groups, are tested too. Fall \
back to a general path where a specialised kernel does not apply.
- Honest speed only: compute the result on every call, on the current CUDA stream; no caching of outputs or \
inputs, no side streams or threads, no changes to global settings or to the timer.

I will build and run your file, check it, and time it against eager PyTorch and torch.compile. Then I will \
tell you exactly what happened: the compiler errors, the wrong outputs, the checks that fired, or the times."""

BLANK = """\
Write `ModelNew`, a faster replacement for the PyTorch `Model` below, using custom CUDA kernels. Think \
about which operators to fuse into one kernel and which to leave to a library, then write the code.

```python
{source}
```

{contract}"""

COMPILED = """\
Write `ModelNew`, a faster replacement for the PyTorch `Model` below, using custom CUDA kernels.

```python
{source}
```

A compiler (torchweld) has already written a correct `ModelNew` for it. Its kernel plan (one call per fused \
kernel, the operators it holds as comments underneath; `[library]` runs in cuBLAS or cuDNN):

```
{plan}
```

Its file:

```python
{compiled}
```

Beat it: find what it leaves on the table (a library call it could fuse into, a better tiling, fewer passes \
over memory) and write a faster `ModelNew`. You may start from its code.

{contract}"""

AGAIN = "Reply with the complete corrected file in one ```python block."
FASTER = "Make it faster, and keep it correct. Reply with the complete file in one ```python block."


@dataclass(frozen=True)
class Start:
    """Where the first prompt starts from: nothing, or torchweld's own ModelNew and its plan."""

    compiled: str | None = None  # the compiled ModelNew's source
    plan: str | None = None  # its kernel plan as `torchweld explain` prints it, or why there is none


def first_prompt(problem_source: str, start: Start = Start()) -> str:
    """The opening user message."""
    source = problem_source.strip()
    if start.compiled is None:
        return BLANK.format(source=source, contract=CONTRACT)
    return COMPILED.format(source=source, plan=(start.plan or "(no plan)").strip(), compiled=start.compiled.strip(),
                           contract=CONTRACT)


def messages_for(first: str) -> list[dict]:
    """The conversation's opening: the system message and the first prompt."""
    return [{"role": "system", "content": SYSTEM}, {"role": "user", "content": first}]


def compiled_start(problem) -> Start:
    """torchweld's ModelNew for `problem` and its kernel plan (a passthrough file and its reason if it fails)."""
    from torchweld.pipeline import compile_problem, compile_source
    from torchweld.plan import describe
    from torchweld.problem import ProblemError

    try:
        result = compile_problem(problem)
        return Start(compiled=result.source, plan=describe(result.plan))
    except ProblemError:
        raise
    except Exception:  # noqa: BLE001 - the compiler could not handle it: start from its passthrough file
        source, reason = compile_source(problem)
        return Start(compiled=source, plan=f"(nothing fused: {reason})")


def prompt_version() -> str:
    """A hash of every prompt text: a resumed conversation continues only under the same prompts."""
    text = "\x00".join((SYSTEM, CONTRACT, BLANK, COMPILED, AGAIN, FASTER))
    return hashlib.sha256(text.encode()).hexdigest()[:12]
