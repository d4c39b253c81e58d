"""`flexpipe train --model GRAPH.json --plan PLAN.json`: a captured PyTorch model trained by the C++
runtime under pipeline schedules equals single-process PyTorch training of the same model.

Each case captures a model, cuts it with a plan (cuts inside blocks, skips and residuals that cross
cuts, recompute and offload decisions), trains it for three steps in float64 on the user's data
(`--data`, a dict saved with torch.save) on 2 or 4 ranks, and reads the trained weights back with
torch.load (`--export-weights`). The reference is the same seeded model trained in this process,
micro-batch by micro-batch with the losses averaged (what a pipeline computes), with torch.optim at the
learning rate the run reports for each step. Losses of every step and every entry of the state_dict
(BatchNorm's statistics included) agree within 1e-9 relative."""
import json
import os
import subprocess
import tempfile
import unittest

import torch
import torch.nn.functional as F

import models
from test_export import graph_of, plan_for

BINARY = os.environ.get("FLEXPIPE_BINARY", "")
RELATIVE = 1e-9
SAMPLES = 10  # not a multiple of a step's batch: the data wraps around
STEPS = 3
SEED = 1234  # flexpipe train's --seed

# factory: (input shape, loss, cuts for 2 chunks, cuts for 4 chunks, recomputed and offloaded operators of
# the 4-chunk plan)
CASES = {
    "tiny_unet": ((2, 3, 8, 8), "mse", ["relu_2"], ["relu", "bottom", "up2"], ["down2", "relu_1"], ["up1"]),
    "transformer_classifier": ((2, 6, 16), "cross_entropy", ["encoder_layers_0_linear1"],
                               ["encoder_layers_0_self_attn", "encoder_layers_0_norm2", "encoder_layers_1_linear2"],
                               ["encoder_layers_0_linear1", "encoder_layers_0_activation"],
                               ["encoder_layers_1_self_attn"]),
    # Dropout in attention, after it and in the feed-forward block; the recompute piece draws masks too.
    "transformer_dropout": ((2, 6, 16), "cross_entropy", ["encoder_layers_0_linear1"],
                            ["encoder_layers_0_self_attn", "encoder_layers_0_norm2", "encoder_layers_1_linear2"],
                            ["encoder_layers_0_linear1", "relu", "encoder_layers_0_dropout"],
                            ["encoder_layers_1_self_attn"]),
    "resnet18": ((2, 3, 32, 32), "cross_entropy", ["layer2_0_bn1"],
                 ["layer1_0_bn1", "layer2_0_downsample_0", "layer3_1_conv2"],
                 ["layer2_0_conv1", "layer2_0_bn1", "layer2_0_relu"], ["layer3_1_conv1", "layer3_1_bn1"]),
    # The embedding's weight is also the output layer's: every cut below puts its readers in two chunks.
    "tied_language_model": ((2, 5), "cross_entropy", ["hidden"], ["embedding", "hidden", "linear"], [], []),
    # GPT-like: the positions an index buffer, the causal mask built in forward from the sequence length,
    # which crosses every cut to the later layers' attention.
    "causal_language_model": ((2, 6), "cross_entropy", ["encoder_layers_0_self_attn"],
                              ["position", "encoder_layers_0_norm1", "encoder_layers_1_self_attn"],
                              ["encoder_layers_0_linear1", "relu", "encoder_layers_0_dropout",
                               "encoder_layers_0_linear2"], ["encoder_layers_1_linear1"]),
    # nn.Transformer: source and target (MORE_INPUTS), the decoder's mask a tensor constant.
    "seq2seq": ((2, 5, 16), "mse", ["transformer_encoder_layers_1_linear1"],
                ["transformer_encoder_layers_0_norm2", "transformer_encoder_norm",
                 "transformer_decoder_layers_0_norm3"],
                ["transformer_decoder_layers_1_linear1", "relu_3", "transformer_decoder_layers_1_dropout",
                 "transformer_decoder_layers_1_linear2"], ["transformer_encoder_layers_1_linear1"]),
}
MORE_INPUTS = {"seq2seq": [(2, 4, 16)]}
# Dropout on a transposed view that crosses the cut (as after nn.MultiheadAttention): its mask follows the
# memory order the model had, not the contiguous one the tensor arrives in.
# The 4-chunk plan's first stage is the input alone (a chunk that only hands it on).
CASES["transposed_dropout"] = ((2, 5, 4), "mse", ["transpose"], ["x", "first", "transpose"], [], [])  # the shapes of forward's later arguments (floats)
# Interleaved 1F1B and ZB-V on 4 ranks: 8 chunks (cuts, recomputed and offloaded operators).
EIGHT_CHUNKS = {
    "tiny_unet": (["down1", "relu", "down2", "relu_1", "bottom", "add", "cat"], ["bottom"], ["up1"]),
    "transformer_dropout": (["embed", "encoder_layers_0_self_attn", "encoder_layers_0_norm1", "encoder_layers_0_dropout",
                             "encoder_layers_0_norm2", "encoder_layers_1_dropout1", "encoder_layers_1_linear2"],
                            ["encoder_layers_0_linear2", "encoder_layers_0_dropout2"], ["encoder_layers_1_self_attn"]),
    "resnet18": (["maxpool", "layer1_0_relu_1", "layer1_1_relu_1", "layer2_0_bn1", "layer2_0_relu_1",
                  "layer3_0_downsample_0", "layer3_1_conv2"],
                 ["layer2_0_conv2", "layer2_0_bn2"], ["layer3_1_conv1", "layer3_1_bn1"]),
}
VOCABULARY = {"tied_language_model": 10, "causal_language_model": 11}  # models fed token ids rather than floats


