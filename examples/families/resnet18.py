#!/usr/bin/python3
"""ResNet-18 (10 classes) in eval mode, exported to ONNX with its
BatchNormalization nodes kept.

    /usr/bin/python3 examples/families/resnet18.py --out DIR [--seed S] [--opset N]
        [--fuse-bn]

Model: torchvision.models.resnet18(num_classes=10) when torchvision can be
imported; otherwise (this machine's /usr/bin/python3 has no torchvision) an
exact copy of torchvision's ResNet/BasicBlock code below, with the same module
names, layer structure and weight initialization (conv 7x7/2 + BN + ReLU,
maxpool 3x3/2, 4 stages of 2 BasicBlocks (64, 128, 256, 512 channels, 1x1
conv + BN downsample), AdaptiveAvgPool2d(1), torch.flatten(x, 1), fc).
BatchNorm affine parameters and running statistics are randomized so that
BN is not the identity. Input pixel_values float32 [2, 3, 64, 64] (N(0, 1)),
output logits float32 [2, 10].

Export variants. With training=TrainingMode.EVAL, torch 1.13's exporter runs
its eval peephole pass, which folds every BatchNorm into the preceding Conv
(whatever do_constant_folding says). With training=TrainingMode.PRESERVE on a
model in eval mode, that pass does not run and BatchNormalization nodes stay
(inference form, one output). All four combinations of
{EVAL, PRESERVE} x {do_constant_folding True, False} are tried on every run
and recorded in ops.json ("variants"); the kept one is the first, in the
order (EVAL, True), (EVAL, False), (PRESERVE, True), (PRESERVE, False), that
has BatchNormalization nodes. --fuse-bn keeps (EVAL, True) instead (BN folded
into Conv).
"""

import os
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402

import numpy as np  # noqa: E402

CLASSES = 10
BATCH = 2
IMAGE = 64


def build_torchvision_copy(torch, num_classes):
    """torchvision.models.resnet.resnet18, copied (BasicBlock only)."""
    nn = torch.nn

    def conv3x3(in_planes, out_planes, stride=1):
        return nn.Conv2d(in_planes, out_planes, kernel_size=3, stride=stride,
                         padding=1, bias=False)

    def conv1x1(in_planes, out_planes, stride=1):
        return nn.Conv2d(in_planes, out_planes, kernel_size=1, stride=stride, bias=False)

    class BasicBlock(nn.Module):
        expansion = 1

        def __init__(self, inplanes, planes, stride=1, downsample=None):
            super().__init__()
            self.conv1 = conv3x3(inplanes, planes, stride)
            self.bn1 = nn.BatchNorm2d(planes)
            self.relu = nn.ReLU(inplace=True)
            self.conv2 = conv3x3(planes, planes)
            self.bn2 = nn.BatchNorm2d(planes)
            self.downsample = downsample
            self.stride = stride

        def forward(self, x):
            identity = x
            out = self.relu(self.bn1(self.conv1(x)))
            out = self.bn2(self.conv2(out))
            if self.downsample is not None:
                identity = self.downsample(x)
            out += identity
            return self.relu(out)

    class ResNet(nn.Module):
        def __init__(self, layers, num_classes):
            super().__init__()
            self.inplanes = 64
            self.conv1 = nn.Conv2d(3, 64, kernel_size=7, stride=2, padding=3, bias=False)
            self.bn1 = nn.BatchNorm2d(64)
            self.relu = nn.ReLU(inplace=True)
            self.maxpool = nn.MaxPool2d(kernel_size=3, stride=2, padding=1)
            self.layer1 = self._make_layer(64, layers[0])
            self.layer2 = self._make_layer(128, layers[1], stride=2)
            self.layer3 = self._make_layer(256, layers[2], stride=2)
            self.layer4 = self._make_layer(512, layers[3], stride=2)
            self.avgpool = nn.AdaptiveAvgPool2d((1, 1))
            self.fc = nn.Linear(512, num_classes)
            for m in self.modules():
                if isinstance(m, nn.Conv2d):
                    nn.init.kaiming_normal_(m.weight, mode="fan_out", nonlinearity="relu")
                elif isinstance(m, nn.BatchNorm2d):
                    nn.init.constant_(m.weight, 1)
                    nn.init.constant_(m.bias, 0)

        def _make_layer(self, planes, blocks, stride=1):
            downsample = None
            if stride != 1 or self.inplanes != planes:
                downsample = nn.Sequential(conv1x1(self.inplanes, planes, stride),
                                           nn.BatchNorm2d(planes))
            layers = [BasicBlock(self.inplanes, planes, stride, downsample)]
            self.inplanes = planes
            for _ in range(1, blocks):
                layers.append(BasicBlock(self.inplanes, planes))
            return nn.Sequential(*layers)

        def forward(self, x):
            x = self.maxpool(self.relu(self.bn1(self.conv1(x))))
            x = self.layer4(self.layer3(self.layer2(self.layer1(x))))
            x = self.avgpool(x)
            x = torch.flatten(x, 1)
            return self.fc(x)

    return ResNet([2, 2, 2, 2], num_classes)


