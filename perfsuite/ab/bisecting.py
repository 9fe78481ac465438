"""``perfsuite bisect``'s driver: the good end's side kept running, each tested release an overlay of
its own compared with it (:func:`perfsuite.ab.rounds.compare_case`), and the search of
:mod:`perfsuite.ab.bisect` judging each by the metric asked."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable
from pathlib import Path
from typing import Any

from packaging.utils import canonicalize_name

from perfsuite.ab.bisect import Found, Judgement, Step, search
from perfsuite.ab.comparison import schedule_for
from perfsuite.ab.envs import Env, EnvError, make_env
from perfsuite.ab.options import BisectOptions
from perfsuite.ab.points import FAILURE, changed, counts, evidence, judged, shown
from perfsuite.ab.rounds import CaseResult, compare_case
from perfsuite.ab.sides import Side
from perfsuite.core.changed_code import ChangedCode
from perfsuite.core.declaration import load_project
from perfsuite.core.explain.explanation import Explanation
from perfsuite.core.explain.reference import aspects_failed
from perfsuite.core.paired import Schedule
from perfsuite.core.preloads import preload_for
from perfsuite.core.reach import Ask, described, reach, to_watch, unreached, unreached_said
from perfsuite.core.results import write_results
from perfsuite.core.spec import CaseSpec, parse_case_id, tier_spec
from perfsuite.core.tolerance import Tolerance


def case_spec(case_id: str, *, steps: int | None, threads: int, project: Path | None = None) -> CaseSpec:
    """The case ``case_id`` as the tiers run it: any id ``perfsuite run`` names, composed strategies,
    engine and ranks included, in the matrix or not (a ``ValueError`` says what a valid id is), as
    ``project``'s declarations name it (default: the working directory's)."""
    load_project(project)
    model, strategy, engine, world_size = parse_case_id(case_id)
    overrides: dict[str, Any] = {"threads": threads}
    if steps is not None:
        overrides["steps"] = steps
    spec = tier_spec(model, strategy, engine, world_size=world_size, **overrides)
    if spec.id != case_id:  # -ws1, -ws02: the record would carry another id than the one asked for
        raise ValueError(f"{case_id!r} names the case {spec.id!r}; give that id")
    return spec


class BisectInterrupted(KeyboardInterrupt):
    """Ctrl-C or SIGTERM stopped a bisection, which has said what it had judged and written it."""


@dataclasses.dataclass
class Bisection:
    options: BisectOptions
    spec: CaseSpec
    versions: list[str]
    """The points searched, good end first: a package's releases, or the project's commits."""
    say: Callable[[str], None]
    env_for: Callable[[str, str], Env] | None = None
    """The environment of a point for a side named so; default: the package at that version, an
    overlay over this environment. ``perfsuite bisect --own``: this environment in the commit's tree."""
    what: str = ""
    """What the points are, for the answer (default: the package's name)."""
    describe: Callable[[str], str] = str
    """A point as the answer names it (a commit: its hash, subject and pull request)."""
    found: Found | None = None
    """The answer, once :meth:`run` has searched (``None`` when the ends did not differ or could not be tested)."""
    tested: list[Step] = dataclasses.field(default_factory=list)
    """The points judged so far between the ends, in the order tested (what a stopped bisection keeps)."""
    ends: CaseResult | None = None
    """The bad end's comparison with the good end, once made."""
    cut_short: tuple[str, CaseResult] | None = None
    """The point whose comparison Ctrl-C or SIGTERM stopped, and that comparison's pairs so far."""
    heard: Callable[[], str | None] = lambda: None
    """The signal that stopped the command, once one has (``SIGINT``, ``SIGTERM``). A signal handled
    where a comparison cannot tell (its last pair in, its look not yet taken) still stops the search."""
    explains: bool = True
    """Whether the answer is explained (``False``: a search that another goes on from)."""
    explanation: Explanation | None = None
    """Why the first bad point (or a range's first judged bad) differs from the last good on the metric
    searched, once explained."""
    compared: dict[str, CaseResult] = dataclasses.field(default_factory=dict)
    """Each point's comparison with the good end, by point."""
    may_switch: bool = True
    """Whether a bad end whose own run fails turns the search into one for the first failing point
    (``False``: a commit search that goes on from a release search, which keeps that one's metric)."""
    asked: str | None = None
    """The metric asked, where the search turned to :data:`~perfsuite.ab.points.FAILURE`."""
    point_floor: float | None = None
    """A time bisection's floor for the points between the ends, once the ends differ: half their change
    (in log ratio) or ``--floor``, the larger. A point is good within it, bad beyond: nearer one end."""
    changed_code: ChangedCode | None = None
    """``--own``: what the project's code changes between the ends, watched in their comparison (each
    side in its own copy), so that ends alike say where the case never called it."""

    def _env(self, version: str, name: str) -> Env:
        if self.env_for is not None:
            return self.env_for(version, name)
        return make_env(f"{self.options.package}=={version}", name=name, held=self.options.held)

    def _unseen(self, ends: CaseResult) -> str:
        """``; `flask` 3.0.0 → 3.0.3: seen called in no case's build or step ...`` where the ends' first
        pair never ran the package bisected (with ``--own``, the project's code the ends differ in):
        their sameness then says nothing of its releases (or commits)."""
        if self.changed_code is not None:
            said = unreached_said(reach([ends.as_json()], self.changed_code))
            return f"; of the code that differs, {said}" if said else ""
        package = canonicalize_name(self.options.package or "")
        found = [r for r in reach([ends.as_json()]) if canonicalize_name(r.name) == package]
        if not found or not unreached(found):
            return ""
        return f"; {described(found[0], 1, self.options.device_type, engines=(self.spec.engine,))}"

    def _one_pair(self) -> Schedule:
        return schedule_for(1, floor=self.options.floor, alpha=self.options.alpha, first=1, cap=1)

    def _compare(self, good: Side, version: str) -> CaseResult:
        if self.heard() is not None:
            raise KeyboardInterrupt
        if self.options.metric == "time":
            schedule = schedule_for(
                1,
                floor=self.point_floor or self.options.floor,
                alpha=self.options.alpha,
                first=self.options.pairs,
                cap=self.options.max_pairs,
            )
        else:  # memory and loss are deterministic on one stack: one pair says it
            schedule = self._one_pair()
        try:
            side = Side(version, self._env(version, "candidate"))
        except EnvError as exc:
            return CaseResult(case=self.spec.id, error=str(exc))
        try:
            side.check_pins()
            moved = to_watch(good.versions(), side.versions())  # what its first pair ran
            good.watch = side.watch = Ask(moved)
            code = self.changed_code
            if code is not None and version == self.versions[-1]:  # the ends: the project's code too
                for index, one in enumerate((good, side)):
                    one.watch = Ask(moved, one.env.cwd, code.files, code.watched(index))
            result = compare_case(
                self.spec,
                (good, side),
                schedule,
                Tolerance(),
                timeout_s=self.options.timeout or 600.0,
                device_type=self.options.device_type,
                progress=lambda so_far, finished: None if finished else self._so_far(version, so_far),
                loss_seeds=self.options.loss_seeds if self.options.metric == "loss" else 0,  # else no run of them
            )
            if result.interrupted or self.heard() is not None:  # its pairs so far are kept; the search stops
                self.cut_short = (version, result)
                raise KeyboardInterrupt
            if result.stopped is not None:  # a side died between rounds: this version is not tested
                result.error = result.stopped
            self.compared[version] = result
            return result
        except EnvError as exc:
            return CaseResult(case=self.spec.id, error=str(exc))
        finally:
            side.close()

    def _so_far(self, version: str, result: CaseResult) -> None:
        """A time comparison's look that decided nothing yet, said as the comparison goes on."""
        if self.options.metric == "time" and result.time is not None and not result.error:
            self.say(f"    {version}: {evidence(result, 'time')}, more pairs to come")

    def run(self) -> int:
        """Search, saying each step; the exit code. Ctrl-C or SIGTERM (a ``KeyboardInterrupt``, under
        :func:`perfsuite.cli.interrupt.terminate_as_interrupt`) stops it: what was compared is said and
        written to ``--json``, and the interrupt goes on to the command."""
        return self._stopped_by_signal(self._run)

    def explain_found(self) -> None:
        """Explain the answer of a search whose explanation was left to another (``explains=False``)
        that could not run, and write it to ``--json`` with the answer; an interrupt as :meth:`run`'s."""
        assert self.found is not None
        found = self.found

        def explain() -> int:
            self.explanation = None if self.options.metric == FAILURE else self._explain(found, None)
            self._write(found, self.ends)
            return 0

        self._stopped_by_signal(explain)

    def _stopped_by_signal(self, work: Callable[[], int]) -> int:
        try:
            return work()
        except KeyboardInterrupt:
            signal = self.heard() or "SIGINT"
            self._write(self.found, self.ends, interrupted=signal)
            written = f" (written to {self.options.json})" if self.options.json else ""
            if self.found is not None:  # stopped after the search: its answer stands
                self.say(f"perfsuite bisect: interrupted by {signal} after the search{written}")
                raise BisectInterrupted from None
            at = f" while comparing {self.cut_short[0]}" if self.cut_short else ""
            tested = ", ".join(f"{s.version} {shown(s.judgement)}" for s in self.tested) or "none"
            self.say(
                f"perfsuite bisect: interrupted by {signal}{at}, no answer; judged between the ends: {tested}{written}"
            )
            raise BisectInterrupted from None

    def _run(self) -> int:
        package, metric = self.what or self.options.package, self.options.metric
        preload_for([self.spec])
        try:
            good = Side("good", self._env(self.versions[0], "good"))
            good.check_pins()
        except EnvError as exc:
            self.say(f"perfsuite: cannot test the good end {self.versions[0]}: {exc}")
            return 3
        try:
            ends = self.ends = self._compare(good, self.versions[-1])
            failed = "good" if (ends.error or "").startswith(("good:", "good (")) else "bad"
            if failed == "bad":  # the good end's failure is said below, once, not as the bad end's evidence
                self.say(f"  {self.versions[-1]} (bad end): {evidence(ends, metric)}")
            if ends.candidate_failed and metric != FAILURE and self.may_switch:  # its run fails, the good end's runs
                metric = self._search_failure(package)
            if ends.error and not (metric == FAILURE and ends.candidate_failed):
                self.say(f"perfsuite: cannot test the {failed} end {self.versions[0 if failed == 'good' else -1]}: "
                         f"{ends.error}")  # fmt: skip
                self._write(None, ends)
                return 3
            differ = changed(ends, metric)
            if differ is None:  # not "no difference": a bisection needs to know the ends differ
                self.say(
                    f"perfsuite: cannot tell whether {self.versions[0]} and {self.versions[-1]} differ in time on "
                    f"{self.spec.id}: undecided at {len(ends.log_ratios)} pairs; a larger --max-pairs (or a "
                    "quieter machine) may decide it"
                )
                self._write(None, ends)
                return 3
            if not differ:
                self.say(
                    f"perfsuite: {self.versions[0]} and {self.versions[-1]} do not differ in {metric} "
                    f"on {self.spec.id}; nothing to bisect{self._unseen(ends)}"
                )
                self._write(None, ends)
                return 0
            if metric == "time" and ends.time is not None:
                self.point_floor = max(self.options.floor, math.expm1(abs(math.log(ends.time.ratio)) / 2))
                near = 1 + self.point_floor
                self.say(
                    f"perfsuite: each point is judged by the end it is nearer: good where its B/A against the good "
                    f"end lies within [{1 / near:.3f}, {near:.3f}] (half the ends' ×{ends.time.ratio:.3f}, in ratio; "
                    f"--floor {self.options.floor:.1%} at least), bad beyond it"
                )

            def judge(version: str) -> tuple[Judgement, str]:
                result = self._compare(good, version)
                judgement, shown = judged(result, metric)
                said = evidence(result, metric)
                self.say(f"  {version}: {shown}: {said}")
                self.tested.append(Step(version, judgement, said))
                return judgement, said

            found = search(self.versions, judge)
            self.found = found
            if found.first_bad is not None:
                whose = f"{self.spec.id}'s {metric}"
                if metric == FAILURE:  # the error is its cause; the bad end's too, where it says another
                    first, last = (str(r.error).split(": ", 1)[-1] for r in (self.compared[found.first_bad], ends))
                    whose = f"{self.spec.id}: its run fails ({self.compared[found.first_bad].error})"
                    whose += f"; the bad end's otherwise ({ends.error})" if first != last else ""
                self.say(
                    f"perfsuite: the first bad {package} is {self.describe(found.first_bad)} "
                    f"(last good {self.describe(found.last_good)}) for {whose}"
                )
                if metric == "time":
                    self._changed_again(found.first_bad, ends)
            else:
                untested = ", ".join(found.untested)
                self.say(
                    f"perfsuite: the first bad {package} is one of {', '.join(map(self.describe, found.candidates))}: "
                    f"{found.known_bad} is bad, {untested} could not be judged (not testable, or undecided in time)"
                )
            if self.explains and self.options.explain and metric != FAILURE:
                self.explanation = self._explain(found, good)
        finally:
            good.close()
        self._write(found, ends)
        return 0 if found.first_bad is not None else 1

    def _changed_again(self, first_bad: str, ends: CaseResult) -> None:
        """Said where the first bad point's time against the good end and the bad end's lie apart (their
        intervals do not overlap): a second change between them moved the time again."""
        point = self.compared.get(first_bad)
        if first_bad == self.versions[-1] or point is None or point.time is None or ends.time is None:
            return
        at, end = point.time, ends.time
        if at.high < end.low or at.low > end.high:
            self.say(
                f"perfsuite: {first_bad} alone is B/A {at.said()} against the good end, the bad end {end.said()}: "
                f"the time changed again between them (×{end.ratio / at.ratio:.3f}); a bisection from it finds that"
            )

    def _search_failure(self, package: str | None) -> str:
        """The bad end's own run failed where the good end's ran: the search is for the first point whose
        run fails (:data:`~perfsuite.ab.points.FAILURE`), each one pair; said, and the metric returned."""
        self.asked, self.options = self.options.metric, dataclasses.replace(self.options, metric=FAILURE)
        self.say(
            f"perfsuite: the bad end's run fails where the good end's runs: searching for the first {package} "
            "whose run fails, one pair each (a point whose run completes is good, whatever its figures)"
        )
        return FAILURE

    def _explain(self, found: Found, good: Side | None) -> Explanation:
        """The first bad point (B) against the last good (A), on the metric searched: each instrumented,
        A B A B (:func:`perfsuite.ab.explain.explain_case`), for memory and loss against one pair of them
        (the breakdowns and curves their causes are read against: the search's own where the last good
        is the good end, whose side is ``good`` while it runs). Where untestable points leave a range,
        B is its known bad end: the change is in B or in an untested point before it. Said as it comes;
        an explanation that fails says why and leaves the answer."""
        from perfsuite.ab.explain import explain_case

        metric, timeout, known = self.options.metric, self.options.timeout or 600.0, found.known_bad
        last, first = self.describe(found.last_good), self.describe(known)
        if found.first_bad is not None:
            said = "first bad"
        else:
            said = f"first judged bad; the change is in it or in the untested {', '.join(found.untested)}"
        self.say(f"perfsuite: why: A {last} (last good) → B {first} ({said}), instrumented runs, A B A B")
        opened: list[Side] = []
        try:
            if found.last_good == self.versions[0] and good is not None:
                base = good
            else:
                base = Side(found.last_good, self._env(found.last_good, "base"))
                opened.append(base)
            bad = Side(known, self._env(known, "candidate"))
            opened.append(bad)
            for side in opened:
                side.check_pins()
            result = CaseResult(case=self.spec.id)
            searched = self.compared.get(known)
            if metric != "time" and base is good and searched is not None and searched.error is None:
                result = searched
            elif metric != "time":
                device = self.options.device_type
                one = self._one_pair()
                result = compare_case(self.spec, (base, bad), one, Tolerance(), timeout_s=timeout, device_type=device)
            if result.interrupted or self.heard() is not None:
                raise KeyboardInterrupt
            # A category that lives within a step is said by the step's ops: the time's profile, as ab explains it.
            failing = [c.metric for c in result.checks if not c.ok and counts(c.metric, metric)]
            what = tuple(a for a in aspects_failed(failing) if a in (metric, "time")) or (metric,)
            if result.error is not None:
                explanation = Explanation(self.spec.id, what, errors=(result.error,))
            else:
                explanation = explain_case((base, bad), self.spec, result, what, timeout_s=timeout)
        except EnvError as exc:
            explanation = Explanation(self.spec.id, (metric,), errors=(str(exc),))
        except Exception as exc:  # the answer stands whatever its explanation does
            explanation = Explanation(self.spec.id, (metric,), errors=(f"{type(exc).__name__}: {exc}",))
        finally:
            for side in opened:
                side.close()
        for line in explanation.lines():
            self.say(f"  {line}")
        return explanation

    def _write(self, found: Found | None, ends: CaseResult | None, *, interrupted: str | None = None) -> None:
        """``--json``: the steps and the answer; ``interrupted``: the signal that stopped it."""
        if not self.options.json:
            return
        steps: list[Step] = found.steps if found else self.tested
        write_results(
            {
                "kind": "perfsuite-bisect",
                "package": self.options.package,
                "what": self.what or self.options.package,
                "first_bad_described": self.describe(found.first_bad) if found and found.first_bad else None,
                "case": self.spec.id,
                "metric": self.options.metric,
                "metric_asked": self.asked or self.options.metric,
                "loss_seeds": self.options.loss_seeds,
                "versions": self.versions,
                "ends": ends.as_json() if ends is not None else None,
                "interrupted": interrupted,
                "cut_short": (
                    {"point": self.cut_short[0], **self.cut_short[1].as_json()} if self.cut_short is not None else None
                ),
                "steps": [dataclasses.asdict(s) for s in steps],
                "first_bad": found.first_bad if found else None,
                "candidates": found.candidates if found else [],
                "explanation": self.explanation.as_json() if self.explanation is not None else None,
            },
            json_file=Path(self.options.json),
            say=None,
        )
