#!/usr/bin/python3
"""A small CNN that resizes with F.interpolate, exported to ONNX.

    /usr/bin/python3 examples/families/interpolate.py --out DIR [--seed S] [--opset N]

Config: Conv2d(3, 4, 3, padding=1), F.interpolate(scale_factor=2,
mode="nearest"), Conv2d(4, 4, 3, padding=1), F.interpolate(size=(10, 14),
mode="bilinear", align_corners=False), F.interpolate(scale_factor=0.5,
mode="bilinear", align_corners=True). Input images float32 [4, 3, 6, 8]
(N(0, 1)), output out float32 [4, 4, 5, 7].

PyTorch exports these as ONNX Resize nodes (nearest: asymmetric with
nearest_mode floor; bilinear: mode linear, pytorch_half_pixel or
align_corners), their scales or sizes computed from constants that fold.
test/e2e/run_torch_train.py trains it (Resize's gradient).
"""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402

import numpy as np  # noqa: E402

INPUT_SHAPE = (4, 3, 6, 8)


def build(torch):
    nn = torch.nn
    F = torch.nn.functional

    class Interpolate(nn.Module):
        def __init__(self):
            super().__init__()
            self.conv1 = nn.Conv2d(3, 4, 3, padding=1)
            self.conv2 = nn.Conv2d(4, 4, 3, padding=1)

        def forward(self, images):
            y = F.interpolate(self.conv1(images), scale_factor=2, mode="nearest")
            y = F.interpolate(self.conv2(y), size=(10, 14), mode="bilinear",
                              align_corners=False)
            return F.interpolate(y, scale_factor=0.5, mode="bilinear",
                                 align_corners=True)

    return Interpolate()


def main(argv=None):
    args = common.parse_args(__doc__, argv)
    torch = common.setup_torch(args.seed)
    model = build(torch)
    model.eval()
    r = common.rng(args.seed)
    images = r.standard_normal(INPUT_SHAPE).astype(np.float32)
    # The numpy checker of common.py has no Resize: the e2e tests compare
    # with PyTorch instead.
    common.export_family("interpolate", model, {"images": images}, ["out"],
                         args, verify=False)
    return 0


if __name__ == "__main__":
    sys.exit(main())
