"""``perfsuite ab`` from start to verdict: both sides set up and checked, every case compared
(:mod:`perfsuite.ab.rounds`), then the table, ``--json`` and ``--report`` (:mod:`perfsuite.ab.written`)."""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Sequence
from typing import Any

from packaging.requirements import Requirement

from perfsuite.ab.added import added_cases, run_added
from perfsuite.ab.envs import EnvError, make_env
from perfsuite.ab.lanes import Lane, Plan, close_lanes, open_lanes, plan_for
from perfsuite.ab.options import AbOptions
from perfsuite.ab.pairs import Choice
from perfsuite.ab.rounds import CaseResult, compare_cases
from perfsuite.ab.said import checks_line, new_line, pairs_line
from perfsuite.ab.sides import Side
from perfsuite.ab.written import ab_payload, write_ab
from perfsuite.core.changed_code import ChangedCode
from perfsuite.core.paired import SAME_CONFIDENCE, Schedule, alarm_looks, case_confidence, min_pairs
from perfsuite.core.preloads import preload_for
from perfsuite.core.reach import Ask, to_watch
from perfsuite.core.spec import CaseSpec
from perfsuite.core.tolerance import Tolerance


class Failed(Exception):
    """A side that cannot be tested: it did not resolve, install, start or import what was asked;
    ``side``, which one (``None``: not known)."""

    def __init__(self, message: str, side: str | None = None) -> None:
        super().__init__(message)
        self.side = side


MAX_PAIRS = 60
"""The default cap. A case whose pairs vary by 6% (tiny-bert-grad_ckpt's did by 6-8% on a 2-core EPYC)
has a 5% change called slower by 60 pairs in nearly every simulated comparison
(benchmarks/ab/simulate.py; the figures in docs/ab-sensitivity.md, "On known noise")."""


def cap_problem(pairs: int | None, max_pairs: int | None) -> str | None:
    """Why ``--max-pairs`` cannot be the cap (``None`` where it can): below ``--pairs``, or, without
    ``--pairs``, below the fewest pairs :func:`schedule_for` gives a verdict on."""
    if max_pairs is None:
        return None
    if pairs is not None:
        return f"--max-pairs {max_pairs} is below --pairs {pairs}" if max_pairs < pairs else None
    fewest = min_pairs(SAME_CONFIDENCE) + 1
    if max_pairs < fewest:
        return f"--max-pairs {max_pairs} is below {fewest}, the fewest pairs a verdict is given on (or set --pairs)"
    return None


def schedule_for(cases: int, *, floor: float, alpha: float, first: int | None, cap: int | None) -> Schedule:
    """Pairs per case: no verdict before the first alarm look (pair 15 for 35 cases), then 2 more
    pairs at a time while undecided, up to :data:`MAX_PAIRS`; *slower* and *faster* only at the
    alarm looks, corrected for the cases and those looks (:func:`perfsuite.core.paired.alarm_looks`),
    *same* at any look. ``first`` (``--pairs``) sets the first look instead.

    *Same* could be reached after 7 pairs, but 7 pairs are too few to trust: twice in two
    uniform-slowdown runs of the 35 cases on a 2-core EPYC, a case slowed 5% had 7 pairs that
    all read 1.00-1.04 and was called *same* (a duet, 1.022 [1.014, 1.030], and an alternating
    multi-rank case), where this machine's A/A pairs, resampled and shifted 5%, are called
    *same* in 0.05-0.15% of cases (benchmarks/results.md). From the first alarm look on, *slower* is
    reachable at the same look.
    """
    grid_from = first if first is not None else min_pairs(SAME_CONFIDENCE) + 1
    grid = Schedule(
        first=grid_from,
        step=2,
        cap=max(grid_from, cap if cap is not None else MAX_PAIRS),
        floor=floor,
        confidence=case_confidence(cases, alpha),
    )
    confidence, alarms = alarm_looks(grid.looks(), cases=cases, alpha=alpha)
    start = first if first is not None else alarms[0]
    return dataclasses.replace(grid, first=start, confidence=confidence, alarms=alarms)


