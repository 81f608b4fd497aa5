"""What the drivers and the runner write for the analysis to read, as typed records: each is
stored as a JSON object of its fields and read back into the record, so that a key is spelt in
one place only, and an older run's object still reads (a field it lacks takes its default)."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, fields
from typing import Any, Literal

ADAPTIVE = "adaptive"
"""The artifact of a run's adaptive repetitions (``AdaptiveRecord``)."""


def _known(record: type, data: dict) -> dict[str, Any]:
    """The entries of ``data`` that are fields of the dataclass ``record``."""
    names = {f.name for f in fields(record)}
    return {k: v for k, v in data.items() if k in names}


UNNAMED_HOST = "(unnamed)"
"""How reports, histories and the site name a host that has no name."""


@dataclass(frozen=True)
class Inventory:
    """What the host is, stored with every run (``host.inventory.collect`` makes it): figures
    without it cannot be compared."""

    hostname: str = ""
    """Empty where the host has none (``name`` then)."""
    cpu_model: str | None = None
    cpu_flags: tuple[str, ...] = ()
    cores_logical: int | None = None
    cores_physical: int | None = None
    memory_bytes: int | None = None
    kernel: str | None = None
    distribution: str | None = None
    virtualization: str | None = None
    python: str | None = None
    tools: dict[str, str | None] = field(default_factory=dict)
    """Each tool a run may need (``host.inventory.TOOLS``): its version line, None where it is
    not installed."""
    conditions: tuple[dict[str, Any], ...] = ()
    """The host's conditions before the run, as ``host.conditions.Condition.as_json`` wrote
    them; none in a run recorded before they were."""

    @property
    def name(self) -> str:
        """The host as a report names it."""
        return self.hostname or UNNAMED_HOST

    def described(self) -> dict[str, str]:
        """The host in a few items, by field name, those not recorded left out: what a report
        prints of it and a history compares between runs."""
        found = {f.name: getattr(self, f.name) for f in fields(self) if f.name not in _LISTS}
        return {k: str(v) for k, v in found.items() if v not in (None, "")}

    def to_json(self) -> dict:
        return {
            **asdict(self),
            "cpu_flags": list(self.cpu_flags),
            "conditions": list(self.conditions),
        }

    @classmethod
    def from_json(cls, data: dict) -> Inventory:
        known = _known(cls, data)
        return cls(
            **{
                **known,
                "cpu_flags": tuple(known.get("cpu_flags") or ()),
                "tools": dict(known.get("tools") or {}),
                "conditions": tuple(known.get("conditions") or ()),
            }
        )


_LISTS = ("cpu_flags", "tools", "conditions")
"""The inventory's fields that are not one item of its description (``Inventory.described``)."""


@dataclass(frozen=True)
class WhatRan:
    """What a platform's driver ran, in the terms the analysis reads (labels, verdicts, disk
    figures above the baseline's): the driver writes it (``Driver.what_ran``) and the store
    keeps it with each cell, so that a report never works it out from a driver's name. Its
    free-form provenance (versions, pinning, image manifests) is ``describe()``'s."""

    mode: str | None = None
    """The accelerator, mode or syscall interception the guests ran under (kvm or tcg; pv, pvh
    or hvm; systrap or ptrace); None where the driver has nothing to choose, or never decided
    (it failed before)."""
    modes: tuple[str, ...] = ()
    """The values ``mode`` can take on this driver: the words a platform's name may claim."""
    mode_reason: str | None = None
    """Why the driver chose ``mode``, where the study left the choice to it (``accel: auto``)."""
    nested: bool = False
    """KVM inside a virtual machine: functional, but its figures are no KVM's."""
    disk_cache: str | None = None
    """How the data disk's path goes through the host page cache, in a few words; None where
    direct I/O in the guest reaches the medium."""
    bare: bool = False
    """The instances are the host itself: what a study without a baseline is measured
    against."""

    def to_json(self) -> dict:
        return {**asdict(self), "modes": list(self.modes)}

    @classmethod
    def from_json(cls, data: dict) -> WhatRan:
        known = _known(cls, data)
        return cls(**{**known, "modes": tuple(known.get("modes") or ())})


