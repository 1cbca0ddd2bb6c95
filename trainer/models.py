"""Built-in models and user model factories."""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from trainer.catalogue import MODELS
from trainer.spec import ModelSpec, is_user_code
from trainer.user_code import import_user_function

# Default args come from the catalogue (the submit limits size models with the same ones).
_MLP, _CONVNET, _RESNET = MODELS["mlp"].defaults, MODELS["convnet"].defaults, MODELS["resnet18"].defaults


def mlp(
    in_features: int = _MLP["in_features"],
    hidden: int | list[int] = _MLP["hidden"],
    num_classes: int = _MLP["num_classes"],
    dropout: float = _MLP["dropout"],
) -> nn.Module:
    """Flatten → (Linear → ReLU [→ Dropout]) per hidden width → Linear."""
    widths = [hidden] if isinstance(hidden, int) else list(hidden)
    layers: list[nn.Module] = [nn.Flatten()]
    prev = in_features
    for w in widths:
        layers += [nn.Linear(prev, w), nn.ReLU()]
        if dropout:
            layers.append(nn.Dropout(dropout))
        prev = w
    layers.append(nn.Linear(prev, num_classes))
    return nn.Sequential(*layers)


class ConvNet(nn.Module):
    """PyTorch's two-conv MNIST example net, with BatchNorm after each conv. The adaptive pool makes it
    take any image size ≥ 5×5 (MNIST 28×28, digits 8×8 with data.args.image true, CIFAR 32×32)."""

    def __init__(
        self,
        in_channels: int = _CONVNET["in_channels"],
        num_classes: int = _CONVNET["num_classes"],
        dropout: float = _CONVNET["dropout"],
    ) -> None:
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(in_channels, 32, 3, 1),
            nn.BatchNorm2d(32),
            nn.ReLU(),
            nn.Conv2d(32, 64, 3, 1),
            nn.BatchNorm2d(64),
            nn.ReLU(),
            nn.AdaptiveMaxPool2d(4),
            nn.Dropout(dropout),
            nn.Flatten(),
        )
        self.classifier = nn.Sequential(
            nn.Linear(64 * 16, 128), nn.ReLU(), nn.Dropout(2 * dropout), nn.Linear(128, num_classes)
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.classifier(self.features(x))


def _resnet(depth: int):
    def build(num_classes: int = _RESNET["num_classes"], in_channels: int = _RESNET["in_channels"]) -> nn.Module:
        from torchvision import models

        net = getattr(models, f"resnet{depth}")(weights=None, num_classes=num_classes)
        if in_channels != 3:
            net.conv1 = nn.Conv2d(in_channels, 64, kernel_size=7, stride=2, padding=3, bias=False)
        return net

    return build


# One builder per catalogue entry (tests/trainer/test_catalogue.py checks names and default args agree).
BUILDERS: dict[str, Any] = {"mlp": mlp, "convnet": ConvNet, "resnet18": _resnet(18), "resnet50": _resnet(50)}


def build_model(spec: ModelSpec) -> nn.Module:
    factory = import_user_function(spec.name, "model factory") if is_user_code(spec.name) else BUILDERS[spec.name]
    try:
        model = factory(**spec.args)
    except TypeError as exc:
        raise TypeError(f"model {spec.name!r} rejected model.args {spec.args}: {exc}") from exc
    if not isinstance(model, nn.Module):
        raise TypeError(f"model factory {spec.name!r} returned {type(model).__name__}; return an nn.Module")
    return model
