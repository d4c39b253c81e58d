"""From a user's model to a partition plan and a searched schedule with the real binary:
`flexpipe capture` (and `python3 -m flexpipe capture`, the same command), then `partition`, `search`
and `simulate` on the captured graph."""
import json
import os
import subprocess
import sys
import tempfile
import unittest

import reference

BINARY = os.environ.get("FLEXPIPE_BINARY", "")
MODELS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "models.py")


def flexpipe(*arguments):
    return subprocess.run([BINARY, *arguments], capture_output=True, text=True, timeout=600)


@unittest.skipUnless(BINARY, "FLEXPIPE_BINARY names the flexpipe binary (ctest sets it)")
class FromModelToSchedule(unittest.TestCase):
    def setUp(self):
        self.directory = tempfile.TemporaryDirectory()
        self.addCleanup(self.directory.cleanup)

    def capture(self, factory, shape, loss):
        path = os.path.join(self.directory.name, f"{factory}.graph.json")
        done = flexpipe("capture", f"{MODELS}:{factory}", "--input", shape, "--loss", loss, "-o", path,
                        "--warmup", "0", "--repeats", "1")
        self.assertEqual(done.returncode, 0, done.stderr)
        with open(path) as f:
            return path, json.load(f)

    def partition_and_search(self, path, graph):
        # A limit that holds all weights (with Adam: 16 bytes each) and one micro-batch's activations:
        # whatever the cuts, each device fits.
        weights = 16 * sum(n.get("parameters", 0) for n in graph["nodes"])
        activations = reference.captured_saved_bytes(graph, graph["reference"]["microbatch_size"])
        limit = str(int(weights + activations))
        plan_path = os.path.join(os.path.dirname(path), "plan.json")
        done = flexpipe("partition", "--model", path, "-p", "2", "-m", "4", "--memory-limit", limit,
                        "--microbatch-size", "2", "--json", "-o", plan_path)
        self.assertEqual(done.returncode, 0, done.stderr)
        plan = json.loads(done.stdout)
        stages = plan["stages"]
        self.assertTrue(plan["fits"])
        self.assertEqual(len(stages), 2)
        self.assertEqual(sum(stage["operators"] for stage in stages), len(graph["nodes"]))
        self.assertEqual(stages[0]["first"], graph["nodes"][0]["name"])
        self.assertEqual(stages[1]["last"], graph["nodes"][-1]["name"])
        done = flexpipe("search", "--model", path, "-p", "2", "-m", "4", "--microbatch-size", "2", "--memory-limit",
                        limit, "--time-budget", "2", "--json", "-q")
        self.assertEqual(done.returncode, 0, done.stderr)
        best = json.loads(done.stdout)["best"]
        self.assertTrue(best["fits"])
        self.assertGreaterEqual(best["makespan"], best["lower_bound"] * (1 - 1e-9))
        done = flexpipe("simulate", "1f1b", "-p", "2", "-m", "4", "--plan", plan_path, "--json")
        self.assertEqual(done.returncode, 0, done.stderr)
        simulated = json.loads(done.stdout)
        self.assertAlmostEqual(simulated["makespan"] / plan["step_time"], 1.0, places=9)
        return plan, best

    def test_resnet50(self):
        self.partition_and_search(*self.capture("resnet50", "2x3x32x32", "cross_entropy"))

    def test_vit_b16(self):
        self.partition_and_search(*self.capture("vit_b16", "2x3x32x32", "cross_entropy"))

    def test_transformer_encoder(self):
        self.partition_and_search(*self.capture("transformer_encoder", "2x10x64", "mse"))

    def test_unet_skips_cross_the_cut_and_exports(self):
        path, graph = self.capture("tiny_unet", "2x3x8x8", "mse")
        self.partition_and_search(path, graph)
        out = os.path.join(self.directory.name, "exported")
        done = flexpipe("export", path, "--plan", os.path.join(self.directory.name, "plan.json"), "-o", out)
        self.assertEqual(done.returncode, 0, done.stderr)
        with open(os.path.join(out, "manifest.json")) as f:
            manifest = json.load(f)
        self.assertEqual([chunk["file"] for chunk in manifest["chunks"]], ["stage_0.pt", "stage_1.pt"])
        self.assertTrue(all(os.path.exists(os.path.join(out, chunk["file"])) for chunk in manifest["chunks"]))

    def test_python_module_runs_the_same_command(self):
        path = os.path.join(self.directory.name, "unet.json")
        done = subprocess.run([sys.executable, "-m", "flexpipe", "capture", f"{MODELS}:tiny_unet", "--input",
                               "2x3x8x8", "-o", path, "--repeats", "1"], capture_output=True, text=True)
        self.assertEqual(done.returncode, 0, done.stderr)
        with open(path) as f:
            graph = json.load(f)
        self.assertEqual(graph["capture"]["factory"], "tiny_unet")
        self.assertEqual(graph["capture"]["file"], MODELS)

    def test_bad_input_is_one_error_line_and_exit_code_2(self):
        out = os.path.join(self.directory.name, "x.json")
        for arguments, message in [
                ([f"{MODELS}:resnet51", "--input", "2x3x32x32"], f"error: {MODELS} does not define 'resnet51'; "),
                ([f"{MODELS}:data_dependent", "--input", "2x4"], "error: cannot trace the model (DataDependent): "),
                ([f"{MODELS}:resnet50", "--input", "2x3x32"], "error: the inputs do not fit the model (ResNet): "),
                (["missing.py:make", "--input", "2x4"], "error: missing.py: no such file")]:
            with self.subTest(arguments[0]):
                done = flexpipe("capture", *arguments, "-o", out)
                self.assertEqual(done.returncode, 2)
                self.assertEqual(done.stderr.count("\n"), 1, done.stderr)
                self.assertTrue(done.stderr.startswith(message), done.stderr)
                self.assertFalse(os.path.exists(out))


if __name__ == "__main__":
    unittest.main()
