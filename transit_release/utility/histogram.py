"""Utility of a released histogram against the true one (internal figures only).

These numbers are computed from raw counts, so they are *not* differentially
private: they go to MLflow and the internal report, never to a release.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

TOP_K = 20


def histogram_utility(true_counts: np.ndarray, kept: np.ndarray, released: np.ndarray,
                      rank_top_k: int | None = None) -> dict[str, float]:
    """Per-marginal figures.

    * ``kept_point_share``: share of present points released;
    * ``trip_coverage``: share of trips on released points;
    * ``mean_abs_error`` / ``max_abs_error``: on released points;
    * ``mean_rel_error``: mean of ``|released − true| / true`` over released points;
    * ``total_variation``: between the true and the released distribution over
      the present points (dropped points count 0; 1.0 when nothing is released);
    * ``top_rank_correlation``: Spearman's rho between true and released counts
      over the ``rank_top_k`` largest true points (only if requested).
    """
    true_counts = np.asarray(true_counts, dtype=np.int64)
    n = true_counts.size
    total = int(true_counts.sum())
    rel_full = np.zeros(n, dtype=np.int64)
    rel_full[kept] = released
    err = np.abs(released - true_counts[kept]) if kept.size else np.zeros(0)
    out = {
        "points": float(n),
        "points_released": float(kept.size),
        "kept_point_share": kept.size / n if n else float("nan"),
        "trip_coverage": float(true_counts[kept].sum() / total) if total else float("nan"),
        "mean_abs_error": float(err.mean()) if err.size else float("nan"),
        "max_abs_error": float(err.max()) if err.size else float("nan"),
        "mean_rel_error": float((err / true_counts[kept]).mean()) if err.size else float("nan"),
        "total_variation": (0.5 * float(np.abs(true_counts / total - rel_full / rel_full.sum()).sum())
                            if total and rel_full.sum() else 1.0),
    }
    if rank_top_k:
        top = np.argsort(-true_counts, kind="stable")[:rank_top_k]
        if top.size >= 3 and np.unique(true_counts[top]).size > 1:
            a = pd.Series(true_counts[top]).rank()
            b = pd.Series(rel_full[top]).rank()
            out["top_rank_correlation"] = float(a.corr(b)) if b.nunique() > 1 else 0.0
        else:
            out["top_rank_correlation"] = float("nan")
    return out
