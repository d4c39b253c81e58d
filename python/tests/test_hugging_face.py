"""Hugging Face transformers models (examples/hugging_face: GPT-2, Llama, Mixtral, BERT, T5, ViT at tiny
sizes, built from configs with random weights) captured through torch.export, partitioned, trained by
the C++ runtime on 2 ranks under two schedules each, and their trained weights loaded back into
transformers: losses of every step and every weight equal single-process PyTorch training within 1e-9
(float64), as test_train_captured.py checks the torch.fx models.

The first schedule of each model trains the plan `flexpipe partition` makes from the captured times; the
second a plan cut at fixed operators (quarters of the graph), two chunks per rank where the schedule
places two. The remaining cells (every schedule family, 4 ranks, the search's answer) are
`FullMatrix`, run by bench/hugging_face_matrix.sh (FLEXPIPE_HF_MATRIX=1): too long for CI's budget."""
import json
import os
import subprocess
import sys
import tempfile
import unittest

import torch
import torch.nn.functional as F

from flexpipe import capture
from flexpipe.errors import CaptureError
from flexpipe.calling import call_model
from flexpipe.loading import example_input
from flexpipe.tracers import trace_model
from test_export import plan_for
from test_train_captured import BINARY, RELATIVE, SAMPLES, SEED, STEPS, load_weights
import reference

EXAMPLES = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "examples", "hugging_face")
sys.path.insert(0, EXAMPLES)
os.environ.setdefault("HF_HUB_OFFLINE", "1")  # nothing is downloaded: every model is built from its config
os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")  # from_pretrained's progress bar and warnings

VOCABULARY = 64
# model: its inputs by name ((shape, dtype)), its outputs' classes (None: the vocabulary), the two
# schedules of CI (the first on the partitioner's plan).
CASES = {
    "gpt2": ({"input_ids": ((2, 8), "int64")}, None, ("1f1b", "zb-v")),
    "llama": ({"input_ids": ((2, 8), "int64")}, None, ("gpipe", "interleaved-1f1b")),
    "mixtral": ({"input_ids": ((2, 8), "int64")}, None, ("1f1b", "dualpipe")),
    "bert": ({"input_ids": ((2, 8), "int64"), "attention_mask": ((2, 8), "int64")}, None, ("zb-h1", "zb-v")),
    "t5": ({"input_ids": ((2, 8), "int64"), "decoder_input_ids": ((2, 6), "int64")}, None, ("1f1b", "interleaved-1f1b")),
    "vit": ({"pixel_values": ((2, 3, 16, 16), "float32")}, 5, ("gpipe", "dualpipe")),
}
TWO_CHUNKS_PER_RANK = {"interleaved-1f1b", "zb-v", "dualpipev"}
# What loads each model's folder back (--export-weights DIR/).
AUTO_CLASSES = {"gpt2": "AutoModelForCausalLM", "llama": "AutoModelForCausalLM", "mixtral": "AutoModelForCausalLM",
                "bert": "AutoModelForMaskedLM", "t5": "AutoModelForSeq2SeqLM", "vit": "AutoModelForImageClassification"}
MICROBATCHES = 4
MEMORY_SLACK = {"mixtral": 0.01}  # of the simulated peak; see check()


def factory(name):
    return getattr(__import__(name), "tiny")


GRAPHS = {}


def graph_of(name, timed=False):
    """The model's cost graph, once per run (capturing measures; timed only where a plan is made from it)."""
    if (name, timed) not in GRAPHS:
        inputs = {key: example_input(list(shape), dtype, seed)
                  for seed, (key, (shape, dtype)) in enumerate(CASES[name][0].items())}
        inputs = {key: x.double() if x.is_floating_point() else x for key, x in inputs.items()}
        torch.manual_seed(0)  # in float64, as it trains: Llama's RMSNorm and rotary embedding compute in float32
        GRAPHS[name, timed] = capture(factory(name)().double(), inputs, "cross_entropy", time_operators=timed, warmup=0,
                                      repeats=1, source={"file": os.path.join(EXAMPLES, f"{name}.py"),
                                                         "factory": "tiny"})
    return GRAPHS[name, timed]


