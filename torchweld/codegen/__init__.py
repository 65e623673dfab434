"""Codegen: CUDA source per kernel kind. What emit and the tests use is exported here."""
from torchweld.codegen.kernel import (contiguous_strides, is_contiguous, module_source, operands, vec_class,
                                      vector_width)
from torchweld.codegen.ops import py_lit, torch_expr
from torchweld.codegen.pool import memory_order, out_strides
from torchweld.codegen.reduce import reduce_launch, reduce_traffic
from torchweld.codegen.variants import variant_aligned, variant_name

__all__ = ["contiguous_strides", "is_contiguous", "memory_order", "module_source", "operands", "out_strides", "py_lit",
           "reduce_launch", "reduce_traffic", "torch_expr", "variant_aligned", "variant_name", "vec_class",
           "vector_width"]
