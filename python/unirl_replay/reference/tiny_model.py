"""Build a tiny, local, deterministic Qwen2-architecture model for CPU reference rollouts.

Nothing is downloaded: the tokenizer is a byte-level BPE trained here on a synthetic word list,
the weights are drawn from a seeded generator, and the whole directory is a few MB.

The model is *scripted*: every token embedding carries one large shared component, so the final
hidden state points (almost) the same way at every position, and the output head reads only that
component. The next-token distribution is therefore (almost) context-free and fixed by
``TinyModelSpec``: mostly filler words, a small end-of-turn probability, and a small probability of
emitting one of a few single-token tool calls (``<tool_call>{...}</tool_call>`` as one added
token). A random-weight model would never produce a parseable tool call; this one does, with a
known rate, so UniRL's ToolEnvironment runs real tool calls.

Usage (reference environment only; needs torch, transformers, tokenizers)::

    python -m unirl_replay.reference.tiny_model OUT_DIR [--seed 0]
"""

from __future__ import annotations

import argparse
import json
import math
import os
import random
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Dict, List, Tuple

CHAT_TEMPLATE = (
    "{% for m in messages %}<|im_start|>{{ m['role'] }}\n"
    "{% if m['content'] is string %}{{ m['content'] }}"
    "{% else %}{% for c in m['content'] %}{{ c['text'] if c['type'] == 'text' else '' }}{% endfor %}"
    "{% endif %}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)

SPECIAL_TOKENS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
EOS_TOKEN = "<|im_end|>"

# Single-token tool calls (non-special added tokens, so they survive skip_special_tokens).
TOOL_CALL_TOKENS = [
    '<tool_call>{"name": "calculator", "arguments": {"expression": "17*23+4"}}</tool_call>',
    '<tool_call>{"name": "lookup", "arguments": {"key": "alpha"}}</tool_call>',
    '<tool_call>{"name": "lookup", "arguments": {"key": "beta"}}</tool_call>',
]

_SYLLABLES = [
    "ka", "lo", "mi", "ra", "ten", "vor", "sa", "qui", "del", "pha", "zu", "ne", "tor", "bi",
    "gal", "we", "xo", "ru", "fen", "dra", "is", "on", "ul", "ex", "ma", "cor", "ly", "sen",
]


@dataclass(frozen=True)
class TinyModelSpec:
    """Architecture and scripted next-token distribution of the tiny model."""

    seed: int = 0
    hidden_size: int = 256
    intermediate_size: int = 512
    num_hidden_layers: int = 4
    num_attention_heads: int = 4
    num_key_value_heads: int = 2
    max_position_embeddings: int = 8192
    bpe_vocab_size: int = 1024
    # Scripted output distribution (probabilities at temperature 1).
    p_eos: float = 0.05
    p_tool_call: float = 0.07
    n_filler_tokens: int = 256
    shared_component: float = 50.0
    noise_std: float = 0.02
    tool_call_tokens: Tuple[str, ...] = field(default_factory=lambda: tuple(TOOL_CALL_TOKENS))


def synthetic_words(rng: random.Random, n: int) -> List[str]:
    """Deterministic pronounceable pseudo-words (never real user text)."""
    return ["".join(rng.choice(_SYLLABLES) for _ in range(rng.randint(1, 3))) for _ in range(n)]


def synthetic_text(seed: int, n_words: int) -> str:
    rng = random.Random(seed)
    return " ".join(synthetic_words(rng, n_words))


def _train_tokenizer(spec: TinyModelSpec):
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    rng = random.Random(spec.seed)
    corpus = [" ".join(synthetic_words(rng, 64)) for _ in range(400)]
    corpus += ["0123456789 + - * / = ( ) . , : ; ? !"] * 4
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=spec.bpe_vocab_size,
        special_tokens=list(SPECIAL_TOKENS),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(corpus, trainer=trainer)
    model = json.loads(tok.to_str())["model"]
    vocab: Dict[str, int] = dict(model["vocab"])
    merges = [tuple(m.split(" ", 1)) if isinstance(m, str) else tuple(m) for m in model["merges"]]
    return vocab, merges


def build_tokenizer(spec: TinyModelSpec):
    """A transformers Qwen2Tokenizer (byte-level BPE) with a trivial chat template."""
    from transformers import AddedToken
    from transformers.models.qwen2.tokenization_qwen2 import Qwen2Tokenizer

    vocab, merges = _train_tokenizer(spec)
    tokenizer = Qwen2Tokenizer(
        vocab=vocab,
        merges=merges,
        unk_token="<|endoftext|>",
        eos_token=EOS_TOKEN,
        pad_token="<|endoftext|>",
    )
    tokenizer.add_special_tokens(
        {"additional_special_tokens": [AddedToken(t, special=True, normalized=False) for t in SPECIAL_TOKENS]}
    )
    tokenizer.add_tokens([AddedToken(t, special=False, normalized=False) for t in spec.tool_call_tokens])
    tokenizer.chat_template = CHAT_TEMPLATE
    return tokenizer


def _scripted_logits(spec: TinyModelSpec, tokenizer, vocab_size: int):
    """Target logit per token id for the context-free scripted distribution."""
    import torch

    vocab = tokenizer.get_vocab()
    eos_id = int(vocab[EOS_TOKEN])
    tool_ids = [int(vocab[t]) for t in spec.tool_call_tokens]
    specials = {int(vocab[t]) for t in SPECIAL_TOKENS}
    rng = random.Random(spec.seed + 1)
    # Filler: word-like tokens that start with the byte-level space marker, so text stays readable.
    candidates = sorted(
        i for t, i in vocab.items() if t.startswith("\u0120") and len(t) > 2 and i not in specials
    )
    filler = rng.sample(candidates, min(spec.n_filler_tokens, len(candidates)))
    p_filler = 1.0 - spec.p_eos - spec.p_tool_call
    logits = torch.full((vocab_size,), -30.0)
    logits[eos_id] = math.log(spec.p_eos)
    for tid in tool_ids:
        logits[tid] = math.log(spec.p_tool_call / len(tool_ids))
    for fid in filler:
        logits[fid] = math.log(p_filler / len(filler))
    return logits, eos_id


def build_tiny_model(out_dir: str | os.PathLike, spec: TinyModelSpec | None = None) -> Path:
    """Write config, weights (safetensors), tokenizer and chat template into ``out_dir``."""
    import torch
    from transformers import Qwen2Config, Qwen2ForCausalLM

    spec = spec or TinyModelSpec()
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    torch.manual_seed(spec.seed)

    tokenizer = build_tokenizer(spec)
    vocab_size = int(math.ceil(len(tokenizer) / 64.0) * 64)
    eos_id = int(tokenizer.convert_tokens_to_ids(EOS_TOKEN))
    pad_id = int(tokenizer.convert_tokens_to_ids("<|endoftext|>"))
    config = Qwen2Config(
        vocab_size=vocab_size,
        hidden_size=spec.hidden_size,
        intermediate_size=spec.intermediate_size,
        num_hidden_layers=spec.num_hidden_layers,
        num_attention_heads=spec.num_attention_heads,
        num_key_value_heads=spec.num_key_value_heads,
        max_position_embeddings=spec.max_position_embeddings,
        tie_word_embeddings=False,
        bos_token_id=pad_id,
        eos_token_id=eos_id,
        pad_token_id=pad_id,
        initializer_range=spec.noise_std,
        dtype="bfloat16",
    )
    model = Qwen2ForCausalLM(config)
    gen = torch.Generator().manual_seed(spec.seed)
    with torch.no_grad():
        for name, param in model.named_parameters():
            if param.dim() >= 2:
                param.copy_(torch.randn(param.shape, generator=gen) * spec.noise_std)
            elif name.endswith("norm.weight") or name.endswith("layernorm.weight"):
                param.fill_(1.0)
            else:
                param.zero_()
        emb = model.model.embed_tokens.weight
        emb[:, 0] = spec.shared_component
        target, _ = _scripted_logits(spec, tokenizer, vocab_size)
        head = model.lm_head.weight
        head.zero_()
        head[:, 0] = target / math.sqrt(spec.hidden_size)
    model = model.to(torch.bfloat16)
    model.generation_config.eos_token_id = eos_id
    model.generation_config.pad_token_id = pad_id
    model.generation_config.do_sample = True
    model.save_pretrained(out, safe_serialization=True)
    tokenizer.save_pretrained(out)
    (out / "tiny_model_spec.json").write_text(json.dumps(asdict(spec), indent=2, sort_keys=True) + "\n")
    return out


def main(argv: List[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("out_dir")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    path = build_tiny_model(args.out_dir, TinyModelSpec(seed=args.seed))
    print(path)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())


MODEL_NAME = "tiny-scripted-qwen2"


def default_model_dir(seed: int) -> Path:
    """Cache location of the tiny model built with ``seed`` (``$XDG_CACHE_HOME`` or ``~/.cache``)."""
    cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return cache / "unirl-replay" / f"{MODEL_NAME}-seed{seed}"


def ensure_model(model_dir: str | os.PathLike | None, seed: int) -> Path:
    """The tiny model at ``model_dir`` (default: the cache), built there first when missing.

    Built into a temporary sibling and renamed, so a concurrent run never sees half a model.
    """
    import shutil

    path = Path(model_dir) if model_dir else default_model_dir(seed)
    if not (path / "config.json").exists():
        tmp = path.with_name(path.name + f".tmp{os.getpid()}")
        build_tiny_model(tmp, TinyModelSpec(seed=seed))
        try:
            tmp.rename(path)
        except OSError:  # built concurrently by another run
            shutil.rmtree(tmp, ignore_errors=True)
    return path


def weights_sha256(model_dir: str | os.PathLike) -> str:
    """sha256 over the model's safetensors files in name order (``ModelIdentity.weights_sha256``)."""
    import hashlib

    h = hashlib.sha256()
    for p in sorted(Path(model_dir).glob("*.safetensors")):
        h.update(p.read_bytes())
    return h.hexdigest()
