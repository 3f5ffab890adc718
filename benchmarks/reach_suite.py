"""A model zoo whose perf tests reach their models as real suites do: a plain import, a
conftest fixture, a computed `importlib` name, a name registry, a package on pytest's
`pythonpath`, `pytest_plugins`, an autouse fixture, the test package's `__init__.py`,
`__import__`, `pkgutil` autoloading, a PEP 562 lazy package, `pytest.importorskip`,
`torch.hub.load(..., source="local")`, `spec_from_file_location`, `sys.path.insert`, a data
file one test declares and another reads undeclared, files under the inert globs a test reads
(`docs/`, a prompt in `prompts/*.md`), and `sitecustomize.py`.

Each pattern has a model of its own and a change that makes it 6 times slower (`SLOWER`):
the partial run must measure that test. `UNRELATED` are changes no test can feel. Used by
`tests/test_reach.py` (the selection, from one recorded session) and `benchmarks/reach_study.py`
(each change measured as CI measures a pull request).
"""

from __future__ import annotations

from pathlib import Path

MODEL = """
import torch
from torch import nn


class {name}(nn.Module):
    def __init__(self, width=16, repeat=1):
        super().__init__()
        self.l = nn.Linear(width, width)
        self.repeat = repeat

    def forward(self, x):
        for _ in range(1 * self.repeat):
            x = torch.tanh(self.l(x))
        return x
"""
SLOW_EDIT = ("for _ in range(1 * self.repeat)", "for _ in range(6 * self.repeat)")

RUN = "perfguard.run({model}, (torch.randn(8, 16),))"
MARK = '@pytest.mark.perfguard(variants=["eager"])'


def model(name: str) -> str:
    return MODEL.format(name=name)


def test(name: str, body: str, *, head: str = "", args: str = "perfguard", mark: str = MARK) -> str:
    lines = "\n".join(f"    {line}" for line in body.strip().splitlines())
    return f"import pytest\nimport torch\n{head}\n\n{mark}\ndef test_{name}({args}):\n{lines}\n"


ROOT = "ROOT = __import__('pathlib').Path(__file__).resolve().parents[1]\n"

