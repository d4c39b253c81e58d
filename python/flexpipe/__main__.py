"""python3 -m flexpipe capture FILE.py:FACTORY --input SHAPE[:dtype] ... [--loss L] -o OUT: the same
command as `flexpipe capture`, which runs this; python3 -m flexpipe export GRAPH --plan PLAN -o DIR: the
captured model cut into TorchScript chunks (docs/export.md); python3 -m flexpipe pretrained GRAPH
--weights FILE.pt -o DIR: trained weights as a transformers folder. Exit codes follow the C++ binary's: 2 for bad
input, with one `error:` line; 3 for a failure of the package itself, also one line (`--debug` prints
the Python traceback instead)."""
import argparse
import dataclasses
import json
import os
import sys
import traceback

BAD_INPUT = 2
INTERNAL_ERROR = 3  # the binary's code for a bug (include/flexpipe/support/exit_status.h)


def _internal_error(command, error):
    """One line for an exception the package did not expect: what failed, where, and what to do."""
    frames = traceback.extract_tb(error.__traceback__)
    place = f" at {os.path.basename(frames[-1].filename)}:{frames[-1].lineno}" if frames else ""
    message = str(error).strip().splitlines()[0] if str(error).strip() else ""
    print(f"error: {command} failed inside flexpipe: {type(error).__name__}{': ' + message if message else ''}"
          f"{place}; run it again with --debug for the Python traceback, and please report it", file=sys.stderr)
    return INTERNAL_ERROR


def _debug_traceback(error):
    """--debug: the traceback of a CaptureError with the exception it was raised for."""
    error.__suppress_context__ = False
    traceback.print_exception(type(error), error, error.__traceback__, file=sys.stderr)


def _arguments(argv):
    from .options import CaptureOptions
    parser = argparse.ArgumentParser(prog="flexpipe capture",
                                     description="Capture a PyTorch model as an operator-level cost graph, measured "
                                                 "on this machine (docs/capture.md).")
    parser.add_argument("model", metavar="FILE.py:FACTORY", help="a function in FILE.py that returns the nn.Module")
    parser.add_argument("--input", action="append", required=True, metavar="[NAME=]SHAPE[:dtype]",
                        help="one per forward argument, e.g. 8x3x224x224 or 8x128:int64, or by name as "
                             "input_ids=8x128:int64; the first dimension is the micro-batch")
    parser.add_argument("-o", "--output", required=True, help="the cost graph JSON to write")
    CaptureOptions.add_arguments(parser)  # --loss, --name, --warmup, --repeats, --clock
    parser.add_argument("--debug", action="store_true",
                        help="on an error, print the Python traceback as well as the error line")
    return parser.parse_args(argv)


def _export_arguments(argv):
    parser = argparse.ArgumentParser(prog="flexpipe export",
                                     description="Cut a captured model at a partition plan's stage boundaries into "
                                                 "TorchScript modules with a manifest (docs/export.md).")
    parser.add_argument("graph", metavar="GRAPH.json", help="a cost graph written by `flexpipe capture`")
    parser.add_argument("--plan", required=True, metavar="PLAN.json",
                        help="a partition plan for that graph (`flexpipe partition -o`)")
    parser.add_argument("-o", "--output", required=True, metavar="DIR",
                        help="the directory to write stage_K.pt, loss.pt and manifest.json to")
    parser.add_argument("--dtype", choices=["float32", "float64", "float16", "bfloat16"],
                        help="convert the model and its floating inputs first (default: as captured)")
    parser.add_argument("--no-check", action="store_true",
                        help="skip running the written chunks once against the model")
    parser.add_argument("--export-tolerance", type=float, metavar="T",
                        help="the check's tolerance on the largest difference between the chunks' and the model's "
                             "outputs, relative to the largest output (default: from the data type and the "
                             "model's scale, docs/export.md)")
    parser.add_argument("--debug", action="store_true",
                        help="on an error, print the Python traceback as well as the error line")
    return parser.parse_args(argv)


def _guarded(command, options, action):
    """(exit code, what action() returned): bad input (a CaptureError, a file that cannot be written) is
    one `error:` line and code 2, any other failure the package's (_internal_error); --debug adds the
    traceback."""
    from .errors import CaptureError
    try:
        return 0, action()
    except CaptureError as error:
        if options.debug:
            _debug_traceback(error)
        print(f"error: {error}", file=sys.stderr)
        return BAD_INPUT, None
    except OSError as error:
        if options.debug:
            traceback.print_exc()
        print(f"error: {error.filename or options.output}: cannot write: {error.strerror}", file=sys.stderr)
        return BAD_INPUT, None
    except Exception as error:  # noqa: BLE001 - any other failure is the package's: one line unless --debug
        if options.debug:
            traceback.print_exc()
            return INTERNAL_ERROR, None
        return _internal_error(command, error), None


