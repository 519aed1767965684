"""A tiny model folder of a family: config.json, random bf16 weights in model.safetensors, the
tokenizer and the chat template its model publishes (templates/). Nothing it says is meaningful;
what the node guarantees (the format, the constraints) holds whatever the weights. Qwen3.5's is its
own hybrid architecture (Gated DeltaNet layers, one gated-attention layer in four, a vision
encoder), made and saved by transformers' own classes, so that its checkpoint is laid out as
Qwen's are."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import torch
from safetensors.torch import save_file
from tokenizers import AddedToken, Tokenizer

TEMPLATES = Path(__file__).parent / "templates"
HIDDEN, LAYERS, HEADS, KV_HEADS, HEAD_DIM, FFN = 64, 2, 2, 1, 32, 128
# The toy shape in config.json's terms, the families' models' and the embedded model's twin's.
TOY_SHAPE = {
    "hidden_size": HIDDEN,
    "intermediate_size": FFN,
    "num_hidden_layers": LAYERS,
    "num_attention_heads": HEADS,
    "num_key_value_heads": KV_HEADS,
    "head_dim": HEAD_DIM,
}


@dataclass(frozen=True)
class Family:
    name: str
    template: str  # the published template, under templates/
    architecture: str
    model_type: str
    added: tuple[str, ...]  # the family's own tokens, beside the embedded vocabulary's
    special: tuple[str, ...] = ()  # its special tokens (turn markers), added as such
    bos: str = "<|im_start|>"
    eos: str = "<|im_end|>"
    qk_norm: bool = False  # Qwen3's norms on queries and keys
    stops: tuple[str, ...] = ()  # tokens that end a turn beside eos (Harmony's <|call|>)

    @property
    def hybrid(self) -> bool:
        return self.architecture == "Qwen3_5ForConditionalGeneration"


QWEN_TOKENS = (
    "<tool_call>", "</tool_call>", "<think>", "</think>", "<tool_response>", "</tool_response>",
    "<|vision_start|>", "<|vision_end|>", "<|image_pad|>", "<|video_pad|>",
)  # fmt: skip
QWEN3_5 = Family(
    "qwen3_5",
    "qwen3_coder/Qwen--Qwen3.5-9B.jinja",
    "Qwen3_5ForConditionalGeneration",
    "qwen3_5",
    QWEN_TOKENS,
)
KIMI_K2 = Family(
    "kimi_k2",
    "kimi_k2/moonshotai--Kimi-K2-Thinking.jinja",
    "Qwen3ForCausalLM",
    "qwen3",
    (),
    special=("<|im_system|>", "<|im_user|>", "<|im_assistant|>", "<|im_middle|>", "<|im_end|>",
             "<|tool_calls_section_begin|>", "<|tool_calls_section_end|>", "<|tool_call_begin|>",
             "<|tool_call_argument_begin|>", "<|tool_call_end|>", "<think>", "</think>"),
    bos="<|im_system|>",
    eos="<|im_end|>",
    qk_norm=True,
)  # fmt: skip
MISTRAL = Family(
    "mistral",
    "mistral/mistralai--Mistral-Small-3.1-24B-Instruct-2503.jinja",
    "MistralForCausalLM",
    "mistral",
    (),
    special=("<s>", "</s>", "[INST]", "[/INST]", "[SYSTEM_PROMPT]", "[/SYSTEM_PROMPT]",
             "[AVAILABLE_TOOLS]", "[/AVAILABLE_TOOLS]", "[TOOL_CALLS]", "[ARGS]",
             "[TOOL_RESULTS]", "[/TOOL_RESULTS]"),
    bos="<s>",
    eos="</s>",
)  # fmt: skip
GPT_OSS = Family(
    "gpt_oss",
    "gpt-oss/openai--gpt-oss-120b.jinja",
    "LlamaForCausalLM",
    "llama",
    (),
    special=("<|startoftext|>", "<|endoftext|>", "<|start|>", "<|end|>", "<|message|>",
             "<|channel|>", "<|constrain|>", "<|return|>", "<|call|>"),
    bos="<|startoftext|>",
    eos="<|return|>",
    stops=("<|call|>",),
)  # fmt: skip
FAMILIES = {family.name: family for family in (QWEN3_5, KIMI_K2, MISTRAL, GPT_OSS)}


def make(folder: Path, family: Family, embedded: Path, seed: int = 0) -> Path:
    """The family's tiny model in `folder`, its tokenizer the embedded model's plus the family's
    tokens."""
    folder.mkdir(parents=True, exist_ok=True)
    tokenizer = Tokenizer.from_file(str(embedded / "tokenizer.json"))
    tokenizer.add_tokens([AddedToken(token, normalized=False) for token in family.added])
    tokenizer.add_special_tokens([AddedToken(token, special=True) for token in family.special])
    tokenizer.save(str(folder / "tokenizer.json"))
    config = json.loads((embedded / "tokenizer_config.json").read_text())
    config |= {"bos_token": family.bos, "eos_token": family.eos, "pad_token": family.eos}
    (folder / "tokenizer_config.json").write_text(json.dumps(config, indent=2))
    (folder / "chat_template.jinja").write_text((TEMPLATES / family.template).read_text())
    vocab = tokenizer.get_vocab_size(with_added_tokens=True)
    eos = tokenizer.token_to_id(family.eos)
    bos = tokenizer.token_to_id(family.bos)
    if family.hybrid:
        _qwen3_5(folder, tokenizer, vocab, eos, seed)
        return folder
    (folder / "config.json").write_text(json.dumps(_config(family, vocab, bos, eos), indent=2))
    stops = [eos, *(tokenizer.token_to_id(token) for token in family.stops)]
    generation = {"bos_token_id": bos, "eos_token_id": stops if family.stops else eos}
    (folder / "generation_config.json").write_text(json.dumps(generation, indent=2))
    weights = _weights(vocab, family.qk_norm, seed)
    save_file(weights, str(folder / "model.safetensors"), metadata={"format": "pt"})
    return folder


def twin(folder: Path, embedded: Path, seed: int = 0) -> Path:
    """The embedded model at toy size in `folder`: its tokenizer, chat template, generation
    settings and window (its rope scaling and `max_position_embeddings`) as they are, its layers
    as narrow and few as the families' and random. A prompt is the embedded model's, token for
    token, and prefills in a fraction of the time."""
    folder.mkdir(parents=True, exist_ok=True)
    for name in ("tokenizer.json", "tokenizer_config.json", "chat_template.jinja",
                 "generation_config.json"):  # fmt: skip
        (folder / name).write_bytes((embedded / name).read_bytes())
    config = json.loads((embedded / "config.json").read_text())
    config |= TOY_SHAPE | {"tie_word_embeddings": True}
    (folder / "config.json").write_text(json.dumps(config, indent=2))
    weights = _weights(int(config["vocab_size"]), qk_norm=False, seed=seed)
    save_file(weights, str(folder / "model.safetensors"), metadata={"format": "pt"})
    return folder


def _config(family: Family, vocab: int, bos: int, eos: int) -> dict[str, object]:
    return {
        "architectures": [family.architecture],
        "model_type": family.model_type,
        "vocab_size": vocab,
        **TOY_SHAPE,
        "hidden_act": "silu",
        "max_position_embeddings": 4096,
        "rms_norm_eps": 1e-6,
        "rope_theta": 10000.0,
        "tie_word_embeddings": True,
        "torch_dtype": "bfloat16",
        "bos_token_id": bos,
        "eos_token_id": eos,
    }


def _weights(vocab: int, qk_norm: bool, seed: int) -> dict[str, torch.Tensor]:
    generator = torch.Generator().manual_seed(seed)

    def random(*shape: int) -> torch.Tensor:
        return (torch.randn(*shape, generator=generator) * 0.05).to(torch.bfloat16)

    def ones(size: int) -> torch.Tensor:
        return torch.ones(size, dtype=torch.bfloat16)

    weights = {"model.embed_tokens.weight": random(vocab, HIDDEN)}
    weights["model.norm.weight"] = ones(HIDDEN)
    for layer in range(LAYERS):
        prefix = f"model.layers.{layer}."
        weights |= {
            prefix + "input_layernorm.weight": ones(HIDDEN),
            prefix + "post_attention_layernorm.weight": ones(HIDDEN),
            prefix + "self_attn.q_proj.weight": random(HEADS * HEAD_DIM, HIDDEN),
            prefix + "self_attn.k_proj.weight": random(KV_HEADS * HEAD_DIM, HIDDEN),
            prefix + "self_attn.v_proj.weight": random(KV_HEADS * HEAD_DIM, HIDDEN),
            prefix + "self_attn.o_proj.weight": random(HIDDEN, HEADS * HEAD_DIM),
            prefix + "mlp.gate_proj.weight": random(FFN, HIDDEN),
            prefix + "mlp.up_proj.weight": random(FFN, HIDDEN),
            prefix + "mlp.down_proj.weight": random(HIDDEN, FFN),
        }
        if qk_norm:
            weights[prefix + "self_attn.q_norm.weight"] = ones(HEAD_DIM)
            weights[prefix + "self_attn.k_norm.weight"] = ones(HEAD_DIM)
    return weights


# Qwen3.5 at a toy size: the 9B's proportions (3 Gated DeltaNet layers to 1 attention layer, twice
# as many value heads as key heads, a quarter of each head rotated, the output gate), 64 wide.
QWEN3_5_TEXT = {
    "hidden_size": HIDDEN,
    "intermediate_size": FFN,
    "num_hidden_layers": 4,
    "full_attention_interval": 4,
    "num_attention_heads": HEADS,
    "num_key_value_heads": KV_HEADS,
    "head_dim": 64,
    "attn_output_gate": True,
    "partial_rotary_factor": 0.25,
    "linear_conv_kernel_dim": 4,
    "linear_num_key_heads": 2,
    "linear_num_value_heads": 4,
    "linear_key_head_dim": 32,
    "linear_value_head_dim": 32,
    "max_position_embeddings": 4096,
    "rms_norm_eps": 1e-6,
    "rope_parameters": {"rope_type": "default", "rope_theta": 10000000.0,
                        "partial_rotary_factor": 0.25, "mrope_section": [3, 3, 2],
                        "mrope_interleaved": True},
}  # fmt: skip
# Its vision encoder: one block, 16-pixel patches merged 2x2 into a token of the text's width.
QWEN3_5_VISION = {
    "depth": 1,
    "hidden_size": 32,
    "intermediate_size": 64,
    "num_heads": 2,
    "patch_size": 16,
    "spatial_merge_size": 2,
    "temporal_patch_size": 2,
    "out_hidden_size": HIDDEN,
    "num_position_embeddings": 64,
    "deepstack_visual_indexes": [],
}
QWEN3_5_PIXELS = {
    "patch_size": 16,
    "temporal_patch_size": 2,
    "merge_size": 2,
    "image_mean": [0.5, 0.5, 0.5],
    "image_std": [0.5, 0.5, 0.5],
    "processor_class": "Qwen3VLProcessor",
}


def _qwen3_5(folder: Path, tokenizer: Tokenizer, vocab: int, eos: int, seed: int) -> None:
    """config.json and model.safetensors as transformers saves a Qwen3.5 model it made, plus
    what its checkpoints carry beside: the layer pattern as `full_attention_interval` (which
    SGLang reads), the image and video processors' settings."""
    from server.torch_compat import ensure_torchvision_loadable

    ensure_torchvision_loadable()  # transformers' vision models import torchvision
    from transformers import Qwen3_5Config, Qwen3_5ForConditionalGeneration

    vision_tokens = {
        f"{kind}_token_id": tokenizer.token_to_id(token)
        for kind, token in (("image", "<|image_pad|>"), ("video", "<|video_pad|>"),
                            ("vision_start", "<|vision_start|>"),
                            ("vision_end", "<|vision_end|>"))
    }  # fmt: skip
    text = QWEN3_5_TEXT | {"vocab_size": vocab, "eos_token_id": eos, "tie_word_embeddings": False}
    config = Qwen3_5Config(
        text_config=text, vision_config=QWEN3_5_VISION, tie_word_embeddings=False, **vision_tokens
    )
    torch.manual_seed(seed)
    Qwen3_5ForConditionalGeneration(config).to(torch.bfloat16).save_pretrained(folder)
    saved = json.loads((folder / "config.json").read_text())
    saved["text_config"]["full_attention_interval"] = QWEN3_5_TEXT["full_attention_interval"]
    (folder / "config.json").write_text(json.dumps(saved, indent=2))
    (folder / "generation_config.json").write_text(json.dumps({"eos_token_id": eos}, indent=2))
    pixels = {"size": {"shortest_edge": 1024, "longest_edge": 1048576}} | QWEN3_5_PIXELS
    (folder / "preprocessor_config.json").write_text(
        json.dumps({"image_processor_type": "Qwen2VLImageProcessorFast"} | pixels, indent=2)
    )
    frames = {"size": {"shortest_edge": 4096, "longest_edge": 25165824}} | QWEN3_5_PIXELS
    (folder / "video_preprocessor_config.json").write_text(
        json.dumps({"video_processor_type": "Qwen3VLVideoProcessor"} | frames, indent=2)
    )
