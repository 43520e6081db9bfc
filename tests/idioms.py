"""The differential corpus: shell and Python actions as agents write them in a src-layout project, with broken twins.

Each template is instantiated on several rows of real names of the workspace `build_workspace` makes
(a module, a symbol in it, files, a directory, a test). ``<key>`` is the row's value; ``<!key>`` is the
row's value in the valid action and a missing one (``_nope`` added) in its broken twin, so every twin
carries exactly one false precondition. A template given as a pair spells the twin out. The test runs
every action for real in a throwaway copy: a valid one exits 0, its twin does not.
"""

from __future__ import annotations

import os
import re
import stat
from dataclasses import dataclass
from pathlib import Path

__all__ = ["ROWS", "TEMPLATES", "Idiom", "build_workspace", "idioms"]

ROWS: list[dict[str, str]] = [
    {"mod": "pkg.core", "top": "pkg", "name": "Engine", "file": "data/a.txt", "file2": "data/b.txt", "stem": "a",
     "stem2": "b", "dir": "data", "test": "tests/test_core.py::test_engine", "script": "scripts/show.py",
     "list": "lists/ab.txt", "tool": "greet", "pyfile": "src/pkg/core.py"},
    {"mod": "pkg.util", "top": "pkg", "name": "helper", "file": "data/b.txt", "file2": "data/c.txt", "stem": "b",
     "stem2": "c", "dir": "docs", "test": "tests/test_core.py::TestThing::test_a", "script": "scripts/count.py",
     "list": "lists/bc.txt", "tool": "hello", "pyfile": "src/pkg/util.py"},
    {"mod": "pkg.io.reader", "top": "pkg", "name": "read_all", "file": "docs/guide.md", "file2": "data/a.txt",
     "stem": "c", "stem2": "a", "dir": "src/pkg", "test": "tests/test_util.py::test_helper",
     "script": "scripts/show.py", "list": "lists/docs.txt", "tool": "greet", "pyfile": "src/pkg/io/reader.py"},
    {"mod": "pkg", "top": "pkg", "name": "VERSION", "file": "src/pkg/core.py", "file2": "docs/guide.md",
     "stem": "b", "stem2": "a", "dir": "tests", "test": "tests/test_util.py::TestMore::test_b",
     "script": "scripts/count.py", "list": "lists/ab.txt", "tool": "hello", "pyfile": "src/pkg/__init__.py"},
    {"mod": "tools_mod", "top": "tools_mod", "name": "tool_fn", "file": "config/settings.ini",
     "file2": "data/c.txt", "stem": "c", "stem2": "b", "dir": "config", "test": "tests/test_core.py::test_version",
     "script": "scripts/show.py", "list": "lists/bc.txt", "tool": "greet", "pyfile": "src/tools_mod.py"},
]

_FILES = {
    "src/pkg/__init__.py": "VERSION = '1.0'\nfrom pkg.core import Engine\n",
    "src/pkg/__main__.py": "print('pkg main')\n",
    "src/pkg/core.py": "class Engine:\n    def run(self):\n        return 1\n\n\ndef run():\n    return Engine().run()\n",
    "src/pkg/util.py": "def helper():\n    return 2\n",
    "src/pkg/io/__init__.py": "",
    "src/pkg/io/reader.py": "def read_all(path):\n    return open(path).read()\n",
    "src/tools_mod.py": "def tool_fn():\n    return 3\n",
    "data/a.txt": "alpha\nEngine line\n", "data/b.txt": "beta\n", "data/c.txt": "gamma\n",
    "docs/guide.md": "# Guide\n", "config/settings.ini": "[main]\nkey = 1\n",
    "lists/ab.txt": "data/a.txt\ndata/b.txt\n", "lists/bc.txt": "data/b.txt\ndata/c.txt\n",
    "lists/docs.txt": "docs/guide.md\n",
    "tests/test_core.py": "def test_engine():\n    pass\n\n\ndef test_version():\n    pass\n\n\n"
                          "class TestThing:\n    def test_a(self):\n        pass\n",
    "tests/test_util.py": "def test_helper():\n    pass\n\n\nclass TestMore:\n    def test_b(self):\n        pass\n",
    "scripts/show.py": "import sys\nprint('show', sys.argv[1:])\n",
    "scripts/count.py": "print(len('abc'))\n",
    "scripts/greet": "#!/bin/sh\necho greet\n", "scripts/hello": "#!/bin/sh\necho hello\n",
    "env.sh": "export PYTHONPATH=src\n", "Makefile": "hello:\n\t@echo hello\n",
    "data.json": '{"a": 1}\n', "setup.cfg": "[metadata]\nname = pkg\n",
}

