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

    def test_causal_masks_and_encoder_decoders_are_traced_through(self):
        # nn.TransformerEncoder checks its mask's type with isinstance (F._none_or_dtype: a proxy answers as
        # its value) and whether it is causal by comparing values (static: built from the sequence length,
        # or a buffer), nn.Transformer takes the decoder's mask as a tensor constant.
        tokens = torch.tensor([[1, 2, 3, 4, 5, 6], [6, 5, 4, 3, 2, 1]])
        for factory, inputs in ((models.causal_language_model, [tokens]),
                                (models.causal_language_model_mask_buffer, [tokens]),
                                (models.seq2seq, [torch.randn(2, 5, 16), torch.randn(2, 4, 16)])):
            with self.subTest(factory.__name__):
                torch.manual_seed(0)
                model = factory()
                graph_module, tracer, kept_whole = trace(model, inputs)
                self.assertEqual(kept_whole, {})
                self.assertTrue(torch.equal(graph_module(*inputs), model(*inputs)))
                attention = [n for n in graph_module.graph.nodes if n.op == "call_module" and "attn" in n.target]
                self.assertEqual(len(attention), 2 if factory is not models.seq2seq else 6)
        self.assertFalse(hasattr(model, "_tensor_constant0"))  # the constant is the traced module's alone
        self.assertIn("_tensor_constant0", dict(graph_module.named_buffers()))

    def test_buffers_read_in_forward_are_get_attr_nodes_with_values(self):
        torch.manual_seed(0)
        model = models.buffers_and_constants()
        x = torch.randn(2, 6)
        graph_module, tracer, _ = trace(model, [x])
        reads = {n.target: tracer.values[n] for n in graph_module.graph.nodes if n.op == "get_attr"}
        self.assertEqual(sorted(reads), ["_tensor_constant0", "mask", "order"])
        self.assertIs(reads["mask"], model.mask)
        self.assertTrue(torch.equal(graph_module(x), model(x)))


class StaticValues(unittest.TestCase):
    """Control flow on what no training step changes is decided at capture: shapes, buffers, constants and
    what is computed from them without random numbers. On parameters, inputs and random numbers it is
    data-dependent."""

    class Branches(torch.nn.Module):
        def __init__(self, on):
            super().__init__()
            self.on = on
            self.linear = torch.nn.Linear(4, 4)
            self.register_buffer("scale", torch.tensor(2.0))

        def forward(self, x):
            value = {"buffer": lambda: self.scale * 3, "shape": lambda: torch.full((x.shape[0],), 1.0).sum(),
                     "parameter": lambda: self.linear.weight.sum(), "random": lambda: torch.rand(1),
                     "input": lambda: x.mean()}[self.on]()
            return self.linear(x) if value > -10 else x

    def test_decided_on_buffers_and_shapes(self):
        for on in ("buffer", "shape"):
            with self.subTest(on):
                graph_module, _, kept_whole = trace(self.Branches(on), [torch.randn(2, 4)])
                self.assertEqual(kept_whole, {})
                self.assertIn("linear", [n.target for n in graph_module.graph.nodes if n.op == "call_module"])

    def test_refused_on_parameters_inputs_and_random_numbers(self):
        for on in ("parameter", "input", "random"):
            with self.subTest(on), self.assertRaisesRegex(CaptureError, r"control flow .* on a value computed from "
                                                                         r"tensor data"):
                trace(self.Branches(on), [torch.randn(2, 4)])


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
