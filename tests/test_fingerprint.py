"""The fingerprint that lets a test's variants share one eager reference: equal for equal
models and inputs, different for any change, and on a GPU computed without bringing the
weights to the host."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from perfguard.measure.fingerprint import WORDS, checksum, fingerprint


def test_the_checksum_sees_every_word_in_its_place_and_the_bytes_past_the_last() -> None:
    a = torch.randn(2 * WORDS + 3, dtype=torch.bfloat16)  # three chunks and a half word
    same = checksum(a)
    assert checksum(a.clone()) == same
    for at in (0, WORDS + 7, 2 * WORDS + 2):  # first chunk, a middle one, the half word
        changed = a.clone()
        changed[at] += 1
        assert checksum(changed) != same, at
    swapped = a.clone()
    swapped[[WORDS - 1, WORDS]] = a[[WORDS, WORDS - 1]]  # two words trade chunks
    assert checksum(swapped) != same
    tail = WORDS  # a tensor shorter than one chunk, and one of no bytes
    assert checksum(torch.arange(tail, dtype=torch.int8)) != checksum(
        torch.zeros(tail, dtype=torch.int8)
    )
    assert checksum(torch.zeros(0)) == checksum(torch.zeros(0))


def test_the_fingerprint_follows_weights_settings_and_inputs() -> None:
    torch.manual_seed(0)
    linear, x = nn.Linear(8, 8), torch.randn(2, 8)
    model = nn.Sequential(linear, nn.Dropout(0.1))
    copied = nn.Linear(8, 8)
    copied.load_state_dict(linear.state_dict())
    again = nn.Sequential(copied, nn.Dropout(0.1))
    key = fingerprint(model, (x,))
    assert fingerprint(again, (x,)) == key  # another object, the same model
    with torch.no_grad():
        copied.weight[3, 3] += 1e-3
    assert fingerprint(again, (x,)) != key
    assert fingerprint(nn.Sequential(linear, nn.Dropout(0.2)), (x,)) != key
    assert fingerprint(model, (x + 1,)) != key


@pytest.mark.cuda
def test_a_cuda_models_fingerprint_is_taken_on_the_device() -> None:
    if not torch.cuda.is_available():
        pytest.skip("needs CUDA")
    torch.manual_seed(0)
    model = nn.Linear(4096, 4096, dtype=torch.bfloat16, device="cuda")
    x = torch.randn(2, 4096, dtype=torch.bfloat16, device="cuda")
    held = torch.cuda.memory_allocated()
    key = fingerprint(model, (x,))
    assert torch.cuda.memory_allocated() == held  # nothing kept: it would be in every peak
    assert fingerprint(model, (x,)) == key
    with torch.no_grad():
        model.weight[0, 0] += 1
    assert fingerprint(model, (x,)) != key
    on_host = nn.Linear(4096, 4096, dtype=torch.bfloat16)
    on_host.load_state_dict(model.state_dict())
    # the device is part of the key: a reference computed on one device serves no other
    assert fingerprint(on_host, (x.cpu(),)) != fingerprint(model, (x,))
