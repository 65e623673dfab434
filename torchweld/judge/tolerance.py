"""Tolerances per dtype and the comparison of a candidate's outputs with the reference and the float64 oracle.

The one tolerance table: the judge grades with it, and so does the first check `torchweld compile`
runs on a GPU (judge/first.py).
"""
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
# fp32 where both sides may run TF32 matrix units (files compiled with `--precision tf32`): each side
# rounds its own operands to 10 mantissa bits, so the two differ by far more than strict fp32's row.
TF32 = Tol(1e-3, 1e-3)
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


_CHUNK = 1 << 24  # elements per chunk: float64 temporaries of a few chunks, never of a whole 2 GB output


def _unravel(flat: int, shape) -> list[int]:
    idx = []
    for size in reversed(shape):
        idx.append(flat % size)
        flat //= size
    return idx[::-1]


class _Sums:
    """Running sums over chunks: squared norms, maxima, counts and the first flat indices of a mask."""

    def __init__(self):
        self.sq, self.max, self.count, self.first = {}, {}, {}, {}

    def add_sq(self, key, x):
        self.sq[key] = self.sq.get(key, 0.0) + float((x * x).sum())

    def add_max(self, key, x):
        if x.numel():
            self.max[key] = max(self.max.get(key, 0.0), float(x.abs().max()))

    def add_mask(self, key, mask, offset, limit=5):
        n = int(mask.sum())
        self.count[key] = self.count.get(key, 0) + n
        got = self.first.setdefault(key, [])
        if n and len(got) < limit:
            got += [offset + int(i) for i in mask.nonzero().flatten()[: limit - len(got)]]

    def norm(self, key) -> float:
        return math.sqrt(self.sq.get(key, 0.0))


def _ratio(num: float, den: float) -> float:
    if den == 0:
        return 0.0 if num == 0 else math.inf
    return num / den


def _chunks(*tensors):
    flats = [t.reshape(-1) if t is not None else None for t in tensors]
    n = flats[0].numel()
    for start in range(0, n, _CHUNK):
        yield start, [f[start:start + _CHUNK].double() if f is not None else None for f in flats]


def compare_tensor(out, ref, truth=None, mode="oracle", factor=4.0, label="", tol: Tol | None = None) -> dict:
    """Compare one output tensor with the reference (and the float64 truth, in oracle mode); `tol`
    replaces the table's row for the reference's dtype."""
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
    shape, numel = tuple(out.shape), out.numel()
    use_truth = mode == "oracle" and truth is not None
    t_all = truth.detach().to(out.device) if use_truth else None
    tol = tol or table_tol(ref.dtype, mode)
    exact = not (out.is_floating_point() or out.is_complex())
    sums = _Sums()
    for off, (o, r, t) in _chunks(out, ref, t_all):
        if exact:
            sums.add_mask("bad", o != r, off)
            sums.add_sq("diff", o - r)
            sums.add_sq("ref", r)
            sums.add_max("diff", o - r)
            continue
        fo, fr = torch.isfinite(o), torch.isfinite(r)
        # NOTE: NaN and +-inf must sit where the reference has them; a NaN the reference lacks always fails.
        sums.add_mask("nonfinite", (torch.isnan(o) != torch.isnan(r)) | ((o == math.inf) != (r == math.inf))
                   | ((o == -math.inf) != (r == -math.inf)), off)
        both = fo & fr
        d = torch.where(both, o - r, 0.0)
        sums.add_sq("diff", d)
        sums.add_sq("ref", torch.where(both, r, 0.0))
        sums.add_max("diff", d)
        sums.add_mask("table", (d.abs() > tol.atol + tol.rtol * r.abs()) & both, off)
        if use_truth:
            m = both & torch.isfinite(t)
            ce, re_ = torch.where(m, o - t, 0.0), torch.where(m, r - t, 0.0)
            sums.add_sq("cand_e", ce)
            sums.add_sq("ref_e", re_)
            sums.add_sq("truth", torch.where(m, t, 0.0))
            sums.add_max("cand_e", ce)
            sums.add_max("ref_e", re_)
            sums.add_max("truth", torch.where(m, t, 0.0))
    res["max_abs"] = sums.max.get("diff", 0.0)
    res["rel"] = _ratio(sums.norm("diff"), sums.norm("ref"))
    if exact:
        res["n_bad"] = sums.count.get("bad", 0)
        res["first_bad"] = [_unravel(f, shape) for f in sums.first.get("bad", [])]
        res["ok"] = res["n_bad"] == 0
        res["why"] = "" if res["ok"] else f"{res['n_bad']} of {numel} elements differ (exact match needed)"
        return res
    bad_key = "table"
    ok = sums.count.get("table", 0) == 0
    why = "" if ok else f"{sums.count['table']} of {numel} elements outside atol={tol.atol:g} rtol={tol.rtol:g}"
    if use_truth:
        floor = ORACLE_FLOOR.get(ref.dtype, ORACLE_FLOOR[torch.float32])
        tn = sums.norm("truth")
        cand_rel, ref_rel = _ratio(sums.norm("cand_e"), tn), _ratio(sums.norm("ref_e"), tn)
        bound_rel = factor * ref_rel + floor
        bound_max = 2 * factor * sums.max.get("ref_e", 0.0) + floor * sums.max.get("truth", 0.0)
        res["oracle"] = {"cand_rel": cand_rel, "ref_rel": ref_rel, "bound_rel": bound_rel,
                         "cand_max": sums.max.get("cand_e", 0.0), "ref_max": sums.max.get("ref_e", 0.0),
                         "bound_max": bound_max}
        bad_key = "oracle"
        if sums.max.get("cand_e", 0.0) > bound_max:  # a second pass finds which elements
            for off, (o, r, t) in _chunks(out, ref, t_all):
                m = torch.isfinite(o) & torch.isfinite(r) & torch.isfinite(t)
                sums.add_mask("oracle", m & ((o - t).abs() > bound_max), off)
        n_or = sums.count.get("oracle", 0)
        ok = cand_rel <= bound_rel and n_or == 0
        if ok:
            why = ""
        elif cand_rel > bound_rel:
            why = f"error vs float64 truth {cand_rel:.2e} > {factor:g} x reference's {ref_rel:.2e} + {floor:.0e}"
        else:
            why = f"{n_or} elements off the float64 truth by more than {bound_max:.2e}"
    n_nf = sums.count.get("nonfinite", 0)
    if n_nf:
        ok = False
        why = f"{n_nf} NaN/inf elements disagree with the reference" + (f"; {why}" if why else "")
    firsts = sorted(set(sums.first.get("nonfinite", []) + sums.first.get(bad_key, [])))[:5] if not ok else []
    res.update(ok=ok, why=why, n_bad=n_nf + sums.count.get(bad_key, 0), first_bad=[_unravel(f, shape) for f in firsts])
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
