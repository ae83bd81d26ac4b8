"""quantcheck: did this serving change make the model worse?"""

from __future__ import annotations

__version__ = "0.1.0"

from .collect import CollectResult, CollectSettings, collect, collect_async  # noqa: E402
from .compare import compare, compare_to_dir  # noqa: E402
from .errors import QuantcheckError  # noqa: E402
from .prompts import RequestOptions, load_prompts  # noqa: E402
from .records import Completion, Expect, Prompt, Tokens  # noqa: E402
from .runstore import Run, load_run  # noqa: E402

__all__ = [
    "CollectResult",
    "CollectSettings",
    "Completion",
    "Expect",
    "Prompt",
    "QuantcheckError",
    "RequestOptions",
    "Run",
    "Tokens",
    "__version__",
    "collect",
    "collect_async",
    "compare",
    "compare_to_dir",
    "load_prompts",
    "load_run",
]
