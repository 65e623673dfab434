"""Codegen: CUDA source per kernel kind (registry.py holds the table). What emit and the tests use is exported here."""
from torchweld.codegen.common import Launch, contiguous_strides, is_contiguous, operands, variant_name, vec_class
from torchweld.codegen.ops import py_lit, torch_expr
from torchweld.codegen.pointwise import vector_width
from torchweld.codegen.pointwise_cl import variant_aligned
from torchweld.codegen.registry import KINDS, Kind, kernel_launch, kernel_traffic, kind_of, module_source
from torchweld.tiling import memory_order, out_strides

# NOTE: the names emit/ imports today; for a reduce kernel they are what the table says of its kind.
reduce_launch, reduce_traffic = kernel_launch, kernel_traffic

__all__ = ["KINDS", "Kind", "Launch", "contiguous_strides", "is_contiguous", "kernel_launch", "kernel_traffic",
           "kind_of", "memory_order", "module_source", "operands", "out_strides", "py_lit", "reduce_launch",
           "reduce_traffic", "torch_expr", "variant_aligned", "variant_name", "vec_class", "vector_width"]
