"""FlexPipe's Python side: what only Python can do (tracing a user's nn.Module into the project's cost
graph) and cutting it into TorchScript chunks for a partition plan. Training runs in the C++ runtime.
Entry points: `capture`, `export`, and `python3 -m flexpipe capture|export`."""
from .capture import capture
from .errors import CaptureError
from .export import export

__all__ = ["capture", "export", "CaptureError"]