FILES: dict[str, str] = {
    "pytest.ini": "[pytest]\npythonpath = lib\n",
    "sitecustomize.py": "import os\n\nos.environ['ZOO_SITE_REPEAT'] = '1'\n",
    "conftest.py": (
        "import pytest\n\npytest_plugins = ['fixtures.models']\n\n\n"
        "@pytest.fixture\ndef fixture_model():\n"
        "    from zoo.viafixture import ViaFixture\n\n    return ViaFixture().eval()\n"
    ),
    "fixtures/__init__.py": "",
    "fixtures/models.py": (
        "import pytest\n\n\n@pytest.fixture\ndef plugin_model():\n"
        "    from zoo.viaplugin import ViaPlugin\n\n    return ViaPlugin().eval()\n"
    ),
    "zoo/__init__.py": "",
    "zoo/plain.py": model("Plain") + "\n\ndef helper():\n    return 1\n",
    "zoo/viafixture.py": model("ViaFixture"),
    "zoo/viaplugin.py": model("ViaPlugin"),
    "zoo/computed.py": model("Computed"),
    "zoo/registry.py": (
        "import importlib\n\nMODELS = {}\n\n\ndef register(name):\n"
        "    def add(cls):\n        MODELS[name] = cls\n        return cls\n\n    return add\n\n\n"
        "def create_model(name):\n    importlib.import_module('zoo.registered')\n"
        "    return MODELS[name]()\n"
    ),
    "zoo/registered.py": model("Registered").replace(
        "class Registered",
        "from zoo.registry import register\n\n\n@register('registered')\nclass Registered",
    ),
    "zoo/autouse.py": model("AutoUsed") + "\nCURRENT = []\n",
    "zoo/initmodel.py": model("InitModel"),
    "zoo/dunder.py": model("Dunder"),
    "zoo/auto/__init__.py": (
        "import importlib\nimport pkgutil\n\nLOADED = {}\n"
        "for info in pkgutil.iter_modules(__path__):\n"
        "    module = importlib.import_module(f'{__name__}.{info.name}')\n"
        "    LOADED[info.name] = module.MODEL\n"
    ),
    "zoo/auto/autoloaded.py": model("AutoLoaded") + "\nMODEL = AutoLoaded\n",
    "zoo/lazy/__init__.py": (
        "def __getattr__(name):\n    if name == 'LazyNet':\n"
        "        from zoo.lazy.impl import LazyNet\n\n        return LazyNet\n"
        "    raise AttributeError(name)\n"
    ),
    "zoo/lazy/impl.py": model("LazyNet"),
    "zoo/optional.py": model("Optional"),
    "zoo/hubmodel.py": model("HubNet"),
    "hubconf.py": (
        "dependencies = ['torch']\n\n\ndef hubnet():\n"
        "    from zoo.hubmodel import HubNet\n\n    return HubNet().eval()\n"
    ),
    "zoo/sitenet.py": model("SiteNet")
    .replace(
        "    def __init__(self, width=16, repeat=1):",
        "    def __init__(self, width=16, repeat=int(os.environ['ZOO_SITE_REPEAT'])):",
    )
    .replace("import torch\n", "import os\n\nimport torch\n", 1),
    "zoo/datanet.py": model("DataNet"),
    "zoo/unused.py": model("Unused"),
    "lib/libmodels/__init__.py": "",
    "lib/libmodels/net.py": model("LibNet"),
    "standalone/specnet.py": model("SpecNet"),
    "vendor/vendored_net.py": model("VendoredNet"),
    "data/shared.txt": "1\n",
    "docs/model.yaml": "repeat: 1\n",
    "docs/guide.md": "# the zoo\n",
    "prompts/short.md": "1\n",
    "tests/__init__.py": "",
    "tests/test_plain.py": test(
        "plain", RUN.format(model="Plain().eval()"), head="from zoo.plain import Plain"
    ),
    "tests/test_fixture.py": test(
        "fixture", RUN.format(model="fixture_model"), args="perfguard, fixture_model"
    ),
    "tests/test_plugin.py": test(
        "plugin", RUN.format(model="plugin_model"), args="perfguard, plugin_model"
    ),
    "tests/test_computed.py": test(
        "computed",
        "name = 'zoo.' + 'computed'\nnet = importlib.import_module(name).Computed().eval()\n"
        + RUN.format(model="net"),
        head="import importlib",
    ),
    "tests/test_registry.py": test(
        "registry",
        RUN.format(model="create_model('registered').eval()"),
        head="from zoo.registry import create_model",
    ),
    "tests/autouse/__init__.py": "",
    "tests/autouse/conftest.py": (
        "import pytest\n\n\n@pytest.fixture(autouse=True)\ndef _model():\n"
        "    from zoo import autouse\n\n    autouse.CURRENT[:] = [autouse.AutoUsed().eval()]\n"
    ),
    "tests/autouse/test_autouse.py": test(
        "autouse", RUN.format(model="autouse.CURRENT[0]"), head="from zoo import autouse"
    ),
    "tests/pkg/__init__.py": "from zoo.initmodel import InitModel as MODEL\n",
    "tests/pkg/test_init.py": test(
        "init", RUN.format(model="MODEL().eval()"), head="from tests.pkg import MODEL"
    ),
    "tests/test_dunder.py": test(
        "dunder", RUN.format(model="__import__('zoo.dunder', fromlist=['Dunder']).Dunder().eval()")
    ),
    "tests/test_autoload.py": test(
        "autoload",
        RUN.format(model="LOADED['autoloaded']().eval()"),
        head="from zoo.auto import LOADED",
    ),
    "tests/test_lazy.py": test(
        "lazy", RUN.format(model="lazy.LazyNet().eval()"), head="from zoo import lazy"
    ),
    "tests/test_importorskip.py": test(
        "importorskip",
        "optional = pytest.importorskip('zoo.optional')\n"
        + RUN.format(model="optional.Optional().eval()"),
    ),
    "tests/test_hub.py": test(
        "hub",
        "net = torch.hub.load(str(ROOT), 'hubnet', source='local')\n" + RUN.format(model="net"),
        head=ROOT,
    ),
    "tests/test_spec.py": test(
        "spec",
        "where = ROOT / 'standalone' / 'specnet.py'\n"
        "spec = importlib.util.spec_from_file_location('specnet', where)\n"
        "module = importlib.util.module_from_spec(spec)\nspec.loader.exec_module(module)\n"
        + RUN.format(model="module.SpecNet().eval()"),
        head="import importlib.util\n" + ROOT,
    ),
    "tests/test_syspath.py": test(
        "syspath",
        "sys.path.insert(0, str(ROOT / 'vendor'))\nimport vendored_net\n\n"
        + RUN.format(model="vendored_net.VendoredNet().eval()"),
        head="import sys\n" + ROOT,
    ),
    "tests/test_pythonpath.py": test(
        "pythonpath", RUN.format(model="LibNet().eval()"), head="from libmodels.net import LibNet"
    ),
    "tests/test_declared.py": test(
        "declared",
        "repeat = int((ROOT / 'data' / 'shared.txt').read_text())\n"
        + RUN.format(model="DataNet(repeat=repeat).eval()"),
        head="from zoo.datanet import DataNet\n" + ROOT,
        mark='@pytest.mark.perfguard(variants=["eager"], depends=["data/shared.txt"])',
    ),
    "tests/test_undeclared.py": test(
        "undeclared",
        "repeat = int((ROOT / 'data' / 'shared.txt').read_text())\n"
        + RUN.format(model="DataNet(repeat=repeat).eval()"),
        head="from zoo.datanet import DataNet\n" + ROOT,
    ),
    "tests/test_docs.py": test(
        "docs",
        "repeat = int((ROOT / 'docs' / 'model.yaml').read_text().split(':')[1])\n"
        "repeat *= int((ROOT / 'prompts' / 'short.md').read_text())\n"
        + RUN.format(model="DataNet(repeat=repeat).eval()"),
        head="from zoo.datanet import DataNet\n" + ROOT,
    ),
    "tests/test_site.py": test(
        "site", RUN.format(model="SiteNet().eval()"), head="from zoo.sitenet import SiteNet"
    ),
}

