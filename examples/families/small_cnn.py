#!/usr/bin/python3
"""A small CNN (conv, batch norm, relu, max pool, global average pool,
linear head), exported to ONNX.

    /usr/bin/python3 examples/families/small_cnn.py --out DIR [--seed S] [--opset N]

Config: Conv2d(3, 8, 3, padding=1) + BatchNorm2d(8) + ReLU,
MaxPool2d(3, stride=2, padding=1), Conv2d(8, 16, 3, stride=2, padding=1,
groups=2) + BatchNorm2d(16) + ReLU (the convolutions have no bias, as in
torchvision's CNNs: BatchNorm removes it, so its gradient is rounding noise
that AdamW would turn into steps of size lr, moving the running means), AdaptiveAvgPool2d(1), flatten,
Linear(16, 10). Input images float32 [4, 3, 16, 16] (N(0, 1)), output out
float32 [4, 10].

This script exports the model in eval mode with its BatchNormalization
nodes kept (training=PRESERVE; EVAL would fold them into the convolutions).
test/e2e/run_torch_train.py trains it (TRAIN_MODE): it exports the model in
train mode (training=TRAINING, BatchNormalization with training_mode = 1,
batch statistics) and compares every step's loss with PyTorch's.
"""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402

import numpy as np  # noqa: E402

BATCH = 4
CHANNELS = 3
IMAGE = 16
CLASSES = 10
# run_torch_train.py: the input's shape, and train-mode export (BatchNorm
# with batch statistics).
INPUT_SHAPE = (BATCH, CHANNELS, IMAGE, IMAGE)
TRAIN_MODE = True


def build(torch):
    nn = torch.nn
    return nn.Sequential(
        nn.Conv2d(CHANNELS, 8, 3, padding=1, bias=False), nn.BatchNorm2d(8),
        nn.ReLU(),
        nn.MaxPool2d(3, stride=2, padding=1),
        nn.Conv2d(8, 16, 3, stride=2, padding=1, groups=2, bias=False),
        nn.BatchNorm2d(16),
        nn.ReLU(), nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(16, CLASSES))


def main(argv=None):
    args = common.parse_args(__doc__, argv)
    torch = common.setup_torch(args.seed)
    model = build(torch)
    common.randomize_norms(model, args.seed)
    model.eval()
    r = common.rng(args.seed)
    images = r.standard_normal(INPUT_SHAPE).astype(np.float32)
    common.export_family("small_cnn", model, {"images": images}, ["out"], args,
                         training=torch.onnx.TrainingMode.PRESERVE)
    return 0


if __name__ == "__main__":
    sys.exit(main())
