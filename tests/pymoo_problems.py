"""pymoo problems the tests hand to process pools (their workers import them by name).
Imported only by tests that have skipped already when pymoo is missing."""

from __future__ import annotations

from typing import Any

import numpy as np
from pymoo.core.problem import ElementwiseProblem


class Sphere(ElementwiseProblem):  # type: ignore[misc]
    def __init__(self, **kwargs: Any) -> None:
        super().__init__(n_var=3, n_obj=1, xl=-1.0, xu=1.0, **kwargs)

    def _evaluate(self, x: Any, out: Any, *args: Any, **kwargs: Any) -> None:
        out["F"] = float(np.sum(x ** 2))
