"""Tolerances per dtype and the comparison of a candidate's outputs with the reference and the float64 oracle."""
from __future__ import annotations

import math
from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class Tol:
    atol: float
    rtol: float


# One table per dtype; `|out - ref| <= atol + rtol * |ref|` elementwise.
TABLE = {torch.float64: Tol(1e-8, 1e-8), torch.float32: Tol(1e-4, 1e-4),
         torch.float16: Tol(1e-2, 1e-2), torch.bfloat16: Tol(2e-2, 2e-2)}
KERNELBENCH = Tol(1e-2, 1e-2)  # KernelBench's one tolerance for every dtype
# Oracle mode's floor on relative error (as a fraction of ||truth||): a few dozen ulps of the dtype,
# so an exact-to-rounding reference cannot make an honest kernel with another summation order fail.
ORACLE_FLOOR = {torch.float64: 1e-12, torch.float32: 1e-5, torch.float16: 2e-3, torch.bfloat16: 1.6e-2}
MODES = ("oracle", "table", "kernelbench")


def table_tol(dtype: torch.dtype, mode: str) -> Tol:
    """The elementwise tolerance for `dtype` under `mode` (oracle mode falls back to the table)."""
    if mode == "kernelbench":
        return KERNELBENCH
    return TABLE.get(dtype, TABLE[torch.float32])


def flatten(out) -> list:
    """A model's output as a flat list of tensors (tuples, lists and dicts are walked in order)."""
    if isinstance(out, torch.Tensor):
        return [out]
    if isinstance(out, (list, tuple)):
        return [t for o in out for t in flatten(o)]
    if isinstance(out, dict):
        return [t for k in sorted(out, key=str) for t in flatten(out[k])]
    if isinstance(out, (int, float, bool)):
        return [torch.tensor(out)]
    raise TypeError(f"output of type {type(out).__name__} is not a tensor")


def _first(mask: torch.Tensor, limit: int = 5) -> list[list[int]]:
    """Multi-indices of the first `limit` True elements, scanning in chunks so a huge mask stays cheap."""
    flat, found, chunk = mask.reshape(-1), [], 1 << 24
    for start in range(0, flat.numel(), chunk):
        nz = flat[start:start + chunk].nonzero().flatten()[: limit - len(found)]
        found += [start + int(i) for i in nz]
        if len(found) >= limit:
            break
    out = []
    for f in found:
        idx = []
        for size in reversed(mask.shape):
            idx.append(f % size)
            f //= size
        out.append(idx[::-1])
    return out


def _norm(x: torch.Tensor) -> float:
    return float(torch.linalg.vector_norm(x)) if x.numel() else 0.0


def _ratio(num: float, den: float) -> float:
    if den == 0:
        return 0.0 if num == 0 else math.inf
    return num / den


