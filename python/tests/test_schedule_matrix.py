"""The exactness matrix of captured training: each model under GPipe, 1F1B, interleaved 1F1B, ZB-H1, ZB-V
and the search's answer, on 2 and 4 ranks, equals single-process PyTorch training (losses of every step
and the state_dict within 1e-9 relative in float64, the measured memory the simulated one byte for byte).

Two-rank runs of GPipe, 1F1B and ZB-H1 use the 2-chunk plan, which cuts each model once; interleaved
1F1B and ZB-V on 2 ranks, and GPipe, 1F1B and ZB-H1 on 4, the 4-chunk plan, which recomputes some
operators and offloads others (test_train_captured.CASES); interleaved 1F1B and ZB-V on 4 ranks the
8-chunk plan (EIGHT_CHUNKS), which recomputes and offloads too. A cell that test_train_captured.py
already trains, with its own twist (AdamW, clipping, --verify, data parallelism), is not trained again
here; this file trains the rest:

| model | GPipe | 1F1B | interleaved | ZB-H1 | ZB-V | search |
| --- | --- | --- | --- | --- | --- | --- |
| U-Net, 2 ranks | there | there | there | there | here | there |
| U-Net, 4 ranks | here | there | here | here | here | here |
| transformer with dropout, 2 ranks | here | there (data-parallel) | here | there (no dropout) | there | here |
| transformer with dropout, 4 ranks | here | here | here | here | here | here |
| ResNet-18, 2 ranks | here | there | there | here | there | here |
| ResNet-18, 4 ranks | here | here | here | here | here | here |

For ResNet-18 the search leaves DualPipe out (BatchNorm's running statistics, docs/export.md)."""
import unittest

from test_train_captured import BINARY, CapturedTraining


@unittest.skipUnless(BINARY, "FLEXPIPE_BINARY names the flexpipe binary (ctest sets it)")
class ScheduleMatrix(CapturedTraining):
    def cells(self, factory, cells):
        for chunks, schedule, devices in cells:
            with self.subTest(schedule=schedule, devices=devices):
                extra = ["-v", "2"] if schedule == "interleaved-1f1b" else []
                if schedule == "auto":
                    # The margin given: the search's answer as on a machine with a core per rank, even where
                    # four ranks share fewer cores (train's rule for those is the fastest built-in).
                    extra = ["--auto-margin", "0.05"]
                self.check(factory, chunks, schedule, devices, 4, extra=extra)

    def test_unet(self):
        self.cells("tiny_unet", [(4, "zb-v", 2), (4, "gpipe", 4), (4, "zb-h1", 4), (8, "interleaved-1f1b", 4),
                                 (8, "zb-v", 4), (2, "auto", 4)])

    def test_transformer_with_dropout(self):
        self.cells("transformer_dropout", [(2, "gpipe", 2), (4, "interleaved-1f1b", 2), (4, "gpipe", 4),
                                           (4, "1f1b", 4), (4, "zb-h1", 4), (8, "interleaved-1f1b", 4),
                                           (8, "zb-v", 4), (2, "auto", 2), (2, "auto", 4)])

    def test_resnet18(self):
        self.cells("resnet18", [(2, "gpipe", 2), (2, "zb-h1", 2), (4, "gpipe", 4), (4, "1f1b", 4),
                                (4, "zb-h1", 4), (8, "interleaved-1f1b", 4), (8, "zb-v", 4), (2, "auto", 2),
                                (2, "auto", 4)])


if __name__ == "__main__":
    unittest.main()
