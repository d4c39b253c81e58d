"""T5 from transformers, built from its config with random weights: an encoder-decoder that takes two
sequences (the source's input_ids and the target's decoder_input_ids), relative position biases, the
encoder's output read by every decoder layer's cross-attention, and an LM head tied to the shared
embedding.

    flexpipe capture examples/hugging_face/t5.py:tiny --input input_ids=2x16:int64 \
        --input decoder_input_ids=2x8:int64 --loss cross_entropy -o t5.graph.json"""
from transformers import T5Config, T5ForConditionalGeneration


def tiny():
    return T5ForConditionalGeneration(T5Config(num_layers=2, num_decoder_layers=2, d_model=32, d_ff=64, d_kv=8,
                                               num_heads=4, vocab_size=64, decoder_start_token_id=0))
