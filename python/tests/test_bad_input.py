"""Bad input to a capture: one clear message naming the file, the function, the module or the line."""
import os
import subprocess
import sys
import tempfile
import unittest

import torch

import models
from flexpipe import CaptureError, capture
from flexpipe.loading import build_model, parse_input, split_model_spec

HERE = os.path.dirname(os.path.abspath(__file__))
MODELS = os.path.join(HERE, "models.py")


class ModelSpecs(unittest.TestCase):
    def test_file_and_factory(self):
        self.assertEqual(split_model_spec("a/b.py:make"), ("a/b.py", "make"))
        with self.assertRaisesRegex(CaptureError, r"^'b\.py': name the model as FILE\.py:FACTORY"):
            split_model_spec("b.py")

    def test_missing_file(self):
        with self.assertRaisesRegex(CaptureError, r"^nope\.py: no such file$"):
            build_model("nope.py", "make")

    def test_missing_factory_lists_what_the_file_defines(self):
        with self.assertRaisesRegex(CaptureError, r"models\.py does not define 'resnet51'; it defines: .*resnet50"):
            build_model(MODELS, "resnet51")

    def test_factory_must_return_a_module(self):
        with self.assertRaisesRegex(CaptureError, r"not_a_module\(\) returned int, not a torch\.nn\.Module"):
            build_model(MODELS, "not_a_module")


class InputShapes(unittest.TestCase):
    def test_shapes_and_types(self):
        self.assertEqual(parse_input("8x3x224x224"), (None, [8, 3, 224, 224], "float32"))
        self.assertEqual(parse_input("4x128:int64"), (None, [4, 128], "int64"))
        self.assertEqual(parse_input("input_ids=4x128:int64"), ("input_ids", [4, 128], "int64"))

    def test_malformed(self):
        for text, message in [("8x3xq", "expected dimensions separated by 'x'"),
                              ("8x0", "every dimension must be a positive whole number"),
                              ("8:complex", "unknown data type 'complex'"),
                              ("99999x99999x99999", "more than a capture can hold")]:
            with self.subTest(text), self.assertRaisesRegex(CaptureError, f"^--input {text}: .*{message}"):
                parse_input(text)

    def test_a_shape_the_model_does_not_take(self):
        with self.assertRaisesRegex(CaptureError, r"^the inputs do not fit the model \(Sequential\): RuntimeError: "
                                                  r"mat1 and mat2 shapes cannot be multiplied \(2x5 and 4x4\)"):
            capture(models.partly_traceable(), [torch.randn(2, 5)])


class UnknownOperators(unittest.TestCase):
    def test_kept_with_a_measured_time_and_a_note(self):
        class Cumulative(torch.nn.Module):
            def __init__(self):
                super().__init__()
                self.linear = torch.nn.Linear(4, 4)

            def forward(self, x):
                return torch.cumsum(self.linear(x), dim=1)

        graph = capture(Cumulative(), [torch.randn(2, 4)], "mse", warmup=0, repeats=1)
        cumsum = next(n for n in graph["nodes"] if n["name"] == "cumsum")
        self.assertEqual(cumsum["note"], "FLOPs unknown (cumsum): measured time only")
        self.assertNotIn("flops", cumsum["forward"])
        self.assertGreater(cumsum["forward"]["time"], 0)

    def test_a_module_kept_whole_says_why(self):
        graph = capture(models.partly_traceable(), [torch.randn(2, 4)], "cross_entropy", warmup=0, repeats=1)
        kept = next(n for n in graph["nodes"] if n["name"] == "_1")
        self.assertRegex(kept["note"], r"^kept whole, could not be traced: control flow .*models\.py:\d+ .*; FLOPs "
                                       r"unknown \(gatedblock\): measured time only$")
        self.assertEqual(graph["capture"]["kept_whole"][0]["module"], "1")

    def test_unknown_clock(self):
        with self.assertRaisesRegex(CaptureError, r"^unknown clock 'sundial'; known: wall, cpu$"):
            capture(models.tiny_unet(), [torch.randn(2, 3, 8, 8)], clock="sundial")

    def test_the_loss_needs_class_scores(self):
        with self.assertRaisesRegex(CaptureError, r"--loss cross_entropy needs class scores in the output's last "
                                                  r"dimension, the output has shape \[2\]"):
            capture(torch.nn.Flatten(0), [torch.randn(2)], "cross_entropy")


class TheCommand(unittest.TestCase):
    """`python3 -m flexpipe capture` (what `flexpipe capture` runs): one `error:` line and exit code 2 for bad
    input, one line and exit code 1 for a failure of the package itself, saying what to do; `--debug` adds
    the Python traceback."""

    def run_capture(self, directory, factory, *extra):
        path = os.path.join(directory, "model.py")
        with open(path, "w") as f:
            f.write("import sys\n"
                    "import torch\n\n\n"
                    "def broken():\n"
                    "    def trace(*arguments):\n"
                    "        raise KeyError('index')\n"
                    "    sys.modules['flexpipe.capture'].trace_model = trace  # a bug in the package\n"
                    "    return torch.nn.Linear(4, 4)\n\n\n"
                    "def data_dependent():\n"
                    "    class Model(torch.nn.Module):\n"
                    "        def forward(self, x):\n"
                    "            return x if x.sum() > 0 else -x\n"
                    "    return Model()\n")
        environment = dict(os.environ, PYTHONPATH=os.path.dirname(HERE))
        return subprocess.run([sys.executable, "-m", "flexpipe", "capture", f"{path}:{factory}", "--input", "2x4",
                               "-o", os.path.join(directory, "out.json"), *extra], capture_output=True, text=True,
                              env=environment)

    def test_a_failure_inside_the_package_is_one_line(self):
        with tempfile.TemporaryDirectory() as directory:
            done = self.run_capture(directory, "broken")
            self.assertEqual(done.returncode, 3)
            self.assertRegex(done.stderr, r"^error: capture failed inside flexpipe: KeyError: 'index' at model\.py:7; "
                                          r"run it again with --debug for the Python traceback, and please report "
                                          r"it\n$")
            done = self.run_capture(directory, "broken", "--debug")
            self.assertEqual(done.returncode, 3)
            self.assertIn("Traceback (most recent call last):", done.stderr)
            self.assertIn("KeyError: 'index'", done.stderr)

    def test_bad_input_is_one_line_and_debug_shows_where(self):
        with tempfile.TemporaryDirectory() as directory:
            done = self.run_capture(directory, "data_dependent")
            self.assertEqual(done.returncode, 2)
            self.assertEqual(done.stderr.count("\n"), 1, done.stderr)
            self.assertTrue(done.stderr.startswith("error: cannot trace the model (Model): control flow"), done.stderr)
            done = self.run_capture(directory, "data_dependent", "--debug")
            self.assertEqual(done.returncode, 2)
            self.assertIn("DataDependentControlFlow", done.stderr)  # the exception the error was raised for
            self.assertTrue(done.stderr.splitlines()[-1].startswith("error: cannot trace the model"), done.stderr)


if __name__ == "__main__":
    unittest.main()
