"""The lean decode step's own pieces (server/engines/sglang/cpu/decode.py) against the
definitions they stand for; the step as a whole is checked against SGLang's own forward in
tests/api/test_sglang_server.py."""

from __future__ import annotations

import pytest
import torch

from server.engines.sglang.cpu.decode import Norm, _angles, rotated


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
@pytest.mark.parametrize("rows", [1, 3])
def test_the_norm_is_rms_norm(dtype: torch.dtype, rows: int) -> None:
    torch.manual_seed(0)
    x, weight = torch.randn(rows, 576).to(dtype) * 3, torch.randn(576).to(dtype)
    out = Norm.of(weight, 1e-5)(x)
    expected = torch.nn.functional.rms_norm(x, (576,), weight, 1e-5)
    assert out.dtype == dtype and out.is_contiguous()  # whole rows, as the int4 kernel takes
    torch.testing.assert_close(
        out, expected, rtol=1e-2 if dtype == torch.bfloat16 else 1e-5, atol=1e-5
    )


def test_the_rotation_is_sglangs_neox_rotation_to_the_bit() -> None:
    """SGLang's `apply_rotary_emb` (neox): halves x1, x2 -> (x1 cos - x2 sin, x2 cos + x1 sin),
    each product rounded to bf16 as there."""
    torch.manual_seed(1)
    dim, positions = 64, torch.tensor([0, 7, 300])
    angles = torch.randn(400, dim).to(torch.bfloat16)  # [position, cos halves then sin halves]
    qk = torch.randn(3, 12, dim).to(torch.bfloat16)
    cos, sin = _angles(angles, positions, torch.bfloat16)
    ours = rotated(qk, cos, sin)
    c, s = angles[positions].chunk(2, dim=-1)
    c, s = c.unsqueeze(1), s.unsqueeze(1)
    x1, x2 = qk.chunk(2, dim=-1)
    assert torch.equal(ours, torch.cat((x1 * c - x2 * s, x2 * c + x1 * s), dim=-1))
