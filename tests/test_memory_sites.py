"""Where the memory went: allocation sites at a call's peak, recorded on the CPU with the
profiler's memory events, matched between base and head; and the CUDA snapshot's replay."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from perfguard.measure.memory_sites import callers, cuda_sites, record, user_frame
from perfguard.records import Comparison, RecordError
from perfguard.records.sites import BEFORE, Place, Site, SiteChange
from perfguard.stats.memory_why import LEAST_BYTES, diff, with_memory_why
from tests.factories import result

EXTRA = 256 * 2048 * 4  # the head's extra activation: 2 MiB of float32


class Base(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.a, self.b = nn.Linear(512, 2048), nn.Linear(2048, 512)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor | None]:
        h = self.a(x)
        return self.b(torch.relu(h)), None


class KeepsOne(Base):
    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor | None]:
        h = self.a(x)
        kept = h * 2  # one more activation, live with the output
        return self.b(torch.relu(h)), kept


class Leaks(Base):
    def __init__(self) -> None:
        super().__init__()
        self.seen: list[torch.Tensor] = []

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor | None]:
        out, _ = super().forward(x)
        self.seen.append(out * 1)  # held by the model after every call
        return out, None


def sites_of(model: nn.Module) -> tuple[list[Site], list[Site]]:
    x = torch.randn(256, 512)
    with torch.no_grad():
        model(x)
        return record(lambda: model(x), torch.device("cpu"))


def test_an_extra_activation_is_the_first_site_with_its_exact_size() -> None:
    """On the CPU the profiler's bytes are exact: 10 of 10 runs name the function and the
    operator that keep it, with its size to the byte."""
    for _ in range(10):
        changes = diff(sites_of(Base())[0], sites_of(KeepsOne())[0], least=LEAST_BYTES)
        first = changes[0]
        assert first.where.endswith(": forward") and "test_memory_sites.py" in first.where
        assert first.op == "aten::mul" and first.kind == "new" and first.change_bytes == EXTRA


def test_identical_code_changes_no_site() -> None:
    for _ in range(10):
        assert diff(sites_of(Base())[0], sites_of(Base())[0], least=LEAST_BYTES) == []


def test_a_leak_names_the_function_that_holds_the_blocks() -> None:
    peak, held = sites_of(Leaks())
    (site,) = [s for s in held if s.bytes >= LEAST_BYTES]
    assert site.where.endswith(": forward") and site.op == "aten::mul"
    assert site.bytes == 256 * 512 * 4 and site.blocks == 1
    assert sites_of(Base())[1] == [] or all(s.bytes < LEAST_BYTES for s in sites_of(Base())[1])
    assert peak  # the peak is recorded too


def test_the_user_frame_is_the_innermost_outside_torch_and_perfguard() -> None:
    frames = [
        "torch/nn/modules/linear.py(130): forward",
        "nn.Module: Linear_0",
        "models/net.py(12): forward",
        "perfguard/measure/runner.py(88): call",
    ]
    assert user_frame(frames) == 2
    assert user_frame(frames[:2]) is None
    # inductor's generated module (a compiled variant) is torch's code, not the user's
    generated = (
        "/tmp/tmpy40ypkdx/oy/coyo5m4k57nqo2pk2w2somcuvudel4gqmghvm6ndpx375yi4lsni.py(46): call"
    )
    assert user_frame([generated, "models/net.py(12): forward"]) == 1
    # and pytest's machinery is not the caller a reader wants
    assert callers(["models/test_net.py(9): test_net", "_pytest/python.py(187): call"]) == (
        "models/test_net.py(9): test_net",
    )


def test_a_cuda_snapshot_is_replayed_to_its_peak() -> None:
    """The allocator's history (its shape as `torch.cuda.memory._snapshot` gives it): the
    blocks live when the total was highest, by the frame of the user's code; what the call
    found allocated is a site of its own."""

    def frames(line: int) -> list[dict[str, object]]:
        return [
            {"filename": "/x/torch/nn/functional.py", "line": 1, "name": "linear"},
            {"filename": "/repo/models/net.py", "line": line, "name": "forward"},
        ]

    trace = [
        {"action": "alloc", "addr": 1, "size": 4 << 20, "frames": frames(10)},
        {"action": "alloc", "addr": 2, "size": 8 << 20, "frames": frames(11)},
        {"action": "free_requested", "addr": 1, "size": 4 << 20},
        {"action": "alloc", "addr": 3, "size": 2 << 20, "frames": frames(12)},
        {"action": "free_requested", "addr": 3, "size": 2 << 20},
    ]
    peak, held = cuda_sites({"device_traces": [trace]}, 0, before=100 << 20)
    assert [(s.where, s.bytes) for s in peak] == [
        (BEFORE, 100 << 20),
        ("/repo/models/net.py(11): forward", 8 << 20),
        ("/repo/models/net.py(10): forward", 4 << 20),
    ]
    assert [(s.where, s.bytes) for s in held] == [("/repo/models/net.py(11): forward", 8 << 20)]


def test_a_memory_verdict_carries_its_site_changes_into_the_json() -> None:
    def with_sites(sites: list[Site]):  # type: ignore[no-untyped-def]
        r = result("t", "eager", 1.0)
        build = {"memory_sites": [s.to_json() for s in sites]}
        return r.__class__(**{**r.__dict__, "details": r.details.__class__(build=build)})

    base = with_sites([Site(Place("m.py", 3, "forward"), "aten::mm", 1 << 20, 1)])
    head = with_sites([Site(Place("m.py", 3, "forward"), "aten::mm", 5 << 20, 2)])
    row = Comparison(
        test="t", variant="eager", metric="peak_memory_bytes", baseline=1.0, current=2.0,
        change_pct=100.0, p_value=None, cohens_d=None, verdict="regression",
    )  # fmt: skip
    (c,) = with_memory_why([row], {("t", "eager"): base}, {("t", "eager"): head})
    assert c.sites == (
        SiteChange(Place("m.py", 3, "forward"), "aten::mm", 1 << 20, 5 << 20, 1, 2, (), "grew"),
    )
    again = Comparison.from_json(c.to_json())
    assert again.sites == c.sites and c.to_json()["sites"][0]["change_bytes"] == 4 << 20
    unchanged = Comparison(**{**row.__dict__, "verdict": "unchanged"})
    assert with_memory_why([unchanged], {}, {("t", "eager"): head})[0].sites == ()
    # a CPU process's RSS is reported only, and its verdict is explained all the same
    reported = Comparison(**{**row.__dict__, "gating": False})
    assert with_memory_why([reported], {}, {("t", "eager"): head})[0].sites


@pytest.mark.parametrize(
    ("sites", "said"),
    [
        ([{"base_bytes": "x"}], "sites[].base_bytes must be a whole number, got 'x'"),
        ([{"head_bytes": -1}], "sites[].head_bytes must be 0 or more, got -1"),
        (["oops"], "sites[] must be an object, got 'oops'"),
        (5, "sites must be a list, got 5"),
        ([{"frames": [1]}], "sites[].frames must be a list of strings, got [1]"),
    ],
)
def test_a_file_with_broken_sites_is_refused_naming_the_field(sites: object, said: str) -> None:
    """A results file's sites are checked as the rest of it is: one RecordError naming the
    field, never a traceback from deep inside."""
    row = Comparison(
        test="t", variant="eager", metric="peak_memory_bytes", baseline=1.0, current=2.0,
        change_pct=100.0, p_value=None, cohens_d=None, verdict="regression",
    ).to_json()  # fmt: skip
    with pytest.raises(RecordError) as info:
        Comparison.from_json({**row, "sites": sites})
    assert str(info.value) == said


def _at(line: int, code: str, mib: float, blocks: int = 1) -> Site:
    return Site(Place("m.py", line, "forward"), "", int(mib * (1 << 20)), blocks, (), code)


def test_an_edited_statement_is_one_site_that_grew_not_one_gone_and_one_new() -> None:
    """On a GPU a site is matched by its statement: the head that edits the line which
    returns the output must not lead with "gone" and "new" of the output's whole size (seen
    on an H100: `return self.b(...), None` gone 2.5 MiB, before the 2 MiB really added)."""
    base = [_at(27, "return self.b(torch.relu(h)), None", 2.5, 2)]
    head = [
        _at(32, "kept = h * 2  # one more activation", 2.0),
        _at(33, "return self.b(torch.relu(h)), kept", 2.5, 2),
    ]
    (only,) = diff(base, head, least=LEAST_BYTES)
    assert (only.where, only.kind, only.change_bytes) == ("m.py(32): forward", "new", 2 << 20)
    grown = [_at(33, "return self.b(torch.relu(h)).double(), kept", 5.0, 2)]
    (edited,) = diff(base, grown, least=LEAST_BYTES)
    assert (edited.where, edited.kind, edited.change_bytes) == (
        "m.py(33): forward",
        "grew",
        5 << 19,
    )
    other = [_at(40, "y = torch.cat([a, b])", 2.5, 2)]  # another statement: not the same site
    assert sorted(c.kind for c in diff(base, other, least=LEAST_BYTES)) == ["gone", "new"]


def test_when_the_peak_grew_its_growth_is_listed_before_what_its_moment_left_behind() -> None:
    """A CNN on an H100: the base's peak falls while a conv's output and its ReLU are both
    live, the head's (one activation kept) later, when the conv's output is freed. The
    kept activation (+1 MiB) comes first, not the conv's -1 MiB of the same size."""
    base = [_at(57, "h = torch.relu(self.c1(x))", 2.0, 2)]
    head = [
        _at(57, "h = torch.relu(self.c1(x))", 1.0),
        _at(58, "kept = h * 2", 1.0),
        _at(59, "out = self.c2(h)", 0.5),
    ]
    changes = diff(base, head, least=LEAST_BYTES)
    assert [(c.where, c.change_bytes) for c in changes] == [
        ("m.py(58): forward", 1 << 20),
        ("m.py(59): forward", 1 << 19),
        ("m.py(57): forward", -(1 << 20)),
    ]
    backwards = diff(head, base, least=LEAST_BYTES)  # the peak fell: the fall first
    assert backwards[0].change_bytes == -(1 << 20) and backwards[-1].change_bytes == 1 << 20


