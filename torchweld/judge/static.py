"""Static checks (AST and text) on a candidate: evidence with line numbers; the runtime checks decide."""
from __future__ import annotations

import ast
import re
from dataclasses import asdict, dataclass

_STREAM_NAMES = ("torch.cuda.Stream", "torch.cuda.stream", "torch.cuda.streams.Stream", "torch.cuda.ExternalStream",
                 "torch.cuda.set_stream")
_CONCURRENCY_MODULES = ("threading", "multiprocessing", "concurrent", "_thread", "subprocess", "asyncio")
_TIMER_PREFIXES = ("time.", "torch.cuda.Event", "torch.cuda.synchronize", "torch.cuda.current_stream",
                   "torch.cuda.Stream", "torch.cuda.streams", "torch._C._cuda_synchronize", "torch.cuda.Event.elapsed_time")
_JUDGE_PREFIXES = ("torch.allclose", "torch.isclose", "torch.equal", "torch.testing", "torch.Tensor.", "builtins.",
                   "torch.cuda.memory", "torch.profiler", "torch.autograd.profiler", "threading.active_count")
_RNG_PREFIXES = ("torch.rand", "torch.randn", "torch.randint", "torch.normal", "torch.manual_seed", "torch.seed",
                 "torch.random.", "torch.default_generator", "torch.Tensor.normal_", "torch.Tensor.uniform_",
                 "random.", "numpy.random.")
# Reaching into the judge's process: the reference through gc, the caller's frames, every module's calls.
_INTROSPECTION = ("gc.get_objects", "gc.get_referrers", "gc.get_referents", "sys._getframe", "inspect.stack",
                  "inspect.currentframe", "inspect.getouterframes", "traceback.extract_stack")
_GLOBAL_HOOKS = ("register_module_forward_hook", "register_module_forward_pre_hook",
                 "register_module_full_backward_hook")
_PRECISION_FLAGS = ("allow_tf32", "allow_fp16_reduced_precision_reduction", "allow_bf16_reduced_precision_reduction")
_HALF_CALLS = ("half", "bfloat16")
_HALF_DTYPES = ("torch.float16", "torch.half", "torch.bfloat16")
_FUNCTIONAL = ("torch.nn.functional.", "torch.")

# Text rules run over the whole source, CUDA strings included: (rule, pattern, what it means).
_TEXT_RULES = [
    ("other_stream", r"\bcudaStreamCreate\w*|\bgetStreamFromPool\b|\bcudaStreamNonBlocking\b", "creates or uses another CUDA stream"),
    ("concurrency", r"\bstd::thread\b|\bpthread_create\b|\bstd::async\b|\bfork\s*\(", "starts host threads or processes"),
    ("tensor_subclass", r"__torch_function__|__torch_dispatch__|_make_subclass|_make_wrapper_subclass",
     "defines a tensor subclass (lazy or fake results)"),
    ("half_cast", r"\b__half2?\b|__float2half|__nv_bfloat16|\bwmma::|mma\.sync", "computes in 16-bit or TF32 inside CUDA"),
    ("verdict_write", r"result\.json|torchweld-judge-", "names the judge's result file or its temporary folder"),
    ("introspection", r"\.f_locals\b|\.f_back\b|\.f_globals\b", "reads the caller's frames"),
]


@dataclass(frozen=True)
class Finding:
    rule: str
    line: int
    text: str

    def to_dict(self) -> dict:
        return asdict(self)


def _dotted(node) -> str | None:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        base = _dotted(node.value)
        return f"{base}.{node.attr}" if base else None
    return None


