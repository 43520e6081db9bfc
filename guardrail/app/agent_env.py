"""The agent's environment as a description (installed distributions and console scripts), for judging its actions.

An audit runs where the agent did not: the guard's own venv has other packages and commands than
the agent's sandbox. Given an interpreter (``--python``) the gate asks it for its import paths; given
only a description (a SWE-bench ``environment.yml``: conda ``dependencies`` with a ``pip:`` list, or
a plain ``{"python": "3.9", "distributions": [...], "console_scripts": [...]}``) the gate is pointed
at a stand-in made of empty marker files: one per declared top-level module (read as a compiled
module, so its names are unknown, never missing) and one per console script on a PATH of its own.
The markers are never run or imported; they only answer the gate's listings and stats.
"""

from __future__ import annotations

import json
import os
import re
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from guardrail.core.guard import Guard
from guardrail.gate.index import TargetPython
from guardrail.gate.layer import Gate
from guardrail.gate.scope import normalize_dist

__all__ = ["AgentEnvironment", "EnvironmentError_", "read_environment"]

MAX_ENV_BYTES = 4 << 20
# Console scripts a distribution installs under another name than its own (the rest are not guessed).
_SCRIPTS = {
    "pytest": ("pytest", "py.test"), "sphinx": ("sphinx-build", "sphinx-apidoc", "sphinx-quickstart"),
    "flake8": ("flake8",), "black": ("black",), "mypy": ("mypy", "dmypy", "stubgen"), "tox": ("tox",),
    "coverage": ("coverage",), "pylint": ("pylint",), "isort": ("isort",), "pre-commit": ("pre-commit",),
    "ipython": ("ipython",), "jupyter": ("jupyter",), "django": ("django-admin",), "setuptools": (),
    "pip": ("pip", "pip3"), "wheel": ("wheel",), "numpy": ("f2py",), "hypothesis": (),
}
# Module names of distributions that install under another import name than `normalize_dist` guesses.
_MODULES = {"pytest": ("pytest", "_pytest", "py"), "setuptools": ("setuptools", "pkg_resources", "_distutils_hack"),
            "scikit-image": ("skimage",), "pyqt5": ("PyQt5",), "pycryptodome": ("Crypto",), "dnspython": ("dns",),
            "pyopenssl": ("OpenSSL",), "python-dateutil": ("dateutil",), "matplotlib": ("matplotlib", "mpl_toolkits",
                                                                                         "pylab")}
_SYSTEM_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"


class EnvironmentError_(ValueError):  # noqa: N801 - not the builtin OSError alias
    """An environment description that cannot be read (not YAML/JSON, no dependency list)."""


@dataclass
class AgentEnvironment:
    """What the agent's environment had installed, as far as a description tells."""

    python_version: tuple[int, ...] | None = None
    distributions: dict[str, str | None] = field(default_factory=dict)  # name -> version (None when not pinned)
    console_scripts: set[str] = field(default_factory=set)
    source: str = ""

    def modules(self) -> set[str]:
        names: set[str] = set()
        for dist in self.distributions:
            key = dist.lower().replace("_", "-")
            names.update(_MODULES.get(key) or ((normalize_dist(dist) or ""),))
        return {n for n in names if n.isidentifier()}

    def scripts(self) -> set[str]:
        names = set(self.console_scripts) | {"python", "python3"}
        if self.python_version:
            names.add("python" + ".".join(str(v) for v in self.python_version[:2]))
        for dist in self.distributions:
            names.update(_SCRIPTS.get(dist.lower().replace("_", "-"), ()))
        return {n for n in names if re.fullmatch(r"[\w+-][\w.+-]*", n)}  # a plain file name: no "/", no ".."

    def apply(self, guard: Guard, workspace: str | os.PathLike[str], directory: str | os.PathLike[str]) -> int:
        """Point every gate of `guard` at this environment, with its markers under `directory`; the gates changed."""
        root = Path(directory)
        site, bin_dir = root / "site-packages", root / "bin"
        site.mkdir(parents=True, exist_ok=True)
        bin_dir.mkdir(parents=True, exist_ok=True)
        for module in self.modules():
            (site / f"{module}.so").touch()  # an empty "compiled module": present, its names unknown
        for script in self.scripts():
            marker = bin_dir / script
            marker.touch()
            marker.chmod(0o755)  # listed and stat'ed by the gate, never run
        version = tuple(self.python_version or sys.version_info[:3])
        target = TargetPython(
            executable=str(bin_dir / "python"),
            sys_path=(os.fspath(workspace), str(site)),
            builtins=frozenset(sys.builtin_module_names),
            stdlib=frozenset(getattr(sys, "stdlib_module_names", ())),  # not found as files: unknown, never missing
            version=(version + (0, 0, 0))[:3],  # type: ignore[arg-type]
            ext_suffixes=(".so",),
        )
        changed = 0
        for layer in guard.layers:
            gate = getattr(layer, "gate", None)
            if isinstance(gate, Gate):
                gate.use_target(target, path_env=os.pathsep.join([str(bin_dir), _SYSTEM_PATH]))
                changed += 1
        return changed