# (valid template, or (valid, broken)); placeholders as the module docstring says.
TEMPLATES: list[str | tuple[str, str]] = [
    # --- environment carried forward: export, env, VAR=x, $PWD, $(pwd), source
    "export PYTHONPATH=src && python -c 'import <!mod>'",
    "export PYTHONPATH=src; python -c 'from <mod> import <!name>'",
    "export PYTHONPATH=$PWD/src; cd <dir> && python -c 'import <!mod>'",
    "env PYTHONPATH=src python -c 'import <!mod>'",
    "env PYTHONPATH=src python -c 'from <mod> import <!name>'",
    "env -u PYTHONHOME PYTHONPATH=src python -c 'import <!mod>'",
    "PYTHONPATH=src python -c 'from <mod> import <!name>'",
    "PYTHONPATH=src:$PYTHONPATH python -c 'import <!mod>'",
    "export PYTHONPATH=\"${PWD}/src\" && python -c 'import <!mod>'",
    "export PYTHONPATH=$(pwd)/src && python -c 'import <!mod>'",
    "SRC=src; PYTHONPATH=$SRC python -c 'import <!mod>'",
    "source env.sh && python -c 'import <!mod>'",
    ". ./env.sh; python -c 'from <mod> import <!name>'",
    "cd src && python -c 'import <!mod>'",
    "cd src; python -m <!top> > /dev/null",
    # --- the Python environment inside the code
    "python -c \"import sys; sys.path.insert(0, 'src'); import <!mod>\"",
    "python -c \"import sys; sys.path.append('src'); from <mod> import <!name>\"",
    "python -c \"import site; site.addsitedir('src'); import <!mod>\"",
    "python -c \"import os, sys; sys.path.insert(0, os.path.join(os.getcwd(), 'src')); import <!mod>\"",
    "python -c \"import os, sys; sys.path.insert(0, os.path.abspath('src')); from <mod> import <!name>\"",
    "python -c \"import os; os.chdir('src'); import <!mod>\"",
    "python -c \"import importlib, sys; sys.path.insert(0, 'src'); importlib.import_module('<!mod>')\"",
    "python - <<'EOF'\nimport sys\nsys.path.insert(0, 'src')\nfrom <mod> import <!name>\nprint(<name>)\nEOF",
    "PYTHONPATH=src python - <<'EOF'\nimport <!mod>\nEOF",
    "python -c 'import typing\nif typing.TYPE_CHECKING:\n    import nothere_mod_zz\nimport os' && cat <!file>",
    "python -c 'try:\n    import yaml_nope_zz\nexcept ImportError:\n    yaml_nope_zz = None\nimport os' && cat <!file>",
    ("cat <!file> && python -c \"import os\nos.environ['PYTHONPATH'] = 'src'\nimport subprocess, sys\n"
     "subprocess.run([sys.executable, '-c', 'import <mod>'], check=True)\""),
    # --- modules, files and scripts written earlier in the same command
    "cat > src/extra_mod.py <<'EOF'\nX = 1\nEOF\nPYTHONPATH=src python -c 'import extra_mod, <!mod>'",
    "printf 'import <!mod>\\n' > check_imp.py && PYTHONPATH=src python check_imp.py",
    "echo 'from <mod> import <!name>' > chk.py && PYTHONPATH=src python chk.py",
    "cat > run_tmp.py <<'EOF'\nimport sys\nsys.path.insert(0, 'src')\nimport <!mod>\nEOF\npython run_tmp.py",
    "echo hi > out_tmp.txt && cat out_tmp.txt <!file>",
    "cat <<EOF > notes_tmp.txt\nhello\nEOF\ncat notes_tmp.txt <!file>",
    "mkdir -p build/x && cd build/x && touch a.txt && cat a.txt && cat ../../<!file>",
    "cp <!file> copy_tmp.txt && cat copy_tmp.txt",
    ("cp <file> t1.txt && mv t1.txt t2.txt && cat t2.txt", "cp <file> t1.txt && mv t1.txt t2.txt && cat t1.txt"),
    ("touch g_<stem>.txt && rm g_<stem>.txt && ls <dir>", "touch g_<stem>.txt && rm g_<stem>.txt && cat g_<stem>.txt"),
    # --- brace expansion, globs, arrays and loops
    "cat data/{<stem>,<!stem2>}.txt",
    "ls data/{<stem>,<!stem2>}.txt",
    "cat data/<stem>.{txt,txt} <!file>",
    "cat data/*.txt <!file>",
    "ls <dir>/* > /dev/null && cat <!file>",
    "for f in data/*.txt; do cat \"$f\"; done; cat <!file>",
    "for f in <file> <!file2>; do wc -l \"$f\"; done",
    "for m in <mod> <!top>; do PYTHONPATH=src python -c \"import $m\"; done",
    "files=(<file> <!file2>); cat \"${files[@]}\"",
    "files=(<file> <file2>); for f in \"${files[@]}\"; do head -n 1 \"$f\"; done; cat <!file>",
    "target=<file>; cat \"$target\" $(echo) && cat <!file2>",
    "d=<!dir>; ls \"$d\"",
    "name=<stem>; cat data/${name}.txt <!file>",
    "ls *.nope_zz 2>/dev/null | wc -l; cat <!file>",
    # --- process and command substitution
    "cat <(echo hi) <!file>",
    "diff <(sort <file>) <(sort <!file>)",
    "wc -l <(cat <file>) && cat <!file>",
    "x=$(cat <!file>) && echo \"$x\"",
    "echo \"$(wc -l < <!file>)\"; cat <!file>",
    "cat \"$(pwd)/<!file>\"",
    "ls \"$PWD/<!dir>\"",
    # --- prefixes and wrappers
    "cd src && nice -n 5 python -c 'import <!mod>'",
    "cd src && exec python -c 'import <!mod>'",
    "time ( cd src && python -c 'import <!mod>' )",
    "timeout 60 env PYTHONPATH=src python -c 'import <!mod>'",
    "timeout -s KILL 30 cat <!file>",
    "builtin cd src && python -c 'import <!mod>'",
    "command cat <!file>",
    "stdbuf -oL cat <!file>",
    "nohup cat <!file> > /dev/null 2>&1",
    "env cat <!file>",
    # --- xargs and find -exec
    "xargs -a <!list> cat",
    "xargs --arg-file=<!list> wc -l",
    "xargs -a <list> -I{} cat {}; cat <!file>",
    "cat <list> | xargs -n 1 wc -l; cat <!file>",
    "xargs cat < <!list>",
    "find <dir> -type f -exec wc -l {} \\; ; cat <!file>",
    "find <dir> -name '*.nope_zz' -exec cat {} +; ls <!dir>",
    "find <!dir> -maxdepth 1 -type f",
    # --- conditional is not necessary
    "test -f missing_zz.txt && cat missing_zz.txt; cat <!file>",
    "[ -f missing_zz.txt ] && cat missing_zz.txt || echo none; cat <!file>",
    "[[ -d missing_zz ]] && ls missing_zz; ls <!dir>",
    "test -f <file> && cat <file>; ls <!dir>",
    "if [ -f missing_zz.cfg ]; then cat missing_zz.cfg; fi; cat <!file>",
    "if [ -d <dir> ]; then ls <dir>; else echo none; fi; cat <!file>",
    "if python -c 'import yaml_nope_zz' 2>/dev/null; then echo y; else echo n; fi; cat <!file>",
    "cat <!file> && { command -v nosuchtool_zz && nosuchtool_zz --version; true; }",
    "which nosuchtool_zz >/dev/null || echo 'no tool'; cat <!file>",
    "ls missing_zz 2>/dev/null || echo missing; cat <!file>",
    "grep -q Engine data/a.txt && echo found; ls <!dir>",
    "cat missing_zz.txt 2>/dev/null || true; cat <!file>",
    "cat <!file> && { nosuchtool_zz 2>/dev/null || echo fallback; }",
    "cat <!file> && { cat <file> || nosuchtool_zz; }",
    "grep -rn nothing_zz <dir> || true; cat <!file>",
    "while read -r f; do cat \"$f\"; done < <!list>",
    "case x in x) cat <!file>;; y) cat missing_zz;; esac",
    "case <stem> in zz) cat missing_zz;; *) cat <!file>;; esac",
    "! grep -q nothing_zz <file>; cat <!file>",
    # --- functions, aliases, subshells, directory stack
    "show() { cat \"$1\"; }; show <!file>",
    "f() { cd src && python -c 'import <!mod>'; }; f",
    "check() { PYTHONPATH=src python -c \"import $1\"; }; check <!mod>",
    "shopt -s expand_aliases\nalias ll='ls -la'\nll <!dir>",
    "(cd <dir> && ls) && cat <!file>",
    "pushd <dir> >/dev/null && ls && popd >/dev/null && cat <!file>",
    "pushd src > /dev/null && python -c 'import <!mod>' && popd > /dev/null",
    "cd <dir> && cd - >/dev/null && cat <!file>",
    "bash -c 'cat <!file>'",
    "bash -c \"cd src && python -c 'import <!mod>'\"",
    "sh -c 'ls <!dir>'",
    # --- PATH this action extends
    "export PATH=\"$PWD/scripts:$PATH\" && <!tool>",
    "PATH=$PWD/scripts:$PATH <!tool>",
    "export PATH=$(pwd)/scripts:$PATH; <!tool> > /dev/null",
    # --- commands and their options
    "stat -c %s <!file>",
    "stat --format=%n <!file>",
    "head -c 10 <!file>",
    "tail -n 2 <!file>",
    "wc -c < <!file>",
    "awk '{print $1}' <!file>",
    "sed -n 1p <!file>",
    "cut -c1-3 <!file>",
    "tr a-z A-Z < <!file>",
    "set -o pipefail; sort <!file> | uniq -c | sort -rn | head -n 3",
    "grep -c . <!file>",
    "grep -rn . <!dir> > /dev/null",
    "ls -la <!dir> > /dev/null",
    "du -sh <!dir>",
    "python <!script>",
    "python <!script> --flag value",
    "PYTHONPATH=src python -m pytest --collect-only -q -p no:cacheprovider <!test>",
    "python -m pytest --collect-only -q -p no:cacheprovider <!test> 2>/dev/null",
    "cat <!file> && make -f Makefile hello",
    "ls <!dir> && make -C . hello >/dev/null",
    "git -C <dir> --version >/dev/null; cat <!file>",
    "jq . data.json > /dev/null && cat <!file>",
    "python -m json.tool data.json > /dev/null && cat <!file>",
    "cat <file> | head -n 1 ; head -n 1 <!file2>",
    "echo <file> | xargs cat; cat <!file>",
    "cd <dir> && ls -1 | head -n 3; cd \"$OLDPWD\" && cat <!file>",
]