@dataclass(frozen=True)
class Provenance:
    """A platform as its driver described it (``Driver.describe``, kept with each of its
    cells): the settings that define it apart from what the driver recorded besides them."""

    settings: dict[str, Any]
    """The settings as the study gave them, the driver's defaults filled in."""
    resolved: dict[str, Any] = field(default_factory=dict)
    """What the driver resolved of them on this host (the accelerator and why, pinning, queues,
    a VMM's version as ``vmm``), the QEMU aside."""
    qemu: str | None = None
    """The QEMU that ran the guests, where one did."""
    image: Any = None
    """The guest image's manifest (its ``key`` names the run's ``image_artifact``), or what an
    engine's image is."""
    rootfs: dict[str, Any] | None = None
    """The root filesystem the instances ran on, where the driver made one."""

    @classmethod
    def of(cls, described: dict) -> Provenance:
        resolved = dict(described.get("resolved") or {})
        return cls(
            {k: v for k, v in described.items() if k not in _RECORDS},
            resolved,
            resolved.pop("qemu", None),
            described.get("image"),
            described.get("rootfs"),
        )

    @property
    def image_key(self) -> str | None:
        """The key of the guest image the instances booted; None where they booted none."""
        return self.image.get("key") if isinstance(self.image, dict) else None

    @property
    def vmm(self) -> str | None:
        """The version of the VMM (Firecracker, Cloud Hypervisor) that ran the guests."""
        return self.resolved.get("vmm")

    def records(self) -> dict[str, Any]:
        """What the driver recorded besides the settings, by its ``describe()`` names, the QEMU
        left out: the provenance a history compares item by item."""
        found = {"resolved": self.resolved, "image": self.image, "rootfs": self.rootfs}
        return {k: v for k, v in found.items() if v}


_RECORDS = ("resolved", "image", "rootfs")
"""What ``Driver.describe`` adds to a platform's settings."""


@dataclass(frozen=True)
class PlatformState:
    """The platform around one sample, as the runner recorded it."""

    instances: list[str] = field(default_factory=list)
    """The names of the sample's instances."""
    vcpus_total: int = 0
    host_cores: int = 0
    """Of the host the instances run on."""
    overcommit: bool | None = None
    """More vCPUs than the host has cores: decided here, once; None in a sample that does not
    say (a failed one)."""
    data_disks: dict[str, str] = field(default_factory=dict)
    """Per instance, what backs its data disk: its provenance."""
    start_retried_after: str | None = None
    """The error of a first start that failed, where the instances were started again."""

    def to_json(self) -> dict:
        """Its fields but those left at their defaults: a failed start's state is ``{}``."""
        return {k: v for k, v in asdict(self).items() if v != getattr(_NO_STATE, k)}

    @classmethod
    def from_json(cls, data: dict | None) -> PlatformState:
        return cls(**_known(cls, data or {}))


_NO_STATE = PlatformState()


@dataclass(frozen=True)
class AdaptiveRecord:
    """How a run's adaptive repetitions went (the study's ``adaptive``): the artifact
    ``ADAPTIVE``, which the report reads to name the cells left short of the target."""

    ci_target: float
    max_repetitions: int
    budget_minutes: float
    stopped_by: Literal["max_repetitions", "budget_minutes"]
    """What ended the repetitions: every cell got its maximum, or the time ran out."""
    short: list[str] = field(default_factory=list)
    """The keys of the cells whose interval is still wider than the target."""

    def to_json(self) -> dict:
        return asdict(self)

    @classmethod
    def from_json(cls, data: dict | None) -> AdaptiveRecord | None:
        """The record of a run's artifacts; None where the run had no adaptive repetitions."""
        return cls(**_known(cls, data)) if data else None


TIME = "time"
"""The artifact of where a run's wall time went (``TimeRecord``)."""


@dataclass
class TimeRecord:
    """Where a run's wall time went, in seconds of a monotonic clock read between the runner's
    steps (never inside a measured window), added up over its sessions where it was resumed:
    what a user waits for, and what a shorter study would cut."""

    total_s: float = 0.0
    """From ``hvbench run``'s start to its end, the analysis included."""
    steps: dict[str, float] = field(default_factory=dict)
    """By step: ``doctor`` (the default study's: the host examined for the platforms it can
    run, a KVM probe and the images that needs included), ``images`` (each platform's driver
    opened: guest images built or found, root filesystems, accelerator probes), ``boots``
    (instances started), ``calibration`` (jobs sized natively), ``analysis``."""
    workloads: dict[str, float] = field(default_factory=dict)
    """By workload (its label): its samples, from preparing them to cleaning up after them."""

    def other_s(self) -> float:
        """What no step accounts for: the host checks before the run, stopping instances,
        writing the store."""
        return max(0.0, self.total_s - sum(self.steps.values()) - sum(self.workloads.values()))

    def to_json(self) -> dict:
        return asdict(self)

    @classmethod
    def from_json(cls, data: dict | None) -> TimeRecord:
        return cls(**_known(cls, data or {}))
