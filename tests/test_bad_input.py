"""Every subcommand refuses bad input with one line and exit code 2, never a traceback, and writes
nothing: each option below is given a bad value in a directory that must stay empty."""

from __future__ import annotations

import importlib.util
import json
import subprocess
from pathlib import Path

import pytest

from perfsuite.cli import main
from perfsuite.worker import process
from perfsuite.worker.device import cuda_usable

RUN = [
    (["--steps", "0"], "--steps: must be at least 1, got 0"),
    (["--steps", "-3"], "--steps: must be at least 1, got -3"),
    (["--steps", "ten"], "--steps: expected an integer, got 'ten'"),
    (["--warmup", "-1"], "--warmup: must be at least 0, got -1"),
    (["--batch-size", "0"], "--batch-size: must be at least 1, got 0"),
    (["--seq-len", "0"], "--seq-len: must be at least 1, got 0"),
    (["--threads", "0"], "--threads: must be at least 1, got 0"),
    (["--timeout", "0"], "--timeout: must be more than 0 seconds, got 0"),
    (["--timeout", "soon"], "--timeout: expected a number of seconds, got 'soon'"),
    (["--world-size", "0"], "--world-size: must be at least 1, got 0"),
    (["--world-size", "2", "--all"], "--world-size is the ranks of the cases --models/--strategies name"),
    (
        ["--models", "tiny-bert", "--engine", "loop,trainer", "--world-size", "2"],
        "--engine trainer runs no case of 2 ranks: ranks launched as processes of their own run through the loop",
    ),
    (["--seed", "-1"], "--seed: must be at least 0, got -1"),
    (["--models", "bert-huge"], "unknown model 'bert-huge'; valid: bert-base-uncased"),
    (["--strategies", "fp8"], "unknown strategy 'fp8'"),
    (["--strategies", "fp16++grad_ckpt"], "unknown strategy 'fp16++grad_ckpt': '+' joins two names"),
    (["--strategies", "fp16+grad_ckpt+fp16"], "strategy 'fp16+grad_ckpt+fp16' names fp16 more than once"),
    (["--engine", "keras"], "unknown engine 'keras'; valid engines: loop, trainer"),
    (["--device", "tpu"], "--device: invalid choice: 'tpu'"),
    (["--gpus", "two"], "--gpus"),
    (["--json", "{tmp}"], "--json: {tmp}: is a directory, expected a file to write"),
    (["--report", "{tmp}/file.txt"], "--report: {tmp}/file.txt: is a file, expected a directory"),
    # A place nothing can be written is refused before any case runs, not after them all
    (["--json", "{tmp}/file.txt/out.json"], "--json: {tmp}/file.txt/out.json: {tmp}/file.txt is not a directory"),
    (["--report", "{tmp}/file.txt/out"], "--report: {tmp}/file.txt/out: {tmp}/file.txt is not a directory"),
    (["--json", "/proc/perfsuite/out.json"], "--json: /proc/perfsuite/out.json: cannot write in /proc"),
    (["--strategies", ","], "--strategies: expected one or more comma-separated names, got ','"),
    (["--models", ""], "--models: expected one or more comma-separated names, got ''"),
    (["--engine", ""], "--engine: expected one or more comma-separated names, got ''"),
    (["--timeout", "inf"], "--timeout: must be at most 604800 seconds (a week), got inf"),
    # What the cases would read is checked before the first of them runs
    (["--models", "tiny-bert", "--pretrained", "{tmp}/none"], "--pretrained {tmp}/none: no config.json there"),
    (["--models", "tiny-bert", "--pretrained", "hub-cache"], "--pretrained hub-cache: tiny-bert has no hub id"),
    (["--models", "tiny-bert", "--tokenizer", "{tmp}"], "--tokenizer is the tokenizer of --dataset"),
    (["--dataset", "{tmp}/none.csv", "--tokenizer", "{tmp}"], "--dataset {tmp}/none.csv: no such file"),
    (["--dataset", "no_such_set", "--tokenizer", "{tmp}"], "--dataset no_such_set: no such file or directory, nor a"),
    (["--dataset", "{tmp}/empty.json", "--tokenizer", "{tmp}/none"], "--tokenizer {tmp}/none: no such directory"),
]
OVERHEAD = [
    (["--rounds", "-1"], "--rounds: must be at least 0, got -1"),
    (["--pairs", "-1"], "--pairs: must be at least 0, got -1"),
    (["--rounds", "0", "--pairs", "0"], "--rounds 0 and --pairs 0 measure nothing"),
    (["--steps", "0"], "--steps: must be at least 1, got 0"),
    (["--threads", "0"], "--threads: must be at least 1, got 0"),
    (["--timeout", "-5"], "--timeout: must be more than 0 seconds, got -5"),
    (["--cases", "grad_ckpt"], "no bare loop for 'grad_ckpt'"),
    (["--models", "bert-huge"], "unknown model 'bert-huge'"),
    (["--json", "{tmp}"], "--json: {tmp}: is a directory, expected a file to write"),
    (["--json", "{tmp}/file.txt/x.json"], "--json: {tmp}/file.txt/x.json: {tmp}/file.txt is not a directory"),
    (["--cases", ","], "--cases: expected one or more comma-separated names"),
    (["--timeout", "1e300"], "--timeout: must be at most 604800 seconds"),
    (["--rounds", "0", "--cases", "zero2_offload,vanilla"], "--rounds 0: tiny-bert-zero2_offload measured in rounds"),
]
REPORT = [
    (["{tmp}", "-o", "{tmp}/out"], "{tmp}: is a directory; expected `pytest --perfsuite-json`'s file"),
    (["{tmp}/empty.json", "-o", "{tmp}/out"], "empty.json: is empty; expected"),
    (["{tmp}/list.json", "-o", "{tmp}/out"], "or `perfsuite ab --json`'s (a 'kind' of 'perfsuite-ab')"),
    (["{tmp}/not-json.json", "-o", "{tmp}/out"], "not-json.json: not a perfsuite results file (not JSON"),
    (["{tmp}/other.json", "-o", "{tmp}/out"], "other.json: case 0 has no 'model', 'strategy', 'status'"),
    (["{tmp}/list.json", "-o", "{tmp}/out"], "list.json: not a perfsuite results file (no 'cases' list)"),
    (["{tmp}/ok-untimed.json", "-o", "{tmp}/out"], "ok-untimed.json: cases[0]: status 'ok' but no 'step_time_s'"),
    (["{tmp}/missing.json", "-o", "{tmp}/out"], "missing.json: no such results file"),
    (["{tmp}/deep.json", "-o", "{tmp}/out"], "deep.json: not a perfsuite results file (nested too deep)"),
    (["{tmp}/other.json", "-o", "{tmp}/file.txt"], "--out: {tmp}/file.txt: is a file, expected a directory"),
    (["{tmp}/other.json", "-o", "/proc/perfsuite"], "--out: /proc/perfsuite: cannot write in /proc"),
    (["{tmp}/other.json", "-o", "{tmp}/out", "--history", "{tmp}/none"], "--history: {tmp}/none: no such directory"),
    (["{tmp}/other.json", "-o", "{tmp}/out", "--baselines", "{tmp}/none"], "--baselines: {tmp}/none: no such"),
    ([], "the following arguments are required: results, -o/--out"),
    # A results file's values are data: each checked when it is read, before anything is written
    (["{tmp}/case-int.json", "-o", "{tmp}/out"], "case-int.json: cases[0]: case is 123 (int), not a string"),
    (["{tmp}/status-int.json", "-o", "{tmp}/out"], "status-int.json: cases[0]: status is 5 (int), not a string"),
    (["{tmp}/status-weird.json", "-o", "{tmp}/out"], "tiny-bert-vanilla: status is 'weird', not one of passed"),
    (["{tmp}/checks-str.json", "-o", "{tmp}/out"], "tiny-bert-vanilla: checks is 'x' (str), not a list"),
    (["{tmp}/tolerance-half.json", "-o", "{tmp}/out"], "tiny-bert-vanilla: tolerance has no 'loss_rtol'"),
    (["{tmp}/env-str.json", "-o", "{tmp}/out"], "env-str.json: env is 'nope' (str), not an object"),
    (["{tmp}/schema-99.json", "-o", "{tmp}/out"], "schema_version is 99 (int); this perfsuite reads 1 (`perfsuite"),
    (["{tmp}/schema-two.json", "-o", "{tmp}/out"], "schema_version is 'two' (str); this perfsuite reads 1"),
    (["{tmp}/huge.json", "-o", "{tmp}/out"], "huge.json: cases[0].peak_memory_bytes is 100000"),
    (["{tmp}/nan.json", "-o", "{tmp}/out"], "nan.json: cases[0].records[0].step_time_s.median is nan (float)"),
    (["{tmp}/run.json", "-o", "{tmp}/out", "--history", "{tmp}/history/trunc"], "m/2026-01-01_abc1234.json: not JSON"),
]
MERGE = [
    (["{tmp}/other.json", "-o", "{tmp}/merged.json"], "other.json: not a pytest --perfsuite-json results file"),
    (["{tmp}/empty.json", "-o", "{tmp}/merged.json"], "empty.json: is empty"),
    (["{tmp}", "-o", "{tmp}/merged.json"], "is a directory"),
    (["{tmp}/other.json", "-o", "{tmp}"], "--out: {tmp}: is a directory, expected a file to write"),
    (["{tmp}/other.json", "-o", "{tmp}/file.txt/m.json"], "--out: {tmp}/file.txt/m.json: {tmp}/file.txt is not a"),
    (["{tmp}/other.json", "-o", "{tmp}/merged.json", "--expect", "0"], "--expect: must be at least 1, got 0"),
    (["{tmp}/other.json", "-o", "{tmp}/merged.json", "--expect", "2"], "1 shard results for 2 shards"),
    (["{tmp}/nan.json", "-o", "{tmp}/merged.json"], "nan.json: cases[0].records[0].step_time_s.median is nan"),
    (["{tmp}/case-int.json", "-o", "{tmp}/merged.json"], "case-int.json: cases[0]: case is 123 (int)"),
    (["{tmp}/status-int.json", "-o", "{tmp}/merged.json"], "status-int.json: cases[0]: status is 5 (int)"),
    (["{tmp}/records-str.json", "-o", "{tmp}/merged.json"], "tiny-bert-vanilla: records is 'oops' (str), not a list"),
    (["{tmp}/gate.json", "{tmp}/gate.json", "-o", "{tmp}/m.json"], "gate.json: given twice ({tmp}/gate.json is the"),
    (["{tmp}/gate.json", "-o", "{tmp}/gate.json"], "--out: {tmp}/gate.json is one of the shards it merges"),
    (
        ["{tmp}/lost.json", "-o", "{tmp}/m.json"],
        "no such results file; write one with `pytest --perfsuite-json {tmp}/lost.json`\n",
    ),
]
BASELINES = [
    (["refresh", "--repeats", "0"], "--repeats: must be at least 1, got 0"),
    (["refresh", "--tests", "{tmp}/none.py"], "no matrix test at {tmp}/none.py"),
    (["refresh", "--markdown", "{tmp}"], "--markdown: {tmp}: is a directory, expected a file to write"),
    (["refresh", "--markdown", "{tmp}/file.txt/x.md"], "--markdown: {tmp}/file.txt/x.md: {tmp}/file.txt is not"),
    (["refresh", "--device", "tpu"], "--device: invalid choice: 'tpu'"),
    (["refresh", "--time-limit", "0"], "--time-limit: must be more than 0 seconds, got 0"),
    (["refresh", "--time-limit", "soon"], "--time-limit: expected a number of seconds, got 'soon'"),
    (["prune"], "invalid choice: 'prune'"),
    (["classes", "cpu"], "unrecognized arguments: cpu"),
    (["pool", "{tmp}/gate.json", "{tmp}/gate.json"], "pooling needs at least 3 sessions' results files, got 2"),
    (["pool", "{tmp}/gate.json", "{tmp}/gate.json", "{tmp}/not-json.json"], "not-json.json"),
    (["pool", "{tmp}/gate.json", "{tmp}/gate.json", "{tmp}/gate.json"], "gate.json: its env names no package versions"),
    (["pool", "{tmp}/stack-1.json", "{tmp}/stack-1.json", "{tmp}/stack-2.json"], "ran different stacks (torch 1 vs 2)"),
    (["pool", "{tmp}/stack-1.json", "{tmp}/stack-2.json", "{tmp}/stack-1.json"], "different stacks"),
    (["pool", "{tmp}/stack-1.json", "{tmp}/stack-1b.json", "{tmp}/stack-1.json"], "stack-1.json are the same session"),
    (["pool", "{tmp}/stack-1.json", "{tmp}/stack-1b.json", "{tmp}/stack-1c.json"], "no baselines directory at"),
]
if not cuda_usable():  # the GPU tier asked for on a machine without one
    BASELINES.append((["refresh", "--device", "cuda", "--tests", "{tmp}/file.txt"], "--device cuda: torch sees no"))
    RUN.append((["--device", "cuda"], "--device cuda: torch sees no CUDA GPU here"))
    OVERHEAD.append((["--device", "cuda"], "--device cuda: torch sees no CUDA GPU here"))
