"""The tracer: the traced graph computes what the model computes; control flow on shapes is specialized,
control flow on data keeps its module whole, or fails naming the line when it is the model itself."""
import unittest

import torch

import models
from flexpipe import CaptureError
from flexpipe.tracing import trace


class TracedGraphEqualsTheModel(unittest.TestCase):
    def check(self, factory, shape):
        torch.manual_seed(0)
        model = factory().eval()
        x = torch.randn(shape)
        graph_module, _, kept_whole = trace(model, [x])
        self.assertEqual(kept_whole, {})
        # With gradients on, as in training: under no_grad nn.TransformerEncoder takes its inference
        # fast path (one fused kernel, rounding of its own), which the traced graph does not.
        self.assertTrue(torch.equal(graph_module(x).detach(), model(x).detach()))
        return graph_module

    def test_resnet50(self):
        self.check(models.resnet50, (2, 3, 32, 32))

    def test_vit_reads_its_input_shape(self):
        # torchvision's ViT unpacks `n, c, h, w = x.shape`: plain fx cannot iterate a proxy.
        graph_module = self.check(models.vit_b16, (2, 3, 32, 32))
        self.assertIn("class_token", [n.target for n in graph_module.graph.nodes if n.op == "get_attr"])

    def test_transformer_encoder_branches_on_dimensions(self):
        # nn.TransformerEncoderLayer asks `src.dim() == 3` and more before its slow path.
        graph_module = self.check(models.transformer_encoder, (2, 10, 64))
        modules = [n.target for n in graph_module.graph.nodes if n.op == "call_module"]
        self.assertIn("layers.2.linear2", modules)

    def test_unet(self):
        self.check(models.tiny_unet, (2, 3, 8, 8))


class DataDependentControlFlow(unittest.TestCase):
    def test_a_module_that_branches_on_data_is_kept_whole(self):
        model = models.partly_traceable()
        graph_module, _, kept_whole = trace(model, [torch.randn(2, 4)])
        self.assertEqual(list(kept_whole), ["1"])
        self.assertRegex(kept_whole["1"], r"models\.py:\d+ in forward: return self\.linear\(x\) if x\.mean\(\) > 0")
        self.assertEqual([n.target for n in graph_module.graph.nodes if n.op == "call_module"], ["0", "1", "2"])

    def test_a_model_that_branches_on_data_cannot_be_captured(self):
        with self.assertRaises(CaptureError) as raised:
            trace(models.data_dependent(), [torch.randn(2, 4)])
        self.assertRegex(str(raised.exception),
                         r"^cannot trace the model \(DataDependent\): control flow .* on a value computed from tensor "
                         r"data at .*models\.py:\d+ in forward: if x\.sum\(\) > 0:$")


if __name__ == "__main__":
    unittest.main()
