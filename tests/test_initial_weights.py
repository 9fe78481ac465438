"""The initial-weights digest: the same for the same weights, another for any other."""

from __future__ import annotations

import pytest
import torch

from perfsuite.core.models import get_model_spec
from perfsuite.worker.modeling import build_model
from perfsuite.worker.weights import initial_weights_digest

pytestmark = pytest.mark.cpu


@pytest.mark.parametrize("model", ["tiny-bert", "tiny-gpt2"])  # tiny-gpt2 ties its head to its embedding
def test_the_digest_follows_the_weights_bit_for_bit(model: str) -> None:
    spec = get_model_spec(model)
    first = build_model(spec, seed=0)
    digest = initial_weights_digest(first)
    assert digest.startswith("xxh3_128:")
    assert len(digest) == len("xxh3_128:") + 32
    assert initial_weights_digest(build_model(spec, seed=0)) == digest
    assert initial_weights_digest(build_model(spec, seed=1)) != digest
    weight = first.get_input_embeddings().weight
    assert isinstance(weight, torch.Tensor)
    with torch.no_grad():
        weight[1, 0] = torch.nextafter(weight[1, 0], torch.tensor(float("inf")))  # one weight, one ulp
    assert initial_weights_digest(first) != digest


def test_a_scalar_buffer_is_digested_too() -> None:
    module = torch.nn.Module()
    module.register_buffer("logit_scale", torch.tensor(2.6592))  # 0-dim, as CLIP's
    digest = initial_weights_digest(module)
    module.get_buffer("logit_scale").fill_(2.0)
    assert initial_weights_digest(module) != digest