HISTORY = [
    (["record", "{tmp}/other.json", "--dir", "{tmp}/history"], "other.json: case 0 has no"),
    (
        ["record", "{tmp}/ab.json", "--dir", "{tmp}/h"],
        "ab.json: a `perfsuite ab --json` file, which `perfsuite report`",
    ),
    (["record", "{tmp}/other.json", "--dir", "{tmp}/file.txt"], "--dir: {tmp}/file.txt: is a file"),
    (["record", "{tmp}/other.json", "--dir", "/proc/perfsuite"], "--dir: /proc/perfsuite: cannot write in /proc"),
    (["judge", "--dir", "{tmp}", "--markdown", "{tmp}/file.txt/v.md"], "{tmp}/file.txt is not a directory"),
    (["record", "{tmp}/other.json", "--dir", "{tmp}/h", "--night", "yesterday"], "expected a date YYYY-MM-DD"),
    (["judge", "--dir", "{tmp}/none"], "--dir: {tmp}/none: no such directory"),
    (["judge", "--dir", "{tmp}", "--results", "{tmp}/empty.json"], "empty.json: is empty"),
    (["judge", "--dir", "{tmp}", "--markdown", "{tmp}"], "--markdown: {tmp}: is a directory"),
    (["track", "--dir", "{tmp}/none", "--repo", "a/b"], "--dir: {tmp}/none: no such directory"),
    (["record", "{tmp}/case-int.json", "--dir", "{tmp}/h"], "case-int.json: cases[0]: case is 123 (int)"),
    (["record", "{tmp}/status-int.json", "--dir", "{tmp}/h"], "status-int.json: cases[0]: status is 5 (int)"),
    (["record", "{tmp}/records-str.json", "--dir", "{tmp}/h"], "records is 'oops' (str), not a list"),
    (["judge", "--dir", "{tmp}"], "no history records in {tmp}"),
    (["track", "--dir", "{tmp}", "--repo", "a/b", "--dry-run"], "no history records in {tmp}"),
    (["judge", "--dir", "{tmp}/history/good", "--results", "{tmp}/env-str.json"], "env is 'nope' (str)"),
    (["judge", "--dir", "{tmp}/history/good", "--results", "{tmp}/run.json"], "needs the gate's results"),
    # A missing file's hint names only the file these read: the gate's (a run's is refused above).
    (
        ["record", "{tmp}/lost.json", "--dir", "{tmp}/h"],
        "lost.json: no such results file; write one with `pytest --perfsuite-json {tmp}/lost.json`\n",
    ),
    (
        ["judge", "--dir", "{tmp}/history/good", "--results", "{tmp}/lost.json"],
        "`pytest --perfsuite-json {tmp}/lost.json`\n",
    ),
    (
        ["judge", "--dir", "{tmp}/history/good", "--markdown", "{tmp}/v.md", "--results", "{tmp}/case-int.json"],
        "case is 123",
    ),
]
INIT = [
    (["--dir", "{tmp}/none"], "--dir: {tmp}/none: no such directory"),
    (["--dir", "{tmp}/file.txt"], "--dir: {tmp}/file.txt: not a directory"),
]
AB = [
    # An option is spelled whole: a prefix becomes ambiguous the day another option starts the same way.
    (["--base", "current", "--cand", "current"], "unrecognized arguments: --cand current"),
    (["--own", ""], "--own: an empty revision; give BASE..HEAD"),
    (["--base-ref", " "], "--base-ref: an empty revision; give REF"),
    (["--base", "nothing", "--candidate", "current"], "--base 'nothing': neither an interpreter"),
    (["--base", "current", "--candidate", "{tmp}/none/python"], "--candidate '{tmp}/none/python': neither"),
    (["--base", "current", "--candidate", "{tmp}/file.txt"], "not executable; give a Python interpreter"),
    (["--base", "current", "--candidate", "{tmp}"], "a directory without bin/python"),
    (["--base", "current", "--candidate", "transformers=="], "'transformers==' is not a requirement"),
    (["--base", "current", "--candidate", "transformers==5.24.0,Transformers==5.23.0"], "pinned more than once"),
    (["--base", "", "--candidate", "current"], "--base is empty: give an interpreter"),
    (["--base", "current"], "the following arguments are required: --candidate"),
    ([], "are required: --base, --candidate (or --pins BASE..HEAD, --base-ref REF, --own BASE..HEAD)"),
    (["--base", "current", "--candidate", "current", "--floor", "2"], "--floor: 2 must lie in [0, 1)"),
    (["--base", "current", "--candidate", "current", "--alpha", "0"], "--alpha: must be above 0"),
    (["--base", "current", "--candidate", "current", "--alpha", "1"], "--alpha: 1 must lie in (0, 1) (0.05 is 5%)"),
    (["--base", "current", "--candidate", "current", "--pairs", "0"], "--pairs: must be at least 1, got 0"),
    (["--base", "current", "--candidate", "current", "--pairs", "6", "--max-pairs", "4"], "--max-pairs 4 is below"),
    (["--base", "current", "--candidate", "current", "--max-pairs", "6"], "--max-pairs 6 is below 7, the fewest"),
    (["--base", "current", "--candidate", "current", "--models", "bert-huge"], "unknown model 'bert-huge'"),
    (["--base", "current", "--candidate", "current", "--steps", "0"], "--steps: must be at least 1, got 0"),
    (["--base", "current", "--candidate", "current", "--loss-seeds", "1"], "--loss-seeds: must be 0, or 2 to 10"),
    (["--base", "current", "--candidate", "current", "--loss-seeds", "-1"], "--loss-seeds: must be at least 0"),
    (["--base", "current", "--candidate", "current", "--json", "{tmp}"], "--json: {tmp}: is a directory"),
    (["--base", "current", "--candidate", "current", "--json", "{tmp}/file.txt/a.json"], "file.txt is not a"),
    (["--base", "current", "--candidate", "current", "--strategies", ","], "--strategies: expected one or more"),
    (["--base", "current", "--candidate", "current", "--report", "{tmp}/file.txt"], "--report: {tmp}/file.txt: is"),
    (["--base", "current", "--candidate", "current", "--explain", "--no-explain"], "--no-explain: not allowed with"),
]
if not list(Path("/dev").glob("nvidia[0-9]*")):  # the sides' torch could see a GPU; no machine without one
    AB.append((["--base", "current", "--candidate", "current", "--device", "cuda"], "this machine has no NVIDIA GPU"))
