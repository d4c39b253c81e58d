"""Mixtral from transformers, built from its config with random weights: a mixture of experts per layer,
top-2 routing over 4 experts whose weights are stored fused (one 3-D tensor per projection).

`experts_implementation="batched_mm"` picks transformers' experts kernel made of ATen operators (index,
bmm) at fixed shapes. The default, grouped_mm, calls an operator registered in Python, which the C++
runtime cannot run: capture says so and names this setting.

    flexpipe capture examples/hugging_face/mixtral.py:tiny --input input_ids=2x16:int64 --loss cross_entropy \
        -o mixtral.graph.json"""
from transformers import MixtralConfig, MixtralForCausalLM


def tiny():
    return MixtralForCausalLM(MixtralConfig(num_hidden_layers=2, hidden_size=32, intermediate_size=48,
                                            num_attention_heads=4, num_key_value_heads=2, vocab_size=64,
                                            max_position_embeddings=32, num_local_experts=4, num_experts_per_tok=2,
                                            bos_token_id=0, eos_token_id=0, experts_implementation="batched_mm"))
