"""The generalisation stage: the candidate judged on variants of the problem (other batch sizes, other
spatial sizes, other constructor arguments) and in the other mode (training <-> eval) where a norm keeps
running statistics, so a kernel right for one configuration only fails."""
from __future__ import annotations

import inspect
from collections import Counter
from dataclasses import dataclass, field

import torch

from torchweld.judge.correctness import Pair, check_buffers, error_line, run_trial, sync, to_dev

# Constructor parameters worth varying, and the values to try (in order) other than the current one.
_ALTERNATIVES = (
    ("output_padding", (1, 0)),
    ("kernel_size", (5, 3, 2)),
    ("stride", (2, 1, 3)),
    ("padding", (1, 0, 2)),
    ("dilation", (2, 1)),
    ("groups", (2, 4, 1)),
)


@dataclass(frozen=True)
class Variant:
    label: str
    init_args: tuple = ()
    init_kwargs: dict = field(default_factory=dict)
    batch: int | None = None  # new leading size of batched inputs
    spatial: tuple | None = None  # new trailing sizes of 4-D/5-D inputs


def _batch_of(inputs) -> int | None:
    dims = [t.shape[0] for t in inputs if isinstance(t, torch.Tensor) and t.dim() >= 2]
    return Counter(dims).most_common(1)[0][0] if dims else None


def _spatial_of(inputs) -> tuple | None:
    for t in inputs:
        if isinstance(t, torch.Tensor) and t.dim() in (4, 5):
            return tuple(t.shape[2:])
    return None


def _odd_size(s: int) -> int:
    o = s // 2 + 1
    return o if o % 2 else o + 1


def _alternatives(value, choices):
    """Alternatives for an int or a tuple of equal ints; other shapes of value are left alone."""
    if isinstance(value, bool):
        return []
    if isinstance(value, int):
        return [c for c in choices if c != value]
    if isinstance(value, (tuple, list)) and value and all(isinstance(v, int) and v == value[0] for v in value):
        return [type(value)([c] * len(value)) for c in choices if c != value[0]]
    return []


def init_variants(model_cls, init_args: list) -> list[Variant]:
    """One variant per alternative value of each stride/padding/... parameter, first alternatives first."""
    try:
        params = [p for p in inspect.signature(model_cls.__init__).parameters.values()
                  if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)][1:]
    except (TypeError, ValueError):
        return []
    rounds: list[list[Variant]] = []
    for i, p in enumerate(params):
        value = init_args[i] if i < len(init_args) else p.default
        if value is inspect.Parameter.empty:
            continue
        name = p.name.lower()
        choices = next((c for key, c in _ALTERNATIVES if key in name and not (key == "padding" and "output" in name)),
                       None)
        if choices is None:
            continue
        for k, alt in enumerate(_alternatives(value, choices)[:2]):
            args, kwargs = list(init_args), {}
            if i < len(args):
                args[i] = alt
            else:
                kwargs[p.name] = alt
            while len(rounds) <= k:
                rounds.append([])
            rounds[k].append(Variant(label=f"{p.name}={alt}", init_args=tuple(args), init_kwargs=kwargs))
    return [v for r in rounds for v in r]


