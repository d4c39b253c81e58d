"""torchvision's classification models captured at small inputs: a subset with one model of each kind of
construction (bench/capture_torchvision.py captures all of them, docs/capture.md). Each is captured
without timing its operators (the structure and the memory are what is checked) at 2 x 3 x 32 x 32, or
the smallest square image it takes; every parameter is counted exactly once, and with the binary the
graph partitions on 4 stages."""
import json
import os
import subprocess
import tempfile
import unittest
import warnings

import torch
import torchvision

from flexpipe import CaptureError, capture

BINARY = os.environ.get("FLEXPIPE_BINARY", "")

# model: (image side, loss, what it exercises)
SUBSET = {
    "alexnet": (63, "cross_entropy", "the smallest image it takes: 63 (its third max pool needs 3x3)"),
    "resnet18": (32, "cross_entropy", "BatchNorm's buffers, in-place ReLUs, residuals"),
    "googlenet": (32, "none", "a named tuple of outputs (the auxiliary classifiers in training mode)"),
    "efficientnet_b0": (32, "cross_entropy", "stochastic depth, squeeze-and-excitation, SiLU"),
    "mobilenet_v3_small": (32, "cross_entropy", "hard swish, hard sigmoid"),
    "shufflenet_v2_x0_5": (32, "cross_entropy", "channel shuffles: chunk, transpose, view"),
    "squeezenet1_0": (32, "cross_entropy", "concatenated branches, ceil-mode pooling"),
    "convnext_tiny": (32, "cross_entropy", "layer scale parameters read by get_attr, permutes, LayerNorm2d"),
    "swin_t": (32, "cross_entropy", "buffers read in forward (relative position indices), torch.fx.wrap'd "
                                    "attention and padding, window masks from shapes"),
    "vit_b_32": (224, "cross_entropy", "a fixed image size (224), the class token and position embedding"),
}


def build(name):
    torch.manual_seed(0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # GoogLeNet warns about its initialization
        return torchvision.models.get_model(name)


class TorchvisionSubset(unittest.TestCase):
    def test_parameters_counted_exactly_and_four_stages(self):
        for name, (side, loss, _) in SUBSET.items():
            with self.subTest(name):
                model = build(name)
                inputs = [torch.randn(2, 3, side, side)]
                graph = capture(model, inputs, loss, name=name, time_operators=False)
                self.assertEqual(sum(n.get("parameters", 0) for n in graph["nodes"]),
                                 sum(p.numel() for p in model.parameters()))
                self.assertNotIn("kept_whole", graph["capture"])
                buffers = {b["name"] for n in graph["nodes"] for b in n.get("buffers", [])}
                self.assertEqual(buffers, {n for n, _ in model.named_buffers()})
                if BINARY:
                    self.partition(graph)

    def partition(self, graph):
        with tempfile.TemporaryDirectory() as directory:
            path = os.path.join(directory, "model.graph.json")
            with open(path, "w") as f:
                json.dump(graph, f)
            done = subprocess.run([BINARY, "partition", "--model", path, "-p", "4", "-m", "8", "--microbatch-size",
                                   "2", "--memory-limit", "1TB", "--json", "-q"], capture_output=True, text=True,
                                  timeout=600)
            self.assertEqual(done.returncode, 0, done.stderr)
            plan = json.loads(done.stdout)
            self.assertTrue(plan["fits"])
            self.assertEqual(len(plan["stages"]), 4)
            self.assertEqual(sum(stage["operators"] for stage in plan["stages"]), len(graph["nodes"]))

    def test_a_smaller_image_is_one_error_naming_the_model(self):
        # ViT's image size is fixed; AlexNet's pooling needs 63 pixels: one CaptureError each, naming the
        # module and the line that refused the input.
        for name, side, message in (
                ("vit_b_32", 32, r"^the inputs do not fit the model \(VisionTransformer\): AssertionError: Wrong "
                                 r"image height! Expected 224 but got 32!"),
                ("alexnet", 62, r"^the inputs do not fit the model \(AlexNet\): RuntimeError: .*Output size is too "
                                r"small")):
            with self.subTest(name), self.assertRaisesRegex(CaptureError, message):
                capture(build(name), [torch.randn(2, 3, side, side)], "cross_entropy", time_operators=False)


if __name__ == "__main__":
    unittest.main()