def data_of(name):
    """The user's data: token ids (an attention mask with padding), or images; targets the next token
    for the causal models, a token per position for BERT and T5, a class for ViT."""
    generator = torch.Generator().manual_seed(7)
    inputs = {}
    for key, (shape, dtype) in CASES[name][0].items():
        if key == "attention_mask":
            mask = torch.ones([SAMPLES, *shape[1:]], dtype=torch.long)
            mask[::3, -2:] = 0  # padding at the end of every third sample
            inputs[key] = mask
        elif dtype == "int64":
            inputs[key] = torch.randint(0, VOCABULARY, [SAMPLES, *shape[1:]], generator=generator)
        else:
            inputs[key] = torch.randn([SAMPLES, *shape[1:]], generator=generator, dtype=torch.float64)
    if name in ("gpt2", "llama", "mixtral"):
        targets = torch.roll(inputs["input_ids"], -1, dims=1)  # the shifted ids
    elif name == "t5":
        targets = torch.randint(0, VOCABULARY, [SAMPLES, *CASES[name][0]["decoder_input_ids"][0][1:]],
                                generator=generator)
    elif name == "vit":
        targets = torch.randint(0, CASES[name][1], [SAMPLES], generator=generator)
    else:
        targets = torch.randint(0, VOCABULARY, [SAMPLES, *CASES[name][0]["input_ids"][0][1:]], generator=generator)
    return {"inputs": inputs, "targets": targets}


REFERENCES = {}


def reference_training(name, data, rates, microbatches=MICROBATCHES):
    """Single-process PyTorch: the seeded model in float64, a step's batch as consecutive micro-batches
    with dropout seeded per micro-batch as the runtime seeds it, SGD at the run's learning rates."""
    key = (name, tuple(rates), microbatches)
    if key not in REFERENCES:
        torch.manual_seed(0)
        model = factory(name)().double().train()
        optimizer = torch.optim.SGD(model.parameters(), lr=rates[0])
        names = list(data["inputs"])
        losses = []
        for step, rate in enumerate(rates):
            optimizer.zero_grad()
            total = 0.0
            for j in range(microbatches):
                b = CASES[name][0][names[0]][0][0]
                rows = torch.tensor([(step * microbatches * b + j * b + i) % SAMPLES for i in range(b)])
                torch.manual_seed(SEED * 1000003 + step * 65537 + j)
                inputs = [data["inputs"][k][rows] for k in names]
                logits = call_model(model, inputs, names)
                loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), data["targets"][rows].reshape(-1))
                (loss / microbatches).backward()
                total += loss.item() / microbatches
            for group in optimizer.param_groups:
                group["lr"] = rate
            optimizer.step()
            losses.append(total)
        REFERENCES[key] = (losses, model.state_dict())
    return REFERENCES[key]