BISECT = [
    (["transformers", "--good", "5.0.0", "--bad", "4.57.6", "--case", "tiny-gpt2-vanilla"], "wrong order"),
    (
        ["transformers", "--good", "4.57.6", "--bad", "5.0.0", "--case", "tiny-gpt2-vanilla", "--max-pairs", "3"],
        "below 7",
    ),
    (["transformers", "--good", "5.0.0", "--bad", "5.0.0", "--case", "tiny-gpt2-vanilla"], "are both 5.0.0"),
    (
        ["transformers", "--good", "five", "--bad", "5.0.0", "--case", "tiny-gpt2-vanilla"],
        "--good 'five' is not a version",
    ),
    (["transformers", "--good", "4.57.6", "--bad", "5.0.0", "--case", "tiny-nope"], "'tiny-nope' is not a case id"),
    (["transformers", "--good", "4.57.6", "--bad", "5.0.0", "--case", "tiny-bert-vanila"], "valid: vanilla, fp16"),
    (["transformers", "--good", "4.57.6", "--bad", "5.0.0", "--case", "tiny-bert-vanilla-ws2"], "combine it with"),
    (
        ["transformers", "--good", "4.57.6", "--bad", "5.0.0", "--case", "tiny-bert-ddp-trainer-ws2"],
        "did you mean 'tiny-bert-ddp-ws2-trainer'?",
    ),
    (["transformers", "--good", "4.57.6", "--bad", "5.0.0", "--case", "c", "--metric", "speed"], "invalid choice"),
    (["transformers", "--good", "4.57.6", "--bad", "5.0.0", "--case", "c", "--threads", "0"], "--threads: must be"),
    (["transformers", "--good", "4.57.6"], "the following arguments are required: --bad, --case"),
    (
        ["--good", "4.57.6", "--bad", "5.0.0", "--case", "c"],
        "name the package to bisect, or give --own to bisect the project's commits\n",
    ),
    (["transformers", "--own", "--good", "a", "--bad", "b", "--case", "c"], "the project's commits, not both\n"),
    (["--own", "--good", "a", "--bad", "b", "--case", "c", "--pre"], "--pre adds a package's pre-releases"),
    (
        ["transformers", "--good", "4.57.6", "--bad", "5.0.0", "--case", "tiny-bert-vanilla"]
        + ["--with", "transformers<5"],
        "--with holds transformers, the package bisected",
    ),
]
_COMMENTING = ["--artifact", "{tmp}", "--workflow", "w.yml", "--repo", "o/r"]
COMMENT = [
    (["--workflow", "w.yml"], "the following arguments are required: --artifact"),
    (
        ["--artifact", "{tmp}", "--workflow", "w.yml", "--event", "{tmp}/none.json", "--repo", "o/r"],
        "none.json: cannot read the event file (No such file or directory)",
    ),
    (
        ["--artifact", "{tmp}", "--workflow", "w.yml", "--event", "{tmp}/not-json.json", "--repo", "o/r"],
        "not-json.json is",
    ),
    (
        ["--artifact", "{tmp}", "--workflow", "w.yml", "--event", "{tmp}/list.json", "--repo", "o/r"],
        "not a workflow_run",
    ),
    # The event is data: each field read is checked (a head commit goes into API paths)
    (["--event", "{tmp}/ev-int.json", *_COMMENTING], "ev-int.json: workflow_run is not an object naming its event"),
    (["--event", "{tmp}/ev-nosha.json", "--stale-on", "w.yml", *_COMMENTING], "workflow_run has no 'head_sha'"),
    (["--event", "{tmp}/ev-path.json", *_COMMENTING], "ev-path.json: workflow_run.path is ['x'], not a string"),
    (["--event", "{tmp}/ev-sha.json", *_COMMENTING], "ev-sha.json: workflow_run.head_sha is '../x', not a commit"),
]
CASES = [
    *((["ab", *a], m) for a, m in AB),
    *((["comment", *a], m) for a, m in COMMENT),
    *((["bisect", *a], m) for a, m in BISECT),
    *((["run", *a], m) for a, m in RUN),
    *((["overhead", *a], m) for a, m in OVERHEAD),
    *((["report", *a], m) for a, m in REPORT),
    *((["merge", *a], m) for a, m in MERGE),
    *((["baselines", *a], m) for a, m in BASELINES),
    *((["history", *a], m) for a, m in HISTORY),
    *((["init", *a], m) for a, m in INIT),
    (["frobnicate"], "invalid choice: 'frobnicate'"),
]