def load_weights(path):
    """The file `--export-weights` writes (torch::pickle_save of a dict, tagged with its type): since
    PyTorch 2.6 torch.load reads only weights unless told which other globals to allow."""
    import torch.jit._pickle
    with torch.serialization.safe_globals([torch.jit._pickle.restore_type_tag]):
        return torch.load(path)


def as_list(inputs):
    """The data's inputs: a tensor, or a list of them in forward's order."""
    return list(inputs) if isinstance(inputs, (list, tuple)) else [inputs]


def loss_of(kind, output, target):
    if kind == "mse":
        return F.mse_loss(output, target)
    return F.cross_entropy(output.reshape(-1, output.shape[-1]), target.reshape(-1))


REFERENCES = {}


def reference(factory, data, microbatches, rates, optimizer, clip=0):
    """Single-process PyTorch training: the seeded model, a step's batch as consecutive micro-batches.
    The data is a function of the factory alone (prepare), so runs that differ only in schedule, ranks
    or plan share one reference training; callers only read what it returns."""
    key = (factory, microbatches, tuple(rates), optimizer, clip)
    if key not in REFERENCES:
        REFERENCES[key] = train_reference(factory, data, microbatches, rates, optimizer, clip)
    return REFERENCES[key]


def train_reference(factory, data, microbatches, rates, optimizer, clip):
    torch.manual_seed(0)
    model = getattr(models, factory)().double().train()
    kind = CASES[factory][1]
    if optimizer == "sgd":
        opt = torch.optim.SGD(model.parameters(), lr=rates[0])
    else:
        opt = torch.optim.AdamW(model.parameters(), lr=rates[0], weight_decay=0.0, eps=1e-8)
    inputs, targets = data["inputs"], data["targets"]
    b = CASES[factory][0][0]
    losses = []
    for step, rate in enumerate(rates):
        opt.zero_grad()
        total = 0.0
        for j in range(microbatches):
            rows = torch.tensor([(step * microbatches * b + j * b + i) % SAMPLES for i in range(b)])
            torch.manual_seed(SEED * 1000003 + step * 65537 + j)  # dropout's masks: the runtime's seed
            loss = loss_of(kind, model(*[x[rows] for x in as_list(inputs)]), targets[rows])
            (loss / microbatches).backward()
            total += loss.item() / microbatches
        if clip:
            torch.nn.utils.clip_grad_norm_(model.parameters(), clip)
        for group in opt.param_groups:
            group["lr"] = rate
        opt.step()
        losses.append(total)
    return losses, model.state_dict()


