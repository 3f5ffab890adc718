"""Three small models shaped like real ones: an MLP, a conv-bn-relu CNN, a transformer encoder."""

from __future__ import annotations

import torch
from torch import nn


class SmallMLP(nn.Module):
    def __init__(self, d_in: int = 256, hidden: int = 512, d_out: int = 64, extra: int = 0) -> None:
        super().__init__()
        layers: list[nn.Module] = [nn.Linear(d_in, hidden), nn.GELU()]
        for _ in range(extra):  # used by the detection study to inject real extra compute
            layers += [nn.Linear(hidden, hidden), nn.GELU()]
        layers += [nn.Linear(hidden, hidden), nn.GELU(), nn.Linear(hidden, d_out)]
        self.net = nn.Sequential(*layers)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out: torch.Tensor = self.net(x)
        return out


def _block(c_in: int, c_out: int) -> nn.Sequential:
    return nn.Sequential(
        nn.Conv2d(c_in, c_out, 3, padding=1, bias=False), nn.BatchNorm2d(c_out), nn.ReLU()
    )


class SmallCNN(nn.Module):
    def __init__(self, classes: int = 10) -> None:
        super().__init__()
        self.features = nn.Sequential(
            _block(3, 16), _block(16, 32), nn.MaxPool2d(2), _block(32, 64), nn.MaxPool2d(2)
        )
        self.head = nn.Sequential(nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(64, classes))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out: torch.Tensor = self.head(self.features(x))
        return out


class SmallEncoder(nn.Module):
    def __init__(self, d_model: int = 64, heads: int = 4, layers: int = 2, vocab: int = 32) -> None:
        super().__init__()
        layer = nn.TransformerEncoderLayer(
            d_model, heads, dim_feedforward=4 * d_model, batch_first=True, dropout=0.0
        )
        self.encoder = nn.TransformerEncoder(layer, layers, enable_nested_tensor=False)
        self.head = nn.Linear(d_model, vocab)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out: torch.Tensor = self.head(self.encoder(x))
        return out


def example_inputs(model: nn.Module, batch: int = 8, seed: int = 0) -> tuple[torch.Tensor]:
    """Seeded inputs of the right shape for each example model."""
    gen = torch.Generator().manual_seed(seed)
    if isinstance(model, SmallCNN):
        return (torch.randn(batch, 3, 32, 32, generator=gen),)
    if isinstance(model, SmallEncoder):
        return (torch.randn(batch, 16, model.encoder.layers[0].self_attn.embed_dim, generator=gen),)
    if isinstance(model, SmallMLP):
        first = model.net[0]
        assert isinstance(first, nn.Linear)
        return (torch.randn(batch, first.in_features, generator=gen),)
    raise TypeError(f"no example inputs for {type(model).__name__}")
