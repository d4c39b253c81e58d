"""A captured ViT-L/16 against the zoo's analytic `vit-l16` (docs/model-zoo.md), both at 5 tokens (a 32x32
image in 16x16 patches plus the class token) and micro-batch 2.

Where they differ, and why:
* Parameters: the position embedding has one row of 1024 per token, and the zoo's is sized for 224x224
  images (197 tokens): exactly 192 x 1024 more than the captured model's.
* Saved bytes: the zoo counts bf16 activations (2 bytes) and dropout masks (1 byte per element);
  torchvision's ViT trains in float32 (4 bytes) and its dropout is 0 (no mask). With masks removed
  and element sizes doubled, a transformer layer's saved bytes agree within 2%: the rest is how
  PyTorch's multi-head attention and the zoo's split attention save their statistics."""
import json
import os
import subprocess
import unittest

import torch
import torchvision

import reference
from flexpipe import capture

BINARY = os.environ.get("FLEXPIPE_BINARY", "")
TOKENS, WIDTH, BATCH = 5, 1024, 2


@unittest.skipUnless(BINARY, "FLEXPIPE_BINARY names the flexpipe binary (ctest sets it)")
class CapturedVitL16AgreesWithTheZoo(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        torch.manual_seed(0)
        model = torchvision.models.VisionTransformer(image_size=32, patch_size=16, num_layers=24, num_heads=16,
                                                     hidden_dim=WIDTH, mlp_dim=4096)
        cls.captured = capture(model, [torch.randn(BATCH, 3, 32, 32)], "cross_entropy", time_operators=False)
        done = subprocess.run([BINARY, "model", "show", "vit-l16", "--seq-len", str(TOKENS), "--microbatch-size",
                               str(BATCH), "--json"], capture_output=True, text=True, check=True)
        cls.zoo = json.loads(done.stdout)

    def test_parameters_differ_by_the_position_rows_of_224_pixel_images(self):
        captured = sum(n.get("parameters", 0) for n in self.captured["nodes"])
        self.assertEqual(self.zoo["parameters"] - captured, (197 - TOKENS) * WIDTH)

    def test_a_layer_saves_what_the_zoo_says_in_float32_without_dropout_masks(self):
        captured = sum(reference.at_batch(n.get("saved_bytes", 0), BATCH)
                       - reference.at_batch(n.get("shared_saved_bytes", 0), BATCH)
                       for n in self.captured["nodes"] if n["layer"] == "encoder.layers.encoder_layer_7")
        zoo_bf16 = sum(n["saved_bytes"] for n in self.zoo["nodes"]
                       if n["name"].startswith("layer.7.") and n["kind"] != "dropout")
        self.assertAlmostEqual(captured / (2 * zoo_bf16), 1.0, delta=0.02)


if __name__ == "__main__":
    unittest.main()
