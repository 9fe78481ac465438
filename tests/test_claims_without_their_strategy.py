"""Each newer strategy's claim fails when the strategy is silently not applied, so none passes vacuously.

The case runs in its worker with the ``disable`` injection (tests/injections.py): it
trains as ``vanilla`` under the strategy's name, the way an upgrade that stops passing a
flag through would leave it. Each failure is matched to the check that should catch it, so a
claim whose first line fails does not stand in for the rest. The optimizer-state claims also
fail under ``hollow``: the claimed optimizer class, without the memory it claims to save.
The accumulation claim is shown failing when the gradients
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
from perfsuite.core.record import CaseRecord
from perfsuite.core.spec import tier_spec
from perfsuite.session import PerfsuiteSession
from perfsuite.worker.process import run_isolated

pytestmark = pytest.mark.cpu

Claim = Callable[[CaseRecord, CaseRecord], None]
CLAIMS: dict[str, tuple[Claim, list[Any], str]] = {
    # strategy: (its claim, its marks, what the claim says when the strategy is not applied)
    "fused_adamw": (claims.fused_adamw, [], "param groups say fused=None"),
    "lion": (claims.lion, [pytest.mark.lion], "not Lion$"),
    "lion_8bit": (claims.lion_8bit, [pytest.mark.bnb], "not 8-bit Lion$"),
    "galore": (claims.galore, [pytest.mark.galore], "no GaLore parameter group"),
    "eager_attention": (claims.eager_attention, [], "attention ran as 'sdpa', not eager"),
    "compile": (lambda record, vanilla: claims.compiled(record), [], "no compile evidence"),
    # Disabled, the model has no adapters at all.
    "lora": (functools.partial(claims.lora, expected_adapters=8192), [pytest.mark.lora], "no LoRA evidence"),
}
HOLLOW = {
    # strategy: what its claim says when its optimizer keeps AdamW's state after all
    "lion": "Lion's state is 1[0-9][0-9]% of AdamW's",
    "lion_8bit": "8-bit Lion's state is 1[0-9][0-9]% of AdamW's",
    "galore": "GaLore keeps [0-9]+% of AdamW's state for the weights it projects",
}


def _injected(model: str, strategy: str, kind: str, **overrides: Any) -> CaseRecord:
    target = functools.partial(injections.run_injected, chosen=frozenset({kind}))
    record = run_isolated(tier_spec(model, strategy, **overrides), timeout_s=600, target=target)
    assert record.status == "ok", record.error
    assert record.extra["injected"] == [kind]
    return record


def _tiered(strategy: str, marks: list[Any]) -> Any:
    """A control runs where its claim runs: nightly for a strategy the matrix runs nightly on tiny-bert
    (tests/test_strategy_claims.py tiers its claims the same way)."""
    nightly = [pytest.mark.nightly] if nightly_only("tiny-bert", strategy) else []
    return pytest.param(strategy, marks=[*marks, *nightly], id=strategy)


@pytest.mark.parametrize("strategy", [_tiered(s, m) for s, (_, m, _) in CLAIMS.items()])
def test_the_claim_fails_when_its_strategy_is_not_applied(perfsuite: PerfsuiteSession, strategy: str) -> None:
    vanilla = perfsuite.record(tier_spec("tiny-bert", "vanilla"))
    disabled = _injected("tiny-bert", strategy, "disable")
    assert disabled.applied["optimizer_class"] == "torch.optim.adamw.AdamW"  # it trained as vanilla
    claim, _, says = CLAIMS[strategy]
    with pytest.raises(AssertionError, match=says):
        claim(disabled, vanilla)


@pytest.mark.parametrize("strategy", [_tiered(s, CLAIMS[s][1]) for s in HOLLOW])
def test_the_claim_fails_when_its_optimizer_keeps_the_state_it_claims_to_save(
    perfsuite: PerfsuiteSession, strategy: str
) -> None:
    vanilla = perfsuite.record(tier_spec("tiny-bert", "vanilla"))
    strategy_run = perfsuite.record(tier_spec("tiny-bert", strategy))
    hollow = _injected("tiny-bert", strategy, "hollow")
    assert hollow.applied["optimizer_class"] == strategy_run.applied["optimizer_class"]  # the class it claims
    claim, _, _ = CLAIMS[strategy]
    with pytest.raises(AssertionError, match=HOLLOW[strategy]):
        claim(hollow, vanilla)


@pytest.mark.bnb
def test_the_accumulation_claim_fails_when_accumulation_drops_gradients(perfsuite: PerfsuiteSession) -> None:
    single = perfsuite.record(tier_spec("tiny-bert", "adamw_8bit", dropout=False))
    dropped = _injected("tiny-bert", "adamw_8bit+grad_accum", "drop_grad", dropout=False)
    with pytest.raises(AssertionError):
        claims.accumulation_keeps_the_trajectory(dropped, single)
