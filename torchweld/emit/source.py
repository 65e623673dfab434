"""The problem's own source as the emitted file keeps it: module-level code, Model's methods, and the
check that a ModelNew was built with the constructor arguments the graph was captured with."""
from __future__ import annotations

import ast
import inspect

import torch


class EmitError(Exception):
    """The problem's source cannot be turned into a ModelNew file."""


def source_parts(source: str) -> tuple[list[str], ast.ClassDef, list[str]]:
    """Module-level code to keep (imports, helpers, constants), the Model class, and the source's lines."""
    tree = ast.parse(source)
    keep, model = [], None
    for node in tree.body:
        if isinstance(node, ast.ClassDef) and node.name == "Model":
            model = node
        elif isinstance(node, ast.FunctionDef) and node.name in ("get_inputs", "get_init_inputs"):
            continue
        elif isinstance(node, ast.If) and "__name__" in ast.unparse(node.test):
            continue
        elif isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant):
            continue  # the problem's docstring
        else:
            keep.append(ast.get_source_segment(source, node, padded=True))
    if model is None:
        raise EmitError("the problem source has no top-level `class Model`")
    return keep, model, source.splitlines()


def methods(model: ast.ClassDef) -> dict[str, ast.FunctionDef]:
    """Model's methods by name; forward must be one."""
    found = {f.name: f for f in model.body if isinstance(f, ast.FunctionDef)}
    if "forward" not in found:
        raise EmitError("Model must define forward")
    return found


def method_source(source_lines: list[str], fn: ast.FunctionDef, new_name: str | None = None) -> str:
    """Method `fn` as written, indented as a method of ModelNew (renamed `new_name` where given)."""
    start = (fn.decorator_list[0].lineno if fn.decorator_list else fn.lineno) - 1
    lines = source_lines[start:fn.end_lineno]
    text = "\n".join(lines)
    text = text.replace("super(Model, self)", "super()")
    if new_name:
        text = text.replace(f"def {fn.name}(", f"def {new_name}(", 1)
    indent = len(lines[0]) - len(lines[0].lstrip())
    return "\n".join("    " + line[indent:] if line.strip() else "" for line in text.splitlines())


_PLAIN = (int, float, bool, str, type(None))


def _plain(v) -> bool:
    """A value whose repr is itself: numbers, strings, None, and tuples/lists/dicts of them."""
    if isinstance(v, (tuple, list)):
        return all(_plain(x) for x in v)
    if isinstance(v, dict):
        return all(_plain(k) and _plain(x) for k, x in v.items())
    return isinstance(v, _PLAIN)


def init_check(init: ast.FunctionDef | None, init_args) -> str:
    """`self._tw_same_init = repr((a, b, ...)) == '<captured>'` for Model.__init__'s arguments, or "".

    NOTE: forward's constants (a conv's stride, a threshold) come from the captured model; a ModelNew
    built with other arguments must not run the kernels, even on inputs of the captured shape."""
    if init is None or init_args is None:
        return ""
    a = init.args
    names = [x.arg for x in a.posonlyargs + a.args][1:]
    names += [a.vararg.arg] if a.vararg else []
    names += [x.arg for x in a.kwonlyargs] + ([a.kwarg.arg] if a.kwarg else [])
    if not names:
        return ""
    values = _bind_init(init, init_args)
    if values is None or not _plain(values):
        return ""
    return f"self._tw_same_init = repr(({', '.join(names)},)) == {repr(tuple(values))!r}"


def _bind_init(init: ast.FunctionDef, init_args) -> list | None:
    """The values __init__'s parameters take for `init_args`, in the order `init_check` names them."""
    src = "def f" + ast.unparse(init).split("def __init__", 1)[1].split(":\n", 1)[0] + ": pass"
    scope: dict = {}
    try:
        exec(src, {"torch": torch, "nn": torch.nn}, scope)  # NOTE: only the signature; defaults may name torch
        bound = inspect.signature(scope["f"]).bind(None, *init_args)
    except Exception:
        return None
    bound.apply_defaults()
    return list(bound.arguments.values())[1:]


def init_method(source_lines: list[str], init: ast.FunctionDef, same_init: str) -> str:
    """Model.__init__ as written, with the `same_init` line at its end."""
    text = method_source(source_lines, init)
    body = next(l for l in text.splitlines()[1:] if l.strip() and not l.strip().startswith(("#", ")")))
    indent = body[:len(body) - len(body.lstrip())]
    return (text + "\n" + indent + "# NOTE: the kernels hold this configuration's constants; another takes the general path\n"
            + indent + same_init + "\n")
