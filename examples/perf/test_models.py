"""An example perf suite: three small models, a training step and a generation, written as a
user would.

    pytest examples/perf --perfguard

Without --perfguard the perf items are skipped and the plain test below runs as usual.
"""

from __future__ import annotations

import pytest
import torch
from torch import nn

HIDDEN = 512  # the demo widens this on its second commit to show a regression
KEEP_OUTPUTS = False  # the demo's third commit keeps every output for inspection: a leak


class MLP(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.net = nn.Sequential(
            nn.Linear(256, HIDDEN),
            nn.GELU(),
            nn.Linear(HIDDEN, HIDDEN),
            nn.GELU(),
            nn.Linear(HIDDEN, 64),
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)


class ConvNet(nn.Module):
    def __init__(self) -> None:
        super().__init__()

        def block(i: int, o: int) -> nn.Sequential:
            return nn.Sequential(
                nn.Conv2d(i, o, 3, padding=1, bias=False), nn.BatchNorm2d(o), nn.ReLU()
            )

        self.body = nn.Sequential(
            block(3, 16),
            block(16, 32),
            nn.MaxPool2d(2),
            block(32, 64),
            nn.AdaptiveAvgPool2d(1),
            nn.Flatten(),
            nn.Linear(64, 10),
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.body(x)


class Encoder(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        layer = nn.TransformerEncoderLayer(64, 4, 256, dropout=0.0, batch_first=True)
        self.encoder = nn.TransformerEncoder(layer, 2, enable_nested_tensor=False)
        self.head = nn.Linear(64, 32)
        self.kept: list[torch.Tensor] = []

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        hidden = self.encoder(x)
        if KEEP_OUTPUTS:
            self.kept.append(hidden)
        return self.head(hidden)


VARIANTS = ["eager", "compile-default", "int8-dynamic", "prune-l1-unstructured", "onnxruntime"]


@pytest.mark.perfguard(variants=VARIANTS)
def test_mlp(perfguard):
    perfguard.run(MLP().eval(), (torch.randn(32, 256),))


@pytest.mark.perfguard(variants=VARIANTS)
def test_convnet(perfguard):
    perfguard.run(ConvNet().eval(), (torch.randn(8, 3, 32, 32),))


@pytest.mark.perfguard(variants=["eager", "compile-default", "int8-dynamic"])
@pytest.mark.parametrize("batch", [4])
def test_encoder(perfguard, batch):
    perfguard.run(Encoder().eval(), (torch.randn(batch, 16, 64),))


@pytest.mark.perfguard(variants=["eager", "compile-default"])
def test_mlp_training_step(perfguard):
    """One optimization step (zero_grad, forward, loss, backward, AdamW), as training runs it."""
    targets = torch.randint(0, 64, (32,))
    perfguard.train_step(
        MLP(),
        (torch.randn(32, 256),),
        loss_fn=lambda out: nn.functional.cross_entropy(out, targets.to(out.device)),
        optimizer=lambda params: torch.optim.AdamW(params, lr=1e-4),
    )


@pytest.mark.perfguard(variants=["eager"])
def test_gpt2_generation(perfguard):
    """Greedy generation of a small GPT-2 built from its config: TTFT, TPOT and tokens/s."""
    transformers = pytest.importorskip("transformers")
    config = transformers.GPT2Config(
        n_layer=2,
        n_embd=128,
        n_head=4,
        vocab_size=1000,
        n_positions=64,
        bos_token_id=0,
        eos_token_id=0,
    )
    model = transformers.GPT2LMHeadModel(config).eval()
    perfguard.generate(model, torch.randint(1, 1000, (1, 16)), max_new_tokens=8)


def test_models_are_deterministic_in_eval():
    model = MLP().eval()
    x = torch.randn(2, 256)
    assert torch.equal(model(x), model(x))
