"""capture() on torchvision's ResNet-50 and ViT-B/16 and on nn.TransformerEncoder stacks, checked against
the real models: parameter counts, the bytes autograd keeps, FLOP formulas by hand, the graph's shape."""
import collections
import unittest

import torch

import models
import reference
from flexpipe import capture


def _nodes_of_kind(graph, kind):
    return [n for n in graph["nodes"] if n["kind"] == kind]


class CapturedModel:
    def __init__(self, factory, shape, loss):
        torch.manual_seed(0)
        self.model = factory()
        self.inputs = [torch.randn(shape)]
        self.loss = loss
        self.graph = capture(self.model, self.inputs, loss, warmup=0, repeats=1)


CAPTURED = {}


def captured(name):
    """Each model is captured once for all the tests that read it (capturing measures; it takes seconds)."""
    if name not in CAPTURED:
        factory, shape, loss = {"resnet50": (models.resnet50, (2, 3, 32, 32), "cross_entropy"),
                                "vit_b16": (models.vit_b16, (2, 3, 32, 32), "cross_entropy"),
                                "encoder": (models.transformer_encoder, (2, 10, 64), "mse")}[name]
        CAPTURED[name] = CapturedModel(factory, shape, loss)
    return CAPTURED[name]


class AgreesWithTheRealModel(unittest.TestCase):
    MODELS = ("resnet50", "vit_b16", "encoder")

    def test_parameter_counts_equal_the_models(self):
        for name in self.MODELS:
            with self.subTest(name):
                c = captured(name)
                self.assertEqual(sum(n.get("parameters", 0) for n in c.graph["nodes"]),
                                 sum(p.numel() for p in c.model.parameters()))

    def test_saved_bytes_equal_what_autograd_keeps(self):
        for name in self.MODELS:
            with self.subTest(name):
                c = captured(name)
                real = reference.saved_activation_bytes(c.model, c.inputs, c.loss)
                self.assertAlmostEqual(reference.captured_saved_bytes(c.graph, 2) / real, 1.0, delta=0.02)

    def test_saved_bytes_scale_to_a_batch_never_measured(self):
        # The polynomial comes from batches 2 and 4; batch 5 is a prediction.
        for name in self.MODELS:
            with self.subTest(name):
                c = captured(name)
                inputs = [torch.randn((5,) + tuple(c.inputs[0].shape[1:]))]
                real = reference.saved_activation_bytes(c.model, inputs, c.loss)
                self.assertAlmostEqual(reference.captured_saved_bytes(c.graph, 5) / real, 1.0, delta=0.02)

    def test_every_operator_has_measured_times(self):
        for name in self.MODELS:
            with self.subTest(name):
                for node in captured(name).graph["nodes"]:
                    for pass_name in ("forward", "backward_input", "backward_weight"):
                        self.assertGreaterEqual(node[pass_name]["time"], 0)
                timed = [n for n in captured(name).graph["nodes"] if n["forward"]["time"] > 0]
                self.assertGreater(len(timed), len(captured(name).graph["nodes"]) // 2)

    def test_the_graph_names_the_hardware_and_how_it_measured(self):
        graph = captured("encoder").graph
        self.assertRegex(graph["hardware"]["name"], rf", {torch.get_num_threads()} threads? \(PyTorch ")
        self.assertGreater(graph["hardware"]["flop_rate"], 0)
        self.assertEqual(graph["capture"]["threads"], torch.get_num_threads())
        self.assertEqual((graph["capture"]["clock"], graph["capture"]["repeats"]), ("wall", 1))
        self.assertEqual(graph["capture"]["inputs"], [{"shape": [2, 10, 64], "dtype": "float32"}])
        self.assertEqual(graph["reference"], {"microbatch_size": 2, "seq_len": 1})


class ResNet50(unittest.TestCase):
    def setUp(self):
        self.graph = captured("resnet50").graph

    def test_one_node_per_operator(self):
        kinds = collections.Counter(n["kind"] for n in self.graph["nodes"])
        self.assertEqual(kinds["conv2d"], 53)  # 1 stem + 16 blocks x 3 + 4 downsamples
        self.assertEqual(kinds["batchnorm2d"], 53)
        self.assertEqual(kinds["add"], 16)  # one residual per bottleneck
        self.assertEqual(kinds["linear"], 1)
        self.assertEqual(kinds["cross_entropy"], 1)

    def test_layers_are_the_bottlenecks(self):
        names = [layer["name"] for layer in self.graph["layers"]]
        self.assertEqual(names[0], "stem")
        self.assertEqual(names[1:17], [f"layer{s}.{b}" for s, n in ((1, 3), (2, 4), (3, 6), (4, 3)) for b in range(n)])
        self.assertEqual(names[17:], ["head", "loss"])

    def test_every_residual_is_an_edge_that_skips_the_block(self):
        # The block's input reaches its final add (or the downsample before it) past the three convolutions.
        nodes = self.graph["nodes"]
        position = {n["name"]: i for i, n in enumerate(nodes)}
        blocks = [layer["name"] for layer in self.graph["layers"] if layer["name"].startswith("layer")]
        for block in blocks:
            first = min(i for i, n in enumerate(nodes) if n["layer"] == block)
            block_input = nodes[first - 1]["name"]
            reached = [position[e["to"]] for e in self.graph["edges"] if e["from"] == block_input]
            self.assertGreaterEqual(max(reached) - first, 8, block)
        for add in _nodes_of_kind(self.graph, "add"):
            self.assertEqual(len([e for e in self.graph["edges"] if e["to"] == add["name"]]), 2)

    def test_convolution_flops_by_hand(self):
        # The stem: 3 -> 64 channels, 7x7 kernel, stride 2 on 32x32: a 16x16 output, 2 samples.
        stem = next(n for n in self.graph["nodes"] if n["name"] == "conv1")
        per_sample = 2 * (3 * 7 * 7) * (64 * 16 * 16)
        self.assertEqual(stem["forward"]["flops"], {"per_sample": per_sample})
        self.assertEqual(stem["backward_weight"]["flops"], {"per_sample": per_sample})
        self.assertEqual(stem["parameters"], 64 * 3 * 7 * 7)


class VisionTransformerB16(unittest.TestCase):
    def setUp(self):
        self.graph = captured("vit_b16").graph

    def test_twelve_blocks_of_attention_and_mlp(self):
        blocks = [layer["name"] for layer in self.graph["layers"] if layer["name"].startswith("encoder.layers.")]
        self.assertEqual(blocks, [f"encoder.layers.encoder_layer_{i}" for i in range(12)])
        self.assertEqual(len(_nodes_of_kind(self.graph, "multiheadattention")), 12)
        self.assertEqual(len(_nodes_of_kind(self.graph, "layernorm")), 25)

    def test_mlp_and_attention_flops_by_hand(self):
        tokens, width = 5, 768  # a 32x32 image in 16x16 patches and the class token
        mlp = next(n for n in self.graph["nodes"] if n["name"] == "encoder_layers_encoder_layer_0_mlp_0")
        self.assertEqual(mlp["forward"]["flops"], {"per_sample": 2 * tokens * width * 3072})
        attention = _nodes_of_kind(self.graph, "multiheadattention")[0]
        projections = 2 * width * width * 4 * tokens  # q, k, v and out
        scores_and_values = 2 * 2 * tokens * tokens * width
        softmax = 5 * 12 * tokens * tokens
        self.assertEqual(attention["forward"]["flops"], {"per_sample": projections + scores_and_values + softmax})

    def test_the_class_token_and_position_embedding_are_parameters(self):
        class_token = next(n for n in self.graph["nodes"] if n["name"] == "class_token")
        self.assertEqual(class_token["parameters"], width := 768)
        position = next(n for n in self.graph["nodes"] if n["name"] == "encoder_pos_embedding")
        self.assertEqual(position["parameters"], 5 * width)


class TransformerEncoderStack(unittest.TestCase):
    def test_each_layer_traced_into_its_operators(self):
        graph = captured("encoder").graph
        # The stem holds only the checks that the masks are None (they are specialized away).
        self.assertEqual([layer["name"] for layer in graph["layers"]],
                         ["stem", "layers.0", "layers.1", "layers.2", "loss"])
        per_layer = collections.Counter(n["kind"] for n in graph["nodes"] if n["layer"] == "layers.1")
        self.assertEqual(per_layer["multiheadattention"], 1)
        self.assertEqual(per_layer["linear"], 2)
        self.assertEqual(per_layer["layernorm"], 2)
        self.assertEqual(per_layer["add"], 2)

    def test_residual_streams_are_edges(self):
        graph = captured("encoder").graph
        into = collections.defaultdict(set)
        for edge in graph["edges"]:
            into[edge["to"]].add(edge["from"])
        # The second residual adds the first norm's output to the feed-forward's output.
        self.assertEqual(into["add_1"], {"layers_0_norm1", "layers_0_dropout2"})


class SkipConnections(unittest.TestCase):
    def test_unet_skip_crosses_the_bottom_of_the_u(self):
        graph = capture(models.tiny_unet(), [torch.randn(2, 3, 8, 8)], "mse", warmup=0, repeats=1)
        order = [n["name"] for n in graph["nodes"]]
        into_cat = {e["from"]: e["bytes"] for e in graph["edges"] if e["to"] == "cat"}
        self.assertEqual(set(into_cat), {"up2", "relu"})
        self.assertGreaterEqual(order.index("cat") - order.index("relu"), 6)
        # relu(down1) is 8 channels of 8x8 float32 per sample.
        self.assertEqual(into_cat["relu"], {"per_sample": 8 * 8 * 8 * 4})


class ReadsAndSaves(torch.nn.Module):
    """h = first(x); relu(h) + second(h), max-pooled in pairs: the ReLU saves its output, the second linear
    layer the h it reads, the max pool its input and its indices (int64)."""

    def __init__(self):
        super().__init__()
        self.first = torch.nn.Linear(4, 6)
        self.second = torch.nn.Linear(6, 6)

    def forward(self, x):
        h = self.first(x)
        out = torch.relu(h) + self.second(h)
        return torch.nn.functional.max_pool1d(out.unsqueeze(1), 2).squeeze(1)


class WhatAReaderSavesOfItsInput(unittest.TestCase):
    # Per edge, the bytes of the very tensor the reader saves and counts: what a stage that receives the
    # tensor holds once, not twice (docs/cost-graph.md). Per node, the saved bytes in tensors of another
    # type than the captured float32, which keep their size when trained in float64.
    def test_edges_and_types_of_saved_tensors(self):
        torch.manual_seed(0)
        graph = capture(ReadsAndSaves(), [torch.randn(2, 4)], "cross_entropy", warmup=0, repeats=1)
        saved = {(e["from"], e["to"]): e["saved_bytes"] for e in graph["edges"]}
        h = {"per_sample": 6 * 4}
        self.assertEqual(saved["first", "relu"], 0)  # it saves its output
        self.assertEqual(saved["first", "second"], h)  # all of h
        self.assertEqual(saved["relu", "add"], 0)
        self.assertEqual(saved["unsqueeze", "max_pool1d"], h)  # a view of the sum's storage
        nodes = {n["name"]: n for n in graph["nodes"]}
        self.assertEqual(nodes["relu"]["saved_bytes"], h)
        self.assertEqual(nodes["relu"]["saved_output_bytes"], h)  # its own output
        self.assertNotIn("saved_output_bytes", nodes["second"])  # its input
        self.assertEqual(nodes["max_pool1d"]["saved_bytes"], {"per_sample": 6 * 4 + 3 * 8})
        self.assertEqual(nodes["max_pool1d"]["unscaled_saved_bytes"], {"per_sample": 3 * 8})  # the indices
        self.assertEqual(nodes["loss"]["unscaled_saved_bytes"], {"per_sample": 8})  # the class targets
        self.assertNotIn("unscaled_saved_bytes", nodes["second"])


class BuffersAndConstants(unittest.TestCase):
    """Buffers and tensor constants are not parameters: every operator that reads one lists it, with its
    bytes (static memory, never trained), where a chunk of the export holding the operator holds it."""

    def test_listed_by_the_operators_that_read_them(self):
        torch.manual_seed(0)
        model = models.buffers_and_constants()
        graph = capture(model, [torch.randn(2, 6)], "mse", warmup=0, repeats=1)
        nodes = {n["name"]: n for n in graph["nodes"]}
        self.assertEqual(sum(n.get("parameters", 0) for n in graph["nodes"]), 42)  # the linear layer's alone
        self.assertEqual(nodes["getitem"]["buffers"], [{"name": "order", "bytes": 6 * 8, "unscaled": True}])
        self.assertEqual(nodes["mul"]["buffers"], [{"name": "mask", "bytes": 6 * 6 * 4}])
        self.assertEqual(nodes["mul_1"]["buffers"], [{"name": "_tensor_constant0", "bytes": 6 * 4}])
        self.assertEqual([nodes[name]["kind"] for name in ("order", "mask", "_tensor_constant0")], ["buffer"] * 3)
        self.assertEqual([name for name, node in nodes.items() if "buffers" in node], ["getitem", "mul", "mul_1"])
        self.assertFalse(hasattr(model, "_tensor_constant0"))  # the user's model is left as it was

    def test_batch_norm_holds_its_running_statistics(self):
        c = captured("resnet50")
        bn1 = next(n for n in c.graph["nodes"] if n["name"] == "bn1")
        self.assertEqual(bn1["buffers"], [{"name": "bn1.running_mean", "bytes": 64 * 4},
                                          {"name": "bn1.running_var", "bytes": 64 * 4},
                                          {"name": "bn1.num_batches_tracked", "bytes": 8, "unscaled": True}])
        listed = {b["name"]: b["bytes"] for n in c.graph["nodes"] for b in n.get("buffers", [])}
        self.assertEqual(listed, {name: b.numel() * b.element_size() for name, b in c.model.named_buffers()})


class CausalMasksAndEncoderDecoders(unittest.TestCase):
    """A GPT-like nn.TransformerEncoder with a causal mask (built in forward, or held as a buffer) and an
    nn.Transformer encoder-decoder with a tensor constant for the decoder's mask: traced through, every
    parameter counted, the masks read as what they are."""

    def test_causal_language_models(self):
        tokens = torch.tensor([[1, 2, 3, 4, 5, 6], [6, 5, 4, 3, 2, 1]])
        for factory, buffers in ((models.causal_language_model, {"positions"}),
                                 (models.causal_language_model_mask_buffer, {"positions", "mask"})):
            with self.subTest(factory.__name__):
                torch.manual_seed(0)
                model = factory()
                graph = capture(model, [tokens], "cross_entropy", warmup=0, repeats=1)
                self.assertNotIn("kept_whole", graph["capture"])
                self.assertEqual(sum(n.get("parameters", 0) for n in graph["nodes"]),
                                 sum(p.numel() for p in model.parameters()))
                self.assertEqual(len(_nodes_of_kind(graph, "multiheadattention")), 2)
                self.assertEqual({b["name"] for n in graph["nodes"] for b in n.get("buffers", [])}, buffers)
                self.assertEqual([layer["name"] for layer in graph["layers"]],
                                 ["stem", "encoder.layers.0", "encoder.layers.1", "head", "loss"])

    def test_encoder_decoder(self):
        torch.manual_seed(0)
        model = models.seq2seq()
        graph = capture(model, [torch.randn(2, 5, 16), torch.randn(2, 4, 16)], "mse", warmup=0, repeats=1)
        self.assertNotIn("kept_whole", graph["capture"])
        self.assertEqual(sum(n.get("parameters", 0) for n in graph["nodes"]),
                         sum(p.numel() for p in model.parameters()))
        self.assertEqual(len(_nodes_of_kind(graph, "multiheadattention")), 6)  # 2 + 2 x 2
        constants = [b for n in graph["nodes"] for b in n.get("buffers", [])]
        self.assertEqual(constants, [{"name": "_tensor_constant0", "bytes": 4 * 4 * 4}] * 2)  # a decoder layer each
        self.assertEqual(graph["capture"]["inputs"], [{"shape": [2, 5, 16], "dtype": "float32"},
                                                      {"shape": [2, 4, 16], "dtype": "float32"}])
        # The inputs are the first nodes: a cut inside the encoder hands the target on to the decoder.
        source, target = graph["nodes"][:2]
        self.assertEqual([(source["name"], source["kind"]), (target["name"], target["kind"])],
                         [("source", "input"), ("target", "input")])
        self.assertEqual(target["output_bytes"], {"per_sample": 4 * 16 * 4})
        self.assertEqual([target[p]["time"] for p in ("forward", "backward_input", "backward_weight")], [0, 0, 0])
        readers = [e["to"] for e in graph["edges"] if e["from"] == "target"]
        self.assertIn("transformer_decoder_layers_0_self_attn", readers)
        self.assertTrue(all(not r.startswith("transformer_encoder") for r in readers))


if __name__ == "__main__":
    unittest.main()