def test_a_small_leak_is_explained_at_any_size() -> None:
    """Growth per call is an exact count: a leak of 16 KiB a call names its site, though a
    peak's site that moved by as little is not shown."""
    r = result("t", "eager", 1.0)
    kept = Site(Place("m.py", 9, "forward"), "aten::mul", 16 << 10, 1)
    head = r.__class__(
        **{
            **r.__dict__,
            "details": r.details.__class__(build={"memory_held_sites": [kept.to_json()]}),
        }
    )
    row = Comparison(
        test="t", variant="eager", metric="memory_growth_bytes_per_call", baseline=0.0,
        current=16384.0, change_pct=None, p_value=None, cohens_d=None, verdict="regression",
    )  # fmt: skip
    (c,) = with_memory_why([row], {("t", "eager"): r}, {("t", "eager"): head})
    assert [(s.where, s.change_bytes, s.kind) for s in c.sites] == [
        ("m.py(9): forward", 16 << 10, "new")
    ]


@pytest.mark.cuda
def test_cuda_sites_name_the_line(tmp_path) -> None:  # type: ignore[no-untyped-def]
    if not torch.cuda.is_available():
        pytest.skip("needs CUDA")
    device = torch.device("cuda")
    x = torch.randn(256, 512, device=device)
    base, head = Base().to(device).eval(), KeepsOne().to(device).eval()
    with torch.no_grad():
        base(x), head(x)
        b = record(lambda: base(x), device)[0]
        h = record(lambda: head(x), device, tmp_path / "head.memory.pickle")[0]
    first = diff(b, h, least=LEAST_BYTES)[0]
    assert "test_memory_sites.py" in first.where and abs(first.change_bytes - EXTRA) <= 1 << 20
    assert (tmp_path / "head.memory.pickle").stat().st_size > 0


