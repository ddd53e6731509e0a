"""Export the PyTorch test fixtures (real exporter output) into tests/fixtures/.

Runs in a separate environment with torch and torchvision (not a tpusim dependency):

    python -m venv /tmp/torchenv && /tmp/torchenv/bin/pip install torch torchvision onnx onnxscript
    /tmp/torchenv/bin/python scripts/export_torch_fixtures.py [--out tests/fixtures]

Weights are torchvision's random initialisation (seeded); BatchNorm running statistics are set by
forward passes in training mode over seeded random images, so the eval-mode network has
non-degenerate activations (untrained but not constant). Each model is written twice: by the
TorchScript exporter (``dynamo=False``: Constant nodes, GlobalAveragePool + Flatten) and by the
dynamo exporter (opset 18: ReduceMean with an axes input, Reshape), so both exporters' idioms are
covered.

  mobilenetv2_w025_c10_32.*.onnx  torchvision mobilenet_v2(width_mult=0.25, num_classes=10),
                                  1x3x32x32: depthwise Conv (group = C), Clip(0, 6) (ReLU6), Add
  convmix_16.*.onnx               a small net: grouped Conv (groups=4), dilated Conv (dilation 2),
                                  depthwise Conv, Hardtanh (Clip(-1, 1)), mean over H, W -> Linear
  actmix_16.*.onnx                activations as the exporters write them: SiLU (Mul(x,
                                  Sigmoid(x))), GELU (the Erf form), Hardswish, Hardsigmoid,
                                  LeakyReLU, ELU, Tanh, Mish, a residual Add -> mean -> Linear
  neck_16.*.onnx                  a YOLO / FPN-style neck with squeeze-and-excite: SiLU, nearest
                                  upsampling by scale_factor and by the size of another map
                                  (shape subgraphs: Shape, Slice / Gather, Concat), Concat,
                                  AdaptiveAvgPool -> 1x1 Convs -> Hardsigmoid gate (Mul), and
                                  x.view(x.size(0), -1) before the Linear head
  lrn_12.*.onnx                   AlexNet's normalization: Conv, ReLU, LocalResponseNorm(5, alpha
                                  1e-2, beta 0.75, k 2), MaxPool, Conv, LocalResponseNorm(3), mean
                                  -> Linear (the exporters decompose LRN: Mul, 5-D Reshape, Pad,
                                  3-D AveragePool, Squeeze, Mul, Add, Pow, Div; torch 2.13)

``--only STEM`` writes one fixture (e.g. ``--only lrn_12``; torchvision is needed only for the
MobileNetV2 one).
"""
from __future__ import annotations

from pathlib import Path

import torch
from fixture_args import fixture_args
from torch import nn


class ConvMix(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, 16, 3, padding=1), nn.BatchNorm2d(16), nn.ReLU())
        self.grouped = nn.Sequential(nn.Conv2d(16, 32, 3, padding=1, groups=4), nn.BatchNorm2d(32), nn.ReLU6())
        self.dilated = nn.Sequential(nn.Conv2d(32, 32, 3, padding=2, dilation=2), nn.BatchNorm2d(32), nn.Hardtanh())
        self.depthwise = nn.Sequential(nn.Conv2d(32, 32, 3, stride=2, padding=1, groups=32), nn.BatchNorm2d(32), nn.ReLU())
        self.fc = nn.Linear(32, 10)

    def forward(self, x):
        x = self.depthwise(self.dilated(self.grouped(self.stem(x))))
        return self.fc(x.mean(dim=(2, 3)))


class ActMix(nn.Module):
    def __init__(self) -> None:
        super().__init__()

        def block(cin, cout, act, **kw):
            return nn.Sequential(nn.Conv2d(cin, cout, 3, padding=1, **kw), nn.BatchNorm2d(cout), act)
        self.b1 = block(3, 16, nn.SiLU())
        self.b2 = block(16, 16, nn.GELU())
        self.b3 = block(16, 24, nn.Hardswish(), stride=2)
        self.b4 = block(24, 24, nn.LeakyReLU(0.1))
        self.b5 = block(24, 24, nn.ELU())
        self.gate = nn.Hardsigmoid()
        self.b6 = block(24, 32, nn.Mish(), stride=2)
        self.fc = nn.Linear(32, 10)

    def forward(self, x):
        x = self.b2(self.b1(x))
        x = self.b3(x)
        x = x + self.b5(self.b4(x))
        x = torch.tanh(self.b6(self.gate(x) * 2 - 1))
        return self.fc(x.mean(dim=(2, 3)))


class Neck(nn.Module):
    def __init__(self) -> None:
        super().__init__()

        def cbs(cin, cout, stride=1):
            return nn.Sequential(nn.Conv2d(cin, cout, 3, stride, 1), nn.BatchNorm2d(cout), nn.SiLU())
        self.p3, self.p4, self.p5 = cbs(3, 8), cbs(8, 16, 2), cbs(16, 24, 2)
        self.lat4 = cbs(24 + 16, 16)
        self.lat3 = cbs(16 + 8, 16)
        self.se_reduce, self.se_expand = nn.Conv2d(16, 4, 1), nn.Conv2d(4, 16, 1)
        self.fc = nn.Linear(16, 10)

    def forward(self, x):
        p3 = self.p3(x)
        p4 = self.p4(p3)
        p5 = self.p5(p4)
        u4 = nn.functional.interpolate(p5, scale_factor=2.0, mode="nearest")
        t4 = self.lat4(torch.cat([u4, p4], 1))
        u3 = nn.functional.interpolate(t4, size=p3.shape[-2:], mode="nearest")
        t3 = self.lat3(torch.cat([u3, p3], 1))
        g = nn.functional.adaptive_avg_pool2d(t3, 1)
        g = nn.functional.hardsigmoid(self.se_expand(torch.relu(self.se_reduce(g))))
        y = nn.functional.adaptive_avg_pool2d(t3 * g, 1)
        return self.fc(y.view(y.size(0), -1))


