"""A package built from one commit of its local clone, as an overlay: what ``perfsuite bisect
--repo`` compares, commit by commit, between the last good and the first bad release.

The commit's files are written out (``git archive``, no ``.git``), built and installed without
dependencies (``uv pip install --no-deps --target``) into a cache directory keyed by the package,
the commit and the interpreter, and laid over a base side: the last good release's overlay, so
that the commit runs beside the dependencies that release resolved to. Where the package allows a
pure-Python build it gets one (DeepSpeed's ops unbuilt, ``DS_BUILD_OPS=0``: they are built at
first use, as a release's are). A commit that cannot be built, or whose package does not import,
is a side that cannot be tested, stepped around as ``git bisect skip`` would. A build is reused
only while its files match the hashes recorded when it was made (:func:`perfsuite.ab.envs.intact`).
"""

from __future__ import annotations

import dataclasses
import hashlib
import sys
import tempfile
from importlib import metadata
from pathlib import Path

from packaging.utils import canonicalize_name

from perfsuite.ab import commits
from perfsuite.ab.envs import Env, EnvError, install_into, intact
from perfsuite.core.cache import cache_root

PURE_BUILD = {"deepspeed": {"DS_BUILD_OPS": "0"}}
"""Per package, what its build is told so that it compiles nothing ahead (its ops build at first use)."""

TAG_FORMS = ("v{version}", "{version}", "{package}-{version}", "{package}-v{version}", "{package}_v{version}")
"""How projects tag a release, tried in this order."""


def release_tag(repo: Path, package: str, version: str, what: str) -> commits.Commit:
    """The commit a release's tag names in the clone; a :class:`~perfsuite.ab.commits.GitError` when none does."""
    for form in TAG_FORMS:
        tag = form.format(package=package, version=version)
        done = commits.git(repo, "rev-parse", "--verify", "--quiet", "--end-of-options", f"{tag}^{{commit}}", what=what)
        if done.returncode == 0:
            return commits.describe(repo, done.stdout.strip())
    tried = ", ".join(form.format(package=package, version=version) for form in TAG_FORMS)
    raise commits.GitError(f"{what}: {repo} has no tag for {package} {version} (tried {tried})")


def built_version(target: Path, package: str) -> str | None:
    """The version of ``package`` a build installed into ``target`` (its metadata), or ``None``."""
    for dist in metadata.distributions(path=[str(target)]):
        if canonicalize_name(dist.metadata["Name"] or "") == canonicalize_name(package):
            return dist.version
    return None


def commit_env(repo: Path, package: str, commit: commits.Commit, base: Env, what: str = "--repo") -> Env:
    """``package`` built from ``commit`` of its clone at ``repo``, over ``base``; an :class:`EnvError` when
    the commit cannot be built (the caller steps around it)."""
    key = hashlib.sha256(f"{sys.version}\n{canonicalize_name(package)}\n{commit.sha}".encode()).hexdigest()[:16]
    target = cache_root() / "builds" / key
    record = [f"{canonicalize_name(package)}@{commit.sha}"]
    label = f"{package} {commit.describe()}"
    if not intact(target, record):
        with tempfile.TemporaryDirectory(prefix="perfsuite-build-") as scratch:
            try:
                tree = commits.write_tree(repo, commit.sha, Path(scratch) / "tree", what)
            except commits.GitError as exc:
                raise EnvError(str(exc)) from None
            install_into(target, record, [str(tree)], label=label, environ=PURE_BUILD.get(canonicalize_name(package)))
    version = built_version(target, package)
    if version is None:
        raise EnvError(f"{label}: its build installed no {package}")
    # The public version: a build from a tree without git metadata labels it (0.16.9+unknown).
    pin = f"{canonicalize_name(package)}=={version.split('+')[0]}"
    return dataclasses.replace(
        base,
        label=label,
        path=(str(target), *base.path),
        pins=(pin,),
        moved=(pin, *(m for m in base.moved if not m.startswith(f"{canonicalize_name(package)}=="))),
    )