T = "tests/test_{}.py::test_{}"
SLOWER: dict[str, tuple[str, tuple[str, str], str]] = {
    # pattern: (the file the change edits, (old, new), the test it must reach)
    "plain import": ("zoo/plain.py", SLOW_EDIT, T.format("plain", "plain")),
    "conftest fixture": ("zoo/viafixture.py", SLOW_EDIT, T.format("fixture", "fixture")),
    "pytest_plugins": ("zoo/viaplugin.py", SLOW_EDIT, T.format("plugin", "plugin")),
    "importlib computed name": ("zoo/computed.py", SLOW_EDIT, T.format("computed", "computed")),
    "name registry": ("zoo/registered.py", SLOW_EDIT, T.format("registry", "registry")),
    "autouse fixture": ("zoo/autouse.py", SLOW_EDIT, "tests/autouse/test_autouse.py::test_autouse"),
    "test package __init__": ("zoo/initmodel.py", SLOW_EDIT, "tests/pkg/test_init.py::test_init"),
    "__import__": ("zoo/dunder.py", SLOW_EDIT, T.format("dunder", "dunder")),
    "pkgutil autoloading": ("zoo/auto/autoloaded.py", SLOW_EDIT, T.format("autoload", "autoload")),
    "PEP 562 lazy package": ("zoo/lazy/impl.py", SLOW_EDIT, T.format("lazy", "lazy")),
    "pytest.importorskip": ("zoo/optional.py", SLOW_EDIT, T.format("importorskip", "importorskip")),
    "torch.hub.load local": ("zoo/hubmodel.py", SLOW_EDIT, T.format("hub", "hub")),
    "spec_from_file_location": ("standalone/specnet.py", SLOW_EDIT, T.format("spec", "spec")),
    "sys.path.insert": ("vendor/vendored_net.py", SLOW_EDIT, T.format("syspath", "syspath")),
    "pythonpath package": ("lib/libmodels/net.py", SLOW_EDIT, T.format("pythonpath", "pythonpath")),
    "data file read undeclared": (
        "data/shared.txt",
        ("1", "6"),
        T.format("undeclared", "undeclared"),
    ),
    "docs file read": ("docs/model.yaml", ("repeat: 1", "repeat: 6"), T.format("docs", "docs")),
    "prompt file read": ("prompts/short.md", ("1", "6"), T.format("docs", "docs")),
    "sitecustomize.py": ("sitecustomize.py", ("'1'", "'6'"), T.format("site", "site")),
}
"""Each pattern's change: its model 6 times slower."""

UNRELATED: dict[str, tuple[str, tuple[str, str]]] = {
    "documentation": ("docs/guide.md", ("# the zoo", "# the model zoo")),
    "an unused module": ("zoo/unused.py", SLOW_EDIT),
    "a function no test runs": ("zoo/plain.py", ("return 1", "return 2")),
}
"""Changes no perf test can feel: each must measure nothing."""


def write(repo: Path) -> None:
    for name, text in FILES.items():
        (repo / name).parent.mkdir(parents=True, exist_ok=True)
        (repo / name).write_text(text)


def apply(repo: Path, path: str, edit: tuple[str, str]) -> None:
    text = (repo / path).read_text()
    old, new = edit
    assert old in text, (path, old)
    (repo / path).write_text(text.replace(old, new, 1))