class CapturedTraining(unittest.TestCase):
    """What a test of captured training does: prepare a case, train it, compare with the reference."""

    def setUp(self):
        self.directory = tempfile.TemporaryDirectory()
        self.addCleanup(self.directory.cleanup)

    def path(self, name):
        return os.path.join(self.directory.name, name)

    def prepare(self, factory, chunks, timed=False):
        shape, kind, two, four, recompute, offload = CASES[factory]
        graph = graph_of_case(factory, timed)
        if chunks == 8:
            plan = plan_for(graph, *EIGHT_CHUNKS[factory])
        else:
            plan = plan_for(graph, two) if chunks == 2 else plan_for(graph, four, recompute, offload)
        with open(self.path("model.graph.json"), "w") as f:
            json.dump(graph, f)
        with open(self.path("plan.json"), "w") as f:
            json.dump(plan, f)
        generator = torch.Generator().manual_seed(7)
        if factory in VOCABULARY:
            inputs = torch.randint(0, VOCABULARY[factory], [SAMPLES, *shape[1:]], generator=generator)
        else:
            inputs = torch.randn([SAMPLES, *shape[1:]], generator=generator, dtype=torch.float64)
        more = [torch.randn([SAMPLES, *more_shape[1:]], generator=generator, dtype=torch.float64)
                for more_shape in MORE_INPUTS.get(factory, [])]
        zeros = [torch.zeros(shape, dtype=torch.long if factory in VOCABULARY else torch.float32)]
        zeros += [torch.zeros(more_shape) for more_shape in MORE_INPUTS.get(factory, [])]
        if kind == "mse":
            torch.manual_seed(0)
            out_shape = getattr(models, factory)()(*zeros).shape
            targets = torch.randn([SAMPLES, *out_shape[1:]], generator=generator, dtype=torch.float64)
        else:
            torch.manual_seed(0)
            out_shape = getattr(models, factory)().eval()(*zeros).shape
            targets = torch.randint(0, out_shape[-1], [SAMPLES, *out_shape[1:-1]], generator=generator)
        if more:
            inputs = [inputs, *more]
        data = {"inputs": inputs, "targets": targets}
        torch.save(data, self.path("data.pt"))
        return data

    def train(self, schedule, devices, microbatches, optimizer, extra=(), clip=0, given_plan=True):
        plan = ["--plan", self.path("plan.json")] if given_plan and schedule != "auto" else []
        done = subprocess.run(
            [BINARY, "train", "--model", self.path("model.graph.json"), *plan, "--schedule", schedule, "-p", str(devices), "-m", str(microbatches), "--steps", str(STEPS),
             "--dtype", "float64", "--optimizer", optimizer, "--lr", "0.05", "--warmup", "1", "--clip", str(clip),
             "--weight-decay", "0", "--data", self.path("data.pt"), "--export-weights", self.path("weights.pt"),
             "--timeout", "120", "--json", *extra],
            capture_output=True, text=True, timeout=600)
        self.assertEqual(done.returncode, 0, done.stdout[-2000:] + done.stderr[-3000:])
        self.stderr = done.stderr
        report = json.loads(done.stdout[done.stdout.index("{"):])["runs"][0]
        return report, load_weights(self.path("weights.pt"))

    def check(self, factory, chunks, schedule, devices, microbatches, optimizer="sgd", extra=(), clip=0, dp=1,
              given_plan=True):
        data = self.prepare(factory, chunks, timed=schedule == "auto" or not given_plan)
        extra = [*extra, "--dp", str(dp)] if dp > 1 else extra
        report, weights = self.train(schedule, devices, microbatches, optimizer, extra, clip, given_plan)
        # What the ranks held for backward passes (saved tensors and what each chunk received) is what the
        # simulator holds from the capture's saved bytes, byte for byte, under this schedule: with recompute
        # and offload pieces, cuts after a ReLU (which saves its output, not what it received) and before a
        # recomputed convolution (which saves its checkpoint), max-pool indices and class targets (integers,
        # which keep their size in float64), BatchNorm (whose running statistics are the model's).
        for rank in report["memory"]:
            self.assertEqual(rank["measured_peak_saved_bytes"], rank["simulated_peak_activation_bytes"],
                             f"{schedule}: rank {rank['rank']}")
        rates = [s["learning_rate"] for s in report["steps"]]
        self.assertIn("samples_per_second", report["steps"][0])  # a captured model's inputs need not be tokens
        # Data parallelism: copy r takes micro-batches r*m .. r*m+m-1 of the step's m*dp.
        losses, state = reference(factory, data, microbatches * dp, rates, optimizer, clip)
        for step, (got, want) in enumerate(zip([s["loss"] for s in report["steps"]], losses)):
            self.assertLessEqual(abs(got - want), RELATIVE * abs(want), f"{schedule}: loss of step {step}")
        self.assertEqual(sorted(weights), sorted(state), "the state_dict's names")
        for name, want in state.items():
            got = weights[name]
            self.assertEqual(got.dtype, want.dtype, name)
            scale = max(want.double().abs().max().item(), 1e-300)
            difference = (got.double() - want.double()).abs().max().item()
            self.assertLessEqual(difference, RELATIVE * scale, f"{schedule}: {name}")
        return report