def untested(
    options: AbOptions, specs: Sequence[CaseSpec], error: str, wall_s: float, side: str | None = None
) -> dict[str, Any]:
    """The file of a comparison whose sides could not be set up (``error``: why): every case *cannot
    test*, saying why, so that a script reading ``--json`` finds the verdict the exit code gives."""
    schedule = schedule_for(
        len(specs), floor=options.floor, alpha=options.alpha, first=options.pairs, cap=options.max_pairs
    )
    asked = {"base": options.base, "candidate": options.candidate}
    sides = {name: {"env": env, "overlay": [], "probe": {"libraries": {}}} for name, env in asked.items()}
    results = [CaseResult(spec.id, error=f"cannot test: {error}") for spec in specs]
    payload = ab_payload(
        options.device_type, specs, schedule, options.alpha, sides, results, wall_s, options.changed, options.loss_seeds
    )
    return {**payload, "untested_side": side}


_NONE_DECLARED = "declares no module of the project's own (no factory, batch maker or engine)"


@dataclasses.dataclass
class AbRun:
    sides: tuple[Side, Side]
    specs: list[CaseSpec]
    schedule: Schedule
    say: Callable[[str], None]
    device_type: str = "cpu"
    mode: Choice = "auto"
    alpha: float = 0.05
    """The false-alarm rate over every case and alarm look (the schedule's confidence comes from it)."""
    plan: Plan = dataclasses.field(default_factory=Plan)
    """Its lanes (``--jobs``; :mod:`perfsuite.ab.lanes`): one by default."""
    lanes: list[Lane] = dataclasses.field(default_factory=list)
    """Each lane's servers, ``sides`` the first's; empty: ``sides`` alone."""
    code: tuple[str, str] | None = None
    """Comparing the project's own code at two commits (:mod:`perfsuite.ab.own`): each side's tree."""
    changed: ChangedCode | None = None
    """Comparing the project's own code: its Python files that differ, and the functions the change touches."""
    new: dict[str, str] = dataclasses.field(default_factory=dict)
    """Per case the base's code does not declare and the candidate's does, the name it lacks: run once, on B."""
    loss_seeds: int = 0
    """Where a case's sides start from other initial weights, the base's runs at other seeds (``--loss-seeds``)."""

    @classmethod
    def start(cls, options: AbOptions, specs: list[CaseSpec], say: Callable[[str], None]) -> AbRun:
        sides: list[Side] = []
        preload_for(specs)  # both sides' forkservers import what the cases need
        plan = plan_for(specs, options.device_type, options.mode, options.jobs)
        try:
            trees = options.trees  # the project's own code at two commits (perfsuite.ab.own)
            envs = []
            for index, (name, asked) in enumerate((("base", options.base), ("candidate", options.candidate))):
                try:
                    env = make_env(asked, name=name, held=options.held)
                except EnvError as exc:  # named by its side, as a side's own errors are
                    raise EnvError(f"{name}: {exc}", name) from None
                envs.append((name, env if trees is None else trees[index].env(env)))
            # Each side reads the versions of what either pins: a package a lock adds on one side is
            # this environment's on the other, the same version, not a change.
            pinned = [Requirement(pin).name for _, env in envs for pin in env.pins]
            for name, env in envs:
                say(f"perfsuite: setting up {name} ({env.label})")
                side = Side(name, env, cores=plan.slots[0].cores, probed=pinned)
                sides.append(side)
                side.check_pins()
            lanes = open_lanes(plan, (sides[0], sides[1]))
            new = added_cases(specs, (sides[0], sides[1]))
            moved = to_watch(sides[0].versions(), sides[1].versions())
            changed = options.changed or ChangedCode()
            for lane in lanes:
                for index, side in enumerate(lane.sides):
                    root = str(trees[index].project) if trees is not None else None
                    side.watch = Ask(moved, root, changed.files, changed.watched(index))
        except (EnvError, KeyboardInterrupt) as exc:
            for side in sides:
                side.close()
            if isinstance(exc, KeyboardInterrupt):
                raise
            raise Failed(str(exc), exc.side) from None
        compared = max(1, len(specs) - len(new))  # the false-alarm rate is shared by the cases paired
        schedule = schedule_for(
            compared, floor=options.floor, alpha=options.alpha, first=options.pairs, cap=options.max_pairs
        )
        code = (trees[0].label, trees[1].label) if trees is not None else None
        run = cls(
            (sides[0], sides[1]),
            specs,
            schedule,
            say,
            options.device_type,
            options.mode,
            options.alpha,
            plan,
            lanes,
            code,
            options.changed,
            new,
            options.loss_seeds,
        )
        for line in run.version_lines():
            say(line)
        for case, name in new.items():
            say(f"perfsuite: {case} is new: the base's code does not declare {name}; it runs once, on the candidate")
        if described := plan.describe():
            say(described)
        if not len(specs) - len(new):
            say("perfsuite: no case to compare: the base's code declares none of them")
            return run
        say(
            f"perfsuite: {len(specs) - len(new)} case(s) compared, {schedule.first} to {schedule.cap} pairs each, "
            f"floor {schedule.floor:.1%}, "
            f"slower or faster at {schedule.confidence:.4g} at pairs {', '.join(map(str, schedule.alarms))} "
            f"(alpha {options.alpha:g} over {compared} case(s) × {len(schedule.alarms)} look(s)), "
            f"same at {schedule.same_confidence:.2g} at any look"
        )
        return run

    def version_lines(self) -> list[str]:
        from perfsuite.reports.ab import differing, imported

        a, b = self.sides
        code = [f"perfsuite: the project's code: {self.code[0]} → {self.code[1]}"] if self.code else []
        for side in self.sides if self.code else ():  # each side's declared modules, from its own copy
            said = imported(side.probe.get("project") or {})
            said = f"imports the modules its declarations name {said}" if said else _NONE_DECLARED
            code.append(f"  {side.name} {said}")
        differ = differing(a.versions(), b.versions())
        if code:
            return [*code, f"perfsuite: base → candidate: {', '.join(differ) or 'the same versions'}"]
        if differ:
            return [f"perfsuite: base → candidate: {', '.join(differ)}"]
        if a.env.label == b.env.label:
            return ["perfsuite: base → candidate: the same versions (an A/A comparison)"]
        return [f"perfsuite: base → candidate: the same package versions, in {a.env.label} and {b.env.label}"]

    def compare_all(
        self, timeout_s: float, *, stop_on_regression: bool = False, heard: Callable[[], bool] = lambda: False
    ) -> list[CaseResult]:
        """Every case compared (``heard``: whether a signal stopped the comparison, which stops the new
        cases' runs too, however the rounds ended)."""
        started = time.monotonic()
        total = len(self.specs)
        done: set[str] = set()

        def checks(result: CaseResult) -> None:
            self.say(f"  {result.case}: {checks_line(result)} · {time.monotonic() - started:.0f} s")

        def progress(result: CaseResult, finished: bool) -> None:
            done.update([result.case] if finished else [])
            self.say(f"{pairs_line(result, finished)} · {len(done)}/{total} done · {time.monotonic() - started:.0f} s")

        paired = [spec for spec in self.specs if spec.id not in self.new]
        results = (
            compare_cases(
                paired,
                self.lanes or self.sides,
                self.schedule,
                Tolerance(),
                timeout_s=timeout_s,
                device_type=self.device_type,
                mode=self.mode,
                plan=self.plan,
                progress=progress,
                on_checks=checks,
                stop_on_regression=stop_on_regression,
                loss_seeds=self.loss_seeds,
                loss_confidence=1 - self.alpha / len(paired),  # as the time's alpha: over every case compared
                on_round=lambda index, cases: self.say(
                    f"  round {index + 1}: {cases} case(s) · {time.monotonic() - started:.0f} s"
                ),
            )
            if paired
            else []
        )
        dead = next((r.stopped for r in results if r.stopped is not None), None)
        stopped = "interrupted" if heard() or any(r.interrupted for r in results) else dead

        def told(result: CaseResult) -> None:
            done.add(result.case)
            self.say(
                f"  {result.case}: {new_line(result)} · {len(done)}/{total} done · {time.monotonic() - started:.0f} s"
            )

        alone = run_added(self.specs, self.new, self.sides[1], timeout_s=timeout_s, stopped=stopped, told=told)
        found = {r.case: r for r in [*results, *alone]}
        return [found[spec.id] for spec in self.specs]

    def untested(self, error: str, wall_s: float, side: str | None = None) -> dict[str, Any]:
        """The file of a comparison whose side, set up, could not run its cases (its forkserver could not
        import what they need): every case *cannot test*, saying why, beside what each side's probe read."""
        results = [CaseResult(spec.id, error=f"cannot test: {error}") for spec in self.specs]
        return {**self.payload(results, wall_s), "untested_side": side}

    def close(self) -> None:
        """Every lane's servers, all at once; a signal heard meanwhile (the command's one: later ones are
        ignored) closes them again and goes no further, so what was measured is still written."""
        try:
            close_lanes(self.lanes or [Lane(self.sides)])
        except KeyboardInterrupt:
            close_lanes(self.lanes or [Lane(self.sides)])

    def payload(self, results: Sequence[CaseResult], wall_s: float) -> dict[str, Any]:
        sides = {
            side.name: {
                "env": side.env.label,
                "overlay": list(side.env.moved),
                "probe": side.probe,
                "code": self.code[i] if self.code else None,
            }
            for i, side in enumerate(self.sides)
        }
        return ab_payload(
            self.device_type,
            self.specs,
            self.schedule,
            self.alpha,
            sides,
            results,
            wall_s,
            self.changed,
            self.loss_seeds,
        )

    def finish(self, results: Sequence[CaseResult], options: AbOptions, wall_s: float, console: Any) -> int:
        from perfsuite.reports.ab import REACH_HEAD, reach_lines, render_table

        payload = self.payload(results, wall_s)
        if options.upgrade is not None:  # --pins: the commits and what moved between them
            payload["pins"] = options.upgrade.as_json()
        console.print(render_table(payload))
        ran = reach_lines(payload)
        for line in [REACH_HEAD, *(f"  {line}" for line in ran)] if ran else []:
            self.say(line)
        counts = payload["verdicts"]
        line = ", ".join(f"{n} {v}" for v, n in counts.items() if n)
        self.say(f"perfsuite ab: {line} of {len(results)} case(s) in {wall_s:.0f} s")
        if payload["interrupted"]:
            self.say(
                f"perfsuite ab: interrupted: {payload['interrupted']} case(s) ended before their time was decided, "
                "with the pairs they had"
            )
        if payload["stopped"]:
            why = next(r.stopped for r in results if r.stopped is not None)
            self.say(
                f"perfsuite ab: stopped: {payload['stopped']} case(s) ended before their time was decided, "
                f"with the pairs they had, when a side stopped answering: {why}"
            )

        timed_on = [r for r in results if r.checks_regressed and len(r.log_ratios) > self.schedule.first]
        if timed_on:  # --stop-on-regression finishes these at the first look
            most = max(len(r.log_ratios) for r in timed_on)
            self.say(
                f"perfsuite ab: {len(timed_on)} case(s) regressed on memory or loss at their first pair and ran on "
                f"to time them (up to {most} pairs); --stop-on-regression finishes such a case at its time's "
                f"first look ({self.schedule.first} pairs)"
            )

        write_ab(payload, options, self.say)
        if counts["cannot test"] and counts["cannot test"] + counts["skipped"] + counts["new"] == len(results):
            return 3  # no case compared, one at least for want of a side: not a pass
        if counts["regressed"]:
            return 1
        return 3 if payload["stopped"] else 0  # cases left open for want of a side: not a pass
