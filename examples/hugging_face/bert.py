"""BERT for masked language modelling, from transformers, built from its config with random weights:
token, position and segment embeddings, an attention mask as a second input, dropout after the
embeddings, in attention and after each block, and an MLM head tied to the word embedding.

    flexpipe capture examples/hugging_face/bert.py:tiny --input input_ids=2x16:int64 \
        --input attention_mask=2x16:int64 --loss cross_entropy -o bert.graph.json"""
from transformers import BertConfig, BertForMaskedLM


def tiny():
    return BertForMaskedLM(BertConfig(num_hidden_layers=2, hidden_size=32, intermediate_size=64, num_attention_heads=2,
                                      vocab_size=64, max_position_embeddings=32))