class _Scan(ast.NodeVisitor):
    """One pass over the candidate's AST, resolving import aliases to full dotted names."""

    def __init__(self, ref_ops: set[str], fp32: bool):
        self.aliases: dict[str, str] = {}
        self.found: list[Finding] = []
        self.ref_ops, self.fp32 = ref_ops, fp32
        self.in_modelnew = False
        self.in_forward = False

    def add(self, rule, node, text):
        self.found.append(Finding(rule, getattr(node, "lineno", 0), text))

    def name(self, node) -> str | None:
        d = _dotted(node)
        if d is None:
            return None
        head, _, rest = d.partition(".")
        full = self.aliases.get(head, head)
        return f"{full}.{rest}" if rest else full

    def visit_Import(self, node):
        for a in node.names:
            self.aliases[a.asname or a.name.split(".")[0]] = a.name if a.asname else a.name.split(".")[0]
            self._module(node, a.name)

    def visit_ImportFrom(self, node):
        mod = node.module or ""
        for a in node.names:
            self.aliases[a.asname or a.name] = f"{mod}.{a.name}" if mod else a.name
        self._module(node, mod)

    def _module(self, node, mod):
        if mod.split(".")[0] in _CONCURRENCY_MODULES:
            self.add("concurrency", node, f"imports {mod}")
        if mod.split(".")[0] == "torchweld":
            self.add("judge_patch", node, f"imports the judge's own {mod}")

    def visit_ClassDef(self, node):
        bases = [self.name(b) or "" for b in node.bases]
        if any(b in ("torch.Tensor", "torch._C.TensorBase", "torch._C._TensorBase") for b in bases):
            self.add("tensor_subclass", node, f"class {node.name} subclasses torch.Tensor")
        if node.name == "Model":
            self.add("reference_model", node, "defines class Model (a copy of the original)")
        was, self.in_modelnew = self.in_modelnew, self.in_modelnew or node.name == "ModelNew"
        self.generic_visit(node)
        self.in_modelnew = was

    def visit_FunctionDef(self, node):
        was, self.in_forward = self.in_forward, self.in_modelnew and node.name == "forward"
        self.generic_visit(node)
        self.in_forward = was

    visit_AsyncFunctionDef = visit_FunctionDef

    def visit_Name(self, node):
        if node.id == "Model" and isinstance(node.ctx, ast.Load):
            self.add("reference_model", node, "uses the original class Model")

    def _target(self, target, node):
        full = self.name(target)
        if not full:
            return
        if full.startswith(_TIMER_PREFIXES) or full in ("time",):
            self.add("timer_patch", node, f"assigns {full}")
        elif full.startswith(_JUDGE_PREFIXES) or full.startswith("torchweld."):
            self.add("judge_patch", node, f"assigns {full}")
        elif full.startswith(_RNG_PREFIXES):
            self.add("rng_patch", node, f"assigns {full}")
        if full.startswith("torch.backends.") and full.endswith(_PRECISION_FLAGS):
            self.add("tf32_flag", node, f"sets {full}")

    def visit_Assign(self, node):
        for t in node.targets:
            self._target(t, node)
        self.generic_visit(node)

    def visit_AugAssign(self, node):
        self._target(node.target, node)
        self.generic_visit(node)

    def visit_With(self, node):
        for item in node.items:
            call = item.context_expr
            full = self.name(call.func) if isinstance(call, ast.Call) else None
            if full in ("torch.cuda.stream", "torch.cuda.StreamContext"):
                self.add("other_stream", node, f"runs work under `with {full}(...)`")
            if full and full.endswith("autocast"):
                self.add("half_cast", node, f"runs under {full}")
        self.generic_visit(node)

    def visit_Try(self, node):
        for h in node.handlers:
            calls = [self.name(c.func) or "" for b in h.body for c in ast.walk(b) if isinstance(c, ast.Call)]
            torch_calls = [c for c in calls if c.startswith(("torch.", "F.", "self."))]
            returns = any(isinstance(c, ast.Return) for b in h.body for c in ast.walk(b))
            if h.body and isinstance(h.body[-1], ast.Raise) and not returns:
                continue  # it reports the error and re-raises: nothing falls back
            if torch_calls or (returns and self.in_modelnew):
                what = ", ".join(sorted(set(torch_calls))[:3]) or "another path"
                self.add("try_fallback", h, f"except handler falls back to {what}")
        self.generic_visit(node)

    visit_TryStar = visit_Try

    def visit_Call(self, node):
        full = self.name(node.func) or ""
        if full in _STREAM_NAMES:
            self.add("other_stream", node, f"calls {full}")
        if full in ("setattr", "builtins.setattr") and node.args:
            obj = self.name(node.args[0]) or ""
            if obj in ("time", "torch.cuda", "torch.cuda.Event", "torch.cuda.streams", "torch._C"):
                self.add("timer_patch", node, f"setattr on {obj}")
        if full in _INTROSPECTION:
            self.add("introspection", node, f"calls {full}")
        if full.endswith(_GLOBAL_HOOKS):
            self.add("global_hook", node, f"calls {full}: a hook on every nn.Module's call")
        if full.endswith("set_float32_matmul_precision"):
            self.add("tf32_flag", node, f"calls {full}")
        if full in ("os.fork", "os.system", "os.popen"):
            self.add("concurrency", node, f"calls {full}")
        if self.fp32 and isinstance(node.func, ast.Attribute) and node.func.attr in _HALF_CALLS and not node.args:
            self.add("half_cast", node, f".{node.func.attr}() on an fp32 problem")
        if self.fp32 and any(self.name(a) in _HALF_DTYPES for a in [*node.args, *(k.value for k in node.keywords)]):
            self.add("half_cast", node, f"{full or 'call'}(..., 16-bit dtype) on an fp32 problem")
        if self.in_forward and full.startswith(_FUNCTIONAL):
            op = full.rsplit(".", 1)[-1]
            if op in self.ref_ops:
                self.add("torch_reference_op", node, f"calls {full}, as the reference does")
        self.generic_visit(node)


def reference_ops(problem_source: str) -> set[str]:
    """Short names of torch functions and tensor methods called in the problem's `Model.forward`."""
    try:
        tree = ast.parse(problem_source)
    except SyntaxError:
        return set()
    ops = set()
    for cls in (n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "Model"):
        fwd = [f for f in cls.body if isinstance(f, ast.FunctionDef) and f.name == "forward"]
        for c in (c for f in fwd for c in ast.walk(f)):
            if isinstance(c, ast.Call) and isinstance(c.func, ast.Attribute):
                d = _dotted(c.func) or ""
                if not d.startswith(("self.", "super")) and c.func.attr not in ("__init__", "Parameter"):
                    ops.add(c.func.attr)
    return ops - {"clone", "detach", "view", "reshape", "contiguous", "size", "dim", "randn", "zeros", "ones"}


def scan(source: str, problem_source: str = "") -> list[Finding]:
    """All static findings for a candidate source, ordered by line."""
    fp32 = not re.search(r"float16|bfloat16|\.half\(\)|torch\.half", problem_source)
    found: list[Finding] = []
    try:
        tree = ast.parse(source)
    except SyntaxError as e:
        return [Finding("syntax", e.lineno or 0, f"syntax error: {e.msg}")]
    s = _Scan(reference_ops(problem_source), fp32)
    s.visit(tree)
    found += s.found
    lines = source.splitlines()
    for rule, pattern, meaning in _TEXT_RULES:
        if rule == "half_cast" and not fp32:
            continue
        for i, line in enumerate(lines, 1):
            m = re.search(pattern, line)
            if m:
                found.append(Finding(rule, i, f"{meaning}: `{m.group(0)}`"))
    uniq = {(f.rule, f.line, f.text): f for f in found}
    return sorted(uniq.values(), key=lambda f: (f.line, f.rule))
