"""A GitHub Actions run of a workflow's job graph, played out without GitHub: which jobs and
steps run, and how each ends, for given step outcomes.

GitHub cannot run here, so the tests that prove a workflow's graph (main keeps every record
it measured, whatever its verdict) evaluate its `if:` conditions as GitHub does: the
expression language (literals, contexts, `!`, comparisons, `&&`, `||`, the status functions,
`hashFiles`, `contains`, `startsWith`, `fromJSON`), a condition without a status function
meaning `success() && (...)`, a job's `needs` results and outputs, a step's outputs and
outcome. What a step does is the test's to say: `Play` maps a step's id (or name) to the
outputs it writes and whether it fails.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

TOKEN = re.compile(
    r"\s*(?:(?P<str>'(?:[^']|'')*')|(?P<num>-?\d+(?:\.\d+)?)|(?P<op>==|!=|<=|>=|&&|\|\||[!<>(),\[\].])"
    r"|(?P<name>[A-Za-z_][A-Za-z0-9_-]*|\*))"
)
STATUS = ("success", "failure", "always", "cancelled")


def _tokens(text: str) -> list[tuple[str, str]]:
    out, pos = [], 0
    text = text.strip()
    while pos < len(text):
        m = TOKEN.match(text, pos)
        if m is None or m.end() == pos:
            raise ValueError(f"cannot read {text[pos:]!r} in {text!r}")
        kind = m.lastgroup or ""
        out.append((kind, m.group(kind)))
        pos = m.end()
    return out


def truthy(value: Any) -> bool:
    return value not in (None, False, 0, "", 0.0)


def _equal(a: Any, b: Any) -> bool:
    if isinstance(a, str) and isinstance(b, str):
        return bool(a.lower() == b.lower())
    return bool(a == b)


@dataclass
class _Parser:
    tokens: list[tuple[str, str]]
    context: Mapping[str, Any]
    functions: Mapping[str, Callable[..., Any]]
    pos: int = 0
    used_status: bool = False

    def peek(self) -> str:
        return self.tokens[self.pos][1] if self.pos < len(self.tokens) else ""

    def take(self, expected: str | None = None) -> tuple[str, str]:
        token = self.tokens[self.pos]
        if expected is not None and token[1] != expected:
            raise ValueError(f"expected {expected!r}, got {token[1]!r}")
        self.pos += 1
        return token

    def expression(self) -> Any:
        left = self.conjunction()
        while self.peek() == "||":
            self.take()
            right = self.conjunction()
            left = left if truthy(left) else right
        return left

    def conjunction(self) -> Any:
        left = self.comparison()
        while self.peek() == "&&":
            self.take()
            right = self.comparison()
            left = right if truthy(left) else left
        return left

    def comparison(self) -> Any:
        left = self.unary()
        while self.peek() in ("==", "!=", "<", ">", "<=", ">="):
            op = self.take()[1]
            right = self.unary()
            if op == "==":
                left = _equal(left, right)
            elif op == "!=":
                left = not _equal(left, right)
            else:
                left = {"<": left < right, ">": left > right, "<=": left <= right,
                        ">=": left >= right}[op]  # fmt: skip
        return left

    def unary(self) -> Any:
        if self.peek() == "!":
            self.take()
            return not truthy(self.unary())
        return self.primary()

    def primary(self) -> Any:
        kind, text = self.take()
        if text == "(":
            value = self.expression()
            self.take(")")
            return value
        if kind == "str":
            return text[1:-1].replace("''", "'")
        if kind == "num":
            return float(text)
        if text in ("true", "false"):
            return text == "true"
        if text == "null":
            return None
        if self.peek() == "(":  # a function call
            self.take("(")
            args = []
            while self.peek() != ")":
                args.append(self.expression())
                if self.peek() == ",":
                    self.take()
            self.take(")")
            if text in STATUS:
                self.used_status = True
            return self.functions[text](*args)
        found: Any = self.context.get(text)
        while self.peek() in (".", "["):
            if self.take()[1] == ".":
                key = self.take()[1]
            else:
                key = self.expression()
                self.take("]")
            found = found.get(key) if isinstance(found, Mapping) else None
        return found


def evaluate(
    text: str, context: Mapping[str, Any], functions: Mapping[str, Callable[..., Any]]
) -> tuple[Any, bool]:
    """The value of expression `text` (without `${{ }}`), and whether it called a status
    function."""
    parser = _Parser(_tokens(text), context, functions)
    value = parser.expression()
    if parser.pos != len(parser.tokens):
        raise ValueError(f"trailing {parser.peek()!r} in {text!r}")
    return value, parser.used_status


def condition(
    text: Any, context: Mapping[str, Any], functions: Mapping[str, Callable[..., Any]]
) -> bool:
    """Whether an `if:` holds, as GitHub reads it (no status function: `success() && ...`)."""
    if text is None:
        text = "success()"
    if isinstance(text, bool):
        return text and bool(functions["success"]())
    text = str(text).strip()
    if text.startswith("${{") and text.endswith("}}"):
        text = text[3:-2]
    value, used = evaluate(text, context, functions)
    if not used:
        return bool(functions["success"]()) and truthy(value)
    return truthy(value)


def _substitute(text: str, context: Mapping[str, Any], functions: Any) -> str:
    def one(m: re.Match[str]) -> str:
        value, _ = evaluate(m.group(1), context, functions)
        return "" if value is None else str(value)

    return re.sub(r"\$\{\{(.*?)\}\}", one, text)


@dataclass
class Step:
    """What a step does when it runs: the outputs it writes, whether it fails."""

    outputs: Mapping[str, str] = field(default_factory=dict)
    fails: bool = False


@dataclass
class Job:
    result: str  # success, failure, skipped
    outputs: dict[str, str]
    steps: list[str]  # the steps that ran, by id or name


def play(
    workflow: Mapping[str, Any],
    *,
    event: str,
    steps: Mapping[str, Step] | None = None,
    jobs: Mapping[str, str] | None = None,
    files: Callable[[str], bool] = lambda _pattern: True,
) -> dict[str, Job]:
    """Every job of `workflow` for one `event`: `steps` says what a step (by `id`, else
    `name`) does (any other step succeeds and writes nothing); `jobs` forces a job's result
    (a matrix job's, say) without playing its steps."""
    steps, jobs = steps or {}, jobs or {}
    github = {
        "event_name": event,
        "repository": "octo/models",
        "ref": "refs/heads/main",
        "sha": "0" * 40,
        "event": {"pull_request": {"number": 7, "head": {"repo": {"full_name": "octo/models"}}}},
    }
    done: dict[str, Job] = {}
    order = list(workflow["jobs"])
    while len(done) < len(order):
        for name in order:
            if name in done:
                continue
            spec = workflow["jobs"][name]
            needs = spec.get("needs") or []
            needs = [needs] if isinstance(needs, str) else list(needs)
            if any(n not in done for n in needs):
                continue
            done[name] = _job(name, spec, needs, done, github, steps, jobs, files)
    return done


def _job(
    name: str,
    spec: Mapping[str, Any],
    needs: list[str],
    done: Mapping[str, Job],
    github: Mapping[str, Any],
    steps: Mapping[str, Step],
    forced: Mapping[str, str],
    files: Callable[[str], bool],
) -> Job:
    need_ctx = {n: {"result": done[n].result, "outputs": done[n].outputs} for n in needs}
    upstream_ok = all(done[n].result == "success" for n in needs)
    upstream_failed = any(done[n].result == "failure" for n in needs)
    base: dict[str, Callable[..., Any]] = {
        "success": lambda: upstream_ok,
        "failure": lambda: upstream_failed,
        "always": lambda: True,
        "cancelled": lambda: False,
        "hashFiles": lambda *patterns: "x" if any(files(p) for p in patterns) else "",
        "contains": lambda a, b: str(b).lower() in str(a).lower(),
        "startsWith": lambda a, b: str(a).lower().startswith(str(b).lower()),
        "fromJSON": lambda text: json.loads(text),
    }
    context = {"github": github, "needs": need_ctx, "inputs": {}, "secrets": {},
               "env": {}, "matrix": {}, "runner": {"os": "Linux", "arch": "X64"}}  # fmt: skip
    if not condition(spec.get("if"), context, base):
        return Job("skipped", {}, [])
    if name in forced:
        return Job(forced[name], {}, [])
    ran: list[str] = []
    step_ctx: dict[str, Any] = {}
    state = {"failed": False}
    functions: dict[str, Callable[..., Any]] = {
        **base,
        "success": lambda: not state["failed"],
        "failure": lambda: state["failed"],
    }
    for step in spec.get("steps", []):
        key = str(step.get("id") or step.get("name") or step.get("uses") or step.get("run"))
        if not condition(step.get("if"), {**context, "steps": step_ctx}, functions):
            continue
        ran.append(key)
        what = steps.get(key, Step())
        if "id" in step:
            step_ctx[step["id"]] = {
                "outputs": dict(what.outputs),
                "outcome": "failure" if what.fails else "success",
            }
        if what.fails and not step.get("continue-on-error"):
            state["failed"] = True
    outputs = {
        k: _substitute(str(v), {**context, "steps": step_ctx}, base)
        for k, v in (spec.get("outputs") or {}).items()
    }
    return Job("failure" if state["failed"] else "success", outputs, ran)
