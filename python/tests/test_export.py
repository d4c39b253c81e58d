"""export(): a captured model cut at a partition plan's stage boundaries into TorchScript modules.

The saved modules are run the way a pipeline runtime runs them: every module gets fresh leaf tensors
for its inputs (looked up by name, so a tensor that crosses several cuts is relayed), its backward is
split into I (gradients of its inputs) and W (gradients of its parameters), gradients go back by name,
and a recompute piece runs without autograd in the forward and again, with the generator's state
replayed, before its backward. In float64 that gives the model's outputs, loss, parameter gradients
(by their original names) and BatchNorm statistics within 1e-12 relative."""
import json
import os
import subprocess
import sys
import tempfile
import unittest

import torch
import torch.nn.functional as F

import models
from flexpipe import CaptureError, capture
from flexpipe.export import export, load, run_chunks
from flexpipe.loading import example_input
from flexpipe.losses import _synthetic_targets, apply_loss

HERE = os.path.dirname(os.path.abspath(__file__))
MODELS = os.path.join(HERE, "models.py")
RELATIVE = 1e-12

# factory: (input shape, loss, cuts for 2 chunks, cuts for 4 chunks, recomputed and offloaded operators for
# the 4-chunk plan). A cut is the operator a chunk ends with.
CASES = {
    # The skip from `relu` to `cat` crosses every cut of the 4-chunk plan.
    "tiny_unet": ((2, 3, 8, 8), "mse", ["relu_2"], ["relu", "bottom", "up2"],
                  ["down2", "relu_1", "relu_2"], ["up1"]),
    # Cut right after the attention, whose output is a tuple: its tensor is what crosses.
    "transformer_encoder": ((2, 10, 64), "cross_entropy", ["layers_1_self_attn"],
                            ["layers_0_linear1", "layers_1_norm1", "layers_2_self_attn"],
                            ["layers_0_norm1", "layers_0_linear1", "layers_1_self_attn", "getitem_1",
                             "layers_1_dropout1", "add_2", "layers_1_norm1"],
                            ["layers_1_linear1", "relu_1"]),
    # Cuts inside residual blocks, before an in-place ReLU, inside the downsample branch.
    "resnet18": ((2, 3, 32, 32), "cross_entropy", ["layer2_0_bn1"],
                 ["layer1_0_bn1", "layer2_0_downsample_0", "layer3_1_conv2"],
                 ["layer1_0_relu", "layer1_0_conv2", "layer1_0_bn2", "layer2_0_conv1", "layer2_0_bn1",
                  "layer2_0_relu", "layer2_0_conv2", "layer2_0_bn2"],
                 ["layer3_1_conv1", "layer3_1_bn1"]),
    # A causal language model: token ids in, a non-persistent mask buffer and a position-index buffer held by
    # the chunk that reads them; the sliced mask (static) crosses the cuts like any tensor.
    "causal_language_model_mask_buffer": ((2, 6), "cross_entropy", ["encoder_layers_0_self_attn"],
                                          ["position", "encoder_layers_0_norm1", "encoder_layers_1_self_attn"],
                                          ["encoder_layers_0_linear1", "relu", "encoder_layers_0_dropout",
                                           "encoder_layers_0_linear2"], ["encoder_layers_0_norm2"]),
}
INPUT_TYPES = {"causal_language_model_mask_buffer": "int64"}  # token ids; every other case takes floats

GRAPHS = {}


def graph_of(factory):
    """The factory's cost graph, structure only (capturing is checked elsewhere), once per run."""
    if factory not in GRAPHS:
        shape, loss = CASES[factory][:2] if factory in CASES else ((2, 4), "cross_entropy")
        torch.manual_seed(0)
        model = getattr(models, factory)()
        GRAPHS[factory] = capture(model, [example_input(list(shape), INPUT_TYPES.get(factory, "float32"), 0)], loss,
                                  time_operators=False, source={"file": MODELS, "factory": factory})
    return GRAPHS[factory]


