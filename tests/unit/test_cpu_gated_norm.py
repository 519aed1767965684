"""The gated RMSNorm of Gated DeltaNet layers on CPUs without AMX (cpu/gated_norm.py) against
SGLang's own torch reference of its Triton kernel, `rms_norm_ref`."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from server.engines.sglang.cpu.gated_norm import gated_rms_norm
from server.torch_compat import ensure_torchvision_loadable


@pytest.fixture(scope="module")
def rms_norm_ref() -> object:
    ensure_torchvision_loadable()
    from sglang.kernels.ops.attention.fla.layernorm_gated import rms_norm_ref

    return rms_norm_ref


@pytest.mark.parametrize("group_size", [None, 16])
@pytest.mark.parametrize("norm_before_gate", [True, False])
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
def test_the_swish_gated_norm_is_sglangs(
    rms_norm_ref: object, group_size: int | None, norm_before_gate: bool, dtype: torch.dtype
) -> None:
    generator = torch.Generator().manual_seed(0)
    x = torch.randn(7, 64, generator=generator).to(dtype)
    z = torch.randn(7, 64, generator=generator).to(dtype)
    weight = (1 + 0.1 * torch.randn(64, generator=generator)).to(dtype)
    ours = gated_rms_norm(x, weight, z, 1e-6, group_size, norm_before_gate)
    theirs = rms_norm_ref(x, weight, None, z, 1e-6, group_size, norm_before_gate)  # type: ignore[operator]
    assert ours.dtype == dtype
    torch.testing.assert_close(ours, theirs)


def test_without_a_gate_it_is_an_rmsnorm_and_sigmoid_gates_by_its_own_function() -> None:
    generator = torch.Generator().manual_seed(1)
    x = torch.randn(5, 32, generator=generator)
    z = torch.randn(5, 32, generator=generator)
    weight = torch.rand(32, generator=generator)
    normed = x * torch.rsqrt(x.square().mean(-1, keepdim=True) + 1e-6) * weight
    torch.testing.assert_close(gated_rms_norm(x, weight, None, 1e-6), normed)
    torch.testing.assert_close(
        gated_rms_norm(x, weight, z, 1e-6, activation="sigmoid"), normed * torch.sigmoid(z)
    )
    torch.testing.assert_close(gated_rms_norm(x, weight, z, 1e-6), normed * F.silu(z))
