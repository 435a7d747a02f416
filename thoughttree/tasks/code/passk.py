"""pass@k: the chance that at least one of k samples passes, estimated without bias from n >= k samples.

With n samples of which c pass, the estimate is ``1 - C(n - c, k) / C(n, k)`` (Chen et al., 2021,
"Evaluating Large Language Models Trained on Code"): the share of the k-subsets of the n samples
that hold at least one passing sample. It is computed as a running product to stay exact in
floating point for large n.
"""

from __future__ import annotations

from typing import Sequence


def pass_at_k(n: int, c: int, k: int) -> float:
    """Unbiased pass@k of one problem with ``c`` passing samples out of ``n``."""
    for name, value in (("n", n), ("c", c), ("k", k)):
        if not isinstance(value, int) or isinstance(value, bool) or value < 0:
            raise ValueError(f"pass_at_k: {name} must be an integer >= 0, got {value!r}")
    if not 1 <= k <= n:
        raise ValueError(f"pass_at_k: k must be in 1..n (n={n}), got {k}; draw at least k samples per problem")
    if c > n:
        raise ValueError(f"pass_at_k: c={c} passing samples cannot exceed n={n}")
    if n - c < k:
        return 1.0
    fail_all = 1.0
    for i in range(n - c + 1, n + 1):  # C(n-c, k) / C(n, k) = prod_{i=n-c+1}^{n} (1 - k / i)
        fail_all *= 1.0 - k / i
    return 1.0 - fail_all


def mean_pass_at_k(counts: Sequence[tuple[int, int]], k: int) -> float:
    """Mean pass@k over problems given as (n, c) pairs."""
    if not counts:
        raise ValueError("mean_pass_at_k needs at least one problem")
    return sum(pass_at_k(n, c, k) for n, c in counts) / len(counts)