def plan_for(graph, cuts, recompute=(), offload=()):
    """A partition plan as `flexpipe partition -o` writes it (docs/partition-plan.md), its stages ending
    at the named operators."""
    names = [n["name"] for n in graph["nodes"]]
    ends = [names.index(cut) + 1 for cut in cuts] + [len(names)]
    stages, start = [], 0
    for end in ends:
        own = names[start:end]
        stages.append({"operators": end - start, "recompute": [n for n in own if n in recompute],
                       "offload": [n for n in own if n in offload], "first": own[0], "last": own[-1]})
        start = end
    return {"format": "flexpipe-partition-plan", "version": 1, "model": "model.graph.json", "graph": graph["name"],
            "graph_operators": len(names), "hardware": "H100-80GB", "schedule": "1f1b", "devices": len(stages),
            "microbatches": 4, "chunks": 0, "microbatch_size": graph["reference"]["microbatch_size"], "seq_len": 1,
            "memory_limit": 8e10, "host_bandwidth": 6.4e10, "method": "dawn", "stages": stages}


def _set_buffer(module, name, tensor):
    *path, leaf = name.split(".")
    for step in path:
        module = getattr(module, step)
    setattr(module, leaf, tensor)


class Pipeline:
    """The exported modules run as a runtime would, in float64: forward module by module, then backward
    in reverse with I and W apart, gradients handed back by tensor name."""

    def __init__(self, directory, pieces=False):
        self.manifest, self.modules = load(directory)
        self.units = []  # (entry: a chunk or a piece, its module)
        for chunk in self.manifest["chunks"]:
            for unit in (chunk["pieces"] if pieces and "pieces" in chunk else [chunk]):
                self.units.append((unit, self.modules[unit["file"]]))
        self.loss_module = self.modules[self.manifest["loss"]["file"]]

    @staticmethod
    def _leaves(values, entries):
        # As a tensor arrives from another rank: contiguous, whatever its strides were where it was made.
        return [values[e["name"]].detach().contiguous().requires_grad_(e["requires_grad"]) for e in entries]

    def step(self, inputs, target, test):
        values = {e["name"]: x for e, x in zip(self.manifest["inputs"], inputs)}
        tape = []
        for unit, module in self.units:
            leaves = self._leaves(values, unit["inputs"])
            if unit.get("memory") == "recompute":  # keeps only its inputs; rebuilt before the backward
                generator = torch.get_rng_state()
                with torch.no_grad():
                    outputs = module(*leaves)
                tape.append((unit, module, leaves, None, generator))
            else:
                outputs = module(*leaves)
                tape.append((unit, module, leaves, outputs, None))
            for entry, value in zip(unit["outputs"], outputs):
                if unit.get("memory") != "recompute":
                    test.assertEqual(value.requires_grad, entry["requires_grad"], entry["name"])
                    test.assertEqual(list(value.shape), entry["shape"], entry["name"])
                values[entry["name"]] = value.detach()
        loss_inputs = [values[name].detach().requires_grad_() for name in self.manifest["loss"]["inputs"]]
        loss = self.loss_module(loss_inputs, target)
        gradients = dict(zip(self.manifest["loss"]["inputs"], torch.autograd.grad(loss, loss_inputs)))
        parameter_gradients = {}
        for unit, module, leaves, outputs, generator in reversed(tape):
            if outputs is None:  # R: the forward again, on the same inputs and random numbers
                kept = dict(module.named_buffers())
                for name, buffer in kept.items():  # the rebuild moves copies of BatchNorm's statistics
                    _set_buffer(module, name, buffer.clone())
                now = torch.get_rng_state()
                torch.set_rng_state(generator)
                outputs = module(*leaves)
                torch.set_rng_state(now)
                for name, buffer in kept.items():
                    _set_buffer(module, name, buffer)
            pairs = [(y, gradients.pop(e["name"])) for e, y in zip(unit["outputs"], outputs)
                     if e["requires_grad"] and e["name"] in gradients]
            if not pairs:
                continue
            ys, gs = [y for y, _ in pairs], [g for _, g in pairs]
            needing = [(e, x) for e, x in zip(unit["inputs"], leaves) if e["requires_grad"]]
            if needing:  # I
                found = torch.autograd.grad(ys, [x for _, x in needing], gs, retain_graph=True, allow_unused=True)
                for (entry, _), g in zip(needing, found):
                    if g is not None:
                        gradients[entry["name"]] = gradients[entry["name"]] + g if entry["name"] in gradients else g
            names = [e for e in unit["parameters"] if e["requires_grad"]]
            if not names:
                continue
            own = dict(module.named_parameters())
            found = torch.autograd.grad(ys, [own[e["name"]] for e in names], gs, allow_unused=True)  # W
            for entry, g in zip(names, found):
                if g is not None:
                    original = entry["state_dict"][0]
                    parameter_gradients[original] = parameter_gradients[original] + g \
                        if original in parameter_gradients else g
        outputs = [values[e["name"]] for e in self.manifest["outputs"]]
        buffers = {}
        for unit, module in self.units:
            own = dict(module.named_buffers())
            for entry in unit["buffers"]:
                for original in entry["state_dict"]:
                    buffers[original] = own[entry["name"]]
        return outputs, loss, parameter_gradients, buffers


