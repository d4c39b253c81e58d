"""The one exception the package raises for bad input: the CLI prints it as a single `error:` line."""
import os
import traceback


class CaptureError(Exception):
    """Bad input to a capture: the message says what and where (file, line, module)."""


_TORCH_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__import__("torch").__file__)))
_PACKAGE_DIR = os.path.dirname(os.path.abspath(__file__))


def user_frame(tb):
    """The innermost traceback frame in model code (the user's, or torchvision's): not in torch or this
    package, so that an error points at the model's line. None when every frame is library code."""
    chosen = None
    for frame in traceback.extract_tb(tb):
        path = os.path.abspath(frame.filename)
        if path.startswith(_PACKAGE_DIR) or path.startswith(os.path.join(_TORCH_DIR, "torch") + os.sep):
            continue
        chosen = frame
    return chosen


def where(tb):
    """`FILE:LINE in FUNCTION: SOURCE` for the innermost user frame, or '' when there is none."""
    frame = user_frame(tb)
    if frame is None:
        return ""
    source = f": {frame.line.strip()}" if frame.line else ""
    return f"{frame.filename}:{frame.lineno} in {frame.name}{source}"
