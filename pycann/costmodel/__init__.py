"""pycann.costmodel: a Da Vinci AI Core cost model fed by the Ascend C twin's instruction trace (issue 19).

``profile_kernel(kernel, blockDim, args, soc_version)`` runs a kernel on the twin, schedules its
instructions on the core's pipes (socs.py tables, simulate.py rules) and returns a ``Profile``:
total cycles and time, per-pipe ratios (msprof's aic_mac_ratio, aiv_vec_ratio, *_mte2_ratio...),
and a bound verdict. See docs/costmodel.md.
"""

from pycann.costmodel.profile import Bound, Profile, profile_kernel, profile_records
from pycann.costmodel.socs import COST_SOCS, CostSoc, get_cost_soc

__all__ = ["COST_SOCS", "Bound", "CostSoc", "Profile", "get_cost_soc", "profile_kernel", "profile_records"]