def build(torch):
    try:
        import torchvision
    except ImportError:
        return build_torchvision_copy(torch, CLASSES), "copy of torchvision's resnet18 " \
            "(torchvision is not installed)"
    return torchvision.models.resnet18(num_classes=CLASSES), \
        "torchvision %s models.resnet18" % torchvision.__version__


def main(argv=None):
    def extra(ap):
        ap.add_argument("--fuse-bn", action="store_true",
                        help="keep the (EVAL, do_constant_folding=True) export, "
                             "where BatchNorm is folded into Conv")
    args = common.parse_args(__doc__, argv, extra)
    torch = common.setup_torch(args.seed)
    model, source = build(torch)
    common.randomize_norms(model, args.seed)
    model.eval()
    r = common.rng(args.seed)
    pixels = r.standard_normal((BATCH, 3, IMAGE, IMAGE)).astype(np.float32)
    x = torch.from_numpy(pixels)

    import onnx
    TM = torch.onnx.TrainingMode
    tried = [(TM.EVAL, True), (TM.EVAL, False), (TM.PRESERVE, True), (TM.PRESERVE, False)]
    variants = {}
    keep = None
    with tempfile.TemporaryDirectory() as tmp:
        for training, cf in tried:
            key = "training=%s, do_constant_folding=%s" % (str(training).split(".")[-1], cf)
            path = os.path.join(tmp, "m.onnx")
            try:
                common.export_onnx(model, (x,), path, ["pixel_values"], ["logits"],
                                   args.opset, do_constant_folding=cf, training=training)
            except Exception as e:  # noqa: BLE001 (recorded)
                variants[key] = "failed: %s: %s" % (type(e).__name__, str(e).split("\n")[0])
                continue
            m = onnx.load(path)
            counts = {}
            for n in m.graph.node:
                counts[n.op_type] = counts.get(n.op_type, 0) + 1
            variants[key] = ", ".join("%s x%d" % kv for kv in sorted(counts.items()))
            if keep is None and (counts.get("BatchNormalization", 0) > 0) != args.fuse_bn:
                keep = (training, cf, key)
    for k, v in variants.items():
        print("%s: %s" % (k, v))
    if keep is None:
        raise SystemExit("error: no export variant %s BatchNormalization nodes"
                         % ("without" if args.fuse_bn else "with"))
    training, cf, key = keep
    print("kept: " + key)
    variants["kept"] = key
    common.export_family("resnet18", model, {"pixel_values": pixels}, ["logits"], args,
                         training=training, do_constant_folding=cf, variants=variants,
                         notes=["model: " + source],
                         dynamic_axes={"pixel_values": {0: "batch"}, "logits": {0: "batch"}})
    return 0


if __name__ == "__main__":
    sys.exit(main())