def _gate(changes: dict[str, object] | None = None, **case: object) -> str:
    """A ``pytest --perfsuite-json`` file of one passed case, ``case`` changed in it and ``changes`` in the file."""
    outcome = {"case": "tiny-bert-vanilla", "status": "passed", "checks": [], "records": []} | case
    return json.dumps({"schema_version": 2, "refresh": False, "env": {}, "cases": [outcome]} | (changes or {}))


_RECORD = {"model": "tiny-bert", "strategy": "vanilla", "status": "ok", "step_time_s": {"median": 0.1}}
_NIGHT = {"schema_version": 1, "night": "2026-01-01", "commit": "abc1234", "cases": {}}
_NIGHT |= {"fingerprint": {"machine": "m"}, "fingerprint_id": "m@1"}
_EVENT = {"event": "pull_request", "path": "w.yml", "head_sha": "a" * 40, "html_url": "https://x"}
INPUTS = {
    "empty.json": "",
    "ab.json": json.dumps({"kind": "perfsuite-ab", "cases": []}),
    "not-json.json": "{",
    "other.json": json.dumps({"cases": [{"name": "x"}]}),
    "list.json": json.dumps([1, 2]),
    "ok-untimed.json": json.dumps({"cases": [{"model": "tiny-bert", "strategy": "vanilla", "status": "ok"}]}),
    "file.txt": "a file",
    "deep.json": '{"cases": ' + "[" * 700 + "]" * 700 + "}",  # JSON that json reads, past a walk's depth
    "gate.json": _gate(),
    "run.json": json.dumps({"schema_version": 1, "cases": [_RECORD]}),
    "stack-1.json": _gate({"env": {"versions": {"torch": "1"}}}),
    "stack-1b.json": _gate({"env": {"versions": {"torch": "1"}, "date": "2026-01-02"}}),
    "stack-1c.json": _gate({"env": {"versions": {"torch": "1"}, "date": "2026-01-03"}}),
    "stack-2.json": _gate({"env": {"versions": {"torch": "2"}}}),
    "case-int.json": _gate(case=123),
    "status-int.json": _gate(status=5),
    "status-weird.json": _gate(status="weird"),
    "checks-str.json": _gate(checks="x"),
    "tolerance-half.json": _gate(tolerance={"loss_atol": 1e-4}),
    "records-str.json": _gate(records="oops"),
    "env-str.json": _gate({"env": "nope"}),
    "schema-99.json": _gate({"schema_version": 99}),
    "schema-two.json": _gate({"schema_version": "two"}),
    "nan.json": _gate(records=[_RECORD | {"step_time_s": {"median": float("nan")}}]),
    "huge.json": json.dumps({"cases": [_RECORD | {"peak_memory_bytes": 10**400}]}),
    "history/good/m/2026-01-01_abc1234.json": json.dumps(_NIGHT),
    "history/trunc/m/2026-01-01_abc1234.json": json.dumps(_NIGHT)[:40],
    "ev-int.json": json.dumps({"workflow_run": 5}),
    "ev-nosha.json": json.dumps({"workflow_run": {k: v for k, v in _EVENT.items() if k != "head_sha"}}),
    "ev-path.json": json.dumps({"workflow_run": _EVENT | {"path": ["x"]}}),
    "ev-sha.json": json.dumps({"workflow_run": _EVENT | {"head_sha": "../x"}}),
}


