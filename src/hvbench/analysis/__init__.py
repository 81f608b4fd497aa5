"""Analysis: baseline normalization, single vs aggregate, host CPU cost, statistics."""

from hvbench.analysis.model import RunAnalysis
from hvbench.analysis.run_analysis import analyse
from hvbench.analysis.stats import needs_more, summarize, welch

__all__ = ["RunAnalysis", "analyse", "needs_more", "summarize", "welch"]
