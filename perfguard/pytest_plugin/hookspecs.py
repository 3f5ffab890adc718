"""The hook a team registers its own variants with (a conftest or a plugin).

```python
from perfguard.variants import Variant

def pytest_perfguard_variants(registry):
    registry.add(Variant("my-int8", build=my_quantize, stage="quantize", tolerance="int8",
                         changes_weights=True))
```
"""

from __future__ import annotations

from typing import Any

import pytest


@pytest.hookspec(historic=True)
def pytest_perfguard_variants(registry: Any) -> None:
    """Register variants: `registry.add(perfguard.variants.Variant(...))`. Called once per
    session for each conftest and plugin, a conftest loaded later included; a variant named
    on the command line or in the ini file must be registered by a plugin, an installed
    package (the `perfguard.variants` entry point group) or a conftest pytest loads before
    collecting (the root's or a test path's)."""
