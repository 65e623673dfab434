"""What the candidate's process watches in itself (candidate_process.py): the judge's own modules, the random
generators, global module hooks and the precision setters, each snapshotted before the candidate is imported.

These run beside the candidate, so a candidate that sets out to can undo them; they are evidence of an
attempt. What decides lives in the trusted process: the inputs, the reference, the comparison and the clock.
"""
from __future__ import annotations

import sys
import types

import torch

from torchweld.judge.guards import _resolve, cheat

RNG_PATHS = (
    "torch.manual_seed", "torch.seed", "torch.rand", "torch.randn", "torch.randint", "torch.randperm",
    "torch.rand_like", "torch.randn_like", "torch.normal", "torch.random.manual_seed", "torch.Tensor.normal_",
    "torch.Tensor.uniform_", "torch.Tensor.random_", "torch.default_generator", "random.random", "random.seed",
)
# The C setters of every flag that changes fp32 numerics (torch.backends' Python setters call these).
PRECISION_SETTERS = (
    "_set_cublas_allow_tf32", "_set_cudnn_allow_tf32", "_set_float32_matmul_precision", "_set_fp32_precision_setter",
    "_set_cublas_allow_fp16_reduced_precision_reduction", "_set_cublas_allow_bf16_reduced_precision_reduction",
    "_set_cublas_allow_fp16_accumulation", "_set_mkldnn_enabled",
)
_HOOKS = ("_global_forward_hooks", "_global_forward_pre_hooks", "_global_backward_hooks",
          "_global_backward_pre_hooks", "_global_forward_hooks_always_called")


def _ours(name: str) -> bool:
    return name == "torchweld" or name.startswith("torchweld.")


def _judge_objects() -> dict[str, int]:
    """id() of every attribute of the judge's loaded modules (torchweld.*), and of their classes' members."""
    out = {}
    for name, mod in list(sys.modules.items()):
        if not _ours(name) or not isinstance(mod, types.ModuleType):
            continue
        for k, v in list(vars(mod).items()):
            out[f"{name}.{k}"] = id(v)
            if isinstance(v, type) and v.__module__ == name:
                for m, f in list(vars(v).items()):
                    if callable(f):
                        out[f"{name}.{k}.{m}"] = id(f)
    return out


def _foreign(mod: types.ModuleType, source: str) -> list[str]:
    """Attributes of a judge module (one the candidate imported itself) that are functions of the candidate."""
    return [f"{mod.__name__}.{k}" for k, v in list(vars(mod).items())
            if getattr(getattr(v, "__code__", None), "co_filename", None) == source]


class Tripwires:
    """Snapshots taken before the import; `tripped(where)` lists what changed since, as cheat dicts."""

    def __init__(self, source: str):
        self.source = source  # the candidate's file: its functions carry it as their code's file name
        # NOTE: importing torch._dynamo rebinds torch.manual_seed to a wrapper of its own (a build or
        # torch.compile imports it later): imported first, so PyTorch's rebinding is not taken for a patch
        import torch._dynamo  # noqa: F401
        self.judge = _judge_objects()
        self.modules = {n for n in sys.modules if _ours(n)}
        self.rng = {p: _resolve(p) for p in RNG_PATHS}
        self.flips: list[str] = []
        self.in_call = False
        self._wrap_setters()

    def _wrap_setters(self):
        """Each precision setter records a change made while a candidate call runs (then restored or not)."""
        from torchweld.judge.guards import precision_flags

        self.setters = {}
        for name in PRECISION_SETTERS:
            real = getattr(torch._C, name, None)
            if real is None:
                continue

            def setter(*a, _real=real, _name=name):
                before = precision_flags() if self.in_call else None
                out = _real(*a)
                if before is not None:
                    after = precision_flags()
                    self.flips += [f"{k} {before[k]} -> {after[k]}" for k in after if after[k] != before.get(k)]
                return out
            setattr(torch._C, name, setter)
            self.setters[name] = (real, setter)
        # NOTE: torch.backends.cudnn's flags are ContextProps holding the C setter itself, captured at import.
        for mod in [m for n, m in list(sys.modules.items()) if n.startswith("torch.backends")]:
            for prop in vars(type(mod)).values():
                s = getattr(prop, "setter", None)
                for real, wrapped in self.setters.values():
                    if s is real:
                        prop.setter = wrapped

    def tripped(self, where: str) -> list[dict]:
        found = []
        now = _judge_objects()
        replaced = [k for k, v in self.judge.items() if k in now and now[k] != v]
        for name in sorted(n for n in sys.modules if _ours(n) and n not in self.modules):
            mod = sys.modules[name]
            if isinstance(mod, types.ModuleType):
                replaced += _foreign(mod, self.source)
        if replaced:
            found.append(cheat("judge_patch", f"{where}: replaced the judge's {', '.join(sorted(replaced)[:4])}"))
        rng = [p for p, o in self.rng.items() if o is not None and _resolve(p) is not o]
        if rng:
            found.append(cheat("rng_patch", f"{where}: replaced {', '.join(rng[:4])}"))
        hooks = [h for h in _HOOKS if getattr(torch.nn.modules.module, h, None)]
        if hooks:
            found.append(cheat("module_hook", f"{where}: a global nn.Module hook is registered ({', '.join(hooks)}): "
                                              "it runs inside every module's call"))
        gone = [n for n, (real, wrapped) in self.setters.items() if getattr(torch._C, n, None) is not wrapped]
        if gone:
            found.append(cheat("precision_in_call", f"{where}: the precision setters {gone[:3]} were replaced"))
        if self.flips:
            found.append(cheat("precision_in_call", f"{where}: forward() changed precision flags while it ran: "
                                                    f"{', '.join(dict.fromkeys(self.flips))}"))
            self.flips = []
        return found