class HuggingFaceTraining(unittest.TestCase):
    def setUp(self):
        self.directory = tempfile.TemporaryDirectory()
        self.addCleanup(self.directory.cleanup)

    def path(self, name):
        return os.path.join(self.directory.name, name)

    def run_binary(self, *arguments):
        done = subprocess.run([BINARY, *arguments], capture_output=True, text=True, timeout=600)
        self.assertEqual(done.returncode, 0, done.stdout[-2000:] + done.stderr[-3000:])
        return done

    def plan(self, name, schedule, devices, partitioned, microbatches=MICROBATCHES):
        """The partitioner's plan from the captured times, or one cut at quarters of the graph; none for the
        search's answer (--schedule auto writes its own)."""
        graph_path = self.path("model.graph.json")
        with open(graph_path, "w") as f:
            json.dump(graph_of(name, timed=partitioned or schedule == "auto"), f)
        stages = devices * (2 if schedule in TWO_CHUNKS_PER_RANK else 1)
        if schedule == "auto":
            return []
        if partitioned:
            # Without offloading (--host-bandwidth 0): whether the partitioner offloads depends on the times it
            # measured, and an offloaded ViT piece holds 208 bytes more than simulated (the closing note's
            # open item), which would make this test pass or fail by the machine's timing.
            self.run_binary("partition", "--model", graph_path, "-p", str(devices), "-m", str(microbatches),
                            "--schedule", schedule, "--host-bandwidth", "0", "-o", self.path("plan.json"))
        else:
            names = [n["name"] for n in graph_of(name)["nodes"]]
            cuts = [names[len(names) * k // stages] for k in range(1, stages)]
            with open(self.path("plan.json"), "w") as f:
                json.dump(plan_for(graph_of(name), cuts), f)
        return ["--plan", self.path("plan.json")]

    def check(self, name, schedule, devices, partitioned=False, folder=False):
        microbatches = max(MICROBATCHES, 2 * devices) if schedule == "dualpipe" else MICROBATCHES  # p per direction
        plan = self.plan(name, schedule, devices, partitioned, microbatches)
        data = data_of(name)
        torch.save(data, self.path("data.pt"))
        extra = ["--auto-margin", "0.05"] if schedule == "auto" else []  # as test_schedule_matrix.py says why
        done = self.run_binary(
            "train", "--model", self.path("model.graph.json"), *plan, *extra, "--schedule", schedule,
            "-p", str(devices), "-m", str(microbatches), "--steps", str(STEPS), "--dtype", "float64",
            "--plain-sgd", "--lr", "0.05", "--data", self.path("data.pt"),
            "--export-weights", self.path("trained/" if folder else "weights.pt"), "--timeout", "120", "--json")
        report = json.loads(done.stdout[done.stdout.index("{"):])["runs"][0]
        losses, state = reference_training(name, data, [s["learning_rate"] for s in report["steps"]], microbatches)
        for step, (got, want) in enumerate(zip([s["loss"] for s in report["steps"]], losses)):
            self.assertLessEqual(abs(got - want), RELATIVE * abs(want), f"{name} {schedule}: loss of step {step}")
        if folder:  # config.json and model.safetensors, as transformers saves a model
            import transformers
            model = getattr(transformers, AUTO_CLASSES[name]).from_pretrained(self.path("trained"), dtype=torch.float64)
            self.assertEqual(type(model), type(factory(name)()))
            written = set(os.listdir(self.path("trained")))
            self.assertLessEqual({"config.json", "model.safetensors"}, written)
            self.assertNotIn("flexpipe-weights.pt", written)  # the folder holds them now
        else:  # the weights go back into the transformers model by its own state_dict names
            model = factory(name)().double()
            model.load_state_dict(load_weights(self.path("weights.pt")), strict=True)
        for key, want in state.items():
            got = model.state_dict()[key]
            # At least 1e-6: a key's bias has no gradient (softmax ignores it) and moves by rounding alone.
            scale = max(want.double().abs().max().item(), 1e-6)
            self.assertLessEqual((got.double() - want.double()).abs().max().item(), RELATIVE * scale,
                                 f"{name} {schedule}: {key}")
        for rank in report["memory"]:
            # Byte for byte, except Mixtral's: where its router's float32 weights (in the float64 model) cross
            # a cut, the receiving rank holds them as they travelled and its readers save float32 copies the
            # graph does not see (docs/capture.md, Limits): within 1% there.
            self.assertLessEqual(abs(rank["measured_peak_saved_bytes"] - rank["simulated_peak_activation_bytes"]),
                                 MEMORY_SLACK.get(name, 0) * rank["simulated_peak_activation_bytes"],
                                 f"{name} {schedule}: rank {rank['rank']}")
        return report


@unittest.skipUnless(BINARY, "FLEXPIPE_BINARY names the flexpipe binary (ctest sets it)")
class TrainHuggingFace(HuggingFaceTraining):
    def train_two_schedules(self, name):
        first, second = CASES[name][2]
        with self.subTest(schedule=first):
            self.check(name, first, 2, partitioned=True)
        with self.subTest(schedule=second):
            self.check(name, second, 2, folder=True)

    def test_gpt2(self):
        self.train_two_schedules("gpt2")

    def test_llama(self):
        self.train_two_schedules("llama")

    def test_mixtral(self):
        self.train_two_schedules("mixtral")

    def test_bert(self):
        self.train_two_schedules("bert")

    def test_t5(self):
        self.train_two_schedules("t5")

    def test_vit(self):
        self.train_two_schedules("vit")


@unittest.skipUnless(BINARY and os.environ.get("FLEXPIPE_HF_MATRIX"),
                     "the full matrix takes about 15 minutes: bench/hugging_face_matrix.sh runs it")
class FullMatrix(HuggingFaceTraining):
    """Every model under every schedule family on 2 and 4 ranks, and the search's answer: the cells CI does
    not train (bench/hugging_face_matrix.sh; its table is in docs/performance.md)."""
    SCHEDULES = ("gpipe", "1f1b", "interleaved-1f1b", "zb-h1", "zb-v", "dualpipe", "auto")

    def cells(self, name):
        for devices in (2, 4):
            for schedule in self.SCHEDULES:
                if devices == 2 and schedule in CASES[name][2]:
                    continue  # CI trains it
                with self.subTest(model=name, schedule=schedule, devices=devices):
                    report = self.check(name, schedule, devices)
                    print(f"cell {name} {schedule} {devices} ranks: equal ({report['schedule']}, "
                          f"{report['stages']} stages)", file=sys.stderr, flush=True)

    def test_gpt2(self):
        self.cells("gpt2")

    def test_llama(self):
        self.cells("llama")

    def test_mixtral(self):
        self.cells("mixtral")

    def test_bert(self):
        self.cells("bert")

    def test_t5(self):
        self.cells("t5")

    def test_vit(self):
        self.cells("vit")


class CapturedHuggingFace(unittest.TestCase):
    def test_parameters_ties_and_the_tracer(self):
        # Every parameter once (GPT-2's, BERT's and T5's LM heads are their embeddings' weight: tied_to).
        tied = {"gpt2": {"lm_head": "transformer_wte"},
                "t5": {"decoder_embed_tokens": "encoder_embed_tokens", "lm_head": "encoder_embed_tokens"}}
        for name in CASES:
            with self.subTest(name):
                graph = graph_of(name)
                torch.manual_seed(0)
                model = factory(name)()
                self.assertEqual(graph["capture"]["tracer"], "export")
                self.assertEqual(sum(n.get("parameters", 0) for n in graph["nodes"]),
                                 sum(p.numel() for p in model.parameters()))
                self.assertEqual({n["name"]: n["tied_to"] for n in graph["nodes"] if "tied_to" in n},
                                 tied.get(name, {}))

    def test_saved_bytes_equal_what_autograd_keeps(self):
        # The capture's hooks attribute each saved tensor to an operator; walking the autograd graph of the
        # traced ATen program (what the exported chunks run) finds the same storages independently. The
        # eager model keeps other tensors: its dropout keeps a float mask, the ATen program's native_dropout
        # a bool one.
        for name in CASES:
            with self.subTest(name):
                torch.manual_seed(0)
                model = factory(name)().double()
                inputs = [example_input(list(shape), dtype, seed).double() if dtype != "int64" else
                          example_input(list(shape), dtype, seed)
                          for seed, (shape, dtype) in enumerate(CASES[name][0].values())]
                _, program, _, _ = trace_model(model, inputs, list(CASES[name][0]))
                real = reference.saved_activation_bytes(program, inputs, "cross_entropy")
                self.assertEqual(reference.captured_saved_bytes(graph_of(name), 2), real)


class CannotBeCaptured(unittest.TestCase):
    """A model or an input that cannot be captured is one CaptureError naming the operation and what to try."""

    def test_an_operator_registered_in_python(self):
        # Mixtral's default experts kernel is transformers' own operator, which the C++ runtime cannot run.
        import transformers
        config = transformers.MixtralConfig(num_hidden_layers=1, hidden_size=16, intermediate_size=16,
                                            num_attention_heads=2, num_key_value_heads=1, vocab_size=32,
                                            num_local_experts=2, num_experts_per_tok=1)
        with self.assertRaisesRegex(CaptureError, r"^cannot capture the model: it calls "
                                                  r"transformers::grouped_mm_fallback, an operator registered in "
                                                  r"Python that the C\+\+ runtime cannot run; for a mixture of "
                                                  r"experts, build the config with "
                                                  r"experts_implementation=\"batched_mm\" \(ATen operators only\)$"):
            capture(transformers.MixtralForCausalLM(config), {"input_ids": torch.zeros(2, 4, dtype=torch.long)},
                    "cross_entropy", time_operators=False)

    def test_an_input_forward_does_not_take(self):
        with self.assertRaisesRegex(CaptureError, r"^--input ids=\.\.\.: GPT2LMHeadModel\.forward has no argument "
                                                  r"'ids'; it takes input_ids, past_key_values, "):
            capture(factory("gpt2")(), {"ids": torch.zeros(2, 4, dtype=torch.long)}, "cross_entropy",
                    time_operators=False)

    def test_named_inputs_by_position_under_fx(self):
        ids = torch.zeros(2, 4, dtype=torch.long)
        with self.assertRaisesRegex(CaptureError, r"^--tracer fx passes the inputs by position, and attention_mask, "
                                                  r"input_ids are not the first arguments of BertForMaskedLM\.forward "
                                                  r"in that order \(input_ids, attention_mask, token_type_ids, "
                                                  r"position_ids, \.\.\.\); give them so, or capture with "
                                                  r"--tracer export$"):
            capture(factory("bert")(), {"attention_mask": torch.ones_like(ids), "input_ids": ids}, "cross_entropy",
                    tracer="fx", time_operators=False)

    def test_what_fx_cannot_trace_is_captured_through_torch_export(self):
        # A custom autograd.Function: torch.fx cannot see into it (torch 2.11 crashed on its proxy), so by
        # default the capture takes torch.export, and says which tracer it used.
        class Square(torch.autograd.Function):
            @staticmethod
            def forward(ctx, x):
                ctx.save_for_backward(x)
                return x * x

            @staticmethod
            def backward(ctx, gradient):
                x, = ctx.saved_tensors
                return 2 * x * gradient

        class Squared(torch.nn.Module):
            def __init__(self):
                super().__init__()
                self.linear = torch.nn.Linear(4, 4)

            def forward(self, x):
                return Square.apply(self.linear(x))

        graph = capture(Squared(), [torch.randn(2, 4)], "mse", time_operators=False)
        self.assertEqual(graph["capture"]["tracer"], "export")
        self.assertEqual([n["kind"] for n in graph["nodes"]], ["input", "linear", "mul", "mse"])
        with self.assertRaisesRegex(CaptureError, r"^cannot trace the model \(Squared\): a custom "
                                                  r"torch\.autograd\.Function \(Square\) cannot be traced by "
                                                  r"torch\.fx at "):
            capture(Squared(), [torch.randn(2, 4)], "mse", tracer="fx", time_operators=False)

    def test_the_command_names_the_tracer(self):
        with tempfile.TemporaryDirectory() as directory:
            done = subprocess.run([sys.executable, "-m", "flexpipe", "capture", f"{EXAMPLES}/gpt2.py:tiny", "--input",
                                   "input_ids=2x8:int64", "--loss", "cross_entropy", "--repeats", "1", "--warmup", "0",
                                   "-o", os.path.join(directory, "g.json")], capture_output=True, text=True,
                                  timeout=600)
            self.assertEqual(done.returncode, 0, done.stderr)
            self.assertRegex(done.stderr.splitlines()[-1], r"g\.json: 63 operators, \d+ tensors, 28544 parameters; "
                                                           r"traced with torch\.export$")

    def test_what_torch_export_refuses_and_fx_too(self):
        class DataDependent(torch.nn.Module):
            def forward(self, x):
                return x if x.sum() > 0 else -x

        with self.assertRaisesRegex(CaptureError, r"^torch\.export cannot capture the model \(DataDependent\): .+; try "
                                                  r"--tracer fx, or make the model exportable \(docs/capture\.md\)$"):
            capture(DataDependent(), [torch.randn(2, 4)], tracer="export", time_operators=False)
        # By default torch.fx says why it cannot, then torch.export why it cannot either.
        with self.assertRaisesRegex(CaptureError, r"^cannot trace the model \(DataDependent\): control flow .+; nor "
                                                  r"can torch\.export: .+"):
            capture(DataDependent(), [torch.randn(2, 4)], time_operators=False)


if __name__ == "__main__":
    unittest.main()