def _export(argv):
    options = _export_arguments(argv)
    from .errors import CaptureError
    from .export import export

    def run():
        if options.export_tolerance is not None and not options.export_tolerance >= 0:
            raise CaptureError(f"--export-tolerance must be a number from 0, got {options.export_tolerance}")
        return export(options.graph, options.plan, options.output, dtype=options.dtype,
                      check=not options.no_check, tolerance=options.export_tolerance)

    code, manifest = _guarded("export", options, run)
    if code:
        return code
    pieces = sum(len(chunk.get("pieces", [])) for chunk in manifest["chunks"])
    print(f"{os.path.join(options.output, 'manifest.json')}: {len(manifest['chunks'])} chunks"
          + (f" ({pieces} pieces where the plan recomputes or offloads)" if pieces else "")
          + f", loss {manifest['loss']['kind']} in chunk {manifest['loss']['chunk']}", file=sys.stderr)
    return 0


def _pretrained(argv):
    parser = argparse.ArgumentParser(prog="python3 -m flexpipe pretrained",
                                     description="Write a transformers folder (config.json, model.safetensors) of a "
                                                 "captured model with trained weights (flexpipe train "
                                                 "--export-weights DIR/ runs this).")
    parser.add_argument("graph", metavar="GRAPH.json", help="the captured model's cost graph")
    parser.add_argument("--weights", required=True, metavar="FILE.pt",
                        help="the trained weights by state_dict name (flexpipe train --export-weights FILE.pt)")
    parser.add_argument("-o", "--output", required=True, metavar="DIR", help="the folder to write")
    parser.add_argument("--debug", action="store_true", help="on an error, print the Python traceback as well")
    options = parser.parse_args(argv)
    from .pretrained import save_pretrained
    code, count = _guarded("pretrained", options,
                           lambda: save_pretrained(options.graph, options.weights, options.output))
    if code:
        return code
    print(f"weights: {count} tensors in {options.output} (config.json, model.safetensors: "
          "AutoModel*.from_pretrained reads it)", file=sys.stderr)  # stdout may be train's --json report
    return 0


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    if argv and argv[0] == "export":
        return _export(argv[1:])
    if argv and argv[0] == "pretrained":
        return _pretrained(argv[1:])
    if not argv or argv[0] != "capture":
        print("usage: python3 -m flexpipe capture FILE.py:FACTORY --input SHAPE ... -o OUT\n"
              "       python3 -m flexpipe export GRAPH.json --plan PLAN.json -o DIR\n"
              "       python3 -m flexpipe pretrained GRAPH.json --weights FILE.pt -o DIR", file=sys.stderr)
        return BAD_INPUT
    options = _arguments(argv[1:])
    from .capture import capture
    from .errors import CaptureError
    from .loading import build_model, example_input, parse_input, split_model_spec
    from .options import CaptureOptions
    try:
        capture_options = CaptureOptions.from_arguments(options)
        capture_options.check_counts()
        path, factory = split_model_spec(options.model)
        inputs = [parse_input(text) for text in options.input]
        named = [name for name, _, _ in inputs if name is not None]
        if named and len(named) != len(inputs):
            raise CaptureError("name every --input (NAME=SHAPE) or none")
        model = build_model(path, factory)
        tensors = [example_input(shape, dtype, seed) for seed, (_, shape, dtype) in enumerate(inputs)]
        if named:
            tensors = dict(zip(named, tensors))
        source = {"file": os.path.abspath(path), "factory": factory}
        graph = capture(model, tensors, source=source, **dataclasses.asdict(capture_options))
    except CaptureError as error:
        if options.debug:
            _debug_traceback(error)
        print(f"error: {error}", file=sys.stderr)
        return BAD_INPUT
    except Exception as error:  # noqa: BLE001 - any other failure is the package's: one line unless --debug
        if options.debug:
            traceback.print_exc()
            return INTERNAL_ERROR
        return _internal_error("capture", error)
    text = json.dumps(graph, indent=1) + "\n"
    temporary = options.output + ".partial"
    try:
        with open(temporary, "w") as out:
            out.write(text)
        os.replace(temporary, options.output)
    except OSError as error:
        print(f"error: {options.output}: cannot write: {error.strerror}", file=sys.stderr)
        return BAD_INPUT
    buffers = {b["name"]: b["bytes"] for n in graph["nodes"] for b in n.get("buffers", [])}
    print(f"{options.output}: {len(graph['nodes'])} operators, {len(graph['edges'])} tensors, "
          f"{sum(n.get('parameters', 0) for n in graph['nodes'])} parameters"
          + (f", {len(buffers)} buffers and constants ({sum(buffers.values())} bytes)" if buffers else "")
          + f"; traced with {'torch.export' if graph['capture']['tracer'] == 'export' else 'torch.fx'}",
          file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