class Exported(unittest.TestCase):
    def setUp(self):
        self.directory = tempfile.TemporaryDirectory()
        self.addCleanup(self.directory.cleanup)

    def assertClose(self, got, expected, what):
        self.assertEqual(got.shape, expected.shape, what)
        scale = float(expected.abs().max()) if expected.numel() else 0.0
        error = float((got - expected).abs().max()) if expected.numel() else 0.0
        self.assertLessEqual(error, RELATIVE * max(scale, 1e-30), what)

    def reference(self, factory):
        """The seeded model in float64, its inputs as export draws them, a target, one forward and backward."""
        shape, loss_kind = CASES[factory][:2]
        torch.manual_seed(0)
        model = getattr(models, factory)().double().train()
        inputs = [example_input(list(shape), INPUT_TYPES.get(factory, "float32"), 0)]
        inputs = [x.double() if x.is_floating_point() else x for x in inputs]
        torch.manual_seed(1)
        output = model(*inputs)
        generator = torch.Generator().manual_seed(2)
        if loss_kind == "cross_entropy":
            target = torch.randint(0, output.shape[-1], output.shape[:-1], generator=generator)
            loss = F.cross_entropy(output.reshape(-1, output.shape[-1]), target.reshape(-1))
        else:
            target = torch.randn(output.shape, generator=generator, dtype=torch.float64)
            loss = F.mse_loss(output, target)
        loss.backward()
        return model, inputs, target, output, loss

    def check_pipeline(self, factory, manifest, pieces=False):
        model, inputs, target, output, loss = self.reference(factory)
        pipeline = Pipeline(self.directory.name, pieces=pieces)
        torch.manual_seed(1)
        outputs, got_loss, gradients, buffers = pipeline.step(inputs, target, self)
        self.assertClose(outputs[0], output.detach(), "output")
        self.assertClose(got_loss.detach(), loss.detach(), "loss")
        state = model.state_dict(keep_vars=True)
        for name, parameter in model.named_parameters():
            self.assertIn(name, gradients, f"no gradient for {name}")
            self.assertClose(gradients[name], parameter.grad, name)
        for name, buffer in model.named_buffers():
            if name in buffers:
                self.assertClose(buffers[name].double(), state[name].double(), name)
        # Every buffer of the state_dict is held by its name (a non-persistent one, in no state_dict, by none).
        self.assertEqual({n for n in state if n not in dict(model.named_parameters())}, set(buffers))

    def export(self, factory, cuts, recompute=(), offload=()):
        graph = graph_of(factory)
        return export(graph, plan_for(graph, cuts, recompute, offload), self.directory.name, dtype="float64")

    def test_two_chunks_equal_the_model(self):
        for factory, case in CASES.items():
            with self.subTest(factory):
                manifest = self.export(factory, case[2])
                self.assertEqual(len(manifest["chunks"]), 2)
                self.check_pipeline(factory, manifest)

    def test_four_chunks_whole_and_in_pieces_equal_the_model(self):
        for factory, case in CASES.items():
            with self.subTest(factory):
                manifest = self.export(factory, case[3], recompute=case[4], offload=case[5])
                self.assertEqual(len(manifest["chunks"]), 4)
                memories = {p["memory"] for c in manifest["chunks"] for p in c.get("pieces", [])}
                self.assertEqual(memories, {"keep", "recompute", "offload"})
                self.check_pipeline(factory, manifest)
                self.check_pipeline(factory, manifest, pieces=True)

    def test_a_skip_is_relayed_through_every_chunk_it_crosses(self):
        manifest = self.export("tiny_unet", CASES["tiny_unet"][3])
        self.assertEqual([c["relays"] for c in manifest["chunks"]], [[], ["relu"], ["relu"], []])
        self.assertEqual([i["name"] for i in manifest["chunks"][3]["inputs"]], ["relu", "up2"])
        self.assertEqual(manifest["chunks"][0]["inputs"][0]["model_input"], True)
        self.assertEqual(manifest["loss"], {"kind": "mse", "file": "loss.pt", "chunk": 3, "inputs": ["out"],
                                            "target": {"shape": [2, 2, 8, 8], "dtype": "float64"},
                                            "reduction": "mean"})

    def test_a_tuple_hands_over_its_tensors(self):
        manifest = self.export("transformer_encoder", CASES["transformer_encoder"][2])
        self.assertIn("layers_1_self_attn[0]", [o["name"] for o in manifest["chunks"][0]["outputs"]])
        self.assertTrue(manifest["chunks"][0]["random"])  # dropout: a recompute must replay the generator

    def test_parameters_are_module_attributes_under_their_original_names(self):
        manifest = self.export("resnet18", CASES["resnet18"][3], CASES["resnet18"][4], CASES["resnet18"][5])
        _, modules = load(self.directory.name)
        torch.manual_seed(0)
        model = models.resnet18().double()
        state = model.state_dict()
        held = set()
        for chunk in manifest["chunks"]:
            for unit in [chunk] + chunk.get("pieces", []):
                module = modules[unit["file"]]
                self.assertEqual([e["name"] for e in unit["parameters"]], [n for n, _ in module.named_parameters()])
                self.assertEqual([e["name"] for e in unit["buffers"]], [n for n, _ in module.named_buffers()])
                for entry in unit["parameters"] + unit["buffers"]:
                    self.assertEqual(entry["state_dict"], [entry["name"]])
                    # As the seeded model was built: tracing ran forwards, the statistics were put back.
                    self.assertTrue(torch.equal(dict(module.state_dict())[entry["name"]], state[entry["name"]]))
            held.update(e["name"] for e in chunk["parameters"] + chunk["buffers"])
            if "pieces" in chunk:  # the pieces hold what their chunk holds
                self.assertEqual({e["name"] for p in chunk["pieces"] for e in p["parameters"] + p["buffers"]},
                                 {e["name"] for e in chunk["parameters"] + chunk["buffers"]})
        self.assertEqual(held, set(state))
        self.assertTrue(manifest["chunks"][0]["updates_buffers"])

    def test_the_loss_module_is_the_captures_loss(self):
        torch.manual_seed(3)
        for kind in ("cross_entropy", "mse", "none"):
            with self.subTest(kind):
                graph = dict(graph_of("tiny_unet"))
                graph["capture"] = dict(graph["capture"], loss=kind)
                if kind == "none":
                    graph["nodes"] = graph["nodes"][:-1]
                export(graph, plan_for(graph, ["relu_2"]), self.directory.name, dtype="float64")
                manifest, modules = load(self.directory.name)
                output = torch.randn(2, 2, 8, 8, dtype=torch.float64)
                target = {"cross_entropy": _synthetic_targets(output), "mse": torch.zeros_like(output),
                          "none": None}[kind]
                self.assertEqual(float(modules["loss.pt"]([output], target)), float(apply_loss(kind, output)))
                self.assertEqual(manifest["loss"]["chunk"], 1)

    def test_control_flow_on_data_is_scripted_not_baked(self):
        graph = graph_of("partly_traceable")
        manifest = export(graph, plan_for(graph, ["_0"]), self.directory.name, dtype="float64")
        self.assertEqual(manifest["scripted"], ["1"])
        _, modules = load(self.directory.name)
        torch.manual_seed(0)
        model = models.partly_traceable().double()
        direction = model[0].weight.sum(0)  # the first layer's output mean grows along it
        for scale in (10.0, -10.0):
            x = (scale * direction).expand(2, 4).contiguous()
            hidden = modules["stage_0.pt"](x)
            out = modules["stage_1.pt"](*hidden)[0]
            self.assertTrue(torch.equal(out, model(x)), scale)


