"""Kernels written in C (`kernels/`), compiled on the machine that runs them (`build.py`), for its
own vector units, and called here through ctypes.

torch has no kernel for a decode step's attention over a paged cache on a CPU (its ops gather the
context or attend one block of slots at a time, each call dispatched), nor for products with a
GGUF's 8-bit blocks, and a decode layer's elementwise steps are several dispatched ops each.
`decode_attention.c` reads the cache where it lies, in one call a layer; `block_products.c`
multiplies a few rows by 4-bit or 8-bit blocks; `layer_ops.c` holds the elementwise steps. The
node compiles them at start (`build.py`), and SGLang's processes load the file named in
KERNELS_ENV. Without a C compiler the node logs why and decodes with torch's kernels."""

from __future__ import annotations

import ctypes
import logging
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from server.engines.sglang.cpu.build import KERNELS_ENV
from server.models.gguf_blocks import EightBit, Groups

log = logging.getLogger(__name__)

MAX_ROWS = 16  # the most rows `block_product` takes (block_products.c)
Q8_0, Q4_1 = 0, 1  # its kinds of weight


@dataclass(frozen=True, slots=True)
class FourBitPairs:
    """4-bit groups in the form `q4_1_product` reads: a row's blocks two by two, 32 bytes each
    pair (the first block's values in the low nibbles, the second's in the high ones), and each
    block's scale and low (a value is q * scale + low)."""

    pairs: torch.Tensor  # uint8 [outputs, columns // 2]
    scales: torch.Tensor  # float32 [outputs, columns // 32]
    lows: torch.Tensor  # float32 [outputs, columns // 32]

    def __post_init__(self) -> None:  # checked once here, not on every product
        outputs, blocks = self.scales.shape
        if not (
            self.pairs.dtype == torch.uint8
            and self.pairs.shape == (outputs, blocks * 16)
            and self.scales.dtype == self.lows.dtype == torch.float32
            and self.lows.shape == self.scales.shape
            and all(part.is_contiguous() for part in (self.pairs, self.scales, self.lows))
        ):
            raise ValueError("4-bit pairs: uint8 [outputs, columns / 2], fp32 scales and lows")

    @staticmethod
    def of(groups: Groups) -> FourBitPairs | None:
        """None where a row is not a whole number of block pairs."""
        outputs, columns = groups.values.shape
        if columns % 64:
            return None
        values = groups.values.to(torch.uint8).view(outputs, columns // 64, 2, 32)
        pairs = values[:, :, 0] | (values[:, :, 1] << 4)
        return FourBitPairs(
            pairs.reshape(outputs, columns // 2).contiguous(),
            groups.scales.to(torch.float32).contiguous(),
            groups.lows.to(torch.float32).contiguous(),
        )


@dataclass(frozen=True, slots=True)
class Kernels:
    """The compiled library's functions."""

    library: ctypes.CDLL

    @staticmethod
    def load(path: Path) -> Kernels:
        library = ctypes.CDLL(str(path))
        for name in ("decode_attention_bf16", "decode_attention_f32"):
            function = getattr(library, name)
            function.restype = ctypes.c_int
            function.argtypes = [
                ctypes.c_void_p, ctypes.c_int64, ctypes.c_void_p, ctypes.c_void_p,
                ctypes.c_void_p, ctypes.c_int64, ctypes.c_void_p, ctypes.c_void_p,
                ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_float,
                ctypes.c_void_p, ctypes.c_int,
            ]  # fmt: skip
        pointer, count, number = ctypes.c_void_p, ctypes.c_int, ctypes.c_float
        for dtype in ("bf16", "f32"):
            norm = getattr(library, f"add_rms_norm_{dtype}")
            norm.restype = None
            norm.argtypes = [pointer, pointer, pointer, number, count, count, pointer]
            rotate = getattr(library, f"rotate_store_{dtype}")
            rotate.restype = None
            rotate.argtypes = [pointer, count, count, count, count, pointer, pointer, pointer,
                               pointer, pointer, pointer]  # fmt: skip
            act = getattr(library, f"silu_mul_{dtype}")
            act.restype = None
            act.argtypes = [pointer, count, count, pointer]
        product = library.block_product
        product.restype = ctypes.c_int
        product.argtypes = [
            ctypes.c_int, ctypes.c_void_p, ctypes.c_int, ctypes.c_int64, ctypes.c_int,
            ctypes.c_int64, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64,
            ctypes.c_void_p, ctypes.c_int,
        ]  # fmt: skip
        return Kernels(library)

    def _step(self, name: str, dtype: torch.dtype) -> Any:
        return getattr(self.library, f"{name}_{'bf16' if dtype == torch.bfloat16 else 'f32'}")

    def add_rms_norm(
        self, residual: torch.Tensor, hidden: torch.Tensor | None, weight: torch.Tensor, eps: float
    ) -> torch.Tensor:
        """residual [rows, width] += hidden (where given; in place), then its RMSNorm times weight:
        a new [rows, width]. All contiguous, of one dtype, bf16 or fp32 (the caller's plan)."""
        out = torch.empty_like(residual)
        self._step("add_rms_norm", residual.dtype)(
            residual.data_ptr(), None if hidden is None else hidden.data_ptr(),
            weight.data_ptr(), eps, residual.shape[0], residual.shape[1], out.data_ptr(),
        )  # fmt: skip
        return out

    def rotate_store(
        self,
        qkv: torch.Tensor,
        heads: int,
        kv_heads: int,
        cos_sin: torch.Tensor,
        positions: torch.Tensor,
        k_cache: torch.Tensor,
        v_cache: torch.Tensor,
        loc: torch.Tensor,
    ) -> torch.Tensor:
        """qkv [rows, (heads + 2 kv_heads) * dim]: q and k rotated by the angles at `positions`
        (cos_sin [positions, dim], neox), k and v written to the caches' slots `loc`; returns q
        [rows, heads, dim]. All contiguous, one dtype, bf16 or fp32; positions and loc int64."""
        dim = cos_sin.shape[1]
        rows = qkv.shape[0]
        q = qkv.new_empty(rows, heads, dim)
        self._step("rotate_store", qkv.dtype)(
            qkv.data_ptr(), rows, heads, kv_heads, dim, cos_sin.data_ptr(), positions.data_ptr(),
            k_cache.data_ptr(), v_cache.data_ptr(), loc.data_ptr(), q.data_ptr(),
        )  # fmt: skip
        return q

    def silu_mul(self, gate_up: torch.Tensor) -> torch.Tensor:
        """gate_up [rows, 2 width] (contiguous, bf16 or fp32) -> silu(gate) * up [rows, width]."""
        rows, both = gate_up.shape
        out = gate_up.new_empty(rows, both // 2)
        self._step("silu_mul", gate_up.dtype)(gate_up.data_ptr(), rows, both // 2, out.data_ptr())
        return out

    def four_bit_product(self, x: torch.Tensor, weight: FourBitPairs) -> torch.Tensor | None:
        """x [rows, columns] (bf16 or fp32, its rows contiguous) times `weight` (transposed),
        exactly but for fp32's rounding (`block_products.c`): [rows, outputs] in x's dtype; None
        where x is not of this form or has more than MAX_ROWS rows."""
        return self._product(Q4_1, x, weight.pairs, weight.scales, weight.lows)

    def eight_bit_product(self, x: torch.Tensor, weight: EightBit) -> torch.Tensor | None:
        """x [rows, columns] (bf16 or fp32, its rows contiguous) times `weight` (transposed),
        exactly but for fp32's rounding (`block_products.c`): [rows, outputs] in x's dtype; None
        where x is not of this form or has more than MAX_ROWS rows."""
        return self._product(Q8_0, x, weight.values, weight.scales, None)

    def _product(
        self,
        kind: int,
        x: torch.Tensor,
        weight: torch.Tensor,
        scales: torch.Tensor,
        lows: torch.Tensor | None,
    ) -> torch.Tensor | None:
        # (the weight's own form is checked where it is made: FourBitPairs, EightBit)
        rows, columns = x.shape
        outputs, blocks = scales.shape
        if not (
            x.dtype in (torch.bfloat16, torch.float32)
            and x.stride(1) == 1
            and 0 < rows <= MAX_ROWS
            and columns == blocks * 32
        ):
            return None
        out = x.new_empty(rows, outputs)
        failed = self.library.block_product(
            kind, x.data_ptr(), x.dtype == torch.bfloat16, x.stride(0), rows, columns,
            weight.data_ptr(), scales.data_ptr(), None if lows is None else lows.data_ptr(),
            outputs, out.data_ptr(), torch.get_num_threads(),
        )  # fmt: skip
        return None if failed else out

    def decode_attention(
        self,
        query: torch.Tensor,
        k_cache: torch.Tensor,
        v_cache: torch.Tensor,
        req_to_token: torch.Tensor,
        rows: torch.Tensor,
        lengths: torch.Tensor,
        scaling: float,
    ) -> torch.Tensor | None:
        """query [requests, heads, dim] (each request's heads contiguous); caches [slots,
        kv_heads, dim] of the query's dtype, contiguous; req_to_token [rows, tokens] int32,
        contiguous; rows and lengths [requests] int64, contiguous. Returns [requests, heads,
        dim]: each query against the keys at req_to_token[row, :length]; None where the inputs
        are not of these forms."""
        requests, heads, dim = query.shape
        kv_heads = k_cache.shape[1]
        dtype = query.dtype
        if not (
            dtype in (torch.bfloat16, torch.float32)
            and k_cache.dtype == v_cache.dtype == dtype
            and k_cache.shape[1:] == v_cache.shape[1:] == (kv_heads, dim)
            and k_cache.is_contiguous()
            and v_cache.is_contiguous()
            and query.stride(2) == 1
            and query.stride(1) == dim
            and req_to_token.dtype == torch.int32
            and req_to_token.is_contiguous()
            and rows.dtype == lengths.dtype == torch.int64
            and rows.is_contiguous()
            and lengths.is_contiguous()
            and rows.numel() == lengths.numel() == requests
        ):
            return None
        out = query.new_empty(requests, heads, dim)
        function = (
            self.library.decode_attention_bf16
            if dtype == torch.bfloat16
            else self.library.decode_attention_f32
        )
        failed = function(
            query.data_ptr(), query.stride(0), k_cache.data_ptr(), v_cache.data_ptr(),
            req_to_token.data_ptr(), req_to_token.stride(0), rows.data_ptr(), lengths.data_ptr(),
            requests, heads, kv_heads, dim, scaling, out.data_ptr(), torch.get_num_threads(),
        )  # fmt: skip
        return None if failed else out


def loaded() -> Kernels | None:
    """The library the node compiled for SGLang's processes (KERNELS_ENV), or None."""
    path = os.environ.get(KERNELS_ENV)
    if not path:
        return None
    try:
        return Kernels.load(Path(path))
    except (OSError, AttributeError) as error:
        log.warning("CPU kernels %s not loaded (%s): torch's kernels instead", path, error)
        return None
