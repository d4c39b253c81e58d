"""Capture's options, defined once: CaptureOptions' fields hold each option's default, choices and help,
from which capture()'s keywords, the arguments of `python3 -m flexpipe capture` and the timing derive."""
import dataclasses
from dataclasses import dataclass, field

from .errors import CaptureError
from .losses import LOSSES
from .measure import CLOCKS, Timing
from .tracers import TRACERS


def _option(default, help, **argparse):
    return field(default=default, metadata={"help": help, "argparse": argparse})


@dataclass(frozen=True)
class CaptureOptions:
    loss: object = _option("none", "the loss after the model's output (default: none, the model returns its loss)",
                           choices=list(LOSSES))
    name: object = _option(None, "the graph's name (default: the model's class)")
    tracer: str = _option("auto", "fx (torch.fx), export (torch.export), or auto (default): torch.export for "
                                  "transformers' models and named inputs, torch.fx for the others and torch.export "
                                  "where torch.fx cannot trace; the output names the one used", choices=list(TRACERS))
    warmup: int = _option(2, "untimed runs before each measurement (default 2)", type=int)
    repeats: int = _option(5, "timed runs per measurement; the median is kept (default 5)", type=int)
    clock: str = _option("wall", "wall (default), or cpu: this thread's CPU time, which other processes on a shared "
                                 "machine do not inflate (exact with one intra-op thread)", choices=list(CLOCKS))

    def __post_init__(self):
        """What capture() refuses, whoever calls it: an unknown tracer, clock or loss."""
        if self.tracer not in TRACERS:
            raise CaptureError(f"unknown tracer '{self.tracer}'; known: {', '.join(TRACERS)}")
        if self.clock not in CLOCKS:
            raise CaptureError(f"unknown clock '{self.clock}'; known: {', '.join(CLOCKS)}")
        if not callable(self.loss) and self.loss not in LOSSES:
            raise CaptureError(f"unknown loss '{self.loss}'; known: {', '.join(LOSSES)}")

    def check_counts(self):
        """The command line's check of the run counts (the Python API takes them as given)."""
        if self.repeats < 1 or self.warmup < 0:
            raise CaptureError("--repeats must be at least 1 and --warmup at least 0")

    def timing(self):
        return Timing(self.warmup, self.repeats, self.clock)

    @staticmethod
    def add_arguments(parser):
        """One `--NAME` argument per option, with its default, choices and help."""
        for option in dataclasses.fields(CaptureOptions):
            parser.add_argument(f"--{option.name}", default=option.default, help=option.metadata["help"],
                                **option.metadata["argparse"])

    @staticmethod
    def from_arguments(arguments):
        return CaptureOptions(**{option.name: getattr(arguments, option.name)
                                 for option in dataclasses.fields(CaptureOptions)})
