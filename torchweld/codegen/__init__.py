"""Codegen: CUDA source per kernel kind (registry.py holds the table). What emit and the tests use is exported here."""
from torchweld.codegen.common import contiguous_strides, is_contiguous, operands, variant_name, vec_class
from torchweld.codegen.ops import py_lit, torch_expr
from torchweld.codegen.pointwise import vector_width
from torchweld.codegen.pointwise_cl import variant_aligned
from torchweld.codegen.registry import KINDS, Kind, kind_of, module_source, reduce_launch, reduce_traffic
from torchweld.tiling import memory_order, out_strides

__all__ = ["KINDS", "Kind", "contiguous_strides", "is_contiguous", "kind_of", "memory_order", "module_source",
           "operands", "out_strides", "py_lit", "reduce_launch", "reduce_traffic", "torch_expr", "variant_aligned",
           "variant_name", "vec_class", "vector_width"]
