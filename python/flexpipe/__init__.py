"""FlexPipe's Python side: what only Python can do (tracing a user's nn.Module into the project's cost
graph). Training runs in the C++ runtime. Entry points: `capture` and `python3 -m flexpipe capture`."""
from .capture import capture
from .errors import CaptureError

__all__ = ["capture", "CaptureError"]
