#!/usr/bin/python3
"""A small recurrent model (nn.LSTM, nn.GRU), exported to ONNX.

    /usr/bin/python3 examples/families/recurrent.py --out DIR [--seed S] [--opset N]

Config: nn.LSTM(8, 12, batch_first=True, bidirectional=True), then
nn.GRU(24, 10) on the time-major sequence (batch_first=False), then
nn.Linear(10, 6) on the GRU's outputs plus its last hidden state. Input
src float32 [4, 5, 8] (N(0, 1)), output out float32 [4, 5, 6].

PyTorch exports nn.LSTM and nn.GRU as ONNX LSTM and GRU nodes (layout 0,
GRU with linear_before_reset = 1, the gates reordered into ONNX's order);
shoal's importer unrolls them over the 5 steps (docs/Importer.md). Both
the outputs Y and Y_h are used. test/e2e/run_torch_train.py trains it.
"""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402

import numpy as np  # noqa: E402

BATCH = 4
SEQ = 5
FEATURES = 8
# run_torch_train.py: the input's shape.
INPUT_SHAPE = (BATCH, SEQ, FEATURES)


def build(torch):
    nn = torch.nn

    class Recurrent(nn.Module):
        def __init__(self):
            super().__init__()
            self.lstm = nn.LSTM(FEATURES, 12, batch_first=True, bidirectional=True)
            self.gru = nn.GRU(24, 10)
            self.head = nn.Linear(10, 6)

        def forward(self, src):
            y, _ = self.lstm(src)               # [B, T, 24]
            z, h = self.gru(y.transpose(0, 1))  # [T, B, 10], [1, B, 10]
            return self.head(z.transpose(0, 1) + h.transpose(0, 1))

    return Recurrent()


def main(argv=None):
    args = common.parse_args(__doc__, argv)
    torch = common.setup_torch(args.seed)
    model = build(torch)
    model.eval()
    r = common.rng(args.seed)
    src = r.standard_normal(INPUT_SHAPE).astype(np.float32)
    # The numpy checker of common.py has no LSTM or GRU: the e2e tests
    # compare with PyTorch instead.
    common.export_family("recurrent", model, {"src": src}, ["out"], args,
                         verify=False)
    return 0


if __name__ == "__main__":
    sys.exit(main())