@pytest.mark.parametrize(("argv", "expected"), CASES, ids=lambda v: " ".join(v) if isinstance(v, list) else "")
def test_bad_input_is_one_line_and_exit_2(
    argv: list[str], expected: str, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)  # nothing may be written here, the working directory included

    def ran(*args: object, **kwargs: object) -> None:
        raise AssertionError(f"bad input got as far as running something: {args}")

    monkeypatch.setattr(process, "run_isolated", ran)
    monkeypatch.setattr(subprocess, "run", ran)
    monkeypatch.setattr(subprocess, "Popen", ran)
    inputs = tmp_path / "inputs"
    inputs.mkdir()
    for name, text in INPUTS.items():
        (inputs / name).parent.mkdir(parents=True, exist_ok=True)
        (inputs / name).write_text(text)
    before = sorted(p.name for p in tmp_path.rglob("*"))
    args = [a.replace("{tmp}", str(inputs)) for a in argv]
    code: object
    try:
        code = main(args)
    except SystemExit as exc:
        code = exc.code  # argparse's own refusals
    err = capsys.readouterr().err
    assert code == 2, err
    assert "Traceback" not in err
    assert err.count("\n") == 1, err
    assert err.startswith("perfsuite: error: ")
    assert expected.replace("{tmp}", str(inputs)) in err
    assert sorted(p.name for p in tmp_path.rglob("*")) == before  # nothing written