class TiedParameters(unittest.TestCase):
    def test_held_by_every_chunk_that_reads_them_and_their_gradients_add_up(self):
        torch.manual_seed(0)
        model = models.TiedLanguageModel().double()
        tokens = torch.tensor([[1, 2, 3, 4, 5], [6, 7, 8, 9, 0]])
        graph = capture(model, [tokens], "cross_entropy", time_operators=False)
        target = torch.tensor([[2, 3, 4, 5, 6], [7, 8, 9, 0, 1]])
        with tempfile.TemporaryDirectory() as directory:
            manifest = export(graph, plan_for(graph, ["hidden"]), directory, model=model)
            self.assertEqual([[(e["name"], e.get("tied_chunks")) for e in c["parameters"]] for c in manifest["chunks"]],
                             [[("embedding.weight", [1]), ("hidden.weight", None), ("hidden.bias", None)],
                              [("embedding.weight", [0])]])
            _, loss, gradients, _ = Pipeline(directory).step([tokens], target, self)
        expected = F.cross_entropy(model(tokens).reshape(-1, 10), target.reshape(-1))
        expected.backward()
        self.assertEqual(float(loss), float(expected))
        for name, parameter in model.named_parameters():
            scale = float(parameter.grad.abs().max())
            self.assertLessEqual(float((gradients[name] - parameter.grad).abs().max()), RELATIVE * scale, name)


