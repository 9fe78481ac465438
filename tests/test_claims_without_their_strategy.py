"""Each newer strategy's claim fails when the strategy is silently not applied, so none passes vacuously.

The case runs in its worker with the ``disable`` injection (tests/injections.py): it
trains as ``vanilla`` under the strategy's name, the way an upgrade that stops passing a
flag through would leave it. The accumulation claim is shown failing when the gradients
of all micro-batches but the last are dropped (``drop_grad``), the bug an
optimizer-offload path once shipped.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import claims
import injections
import pytest

from perfsuite.core.matrix import nightly_only
from perfsuite.core.spec import tier_spec
from perfsuite.session import PerfsuiteSession
from perfsuite.worker.process import run_isolated

pytestmark = pytest.mark.cpu

Claim = Callable[[dict[str, Any], dict[str, Any]], None]
CLAIMS: dict[str, tuple[Claim, list[Any]]] = {
    "fused_adamw": (claims.fused_adamw, []),
    "lion": (claims.lion, [pytest.mark.lion]),
    "lion_8bit": (claims.lion_8bit, [pytest.mark.bnb]),
    "galore": (claims.galore, [pytest.mark.galore]),
    "eager_attention": (claims.eager_attention, []),
    "compile": (lambda record, vanilla: claims.compiled(record), []),
    # Disabled, the model has no adapters at all: the expected count never matches.
    "lora": (functools.partial(claims.lora, expected_adapters=8192), [pytest.mark.lora]),
}


def _injected(model: str, strategy: str, kind: str, **overrides: Any) -> dict[str, Any]:
    target = functools.partial(injections.run_injected, chosen=frozenset({kind}))
    record = run_isolated(tier_spec(model, strategy, **overrides), timeout_s=600, target=target)
    assert record["status"] == "ok", record["error"]
    assert record["injected"] == [kind]
    return record


def _tiered(strategy: str, marks: list[Any]) -> Any:
    """A control runs where its claim runs: nightly for a strategy the matrix runs nightly on tiny-bert
    (tests/test_strategy_claims.py tiers its claims the same way)."""
    nightly = [pytest.mark.nightly] if nightly_only("tiny-bert", strategy) else []
    return pytest.param(strategy, marks=[*marks, *nightly], id=strategy)


@pytest.mark.parametrize("strategy", [_tiered(s, m) for s, (_, m) in CLAIMS.items()])
def test_the_claim_fails_when_its_strategy_is_not_applied(perfsuite: PerfsuiteSession, strategy: str) -> None:
    vanilla = perfsuite.record(tier_spec("tiny-bert", "vanilla"))
    disabled = _injected("tiny-bert", strategy, "disable")
    assert disabled["applied"]["optimizer_class"] == "torch.optim.adamw.AdamW"  # it trained as vanilla
    claim, _ = CLAIMS[strategy]
    with pytest.raises(AssertionError):
        claim(disabled, vanilla)


@pytest.mark.bnb
def test_the_accumulation_claim_fails_when_accumulation_drops_gradients(perfsuite: PerfsuiteSession) -> None:
    single = perfsuite.record(tier_spec("tiny-bert", "adamw_8bit", dropout=False))
    dropped = _injected("tiny-bert", "adamw_8bit+grad_accum", "drop_grad", dropout=False)
    with pytest.raises(AssertionError):
        claims.accumulation_keeps_the_trajectory(dropped, single)