def shape_variants(inputs, init_args) -> list[Variant]:
    """batch=1, batch=3, and spatial sizes scaled to 3/4 and to an odd size, where inputs allow."""
    out, b, sp = [], _batch_of(inputs), _spatial_of(inputs)
    args = tuple(init_args)
    if b is not None and b > 1:
        out += [Variant(label=f"batch={n}", init_args=args, batch=n) for n in (1, 3) if n != b]
    if sp is not None and min(sp) >= 4:
        three_q = tuple(max(2, (s * 3) // 4) for s in sp)
        odd = tuple(_odd_size(s) for s in sp)
        for new in (three_q, odd):
            if new != sp:
                out.append(Variant(label="spatial=" + "x".join(map(str, new)), init_args=args, spatial=new))
    return out


def all_variants(model_cls, inputs, init_args, limit: int) -> list[Variant]:
    return (shape_variants(inputs, init_args) + init_variants(model_cls, init_args))[:limit]


def reshape_inputs(inputs, variant: Variant, gen: torch.Generator, max_batch: int | None = None) -> list:
    """Inputs with the variant's shapes, values resampled from the originals (same dtype and distribution)."""
    b, sp = _batch_of(inputs), _spatial_of(inputs)
    new_b = variant.batch if variant.batch is not None else (min(b, max_batch) if b and max_batch else None)
    out = []
    for t in inputs:
        if not isinstance(t, torch.Tensor) or t.dim() == 0:
            out.append(t)
            continue
        shape = list(t.shape)
        if new_b is not None and t.dim() >= 2 and shape[0] == b:
            shape[0] = new_b
        if variant.spatial is not None and t.dim() in (4, 5) and tuple(shape[2:]) == sp:
            shape[2:] = variant.spatial
        if shape == list(t.shape):
            out.append(t.clone())
            continue
        flat = t.reshape(-1)
        idx = torch.randint(0, flat.numel(), (int(torch.Size(shape).numel()),), generator=gen)
        out.append(flat[idx].reshape(shape).clone())
    return out


# ---- the stage ---------------------------------------------------------------------------------------

def stage(j, problem, pair: Pair, init_args):
    """The other mode, then each variant as one trial (a constructor variant on models built for it);
    wrong on any variant is wrong. `j` is the child's Judging."""
    opts = j.opts
    if not opts.generalize:
        return
    j.stage("generalization")
    other_mode(j, problem, pair, init_args)
    torch.manual_seed(opts.seed)
    base = problem.inputs()
    for k, v in enumerate(all_variants(problem.model_cls, base, init_args, opts.max_variants)):
        seed = opts.seed * 1000 + 101 + k
        vpair = pair
        if v.init_kwargs or list(v.init_args) != list(init_args):
            try:
                torch.manual_seed(seed)
                problem.model_cls(*v.init_args, **v.init_kwargs)
            except Exception as e:  # noqa: BLE001 - not a valid configuration of the original
                j.r["details"].append(f"generalisation {v.label} skipped: the original rejects it ({error_line(e)})")
                continue
            try:
                vpair = Pair(problem, j.remote, v.init_args, v.init_kwargs, seed, pair.use_oracle)
            except Exception as e:  # noqa: BLE001
                j.r["generalization"].append(failed(v.label, f"ModelNew({v.label}) raised {error_line(e)}"))
                continue
        torch.manual_seed(seed)
        inputs = reshape_inputs(problem.inputs(), v, torch.Generator().manual_seed(seed),
                                max_batch=2 if vpair is not pair else None)
        try:
            vpair.ref(*to_dev(inputs, pair.device))
            sync(pair.device)
        except Exception as e:  # noqa: BLE001
            sync(pair.device)  # NOTE: re-raises where this process's CUDA context broke: nothing after is sound
            j.r["details"].append(f"generalisation {v.label} skipped: the original fails on it ({error_line(e)})")
            continue
        try:
            verdict, cheats, _, _ = run_trial(vpair, inputs, v.label, opts, anti_cheat=opts.anti_cheat)
        except Exception as e:  # noqa: BLE001
            j.remote.alive()
            verdict, cheats = failed(v.label, f"candidate raised {type(e).__name__}: {error_line(e)}"), []
        j.r["generalization"].append(verdict)
        j.caught(cheats, f"generalisation {v.label}")
        j.save()
    bad = [g for g in j.r["generalization"] if not g["ok"]]
    if bad:
        j.finish("wrong", f"fails generalisation on {', '.join(g['inputs'] for g in bad)}: {bad[0]['why']}")


def other_mode(j, problem, pair: Pair, init_args):
    """The model in the other mode (training <-> eval) where a norm keeps running statistics: the
    original and the candidate both switched, run on fresh inputs, and their buffers compared."""
    to_eval = mode_variant(pair.ref)
    if to_eval is None:
        return
    label = "eval mode" if to_eval else "training mode"
    seed = j.opts.seed * 1000 + 91
    try:
        vpair = Pair(problem, j.remote, init_args, {}, seed, pair.use_oracle)
    except Exception as e:  # noqa: BLE001
        j.r["generalization"].append(failed(label, f"ModelNew raised {error_line(e)}"))
        return
    calls = []
    if to_eval:  # one training call first, so the running statistics are not the fresh ones
        calls.append(("training mode, then", False))
    calls += [(label, to_eval), (label, to_eval)]
    for k, (what, eval_now) in enumerate(calls):
        vpair.ref.train(not eval_now)
        vpair.cand.train(not eval_now)
        torch.manual_seed(seed + 1 + k)
        try:
            verdict, cheats, _, _ = run_trial(vpair, problem.inputs(), f"{what} (call {k + 1})", j.opts,
                                              anti_cheat=j.opts.anti_cheat)
        except Exception as e:  # noqa: BLE001
            j.remote.alive()
            verdict, cheats = failed(label, f"candidate raised {type(e).__name__}: {error_line(e)}"), []
        j.r["generalization"].append(verdict)
        j.caught(cheats, label)
        if not verdict["ok"]:
            break
    else:
        check_buffers(j, vpair, f"in {label}")
    j.save()


def mode_variant(model) -> bool | None:
    """True: judge the model in eval mode too; False: in training mode too; None: its mode changes
    nothing judgeable (no norm with running statistics, or a dropout that would make training random)."""
    norms = [m for m in model.modules() if getattr(m, "track_running_stats", False)
             and isinstance(getattr(m, "running_mean", None), torch.Tensor)]
    if not norms:
        return None
    if all(m.training for m in norms):
        return True
    dropout = any(isinstance(m, torch.nn.modules.dropout._DropoutNd) and m.p > 0 for m in model.modules())
    return None if dropout else False


def failed(label: str, why: str) -> dict:
    """A verdict for a variant the candidate could not even run."""
    return {"inputs": label, "ok": False, "max_abs": None, "rel": None, "first_bad": [], "n_bad": 0, "why": why,
            "oracle": None}