@unittest.skipUnless(BINARY, "FLEXPIPE_BINARY names the flexpipe binary (ctest sets it)")
class TrainCaptured(CapturedTraining):
    def test_unet_skips_across_cuts_under_gpipe_1f1b_and_zb_h1(self):
        for schedule in ("gpipe", "1f1b", "zb-h1"):
            with self.subTest(schedule=schedule):
                self.check("tiny_unet", 2, schedule, 2, 4)

    def test_the_searchs_answer(self):
        # --schedule auto searches placements, partitions and orders with the times the capture measured,
        # writes its partition as a plan next to the graph, exports the model for it and trains it. Which
        # answer wins depends on those times; every answer must train exactly.
        report = self.check("tiny_unet", 2, "auto", 2, 4, "adamw")
        with open(self.path("model.graph.auto-plan.json")) as f:
            plan = json.load(f)
        self.assertEqual(plan["method"], "search")
        self.assertEqual(len(plan["stages"]), report["stages"] // (2 if report["schedule"] == "dualpipe" else 1))

    def test_without_a_plan_the_partitioners_default(self):
        # No --plan: train partitions the graph as `flexpipe partition --model GRAPH` does by default for the
        # run (DawnPiper's method, the run's schedule, devices and micro-batches, the graph's micro-batch, the
        # hardware profile's memory), writes the plan next to the graph, says so in one line, and trains it
        # exactly.
        for schedule, devices, stages in (("1f1b", 2, 2), ("interleaved-1f1b", 2, 4)):
            with self.subTest(schedule=schedule):
                extra = ["-v", "2"] if schedule == "interleaved-1f1b" else []
                self.check("tiny_unet", 2, schedule, devices, 4, "adamw", extra, given_plan=False)
                graph, written = self.path("model.graph.json"), self.path("model.graph.plan.json")
                said = [line for line in self.stderr.splitlines() if "no --plan" in line]
                self.assertEqual(said, [f"--model {graph}: no --plan: partitioned for {schedule} on {devices} devices "
                                        f"with 4 micro-batches (dawn, memory limit 80.00 GB of H100-80GB) into "
                                        f"{written}"])
                with open(written) as f:
                    plan = json.load(f)
                self.assertEqual((plan["method"], plan["schedule"], len(plan["stages"]), plan["memory_limit"]),
                                 ("dawn", schedule, stages, 80e9))

    def test_unet_recompute_and_offload_interleaved_and_on_four_ranks(self):
        report = self.check("tiny_unet", 4, "interleaved-1f1b", 2, 4, "adamw", ["-v", "2", "--verify"])
        # --verify: the same export trained in one process, one autograd graph per micro-batch; the
        # pipeline (pieces, recompute, offload, transfers) computes the same numbers, for every parameter
        # and buffer of the chunks each rank holds.
        verify = report["verify"]
        self.assertTrue(verify["passed"], verify)
        self.assertLessEqual(verify["loss_difference"], 1e-12)
        self.assertLessEqual(verify["parameter_difference"], 1e-12)
        self.assertGreater(verify["tensors_compared_on_rank_0"], 0)
        report = self.check("tiny_unet", 4, "1f1b", 4, 4, "adamw")
        self.assertEqual(len(report["memory"]), 4)

    def test_transformer_classifier_zb_v_and_1f1b_with_two_data_parallel_copies(self):
        self.check("transformer_classifier", 4, "zb-v", 2, 4, "adamw")
        # Split backward: a piece that trains keeps its graph from I to W, and the simulator holds it so.
        self.check("transformer_classifier", 2, "zb-h1", 2, 4)
        self.check("transformer_classifier", 2, "1f1b", 2, 2, "adamw", clip=0.5, dp=2)

    def test_dropout_draws_the_single_process_masks(self):
        # One process seeds the generator per micro-batch and every dropout draws where the one before
        # stopped: the runtime hands the generator's state on with each chunk's outputs, over the wire
        # (ZB-V: chunk 0 to 1, 2 to 3) and within a rank (chunk 1 to 2 on rank 1), and the recompute piece
        # replays its draws. Data parallelism: copy r's micro-batch j is the step's micro-batch r*m + j.
        self.check("transformer_dropout", 4, "zb-v", 2, 4, "adamw")
        report = self.check("transformer_dropout", 2, "1f1b", 2, 2, "adamw", ["--verify"], dp=2)
        self.assertTrue(report["verify"]["passed"], report["verify"])

    def test_a_weight_tied_across_chunks(self):
        # Each chunk holding the tied weight adds its gradient; the copies take the summed step, counted
        # once in the clipped norm and written once: on two ranks (1F1B), and with both copies on one rank
        # (interleaved: chunks 0 and 2 on rank 0).
        self.check("tied_language_model", 2, "1f1b", 2, 4, "adamw", clip=0.5)
        report = self.check("tied_language_model", 4, "interleaved-1f1b", 2, 4, "adamw", ["-v", "2", "--verify"],
                            clip=0.5)
        self.assertTrue(report["verify"]["passed"], report["verify"])

    def test_a_tied_weight_under_dualpipe_and_dualpipev(self):
        # DualPipe: two pipelines in opposite directions, each rank holding chunk 0 of one and chunk 1 of the
        # other, so rank 0 holds both copies of the tied weight, in different pipelines: the copies of each
        # chunk sum their gradients first, then each pipeline's tied copies. DualPipeV: one pipeline on a V
        # of 4 chunks, the copies (chunks 0 and 2) on ranks 0 and 1, under overlapped F&B and split backward.
        self.check("tied_language_model", 2, "dualpipe", 2, 4, "adamw", clip=0.5)
        report = self.check("tied_language_model", 4, "dualpipev", 2, 4, "adamw", ["--verify"], clip=0.5)
        self.assertTrue(report["verify"]["passed"], report["verify"])

    def test_a_tied_weight_checkpointed_and_resumed(self):
        # Every holder saves its copy and its optimizer moments; resumed, the copies go on as one tensor, bit
        # for bit as without the interruption: copies on two ranks (1F1B), and under DualPipe, where rank 0
        # holds both (in opposite pipelines). With AdamW and clipping, DualPipe's resumed step differed in
        # the last bit while TorchScript optimized the modules after their first calls (a resumed run's
        # step 2 is their first call, the uninterrupted run's is not).
        for schedule in ("1f1b", "dualpipe"):
            with self.subTest(schedule=schedule):
                self.prepare("tied_language_model", 2)
                checkpoints = ["--checkpoint", self.path(f"checkpoints-{schedule}")]
                _, straight = self.train(schedule, 2, 4, "adamw", [*checkpoints, "--save-every", "2"], clip=0.5)
                with open(self.path(f"checkpoints-{schedule}/latest"), "w") as f:  # back to after step 2
                    f.write("2\n")
                report, resumed = self.train(schedule, 2, 4, "adamw", [*checkpoints, "--resume"], clip=0.5)
                self.assertEqual(report["first_step"], 2)
                self.assertEqual(sorted(resumed), sorted(straight))
                for name, want in straight.items():
                    self.assertTrue(torch.equal(resumed[name], want), name)

    def test_the_model_is_exported_again_only_when_what_it_is_cut_from_changed(self):
        def train(schedule="1f1b"):
            done = subprocess.run([BINARY, "train", "--model", self.path("model.graph.json"), "--plan",
                                   self.path("plan.json"), "--schedule", schedule, "-p", "2", "-m", "2", "--steps", "1"],
                                  capture_output=True, text=True, timeout=600)
            self.assertEqual(done.returncode, 0, done.stderr)
            return done.stderr

        export = self.path("model.graph.export")
        self.prepare("tiny_unet", 2)
        self.assertIn(f"{export}/manifest.json: 2 chunks", train())
        self.assertIn(f"{export}: made from this graph, plan, dtype and model source already: not exported again",
                      train())
        self.prepare("tiny_unet", 4)  # another plan
        self.assertIn(f"{export}/manifest.json: 4 chunks", train("zb-v"))
        # Any export into the directory, here one for the 2-chunk plan, forgets what the last train made it from.
        with open(self.path("plan2.json"), "w") as f:
            json.dump(plan_for(graph_of_case("tiny_unet"), CASES["tiny_unet"][2]), f)
        done = subprocess.run([BINARY, "export", self.path("model.graph.json"), "--plan", self.path("plan2.json"),
                               "-o", export, "--no-check"], capture_output=True, text=True, timeout=600)
        self.assertEqual(done.returncode, 0, done.stderr)
        self.assertIn(f"{export}/manifest.json: 4 chunks", train("zb-v"))

    def test_checkpoint_and_resume_equal_an_uninterrupted_run(self):
        self.prepare("resnet18", 2)
        checkpoints = ["--checkpoint", self.path("checkpoints")]
        _, straight = self.train("1f1b", 2, 2, "adamw", [*checkpoints, "--save-every", "2"])
        with open(self.path("checkpoints/latest"), "w") as f:  # back to the checkpoint after step 2
            f.write("2\n")
        report, resumed = self.train("1f1b", 2, 2, "adamw", [*checkpoints, "--resume"])
        self.assertEqual(report["first_step"], 2)
        for name, want in straight.items():
            self.assertTrue(torch.equal(resumed[name], want), name)

    def test_a_causal_language_model_with_buffers_and_a_mask_built_in_forward(self):
        # The positions' buffer and the causal mask (a tensor the first chunk builds from the sequence length
        # and hands on, never a gradient), 2 chunks under 1F1B, and 4 under ZB-V with recompute and offload.
        self.check("causal_language_model", 2, "1f1b", 2, 4, "adamw")
        report = self.check("causal_language_model", 4, "zb-v", 2, 4, extra=["--verify"])
        self.assertTrue(report["verify"]["passed"], report["verify"])

    def test_an_encoder_decoder_with_two_inputs_and_a_mask_constant(self):
        # nn.Transformer: the target relayed through the encoder's chunks, the decoder's mask a constant of
        # every chunk that reads it; 2 chunks under ZB-H1 (split backward), 4 interleaved with recompute and
        # offload.
        self.check("seq2seq", 2, "zb-h1", 2, 4, "adamw")
        self.check("seq2seq", 4, "interleaved-1f1b", 2, 4, extra=["-v", "2"])

    def test_dropout_on_a_transposed_view_received_from_another_rank(self):
        self.check("transposed_dropout", 2, "1f1b", 2, 4)
        report = self.check("transposed_dropout", 4, "zb-v", 2, 4, extra=["--verify"])
        self.assertTrue(report["verify"]["passed"], report["verify"])

    def test_resnet18_batchnorm_statistics(self):
        self.check("resnet18", 2, "1f1b", 2, 2)
        # 4 chunks under ZB-V: a recomputed convolution after a kept ReLU (the checkpoint is the tensor the
        # ReLU saves), BatchNorm rebuilt from copies of its statistics, an offload piece.
        self.check("resnet18", 4, "zb-v", 2, 4, "adamw")
        # Interleaved: the offload piece's convolution saves the tensor the kept ReLU before it saves; that
        # tensor stays on the device (a host copy would come back from RELOAD as a second one).
        self.check("resnet18", 4, "interleaved-1f1b", 2, 4, extra=["-v", "2"])


@unittest.skipUnless(BINARY, "FLEXPIPE_BINARY names the flexpipe binary (ctest sets it)")
class BadInput(unittest.TestCase):
    """One error line naming the file, and exit code 2, before any rank trains."""

    def setUp(self):
        self.directory = tempfile.TemporaryDirectory()
        self.addCleanup(self.directory.cleanup)
        graph = graph_of_case("tiny_unet")
        self.graph = self.path("model.graph.json")
        self.write("model.graph.json", graph)
        self.write("plan2.json", plan_for(graph, ["relu_2"]))
        self.write("plan1.json", plan_for(graph, []))

    def path(self, name):
        return os.path.join(self.directory.name, name)

    def write(self, name, document):
        with open(self.path(name), "w") as f:
            json.dump(document, f)

    def train(self, *arguments, rank=False):
        # As a rank of a job (WORLD_SIZE set) the export is not made again: it must be there.
        environment = dict(os.environ, WORLD_SIZE="1", RANK="0", LOCAL_RANK="0") if rank else None
        done = subprocess.run([BINARY, "train", "--model", self.graph, "--steps", "1", *arguments],
                              capture_output=True, text=True, timeout=600, env=environment)
        self.assertEqual(done.returncode, 2, done.stdout + done.stderr)
        errors = [line for line in done.stderr.splitlines() if line.startswith("error:")]
        self.assertEqual(len(errors), 1, done.stderr)
        return errors[0]

    def test_data_whose_samples_do_not_match_the_inputs(self):
        torch.save({"inputs": torch.randn(5, 3, 9, 8), "targets": torch.randn(5, 2, 8, 8)}, self.path("data.pt"))
        self.assertEqual(
            self.train("--plan", self.path("plan2.json"), "-p", "2", "--data", self.path("data.pt")),
            f"error: {self.path('data.pt')}: inputs[0] (x) has shape [5, 3, 9, 8]; the model takes samples of "
            "shape [3, 8, 8] along dimension 0 (N x 3 x 8 x 8)")
        torch.save([1, 2], self.path("list.pt"))
        self.assertIn("holds a GenericList, not a dict",
                      self.train("--plan", self.path("plan2.json"), "-p", "2", "--data", self.path("list.pt")))

    def test_a_plan_for_another_model(self):
        plan = plan_for(graph_of_case("tiny_unet"), ["relu_2"])
        plan["graph"] = "Other"
        self.write("other.json", plan)
        error = self.train("--plan", self.path("other.json"), "-p", "2")
        self.assertIn("made for 'Other'", error)

    def test_an_export_for_another_plan_a_missing_module_and_one_from_another_model(self):
        export = self.path("model.export")
        done = subprocess.run([BINARY, "export", self.graph, "--plan", self.path("plan2.json"), "-o", export,
                               "--no-check"], capture_output=True, text=True, timeout=600)
        self.assertEqual(done.returncode, 0, done.stderr)
        one_rank = ["-p", "1", "--export-dir", export]
        self.assertEqual(self.train("--plan", self.path("plan1.json"), *one_rank, rank=True),
                         f"error: rank 0: {export}/manifest.json: 2 chunks, but the plan has 1 stages: export again "
                         "with this plan")
        done = subprocess.run([BINARY, "export", self.graph, "--plan", self.path("plan1.json"), "-o", export,
                               "--no-check"], capture_output=True, text=True, timeout=600)
        self.assertEqual(done.returncode, 0, done.stderr)
        os.rename(os.path.join(export, "stage_0.pt"), self.path("stage_0.pt"))
        self.assertIn(f"{export}/stage_0.pt: missing", self.train("--plan", self.path("plan1.json"), *one_rank,
                                                                    rank=True))
        torch.jit.save(torch.jit.script(torch.nn.Linear(2, 2)), os.path.join(export, "stage_0.pt"))
        self.assertIn("holds parameter weight, which chunk 0's manifest entry does not list",
                      self.train("--plan", self.path("plan1.json"), *one_rank, rank=True))

    def test_a_malformed_tied_chunks(self):
        # The tied language model cut in two: both chunks hold embedding.weight, each naming the other.
        graph = graph_of_case("tied_language_model")
        self.graph = self.path("tied.graph.json")
        self.write("tied.graph.json", graph)
        self.write("tied-plan.json", plan_for(graph, ["hidden"]))
        export = self.path("tied.export")
        done = subprocess.run([BINARY, "export", self.graph, "--plan", self.path("tied-plan.json"), "-o", export,
                               "--no-check"], capture_output=True, text=True, timeout=600)
        self.assertEqual(done.returncode, 0, done.stderr)
        manifest = os.path.join(export, "manifest.json")
        with open(manifest) as f:
            good = json.load(f)
        index = [[p["name"] for p in chunk["parameters"]].index("embedding.weight") for chunk in good["chunks"]]
        self.assertEqual([good["chunks"][k]["parameters"][index[k]]["tied_chunks"] for k in (0, 1)], [[1], [0]])

        def error_with(change):
            document = json.loads(json.dumps(good))
            change(document["chunks"][0]["parameters"][index[0]], document["chunks"][1]["parameters"][index[1]])
            with open(manifest, "w") as f:
                json.dump(document, f)
            # Both chunks on one rank (interleaved, one device): a rank of a job reads the export as it is.
            return self.train("--plan", self.path("tied-plan.json"), "--schedule", "interleaved-1f1b", "-p", "1",
                              "-v", "2", "-m", "2", "--export-dir", export, rank=True)

        field = f"error: rank 0: {manifest}: chunks[0].parameters[{index[0]}].tied_chunks"
        self.assertEqual(error_with(lambda mine, other: mine.update(tied_chunks=1)),
                         f"{field}: expected a list of the other chunks' indices, got 1")
        self.assertEqual(error_with(lambda mine, other: mine.update(tied_chunks=[2])),
                         f"{field}: 2 is not another chunk's index (0 to 1)")
        self.assertEqual(error_with(lambda mine, other: mine.update(tied_chunks=[0])),
                         f"{field}: 0 is this chunk: list the other chunks that hold embedding.weight")
        self.assertEqual(error_with(lambda mine, other: other.update(shape=[10, 9])),
                         f"{field}: chunk 1 holds embedding.weight as [10, 9] float32, this chunk as [10, 8] float32: "
                         "tied copies must agree")
        self.assertEqual(error_with(lambda mine, other: other.pop("tied_chunks")),
                         f"{field}: chunk 1's embedding.weight does not name chunk 0 in its tied_chunks")
        self.assertEqual(error_with(lambda mine, other: other.update(state_dict=["other.weight"])),
                         f"{field}: chunk 1 holds no parameter embedding.weight")

    def test_options_a_captured_model_needs(self):
        # Without --plan the partitioner balances the capture's operator times: this graph has none.
        self.assertEqual(
            self.train("-p", "2"),
            f"error: --model {self.graph}: no --plan, and the graph holds no operator times (its capture record says "
            "0 repeats), so the partitioner has nothing to balance: capture it with `flexpipe capture` (which times "
            "every operator), or give --plan PLAN.json")
        # Without --plan the partition is made before the ranks start: a rank of a job cannot make it.
        self.assertEqual(
            self.train("-p", "2", rank=True),
            f"error: --model {self.graph}: without --plan the partition is made once, before any rank starts: run "
            f"`flexpipe train --model {self.graph} ...` without a launcher around it (it starts its own ranks), or "
            f"give every rank --plan PLAN.json (flexpipe partition --model {self.graph} -p P -m M -o PLAN.json)")
        self.assertEqual(
            self.train("--schedule", "auto", "-p", "2"),
            f"error: --schedule auto: {self.graph} holds no operator times (its capture record says 0 repeats), so "
            "every schedule would look alike: capture it with `flexpipe capture` (which times every operator), or "
            "name a schedule")
        self.assertIn("is chosen once, before any rank starts", self.train("--schedule", "auto", rank=True))


GRAPHS = {}


def graph_of_case(factory, timed=False):
    if (factory, timed) not in GRAPHS:
        from flexpipe import capture
        from flexpipe.loading import example_input
        shape, kind = CASES[factory][:2]
        torch.manual_seed(0)
        model = getattr(models, factory)()
        dtype = "int64" if factory in VOCABULARY else "float32"
        inputs = [example_input(list(shape), dtype, 0)]
        inputs += [example_input(list(more), "float32", seed)
                   for seed, more in enumerate(MORE_INPUTS.get(factory, []), 1)]
        GRAPHS[factory, timed] = capture(model, inputs, kind, time_operators=timed,
                                         source={"file": models.__file__, "factory": factory})
    return GRAPHS[factory, timed]


if __name__ == "__main__":
    unittest.main()
