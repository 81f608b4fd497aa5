"""Analysis: baseline normalization, single vs aggregate, host CPU cost, statistics."""

from hvbench.analysis.intervals import summarize
from hvbench.analysis.model import RunAnalysis
from hvbench.analysis.ratios import welch
from hvbench.analysis.run_analysis import analyse
from hvbench.analysis.settling import needs_more

__all__ = ["RunAnalysis", "analyse", "needs_more", "summarize", "welch"]