_WORD = re.compile(r"<(!?)([a-z0-9]+)>")


def _broken(key: str, value: str) -> str:
    if key in ("mod", "top"):
        return value + "_nope"
    if key in ("name", "tool", "stem", "stem2"):
        return value + "_nope"
    if key == "test":
        return value + "_nope"
    stem, dot, suffix = value.rpartition(".")
    return f"{stem}_nope.{suffix}" if dot and "/" not in suffix else value + "_nope"


@dataclass(frozen=True)
class Idiom:
    """One valid action (as an action dict) and its broken twin."""

    template: str
    valid: dict[str, str]
    broken: dict[str, str]


def _fill(template: str, row: dict[str, str], *, broken: bool) -> str:
    def value(match: re.Match[str]) -> str:
        key = match.group(2)
        plain = row[key]
        return _broken(key, plain) if broken and match.group(1) else plain

    return _WORD.sub(value, template)


def _action(text: str) -> dict[str, str]:
    return {"kind": "shell", "command": text}


def idioms(tools: frozenset[str] = frozenset({"make", "git", "jq"}), rows: int = len(ROWS)) -> list[Idiom]:
    """Every template on the first `rows` rows (the valid and broken texts deduplicated), skipping those that need
    a program not in `tools`."""
    seen: set[str] = set()
    out: list[Idiom] = []
    for template in TEMPLATES:
        valid_t, broken_t = template if isinstance(template, tuple) else (template, template)
        if any(re.search(rf"(^|[;&|(\s]){tool}\s", valid_t) for tool in ("make", "git", "jq") if tool not in tools):
            continue
        for row in ROWS[:rows]:
            valid = _fill(valid_t, row, broken=False)
            broken = _fill(broken_t, row, broken=isinstance(template, str))
            if valid in seen or valid == broken:
                continue
            seen.add(valid)
            out.append(Idiom(valid_t, _action(valid), _action(broken)))
            if "<" not in valid_t.replace("<<", "").replace("< ", ""):
                break  # nothing of the row in it: one instance is enough
    # The same Python-level idioms as Python actions (the code itself, run with the workspace as cwd).
    python_templates = [
        "import sys\nsys.path.insert(0, 'src')\nimport <!mod>",
        "import sys, os\nsys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath('x')), 'src'))\n"
        "from <mod> import <!name>",
        "import site\nsite.addsitedir('src')\nfrom <mod> import <!name>",
        "import os, sys\nos.chdir('src')\nsys.path.insert(0, os.getcwd())\nimport <!mod>",
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    import nothere_zz\nprint(open('<!file>').read())",
    ]
    for template in python_templates:
        for row in ROWS[:rows]:
            valid = _fill(template, row, broken=False)
            if valid in seen:
                continue
            seen.add(valid)
            out.append(Idiom(template, {"kind": "python", "code": valid},
                             {"kind": "python", "code": _fill(template, row, broken=True)}))
    return out


def build_workspace(root: Path) -> Path:
    """The src-layout project the corpus names (written fresh under `root`)."""
    for relative, text in _FILES.items():
        path = root / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    for tool in ("scripts/greet", "scripts/hello"):
        path = root / tool
        path.chmod(path.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
    return root


def run_env(python: str, home: str) -> dict[str, str]:
    """The environment an action runs in: the target interpreter first on PATH, nothing of this process's."""
    return {"PATH": os.pathsep.join([os.path.dirname(python), "/usr/local/bin", "/usr/bin", "/bin"]),
            "HOME": home, "LC_ALL": "C.UTF-8", "PYTHONDONTWRITEBYTECODE": "1"}
