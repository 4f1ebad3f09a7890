#!/usr/bin/env python3
"""Writes bench/llama/configs/*.json with transformers' own config classes (LlamaConfig, Qwen2Config) and
save_pretrained, so that each file is exactly what transformers writes (model_type, architectures, its defaults).
The files are committed; this script is how they were made and how to remake them for another transformers
(they were written by transformers 5.17.0, the GPU machine's version: it writes RoPE as "rope_parameters"
{"rope_type", "rope_theta", ...}; the hub's files written by transformers 4 carry "rope_theta" and "rope_scaling"
instead, which transformers 5 still reads). Needs transformers only (no torch):
    python3 bench/llama/make_configs.py [OUT_DIR (default bench/llama/configs)]
"""
import json
import os
import sys
import tempfile

from transformers import LlamaConfig, Qwen2Config

LLAMA3_ROPE = {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
               "original_max_position_embeddings": 8192}


def llama(**kw):
    return LlamaConfig(architectures=["LlamaForCausalLM"], **kw)


def qwen2(layers, **kw):
    # Qwen2 always has q/k/v biases (Qwen2Attention builds them unconditionally; no config field says so).
    # sliding_window and max_window_layers as in Qwen's own files; use_sliding_window false: full attention.
    return Qwen2Config(architectures=["Qwen2ForCausalLM"], num_hidden_layers=layers, max_window_layers=layers,
                       use_sliding_window=False, **kw)


CONFIGS = {
    # TinyLlama/TinyLlama-1.1B (intermediate-step-1431k-3T): GQA 32/4, head_dim 64, untied
    "tinyllama-1.1b": llama(hidden_size=2048, num_hidden_layers=22, num_attention_heads=32, num_key_value_heads=4,
                            intermediate_size=5632, vocab_size=32000, rope_theta=10000.0, rms_norm_eps=1e-5,
                            max_position_embeddings=2048, tie_word_embeddings=False, bos_token_id=1, eos_token_id=2),
    # meta-llama/Llama-2-7b-hf: multi-head (32 kv heads), untied
    "llama2-7b": llama(hidden_size=4096, num_hidden_layers=32, num_attention_heads=32, num_key_value_heads=32,
                       intermediate_size=11008, vocab_size=32000, rope_theta=10000.0, rms_norm_eps=1e-5,
                       max_position_embeddings=4096, tie_word_embeddings=False, bos_token_id=1, eos_token_id=2),
    # meta-llama/Llama-2-13b-hf: multi-head (40 kv heads), untied
    "llama2-13b": llama(hidden_size=5120, num_hidden_layers=40, num_attention_heads=40, num_key_value_heads=40,
                        intermediate_size=13824, vocab_size=32000, rope_theta=10000.0, rms_norm_eps=1e-5,
                        max_position_embeddings=4096, tie_word_embeddings=False, bos_token_id=1, eos_token_id=2),
    # meta-llama/Llama-3.1-8B: GQA 32/8, head_dim 128, rope_scaling "llama3", untied
    "llama3-8b": llama(hidden_size=4096, num_hidden_layers=32, num_attention_heads=32, num_key_value_heads=8,
                       intermediate_size=14336, vocab_size=128256, rope_theta=500000.0, rope_scaling=LLAMA3_ROPE,
                       rms_norm_eps=1e-5, max_position_embeddings=131072, tie_word_embeddings=False,
                       bos_token_id=128000, eos_token_id=128001),
    # Qwen/Qwen2-0.5B and Qwen/Qwen2-1.5B: GQA, q/k/v bias, tied embeddings
    "qwen2-0.5b": qwen2(24, hidden_size=896, num_attention_heads=14, num_key_value_heads=2, intermediate_size=4864,
                        vocab_size=151936, rope_theta=1000000.0, rms_norm_eps=1e-6, max_position_embeddings=131072,
                        sliding_window=131072, tie_word_embeddings=True, bos_token_id=151643, eos_token_id=151643),
    "qwen2-1.5b": qwen2(28, hidden_size=1536, num_attention_heads=12, num_key_value_heads=2, intermediate_size=8960,
                        vocab_size=151936, rope_theta=1000000.0, rms_norm_eps=1e-6, max_position_embeddings=131072,
                        sliding_window=131072, tie_word_embeddings=True, bos_token_id=151643, eos_token_id=151643),
    # Correctness variants (fp32 on one GPU in seconds): each family's features, 2 layers
    "tiny-tinyllama": llama(hidden_size=2048, num_hidden_layers=2, num_attention_heads=32, num_key_value_heads=4,
                            intermediate_size=5632, vocab_size=32000, rope_theta=10000.0, rms_norm_eps=1e-5,
                            max_position_embeddings=2048, tie_word_embeddings=False, bos_token_id=1, eos_token_id=2),
    "tiny-llama3": llama(hidden_size=1024, num_hidden_layers=2, num_attention_heads=8, num_key_value_heads=2,
                         intermediate_size=3584, vocab_size=128256, rope_theta=500000.0, rope_scaling=LLAMA3_ROPE,
                         rms_norm_eps=1e-5, max_position_embeddings=131072, tie_word_embeddings=False,
                         bos_token_id=128000, eos_token_id=128001),
    # Qwen2-0.5B's shape with 2 layers and an UNTIED head (the untied Qwen2-shaped check)
    "tiny-qwen2": qwen2(2, hidden_size=896, num_attention_heads=14, num_key_value_heads=2, intermediate_size=4864,
                        vocab_size=151936, rope_theta=1000000.0, rms_norm_eps=1e-6, max_position_embeddings=131072,
                        sliding_window=131072, tie_word_embeddings=False, bos_token_id=151643, eos_token_id=151643),
    # CPU CI: byte vocabulary, head_dim 16, GQA 4/2, untied
    "tiny-ci": llama(hidden_size=64, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                     intermediate_size=160, vocab_size=256, rope_theta=10000.0, rms_norm_eps=1e-5,
                     max_position_embeddings=64, tie_word_embeddings=False, bos_token_id=1, eos_token_id=2),
    # CPU CI, the two other paths at the same size: rope_scaling "llama3" (with head_dim 16 and theta 10000 its
    # wavelengths span 6 to 19,000 positions, so the scaled (> 8192), the smoothed and the kept bands all occur;
    # max_position_embeddings as Llama 3.1's, since transformers warns when it is below the original 8192), and
    # Qwen2's q/k/v biases
    "tiny-ci-llama3": llama(hidden_size=64, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                            intermediate_size=160, vocab_size=256, rope_theta=10000.0, rope_scaling=LLAMA3_ROPE,
                            rms_norm_eps=1e-5, max_position_embeddings=131072, tie_word_embeddings=False,
                            bos_token_id=1, eos_token_id=2),
    "tiny-ci-qwen2": qwen2(2, hidden_size=64, num_attention_heads=4, num_key_value_heads=2, intermediate_size=160,
                           vocab_size=256, rope_theta=10000.0, rms_norm_eps=1e-6, max_position_embeddings=64,
                           sliding_window=64, tie_word_embeddings=False, bos_token_id=1, eos_token_id=2),
}


def main():
    out = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(os.path.abspath(__file__)), "configs")
    os.makedirs(out, exist_ok=True)
    for name, config in CONFIGS.items():
        with tempfile.TemporaryDirectory() as tmp:
            config.save_pretrained(tmp)  # what transformers writes for this config (its config.json)
            with open(os.path.join(tmp, "config.json")) as f:
                text = f.read()
        json.loads(text)
        with open(os.path.join(out, name + ".json"), "w") as f:
            f.write(text)
        print(f"{name}.json")


if __name__ == "__main__":
    main()
