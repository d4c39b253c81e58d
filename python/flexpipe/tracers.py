"""The two tracers behind one call: torch.fx with concrete values (tracing.py) and torch.export
(aten_tracing.py), and the default that picks the one that works: torch.export for transformers'
models and for inputs given by name, torch.fx for the others, torch.export where torch.fx cannot trace."""
import inspect

from .aten_tracing import ExportFailed, trace_exported
from .errors import CaptureError
from .tracing import trace

TRACERS = ("auto", "fx", "export")


def _from_transformers(model):
    return any(cls.__module__.split(".")[0] == "transformers" for cls in type(model).__mro__)


def _check_positional(model, names):
    """torch.fx passes the inputs by position: names must be forward's first arguments, in order."""
    if all(name is None for name in names):
        return
    parameters = list(inspect.signature(model.forward).parameters)
    if [n for n in names] != parameters[:len(names)]:
        raise CaptureError(f"--tracer fx passes the inputs by position, and {', '.join(map(str, names))} are not "
                           f"the first arguments of {type(model).__name__}.forward in that order "
                           f"({', '.join(parameters[:len(names) + 2])}, ...); give them so, or capture with "
                           "--tracer export")


def trace_model(model, inputs, names, tracer="auto"):
    """(the tracer used, GraphModule, trace, kept_whole): the model's operator graph at these inputs."""
    if tracer not in TRACERS:
        raise CaptureError(f"unknown tracer '{tracer}'; known: {', '.join(TRACERS)}")
    if tracer == "export" or tracer == "auto" and (_from_transformers(model) or any(n is not None for n in names)):
        try:
            return ("export", *trace_exported(model, inputs, names))
        except ExportFailed as error:
            hint = "--tracer fx with the inputs by position" if any(n is not None for n in names) else "--tracer fx"
            raise CaptureError(f"torch.export cannot capture the model ({type(model).__name__}): {error}; try {hint}, "
                               "or make the model exportable (docs/capture.md)") from None
    _check_positional(model, names)
    try:
        return ("fx", *trace(model, inputs))
    except CaptureError as fx_error:
        if tracer == "fx":
            raise
        try:
            return ("export", *trace_exported(model, inputs, names))
        except ExportFailed as export_error:
            fx_error.__suppress_context__ = False  # --debug shows where torch.fx stopped, and why
            raise CaptureError(f"{fx_error}; nor can torch.export: {export_error}") from fx_error
