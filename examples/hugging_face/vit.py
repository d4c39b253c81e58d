"""ViT for image classification, from transformers, built from its config with random weights: 8x8
patches of a 16x16 image (4 tokens and the class token) in `tiny`, 5 classes.

    flexpipe capture examples/hugging_face/vit.py:tiny --input pixel_values=2x3x16x16 --loss cross_entropy \
        -o vit.graph.json"""
from transformers import ViTConfig, ViTForImageClassification


def tiny():
    return ViTForImageClassification(ViTConfig(num_hidden_layers=2, hidden_size=32, intermediate_size=64,
                                               num_attention_heads=2, image_size=16, patch_size=8, num_labels=5))