class InPlace(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.a = torch.nn.Linear(4, 4)
        self.b = torch.nn.Linear(4, 4)

    def forward(self, x):
        y = self.a(x)
        z = y.clone()
        z.mul_(2)  # read later as z: becomes mul
        w = torch.sigmoid_(z * 1)  # becomes torch.sigmoid
        y.add_(1)
        v = y.view(8)
        v.copy_(v * 3)  # no out-of-place twin, and y is read later through another view: stays
        return self.b(y) + w


class InPlaceOperators(unittest.TestCase):
    def test_made_out_of_place_where_nothing_can_tell(self):
        torch.manual_seed(0)
        model = InPlace().double()
        x = torch.randn(2, 4, dtype=torch.float64)
        graph = capture(model, [x], "mse", time_operators=False)
        for cuts in (["a"], ["clone"], ["mul_"], ["copy_"]):
            with self.subTest(cuts), tempfile.TemporaryDirectory() as directory:
                export(graph, plan_for(graph, cuts), directory, model=model)
                manifest, modules = load(directory)
                y = x.clone().requires_grad_()  # a received tensor: modifying it in place would fail
                hidden = modules["stage_0.pt"](y)
                received = [h.detach().requires_grad_(e["requires_grad"])
                            for h, e in zip(hidden, manifest["chunks"][1]["inputs"])]
                self.assertTrue(torch.equal(modules["stage_1.pt"](*received)[0], model(x)))
        with tempfile.TemporaryDirectory() as directory, self.assertRaisesRegex(
                CaptureError, r"^the plan: stage 1: 'copy_' modifies 'view' in place, which an earlier module "
                              r"computes \(and another view of it is read later\); move the cut$"):
            export(graph, plan_for(graph, ["view"]), directory, model=model)


class BuffersAndConstants(unittest.TestCase):
    def test_held_by_the_chunks_that_read_them(self):
        torch.manual_seed(0)
        model = models.buffers_and_constants().double()
        x = torch.randn(2, 6, dtype=torch.float64)
        graph = capture(model, [x], "mse", time_operators=False)
        with tempfile.TemporaryDirectory() as directory:
            manifest = export(graph, plan_for(graph, ["getitem", "mul"]), directory, model=model, tolerance=0.0)
            self.assertEqual([[(b["name"], b["state_dict"]) for b in c["buffers"]] for c in manifest["chunks"]],
                             [[("order", ["order"])], [("mask", [])], [("_tensor_constant0", [])]])
            self.assertEqual([c["parameters"] for c in manifest["chunks"]][1:], [[], []])
            _, modules = load(directory)
            self.assertTrue(torch.equal(dict(modules["stage_1.pt"].named_buffers())["mask"], model.mask))
            hidden = modules["stage_0.pt"](x)
            out = modules["stage_2.pt"](*modules["stage_1.pt"](*hidden))[0]
            self.assertTrue(torch.equal(out, model(x)))


class EncoderDecoder(unittest.TestCase):
    setUp = Exported.setUp
    assertClose = Exported.assertClose

    def test_two_inputs_and_a_decoder_mask_constant_in_three_chunks(self):
        # nn.Transformer: the target crosses the encoder's chunks unread (relayed), the decoder's mask is a
        # tensor constant each decoder chunk holds; output, loss and every gradient as the model's.
        torch.manual_seed(0)
        model = models.seq2seq()
        inputs = [example_input([2, 5, 16], "float32", 0), example_input([2, 4, 16], "float32", 1)]
        graph = capture(model, inputs, "mse", time_operators=False, source={"file": MODELS, "factory": "seq2seq"})
        manifest = export(graph, plan_for(graph, ["transformer_encoder_layers_1_linear1",
                                                  "transformer_decoder_layers_0_norm2"]),
                          self.directory.name, dtype="float64")
        self.assertEqual([i["name"] for i in manifest["chunks"][1]["inputs"]][0], "target")
        self.assertEqual([[b["name"] for b in c["buffers"]] for c in manifest["chunks"]],
                         [[], ["_tensor_constant0"], ["_tensor_constant0"]])
        torch.manual_seed(0)
        model = models.seq2seq().double().train()
        inputs = [x.double() for x in inputs]
        output = model(*inputs)
        target = torch.randn(output.shape, generator=torch.Generator().manual_seed(2), dtype=torch.float64)
        loss = F.mse_loss(output, target)
        loss.backward()
        outputs, got_loss, gradients, _ = Pipeline(self.directory.name).step(inputs, target, self)
        self.assertClose(outputs[0], output.detach(), "output")
        self.assertClose(got_loss.detach(), loss.detach(), "loss")
        for name, parameter in model.named_parameters():
            self.assertClose(gradients[name], parameter.grad, name)


class ReceivedLayouts(unittest.TestCase):
    def test_dropout_on_a_received_transposed_view_draws_the_models_mask(self):
        # Dropout's mask follows its input's memory order; a transposed view travels in its memory order
        # (dense, as a runtime's transport delivers it: the sender's permute is a view) and the receiver
        # permutes it back, so that it has the strides it had in the model, copying nothing.
        torch.manual_seed(0)
        model = models.transposed_dropout().double()
        x = torch.randn(2, 5, 4, dtype=torch.float64)
        graph = capture(model, [x], "mse", time_operators=False)
        with tempfile.TemporaryDirectory() as directory:
            manifest = export(graph, plan_for(graph, ["transpose"]), directory, model=model)
            _, modules = load(directory)
            for call in range(3):
                torch.manual_seed(call)
                want = model(x)
                torch.manual_seed(call)
                hidden = [h.contiguous() for h in modules["stage_0.pt"](x)]
                got = modules["stage_1.pt"](*hidden)[0]
                # The same masks; from the second call on TorchScript's autodiff scales after multiplying
                # (x * mask / (1 - p), eager x * (mask / (1 - p))): a rounding apart at most. Other masks
                # would differ by the order of the output.
                self.assertLessEqual(float((got - want).abs().max()), 4 * torch.finfo(torch.float64).eps, call)
            sent = modules["stage_0.pt"](x)[0]
            self.assertTrue(sent.is_contiguous())
            self.assertEqual(list(sent.shape), manifest["chunks"][0]["outputs"][0]["shape"])
            self.assertEqual(manifest["chunks"][0]["outputs"][0]["shape"], [2, 5, 6])  # first(x), before its transpose
            self.assertIn("aten::permute", str(modules["stage_1.pt"].inlined_graph))
            self.assertNotIn("aten::contiguous", str(modules["stage_1.pt"].inlined_graph))
            self.assertEqual(manifest["chunks"][1]["random"], True)


class WhatTorchScriptDoesOtherwise(unittest.TestCase):
    def test_shape_arithmetic_and_dropout_of_zero_run_as_in_eager(self):
        # In float64 the chunks equal the model bit for bit, on every call: a scale from a shape inside a
        # function kept whole is a Python float (the tracer made it a float32 tensor), and a dropout of 0
        # draws no random numbers (TorchScript's autodiff drew some from the second call on, so stochastic
        # depth after it drew other masks).
        torch.manual_seed(0)
        model = models.what_torchscript_does_otherwise().double()
        x = torch.randn(4, 6, dtype=torch.float64)
        graph = capture(model, [x], "mse", time_operators=False)
        with tempfile.TemporaryDirectory() as directory:
            manifest = export(graph, plan_for(graph, ["dropout"]), directory, model=model, tolerance=0.0)
            self.assertEqual([c["random"] for c in manifest["chunks"]], [False, True])
            _, modules = load(directory)
            for call in range(4):
                torch.manual_seed(call)
                want = model(x)
                torch.manual_seed(call)
                got = run_chunks(manifest, modules, [x])[0]
                self.assertTrue(torch.equal(got, want), call)
            self.assertNotIn("aten::dropout", str(modules["stage_0.pt"].inlined_graph))


class CheckTolerance(unittest.TestCase):
    """Export's own check: the largest difference between the chunks' outputs and the model's, against
    1024 machine epsilons of the type times the output's scale (the larger of 1 and its largest magnitude),
    or --export-tolerance; the error says both."""

    def setUp(self):
        self.directory = tempfile.TemporaryDirectory()
        self.addCleanup(self.directory.cleanup)
        self.graph = graph_of("tiny_unet")
        self.plan = plan_for(self.graph, ["relu_2"])
        self.module = sys.modules["flexpipe.export"]
        self.addCleanup(setattr, self.module, "run_chunks", self.module.run_chunks)

    def perturbed(self, relative):
        """The chunks' outputs made to differ from the model's by `relative` of their largest magnitude."""
        def run(manifest, modules, inputs):
            return [y + relative * max(1.0, float(y.detach().abs().max()))
                    for y in run_chunks(manifest, modules, inputs)]
        self.module.run_chunks = run

    def test_the_default_is_epsilons_of_the_type_times_the_outputs_scale(self):
        torch.manual_seed(0)
        scale = max(1.0, float(models.tiny_unet().double()(example_input([2, 3, 8, 8], "float32", 0).double())
                               .abs().max()))
        for dtype, accepted, refused in (("float64", 1e-13, 1e-11), ("float32", 5e-5, 5e-3)):
            with self.subTest(dtype):
                epsilon = torch.finfo(getattr(torch, dtype)).eps
                self.perturbed(accepted)
                export(self.graph, self.plan, self.directory.name, dtype=dtype)
                self.perturbed(refused)
                with self.assertRaises(CaptureError) as raised:
                    export(self.graph, self.plan, self.directory.name, dtype=dtype)
                tolerance = 1024 * epsilon
                self.assertEqual(
                    str(raised.exception),
                    f"the exported chunks compute 'out' differently from the model (largest difference "
                    f"{refused * scale:.3g}, tolerance {tolerance * scale:.3g}: {tolerance:.3g} (1024 x {dtype}'s "
                    f"epsilon {epsilon:.3g}) x the output's scale {scale:.3g}); if that is rounding, export with a "
                    "larger --export-tolerance (relative to the output's scale); otherwise please report this model")
                # A tolerance given accepts it, and the error names it when it does not.
                export(self.graph, self.plan, self.directory.name, dtype=dtype, tolerance=10 * refused)
                with self.assertRaisesRegex(CaptureError, r"tolerance \S+: 1e-12 \(--export-tolerance\) x the "):
                    export(self.graph, self.plan, self.directory.name, dtype=dtype, tolerance=1e-12)

    def test_the_command_takes_a_tolerance(self):
        graph = os.path.join(self.directory.name, "unet.graph.json")
        plan = os.path.join(self.directory.name, "plan.json")
        for path, document in ((graph, self.graph), (plan, self.plan)):
            with open(path, "w") as f:
                json.dump(document, f)
        environment = dict(os.environ, PYTHONPATH=os.path.dirname(HERE))
        out = os.path.join(self.directory.name, "out")
        for tolerance, code, error in (("1e-6", 0, ""), ("-1", 2, "error: --export-tolerance must be a number from "
                                                                   "0, got -1.0\n")):
            with self.subTest(tolerance):
                done = subprocess.run([sys.executable, "-m", "flexpipe", "export", graph, "--plan", plan, "-o", out,
                                       "--export-tolerance", tolerance], capture_output=True, text=True,
                                      env=environment)
                self.assertEqual(done.returncode, code, done.stderr)
                if error:
                    self.assertEqual(done.stderr, error)


class BadInput(unittest.TestCase):
    def setUp(self):
        self.directory = tempfile.TemporaryDirectory()
        self.addCleanup(self.directory.cleanup)
        self.graph = graph_of("tiny_unet")
        self.plan = plan_for(self.graph, ["relu_2"])

    def write(self, name, document):
        path = os.path.join(self.directory.name, name)
        with open(path, "w") as f:
            json.dump(document, f)
        return path

    def assertRefused(self, graph, plan, message):
        with self.assertRaises(CaptureError) as raised:
            export(graph, plan, os.path.join(self.directory.name, "out"))
        self.assertRegex(str(raised.exception), message)
        self.assertFalse(os.path.exists(os.path.join(self.directory.name, "out", "manifest.json")))

    def test_a_plan_for_another_graph(self):
        other = plan_for(graph_of("transformer_encoder"), ["layers_1_self_attn"])
        path = self.write("plan.json", other)
        operators = len(graph_of("transformer_encoder")["nodes"])  # 46 in PyTorch 2.11
        self.assertRefused(self.graph, path, rf"^{path}: made for 'TransformerEncoder' with {operators} operators, "
                                             r"the graph 'TinyUNet' has 14$")

    def test_a_graph_without_a_capture_record(self):
        graph = {k: v for k, v in self.graph.items() if k != "capture"}
        self.assertRefused(graph, self.plan, r"^the graph: no capture record: export rebuilds the model from the "
                                             r"file, factory and inputs that `flexpipe capture` records$")
        graph["capture"] = {"inputs": self.graph["capture"]["inputs"]}
        self.assertRefused(graph, self.plan, r"^the graph: the capture record has no file, factory: ")

    def test_cuts_out_of_range(self):
        for counts, message in [([8, 8], r"^the plan: stages\[1\] ends at operator 16, past the 14 operators of "
                                         r"'TinyUNet'$"),
                                ([4, 4], r"^the plan: its stages hold 8 operators, the graph 'TinyUNet' has 14$"),
                                ([14, 0], r"^the plan: stages\[1\]\.operators must be a positive integer, got 0$")]:
            with self.subTest(counts):
                plan = dict(self.plan, stages=[{"operators": c} for c in counts])
                self.assertRefused(self.graph, plan, message)

    def test_names_at_the_cut_points_and_decisions_must_match(self):
        plan = json.loads(json.dumps(self.plan))
        plan["stages"][1]["first"] = "up2"
        self.assertRefused(self.graph, plan, r"^the plan: stages\[1\]\.first is 'up2', but operator 7 of 'TinyUNet' "
                                             r"is 'add'$")
        plan = json.loads(json.dumps(self.plan))
        plan["stages"][0]["recompute"] = ["up1"]
        self.assertRefused(self.graph, plan, r"^the plan: stages\[0\]\.recompute: 'up1' is not an operator of stage 0 "
                                             r"\(x \.\. relu_2\)$")

    def test_a_graph_the_model_no_longer_traces_to(self):
        graph = json.loads(json.dumps(self.graph))
        graph["nodes"][3]["name"] = "renamed"
        plan = plan_for(graph, ["relu_2"])
        self.assertRefused(graph, plan, r"^the graph: .*models\.py:tiny_unet traced now differs from the captured "
                                        r"graph at operator 3: 'renamed' in the graph, 'down2' traced \(14 and 14 "
                                        r"operators\); capture it again$")

    def test_the_command(self):
        graph, plan = self.write("unet.graph.json", self.graph), self.write("plan.json", self.plan)
        out = os.path.join(self.directory.name, "out")
        export(self.graph, plan_for(self.graph, ["relu", "bottom", "up2"]), out)  # its stage_2.pt, stage_3.pt go
        environment = dict(os.environ, PYTHONPATH=os.path.dirname(HERE))
        done = subprocess.run([sys.executable, "-m", "flexpipe", "export", graph, "--plan", plan, "-o", out],
                              capture_output=True, text=True, env=environment)
        self.assertEqual(done.returncode, 0, done.stderr)
        self.assertEqual(sorted(os.listdir(out)), ["loss.pt", "manifest.json", "stage_0.pt", "stage_1.pt"])
        other = self.write("other.json", plan_for(graph_of("transformer_encoder"), ["layers_1_self_attn"]))
        done = subprocess.run([sys.executable, "-m", "flexpipe", "export", graph, "--plan", other, "-o", out + "2"],
                              capture_output=True, text=True, env=environment)
        self.assertEqual(done.returncode, 2)
        operators = len(graph_of("transformer_encoder")["nodes"])
        self.assertEqual(done.stderr, f"error: {other}: made for 'TransformerEncoder' with {operators} operators, the "
                                      "graph 'TinyUNet' has 14\n")


if __name__ == "__main__":
    unittest.main()