@pytest.mark.skipif(cuda_usable(), reason="on a GPU machine the GPU tier runs")
def test_selecting_the_gpu_tier_without_a_gpu_fails_unless_skips_are_asked_for(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(
        test_tier="""
        import pytest

        @pytest.mark.gpu
        def test_on_a_gpu():
            pass
        """
    )
    refused = pytester.runpytest("-m", "gpu", "-p", "no:cacheprovider")
    assert refused.ret == pytest.ExitCode.USAGE_ERROR
    refused.stderr.fnmatch_lines(["*the GPU tier is selected (-m gpu) but torch sees no CUDA GPU here*"])
    skipped = pytester.runpytest("-m", "gpu", "--perfsuite-no-gpu=skip", "-p", "no:cacheprovider")
    skipped.assert_outcomes(skipped=1)
    left_in = pytester.runpytest("-p", "no:cacheprovider")  # the tier not asked for: skipped as before
    left_in.assert_outcomes(skipped=1)
    compared = pytester.runpytest("-m", "gpu", "--benchmark-compare", "-p", "no:cacheprovider")
    assert compared.ret == pytest.ExitCode.USAGE_ERROR  # what is wrong, not the CPU's missing pinned file
    compared.stderr.fnmatch_lines(["*the GPU tier is selected (-m gpu) but torch sees no CUDA GPU here*"])


class _Session:
    """A refresh's pytest session that exits with ``code`` (``subprocess.Popen``'s stand-in)."""

    def __init__(self, code: int) -> None:
        self.code = code
        self.started: list[list[str]] = []

    def __call__(self, argv: list[str], **kwargs: object) -> _Session:
        self.started.append(argv)
        return self

    def wait(self, timeout: float | None = None) -> int:
        return self.code


@pytest.mark.parametrize(
    ("argv", "code", "expected"),
    [
        (["-k", "nothing"], pytest.ExitCode.NO_TESTS_COLLECTED, "nothing to refresh: -k 'nothing' selects no case"),
        (["--scope", "weekly"], pytest.ExitCode.NO_TESTS_COLLECTED, "nothing to refresh: --scope weekly selects"),
        (["--", "-k", "nope"], pytest.ExitCode.NO_TESTS_COLLECTED, "nothing to refresh: -- -k nope selects no case"),
        (["--", "--no-such-option"], pytest.ExitCode.USAGE_ERROR, None),  # pytest has said what is wrong
        (["-k", "bert"], pytest.ExitCode.TESTS_FAILED, None),  # a refused case: the session's own exit code
    ],
)
def test_a_refresh_that_selects_nothing_or_misuses_pytest_is_bad_input(
    argv: list[str],
    code: int,
    expected: str | None,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.chdir(Path(__file__).parents[1])  # the repository's matrix test
    session = _Session(code)
    monkeypatch.setattr(subprocess, "Popen", session)
    exit_code = main(["baselines", "refresh", "--device", "cpu", *argv])
    err = capsys.readouterr().err
    if code == pytest.ExitCode.NO_TESTS_COLLECTED:  # told by a quiet collection: no refresh session, no header
        (collected,) = session.started
        assert "--collect-only" in collected
        assert "--perfsuite-refresh" not in collected
    if code == pytest.ExitCode.TESTS_FAILED:
        assert exit_code == code
        assert not err
        return
    assert exit_code == 2
    if expected is None:
        assert not err
    else:
        assert err.count("\n") == 1, err
        assert err.startswith(f"perfsuite: error: {expected}"), err


@pytest.mark.parametrize(
    ("absent", "said"),
    [({"pytest"}, "pytest is"), ({"pytest", "pytest_benchmark"}, "pytest and pytest-benchmark are")],
)
def test_a_refresh_without_pytest_installed_names_the_extra(
    absent: set[str], said: str, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    find_spec = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name in absent else find_spec(name, *a))
    monkeypatch.setattr(subprocess, "Popen", _Session(0))
    assert main(["baselines", "refresh", "--device", "cpu"]) == 2
    err = capsys.readouterr().err
    assert err == (
        f"perfsuite: error: a refresh runs the matrix test under pytest, and {said} not installed here: "
        "pip install 'perfsuite[pytest]'\n"
    )


def test_a_refresh_session_that_runs_no_case_ends_without_a_traceback(pytester: pytest.Pytester) -> None:
    """pytest-benchmark says it saved nothing when a session it was asked to write JSON for ran no
    benchmark; where warnings are errors (this repository's pytest settings) that was a traceback."""
    pytester.makeini("[pytest]\nfilterwarnings = error\n")
    pytester.makepyfile(
        test_tier="""
        import pytest

        @pytest.mark.cpu
        def test_a_case():
            pass
        """
    )
    result = pytester.runpytest("--perfsuite-refresh", "-k", "nothing", "-p", "no:cacheprovider")
    assert result.ret == pytest.ExitCode.NO_TESTS_COLLECTED
    assert "Traceback" not in result.stdout.str() + result.stderr.str()


def test_a_dataset_name_is_taken_where_a_cache_holds_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """``--dataset NAME`` is checked before any case runs: a local directory, or a name the hub cache or
    ``datasets``' own cache holds, as ``datasets`` names its directories (``ns___name`` in snake case)."""
    from perfsuite.cli.selection import _cached_dataset

    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    for variable in ("HF_HUB_CACHE", "HF_DATASETS_CACHE"):
        monkeypatch.delenv(variable, raising=False)
    assert not _cached_dataset("acme/ReviewSet")
    (tmp_path / "hf" / "datasets" / "acme___review_set").mkdir(parents=True)
    assert _cached_dataset("acme/ReviewSet")
    assert not _cached_dataset("imdb")
    (tmp_path / "hf" / "hub" / "datasets--imdb").mkdir(parents=True)
    assert _cached_dataset("imdb")
    assert _cached_dataset(str(tmp_path))  # a directory load_dataset reads