def _parse_spec(spec: str, separator: str) -> tuple[str, str | None] | None:
    text = spec.strip()
    if not text or text.startswith(("-", "#", "git+", "http", "/", ".")):
        return None
    name = re.split(r"[\s\[<>=!~;@]", text, maxsplit=1)[0]
    if not re.fullmatch(r"[A-Za-z0-9][\w.-]*", name):
        return None
    match = re.search(re.escape(separator) + r"\s*([\w.*+!-]+)", text)
    return name, match.group(1) if match else None


def read_environment(path: str | os.PathLike[str]) -> AgentEnvironment:
    """An environment description: a conda ``environment.yml`` (SWE-bench's) or a JSON/YAML object with
    ``python``, ``distributions`` (names or ``name==version``) and ``console_scripts``."""
    file = Path(path)
    try:
        if file.stat().st_size > MAX_ENV_BYTES:
            raise EnvironmentError_(f"{file}: larger than {MAX_ENV_BYTES} bytes")
        text = file.read_text(encoding="utf-8", errors="replace")
    except OSError as exc:
        raise EnvironmentError_(f"{file}: cannot read ({exc.strerror or exc})") from exc
    raw: Any
    try:
        raw = json.loads(text)
    except json.JSONDecodeError:
        try:
            import yaml
        except ImportError as exc:
            raise EnvironmentError_(f"{file}: not JSON, and reading YAML needs PyYAML (pip install 'guardrail[swe]')") \
                from exc
        try:
            raw = yaml.safe_load(text)
        except yaml.YAMLError as exc:
            raise EnvironmentError_(f"{file}: neither JSON nor YAML ({str(exc).splitlines()[0]})") from exc
    if not isinstance(raw, dict):
        raise EnvironmentError_(f"{file}: expected an object with 'dependencies' or 'distributions'")
    env = AgentEnvironment(source=str(file))
    conda = raw.get("dependencies")
    plain = raw.get("distributions")
    if not isinstance(conda, list) and not isinstance(plain, list):
        raise EnvironmentError_(f"{file}: no 'dependencies' (conda environment.yml) or 'distributions' list")
    for item in conda if isinstance(conda, list) else []:
        if isinstance(item, str) and (parsed := _parse_spec(item, "=")):
            env.distributions[parsed[0]] = parsed[1]
        elif isinstance(item, dict) and isinstance(item.get("pip"), list):
            for spec in item["pip"]:
                if isinstance(spec, str) and (parsed := _parse_spec(spec, "==")):
                    env.distributions[parsed[0]] = parsed[1]
    for spec in plain if isinstance(plain, list) else []:
        if isinstance(spec, str) and (parsed := _parse_spec(spec, "==")):
            env.distributions[parsed[0]] = parsed[1]
    python = raw.get("python") or env.distributions.pop("python", None)
    if isinstance(python, int | float | str):
        digits = re.findall(r"\d+", str(python))
        env.python_version = tuple(int(d) for d in digits[:3]) or None
    scripts = raw.get("console_scripts")
    env.console_scripts = {s for s in scripts if isinstance(s, str)} if isinstance(scripts, list) else set()
    return env


def temporary_environment_dir() -> tempfile.TemporaryDirectory[str]:
    return tempfile.TemporaryDirectory(prefix="guardrail-agent-env-")