WIDE = """
import torch
from torch import nn

class Net(nn.Module):
    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.a = nn.Linear(1, 1024)  # an 8 MiB activation at little compute

    def forward(self, x):
        h = self.a(x)
        return h.relu(){extra}
"""
SUITE = """
import pytest, torch
from net import Net

@pytest.mark.perfguard(variants=["eager"], ab_min_change_pct=50)
def test_net(perfguard):
    perfguard.run(Net().eval(), (torch.randn(2048, 1),))
"""


@pytest.mark.slow
def test_a_memory_regression_in_ab_shows_where_the_memory_went(pytester: pytest.Pytester) -> None:
    """The head keeps an 8 MiB activation more: the memory verdict carries the site (the
    function and its operator), in the JSON and in the report's fold."""
    import json

    from tests.gitrepo import git
    from tests.test_same_job import FAST, LEAST

    pytester.makepyfile(net=WIDE.format(extra=""), test_net=SUITE)
    git(pytester.path, "init", "-q", "-b", "main")
    git(pytester.path, "add", "-A")
    git(pytester.path, "commit", "-q", "-m", "base")
    extra = ", (h * 2).sum(dim=1), h * 3"  # h * 3: one more 8 MiB activation, returned
    (pytester.path / "net.py").write_text(WIDE.format(extra=extra))
    git(pytester.path, "commit", "-qam", "keep one more")
    result = pytester.runpytest_subprocess(
        *FAST, *LEAST, "--perfguard", "--perfguard-ab=HEAD~1", "--perfguard-json=out.json",
    )  # fmt: skip
    assert result.ret in (0, 1), result.stdout.str()
    doc = json.loads((pytester.path / "out.json").read_text())
    (memory,) = [c for c in doc["comparisons"] if c["metric"] == "peak_memory_bytes"]
    assert memory["verdict"] == "regression", memory
    first = memory["sites"][0]
    assert first["where"].startswith("net.py(") and first["where"].endswith(": forward")
    # the 8 MiB activation, and the 0-d scalar `h * 2` wraps (exact bytes on the CPU)
    assert first["op"] == "aten::mul" and 0 <= first["change_bytes"] - (8 << 20) <= 64
    assert "nn.Module: Net_0" in first["frames"]
    assert not any("perfguard/" in f or "torch/" in f for f in first["frames"])
    report = (pytester.path / "reports" / "perfguard.md").read_text()
    assert "Where the memory went" in report


def test_a_sites_place_is_typed_and_written_as_the_profiler_names_a_frame() -> None:
    place = Place.parse("/repo/models/net.py(11): forward")
    assert place == Place("/repo/models/net.py", 11, "forward")
    assert str(place) == "/repo/models/net.py(11): forward"
    assert Place.parse(BEFORE) == Place(BEFORE) and str(Place(BEFORE)) == BEFORE
    site = Site(place, "aten::mm", 1 << 20, 1)
    assert Site.from_json(site.to_json()) == site and site.key[:2] == (place.file, "forward")