class Seq1d(nn.Module):
    """A 1-D CNN on a (1, 3, 64) sequence: Conv1d + BatchNorm1d + ReLU, MaxPool1d, strided Conv1d +
    BatchNorm1d + ReLU6, depthwise Conv1d + ReLU, AvgPool1d, AdaptiveAvgPool1d(1), Flatten,
    Linear (the dynamo exporter writes each 1-D pool as Unsqueeze, a 2-D pool, Squeeze)."""

    def __init__(self) -> None:
        super().__init__()
        self.f = nn.Sequential(nn.Conv1d(3, 16, 7, padding=3), nn.BatchNorm1d(16), nn.ReLU(),
                               nn.MaxPool1d(2), nn.Conv1d(16, 24, 5, stride=2, padding=2), nn.BatchNorm1d(24),
                               nn.ReLU6(), nn.Conv1d(24, 24, 3, padding=1, groups=24), nn.ReLU(),
                               nn.AvgPool1d(2))
        self.head = nn.Sequential(nn.AdaptiveAvgPool1d(1), nn.Flatten(), nn.Linear(24, 5))

    def forward(self, x):
        return self.head(self.f(x))


def _cbs(cin, cout, k=1):
    return nn.Sequential(nn.Conv2d(cin, cout, k, 1, k // 2), nn.BatchNorm2d(cout), nn.SiLU())


class C2fSppf(nn.Module):
    """YOLOv8's C2f block (``chunk(2, 1)`` of a 1x1 conv: a Split; two 3x3 residual bottlenecks
    on the second half; a Concat of all four parts) and its SPPF (three 5x5 stride-1 max pools in
    a chain, concatenated), then a channel slice ``x[:, 4:12]`` (a Slice), mean, Linear."""

    def __init__(self) -> None:
        super().__init__()
        self.stem, self.cv1 = _cbs(3, 16, 3), _cbs(16, 16)
        self.m = nn.ModuleList(nn.Sequential(_cbs(8, 8, 3), _cbs(8, 8, 3)) for _ in range(2))
        self.cv2 = _cbs(32, 16)
        self.sppf_in, self.pool, self.sppf_out = _cbs(16, 8), nn.MaxPool2d(5, 1, 2), _cbs(32, 16)
        self.fc = nn.Linear(8, 10)

    def forward(self, x):
        y = list(self.cv1(self.stem(x)).chunk(2, 1))
        for m in self.m:
            y.append(y[-1] + m(y[-1]))
        x = self.cv2(torch.cat(y, 1))
        a = self.sppf_in(x)
        b = self.pool(a)
        c = self.pool(b)
        x = self.sppf_out(torch.cat([a, b, c, self.pool(c)], 1))
        return self.fc(x[:, 4:12].mean(dim=(2, 3)))


class LrnNet(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.c1 = nn.Conv2d(3, 12, 3, padding=1)
        self.n1 = nn.LocalResponseNorm(5, alpha=1e-2, beta=0.75, k=2.0)
        self.c2 = nn.Conv2d(12, 10, 3, padding=1)
        self.n2 = nn.LocalResponseNorm(3)
        self.fc = nn.Linear(10, 10)

    def forward(self, x):
        x = nn.functional.max_pool2d(self.n1(torch.relu(self.c1(x))), 2)
        return self.fc(self.n2(self.c2(x)).mean(dim=(2, 3)))


def _settle_batchnorm(model: nn.Module, shape, seed: int) -> None:
    g = torch.Generator().manual_seed(seed)
    model.train()
    for m in model.modules():
        if isinstance(m, (nn.BatchNorm1d, nn.BatchNorm2d)):
            m.momentum = None               # cumulative average over the passes
    with torch.no_grad():
        for _ in range(8):
            model(torch.rand((8, *shape[1:]), generator=g) * 2 - 1)
    model.eval()


def _export(model: nn.Module, shape, stem: Path) -> None:
    x = torch.rand(shape, generator=torch.Generator().manual_seed(1))
    torch.onnx.export(model, (x,), f"{stem}.ts.onnx", dynamo=False, opset_version=17,
                      input_names=["input"], output_names=["logits"])
    prog = torch.onnx.export(model, (x,), dynamo=True, input_names=["input"], output_names=["logits"])
    prog.save(f"{stem}.dynamo.onnx", external_data=False)
    print(f"wrote {stem}.ts.onnx and {stem}.dynamo.onnx")


def main() -> None:
    a = fixture_args(__doc__)
    def mnv2():
        import torchvision
        return torchvision.models.mobilenet_v2(weights=None, width_mult=0.25, num_classes=10)
    fixtures = [("mobilenetv2_w025_c10_32", mnv2, (1, 3, 32, 32), 2), ("convmix_16", ConvMix, (1, 3, 16, 16), 3),
                ("actmix_16", ActMix, (1, 3, 16, 16), 4), ("neck_16", Neck, (1, 3, 16, 16), 5),
                ("seq1d_64", Seq1d, (1, 3, 64), 6), ("c2f_sppf_16", C2fSppf, (1, 3, 16, 16), 7),
                ("lrn_12", LrnNet, (1, 3, 12, 12), 8)]
    for stem, make, shape, seed in fixtures:
        if a.only in (None, stem):
            torch.manual_seed(0)
            model = make()
            _settle_batchnorm(model, shape, seed)
            _export(model, shape, a.out / stem)

if __name__ == "__main__":
    main()
