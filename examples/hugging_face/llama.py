"""Llama from transformers, built from its config with random weights: rotary position embeddings
(computed without gradients, in float32, as transformers does), RMSNorm, grouped-query attention (4 query
heads share 2 key-value heads in `tiny`), a SiLU-gated MLP, an untied LM head.

    flexpipe capture examples/hugging_face/llama.py:tiny --input input_ids=2x16:int64 --loss cross_entropy \
        -o llama.graph.json

`one_billion(layers)` has the geometry of Llama 3.2 1B (width 2048, 32 query and 8 key-value heads, MLP
8192, vocabulary 128256) at `layers` layers (16 in the real model)."""
from transformers import LlamaConfig, LlamaForCausalLM


def tiny():
    return LlamaForCausalLM(LlamaConfig(num_hidden_layers=2, hidden_size=32, intermediate_size=64, num_attention_heads=4,
                                        num_key_value_heads=2, vocab_size=64, max_position_embeddings=32,
                                        bos_token_id=0, eos_token_id=0))


def one_billion(layers=16):
    return LlamaForCausalLM(LlamaConfig(num_hidden_layers=layers, hidden_size=2048, intermediate_size=8192,
                                        num_attention_heads=32, num_key_value_heads=8, vocab_size=128256,
                                        max_position_embeddings=2048, tie_word_embeddings=True))