def compare_tensor(out, ref, truth=None, mode="oracle", factor=4.0, label="") -> dict:
    """Compare one output tensor with the reference (and the float64 truth, in oracle mode)."""
    res = {"inputs": label, "ok": False, "max_abs": None, "rel": None, "first_bad": [], "n_bad": 0, "why": "",
           "oracle": None}
    if not isinstance(out, torch.Tensor):
        res["why"] = f"output is a {type(out).__name__}, not a tensor"
        return res
    if tuple(out.shape) != tuple(ref.shape):
        res["why"] = f"shape {tuple(out.shape)} != reference {tuple(ref.shape)}"
        return res
    if out.dtype != ref.dtype:
        res["why"] = f"dtype {str(out.dtype)[6:]} != reference {str(ref.dtype)[6:]}"
        return res
    out, ref = out.detach(), ref.detach().to(out.device)
    if not (out.is_floating_point() or out.is_complex()):
        bad = out != ref
        res.update(max_abs=float((out.double() - ref.double()).abs().max()) if out.numel() else 0.0,
                   rel=_ratio(_norm((out.double() - ref.double())), _norm(ref.double())))
        res["n_bad"] = int(bad.sum())
        res["first_bad"] = _first(bad)
        res["ok"] = res["n_bad"] == 0
        res["why"] = "" if res["ok"] else f"{res['n_bad']} of {out.numel()} elements differ (exact match needed)"
        return res
    o, r = out.double(), ref.double()
    fo, fr = torch.isfinite(o), torch.isfinite(r)
    # NOTE: NaN and +-inf must sit where the reference has them; a NaN the reference lacks always fails.
    nonfinite_bad = (torch.isnan(o) != torch.isnan(r)) | ((o == math.inf) != (r == math.inf)) | (
        (o == -math.inf) != (r == -math.inf))
    both = fo & fr
    diff = torch.where(both, o - r, torch.zeros((), dtype=o.dtype, device=o.device))
    res["max_abs"] = float(diff.abs().max()) if diff.numel() else 0.0
    res["rel"] = _ratio(_norm(diff), _norm(torch.where(both, r, 0.0)))
    tol = table_tol(ref.dtype, mode)
    bad = (diff.abs() > tol.atol + tol.rtol * r.abs()) & both
    ok = not bool(bad.any())
    why = "" if ok else f"{int(bad.sum())} of {out.numel()} elements outside atol={tol.atol:g} rtol={tol.rtol:g}"
    if mode == "oracle" and truth is not None:
        t = truth.detach().to(o.device).double()
        m = both & torch.isfinite(t)
        zero = torch.zeros((), dtype=t.dtype, device=t.device)
        cand_e, ref_e = torch.where(m, o - t, zero), torch.where(m, r - t, zero)
        tn = _norm(torch.where(m, t, zero))
        floor = ORACLE_FLOOR.get(ref.dtype, ORACLE_FLOOR[torch.float32])
        cand_rel, ref_rel = _ratio(_norm(cand_e), tn), _ratio(_norm(ref_e), tn)
        tmax = float(torch.where(m, t, zero).abs().max()) if t.numel() else 0.0
        ref_max = float(ref_e.abs().max()) if t.numel() else 0.0
        bound_rel = factor * ref_rel + floor
        bound_max = 2 * factor * ref_max + floor * tmax
        bad = cand_e.abs() > bound_max
        ok = cand_rel <= bound_rel and not bool(bad.any())
        res["oracle"] = {"cand_rel": cand_rel, "ref_rel": ref_rel, "bound_rel": bound_rel,
                         "cand_max": float(cand_e.abs().max()) if t.numel() else 0.0, "ref_max": ref_max,
                         "bound_max": bound_max}
        if ok:
            why = ""
        elif cand_rel > bound_rel:
            why = f"error vs float64 truth {cand_rel:.2e} > {factor:g} x reference's {ref_rel:.2e} + {floor:.0e}"
        else:
            why = f"{int(bad.sum())} elements off the float64 truth by more than {bound_max:.2e}"
    n_nf = int(nonfinite_bad.sum())
    if n_nf:
        ok = False
        why = f"{n_nf} NaN/inf elements disagree with the reference" + (f"; {why}" if why else "")
    res["ok"] = ok
    res["why"] = why
    res["n_bad"] = n_nf + int(bad.sum())
    res["first_bad"] = _first(nonfinite_bad | bad)
    return res


def compare(out, ref, truth=None, mode="oracle", factor=4.0, label="") -> dict:
    """Compare whole outputs (any nesting of tensors); one result, the worst of the parts."""
    try:
        outs, refs = flatten(out), flatten(ref)
    except TypeError as e:
        return {"inputs": label, "ok": False, "max_abs": None, "rel": None, "first_bad": [], "n_bad": 0,
                "why": str(e), "oracle": None}
    truths = flatten(truth) if truth is not None else [None] * len(refs)
    if len(outs) != len(refs):
        return {"inputs": label, "ok": False, "max_abs": None, "rel": None, "first_bad": [], "n_bad": 0,
                "why": f"{len(outs)} outputs, reference has {len(refs)}", "oracle": None}
    parts = [compare_tensor(o, r, t, mode, factor, label) for o, r, t in zip(outs, refs, truths)]
    if len(parts) == 1:
        return parts[0]
    worst = next((p for p in parts if not p["ok"]), parts[0])
    res = dict(worst)
    res["ok"] = all(p["ok"] for p in parts)
    res["max_abs"] = max((p["max_abs"] for p in parts if p["max_abs"] is not None), default=None)
    res["rel"] = max((p["rel"] for p in parts if p["rel"] is not None), default=None)
    res["first_bad"] = [[i, *b] for i, p in enumerate(parts) for b in p["first_bad"]][:5]
    res["why"] = "; ".join(f"output {i}: {p['why']}" for i, p in enumerate(parts) if p["why"])
    return res


def downgrade_level(cand_rel: float, levels: dict[str, float], factor: float = 4.0) -> str | None:
    """The lowest precision (e.g. 'float16') whose error explains `cand_rel`, or None if none does."""
    for name, err in sorted(levels.items(), key=lambda kv: kv[1]):
        if err > 0 and cand_rel <= factor * err:
            return name
    return None
