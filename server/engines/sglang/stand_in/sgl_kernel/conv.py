"""The short causal depthwise convolution of Gated DeltaNet (and Mamba) layers, as SGLang's CPU
build computes it, in torch.

Each channel d of a sequence x is convolved with its own `width`-tap filter over the current and
the previous width - 1 inputs:
    out[d, t] = act(bias[d] + sum_j weight[d, j] * x[d, t - width + 1 + j]).
The previous inputs of a request live in its slot of the conv state pool, conv_states[slot]
(dim, width - 1), oldest first; each call leaves there the last width - 1 inputs it saw. The pool
is read through its strides: SGLang lays it out differently on AMX machines.

Weights here are always plain (dim, width): only AMX machines prepack them (VNNI, `is_vnni`).
"""

from __future__ import annotations

import itertools

import torch
import torch.nn.functional as F


def _check_plain_weight(name: str, is_vnni: bool) -> None:
    if is_vnni:
        raise ValueError(
            f"{name}: VNNI-packed weights exist only on AMX CPUs; this stand-in reads the plain "
            "(dim, width) weight, so call it with is_vnni=False"
        )


def _conv(
    window: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None, silu: bool
) -> torch.Tensor:
    """The causal depthwise convolution of window (dim, width - 1 + steps), whose first width - 1
    columns are history, in fp32: (dim, steps)."""
    dim = window.shape[0]
    out = F.conv1d(
        window.float().unsqueeze(0),
        weight.float().unsqueeze(1),
        None if bias is None else bias.float(),
        groups=dim,
    ).squeeze(0)
    return F.silu(out) if silu else out


def _slots(indices: torch.Tensor | None, batch: int) -> list[int]:
    return list(range(batch)) if indices is None else indices.tolist()


@torch.library.custom_op(
    "sgl_kernel::causal_conv1d_fwd_cpu",
    mutates_args=("conv_states",),
    device_types="cpu",
    schema="(Tensor x, Tensor weight, Tensor? bias, Tensor(a!)? conv_states, "
    "Tensor? query_start_loc, Tensor? cache_indices, Tensor? has_initial_state, "
    "bool silu_activation, int pad_slot_id, bool is_vnni) -> Tensor",
)
def causal_conv1d_fwd_cpu(
    x: torch.Tensor,
    weight: torch.Tensor,
    bias: torch.Tensor | None,
    conv_states: torch.Tensor | None,
    query_start_loc: torch.Tensor | None,
    cache_indices: torch.Tensor | None,
    has_initial_state: torch.Tensor | None,
    silu_activation: bool,
    pad_slot_id: int,
    is_vnni: bool,
) -> torch.Tensor:
    """Prefill. x: (dim, total_tokens) with query_start_loc (sequences packed back to back, the
    view SGLang passes is the transpose of its (tokens, dim) activations), else (batch, dim,
    seqlen). Sequence i starts from conv_states[cache_indices[i]] where has_initial_state[i], else
    from zeros, and when conv_states is given leaves its last width - 1 inputs there. A sequence
    whose slot is pad_slot_id is computed from zeros and stores nothing. Returns a new tensor of
    x's shape and strides.

    SGLang's AMX kernel ignores has_initial_state when given query_start_loc (a TODO there), which
    would restart every chunk of a chunked prefill and every cached prefix from zeros; this
    follows its fixed-length path and the CUDA kernel instead."""
    _check_plain_weight("causal_conv1d_fwd_cpu", is_vnni)
    width = weight.shape[-1]
    if query_start_loc is not None:
        if x.dim() != 2:
            raise ValueError("causal_conv1d_fwd_cpu: x must be (dim, tokens) with query_start_loc")
        starts = query_start_loc.tolist()
        sequences = [x[:, begin:end] for begin, end in itertools.pairwise(starts)]
    else:
        if x.dim() != 3:
            raise ValueError("causal_conv1d_fwd_cpu: x must be (batch, dim, seqlen)")
        sequences = list(x.unbind(0))
    out = torch.empty_like(x)
    if query_start_loc is not None:
        out.zero_()  # rows past the last sequence (padding) are not computed
    outputs = out.unbind(0) if query_start_loc is None else None
    initial = [False] * len(sequences) if has_initial_state is None else has_initial_state.tolist()
    position = 0
    slots = _slots(cache_indices, len(sequences))
    for i, (sequence, slot) in enumerate(zip(sequences, slots, strict=True)):
        dim, steps = sequence.shape
        if steps == 0:
            continue
        use_state = conv_states is not None and slot != pad_slot_id
        if use_state and initial[i]:
            assert conv_states is not None
            history = conv_states[slot].to(sequence.dtype)
        else:
            history = sequence.new_zeros(dim, width - 1)
        window = torch.cat([history, sequence], dim=1)
        result = _conv(window, weight, bias, silu_activation).to(out.dtype)
        if outputs is None:
            out[:, position : position + steps] = result
            position += steps
        else:
            outputs[i].copy_(result)
        if use_state:
            assert conv_states is not None
            conv_states[slot] = window[:, steps:].to(conv_states.dtype)
    return out


@torch.library.custom_op(
    "sgl_kernel::causal_conv1d_update_cpu",
    mutates_args=("conv_states",),
    device_types="cpu",
    schema="(Tensor x, Tensor(a!) conv_states, Tensor weight, Tensor? bias, bool silu_activation, "
    "Tensor? cache_seqlens, Tensor? conv_state_indices, int pad_slot_id, bool is_vnni) -> Tensor",
)
def causal_conv1d_update_cpu(
    x: torch.Tensor,
    conv_states: torch.Tensor,
    weight: torch.Tensor,
    bias: torch.Tensor | None,
    silu_activation: bool,
    cache_seqlens: torch.Tensor | None,
    conv_state_indices: torch.Tensor | None,
    pad_slot_id: int,
    is_vnni: bool,
) -> torch.Tensor:
    """Decode, one token per request. x: (batch, dim); request i's history is
    conv_states[conv_state_indices[i]] (or slot i), which then shifts by one to take x[i].
    A request whose slot is pad_slot_id is computed from zeros and stores nothing.
    Returns a new (batch, dim) tensor."""
    _check_plain_weight("causal_conv1d_update_cpu", is_vnni)
    if cache_seqlens is not None:
        raise ValueError(
            "causal_conv1d_update_cpu: cache_seqlens (a circular state) is not supported"
        )
    if x.dim() != 2:
        raise ValueError("causal_conv1d_update_cpu: x must be (batch, dim), one token per request")
    batch = x.shape[0]
    slots = (
        torch.arange(batch, device=x.device)
        if conv_state_indices is None
        else conv_state_indices.long()
    )
    live = slots != pad_slot_id
    history = conv_states[slots.where(live, 0)].to(x.dtype)
    history[~live] = 0
    window = torch.cat([history, x.unsqueeze(-1)], dim=-1)  # (batch, dim, width)
    out = (window.float() * weight.float()).sum(dim=-1)
    if bias is not None:
        out = out + bias.float()
    if silu_activation:
        out = F.silu(out)
    conv_states[slots[live]] = window[live, :, 1:].to(conv_states.dtype)
    return out.to(x.dtype)
