#!/usr/bin/env bash
# The exactness matrix of the Hugging Face models (docs/capture.md, "Hugging Face models"): GPT-2, Llama,
# Mixtral, BERT, T5 and ViT at their tiny sizes under GPipe, 1F1B, interleaved 1F1B, ZB-H1, ZB-V, DualPipe
# and the search's answer, on 2 and 4 ranks, each equal to single-process PyTorch within 1e-9 (float64),
# its measured memory equal to the simulated one: python/tests/test_hugging_face.py's FullMatrix, the
# cells CI does not train. One line per cell that trained equal, then unittest's summary (a failing
# cell is a failure there). About 15 minutes on 2 cores. Not a timed benchmark.
# Usage: bench/hugging_face_matrix.sh [BUILD_DIR]   (default: build)
set -euo pipefail
build=$(cd "${1:-build}" && pwd)
root=$(cd "$(dirname "$0")/.." && pwd)
python=${FLEXPIPE_PYTHON:-/opt/flexpipe/venv/bin/python}
echo "machine: $(nproc) cores, load average $(cut -d' ' -f1-3 /proc/loadavg)"
cd "$root/python/tests"
FLEXPIPE_HF_MATRIX=1 FLEXPIPE_BINARY="$build/flexpipe" PYTHONPATH="$root/python" OMP_NUM_THREADS=1 \
  HF_HUB_OFFLINE=1 PYTHONDONTWRITEBYTECODE=1 "$python" -m unittest test_hugging_face.FullMatrix 2>&1 |
  grep -v '^\[transformers\]\|FutureWarning\|return cls.__new__'
