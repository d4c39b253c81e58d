"""GPT-2 from transformers, built from its config with random weights (nothing downloaded). The embedding
and the LM head share one weight (tied); the attention is PyTorch's SDPA, captured as one operator.

    flexpipe capture examples/hugging_face/gpt2.py:tiny --input input_ids=2x16:int64 --loss cross_entropy \
        -o gpt2.graph.json
    flexpipe train --model gpt2.graph.json --schedule 1f1b -p 2 -m 4 --steps 3 --data data.pt \
        --export-weights trained/

`small` is GPT-2 small's geometry (124M parameters, 12 layers of width 768, 1024 positions)."""
from transformers import GPT2Config, GPT2LMHeadModel


def tiny():
    return GPT2LMHeadModel(GPT2Config(n_layer=2, n_embd=32, n_head=2, vocab_size=64, n_positions=32,
                                      bos_token_id=0, eos_token_id=0))


def small():
    return GPT2LMHeadModel(GPT2Config())
