"""Xen domains (``driver: xen``, ``mode: pv | pvh | hvm``), started with xl from dom0: the driver.
The domains themselves, their settings, instances, lifecycle and the xl around them, are
``xen_domain``'s, which libvirt's Xen half shares."""

from __future__ import annotations

import os
from typing import ClassVar

from hvbench.drivers.xen_domain import XenDomains, XenOpened, XenSettings, xl_info
from hvbench.errors import HvbenchError
from hvbench.host.process import ExecResult


class XenDriver(XenDomains[XenSettings, XenOpened]):
    """Xen domains through xl, from dom0."""

    name: ClassVar[str] = "xen"
    settings_model: ClassVar[type[XenSettings]] = XenSettings

    def _resolve(self) -> XenOpened:
        """xl's Xen, then the domains' image and the hotplug script."""
        ok = self.check()
        if not ok.ok:
            raise HvbenchError(f"platform {self.platform}: {ok.detail} ({ok.fix})")
        info = xl_info()
        if isinstance(info, ExecResult):
            return self._domains("unknown", os.cpu_count() or 1)
        version, cpus = info.get("xen_version", "unknown"), int(info.get("nr_cpus", 0)) or 1
        return self._domains(version, cpus)
