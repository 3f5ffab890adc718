"""Every command the README and docs/ show is one perfguard really takes.

The shell blocks of README.md and docs/*.md are read line by line: a `perfguard` command is
parsed by the real command-line parser (optional `[...]` parts included, placeholders filled
in), a `pytest` line may use only registered `--perfguard*` options, `make` only targets of
the Makefile, `pip install "perfguard[...]"` only extras of pyproject.toml, and
`benchmarks/*.py` only their own subcommands. The newcomer's path itself (`pip install`, then
`perfguard init`, then `pytest --perfguard`) is run end to end by `make package-check` in CI.
Machine set-up commands for a GPU runner (nvidia-smi, systemctl, ...) are not run here.
"""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest
import tomllib

from perfguard.cli import parse_args
from perfguard.pytest_plugin.options import OPTIONS

ROOT = Path(__file__).resolve().parent.parent
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
PLACEHOLDERS = {"N": "1", "OWNER/NAME": "octo/models", "LOGIN": "bot", "K/N": "1/2"}


def _commands() -> list[tuple[str, str]]:
    found = []
    for page in PAGES:
        for block in re.findall(r"```sh\n(.*?)```", page.read_text(encoding="utf-8"), re.S):
            for line in block.replace("\\\n", " ").splitlines():
                line = re.sub(r"\s+#.*$", "", line).strip()
                if line and not line.startswith("#"):
                    found.append((page.name, line))
    return found


COMMANDS = _commands()


def _words(line: str) -> list[str]:
    line = re.sub(r"(?<![\w\"])\[|\](?![\w\"])", "", line)  # [--opt X] -> --opt X
    return [PLACEHOLDERS.get(w, w) for w in shlex.split(line)]


def test_the_pages_show_commands() -> None:
    programs = {line.split()[0] for _, line in COMMANDS}
    assert {"perfguard", "pytest", "make", "pip"} <= programs


@pytest.mark.parametrize(
    ("page", "line"), [c for c in COMMANDS if c[1].startswith("perfguard ")], ids=str
)
def test_each_perfguard_command_parses(page: str, line: str) -> None:
    try:
        parse_args(_words(line)[1:])
    except Exception as exc:  # the parser raises InputError for a usage error
        raise AssertionError(f"{page}: `{line}` is not a valid command: {exc}") from None


def test_pytest_lines_use_only_registered_options() -> None:
    known = {"--perfguard", *(o.flag for o in OPTIONS)}
    for page, line in COMMANDS:
        if line.startswith("pytest "):
            for flag in re.findall(r"--perfguard[\w-]*", line):
                assert flag in known, f"{page}: `{line}` uses {flag}, which is not an option"


def test_make_targets_and_pip_extras_exist() -> None:
    targets = set(re.findall(r"^([\w-]+):", (ROOT / "Makefile").read_text(), re.M))
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    extras = set(project["optional-dependencies"])
    for page, line in COMMANDS:
        words = shlex.split(line)
        if words[0] == "make":
            assert set(words[1:]) <= targets, f"{page}: `{line}`: no such make target"
        if words[:2] == ["pip", "install"]:
            for word in words[2:]:
                if word.startswith("perfguard["):
                    wanted = set(word[len("perfguard[") : -1].split(","))
                    assert wanted <= extras, f"{page}: `{line}`: no such extra"


def test_benchmark_commands_name_their_own_subcommands() -> None:
    for page, line in COMMANDS:
        script = re.search(r"(benchmarks/\w+\.py)\s+([\w-]+)", line)
        if script:
            text = (ROOT / script.group(1)).read_text()
            assert f'"{script.group(2)}"' in text, f"{page}: `{line}`: no such subcommand"
