"""One QEMU process and the KVM probe: a machine (``qemu_devices.Machine``) started with its
console reader and agent connection (``Guest``), which the qemu driver runs its instances in and
the probe boots a stock guest in to decide whether KVM runs guests here (``kvm_verdict``). Apart
from the qemu driver so that the machine's builder (``qemu_machine``), which the libvirt driver
shares, decides the accelerator without importing a driver."""

from __future__ import annotations

import contextlib
import os
import subprocess
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from qemu.qmp.legacy import QEMUMonitorProtocol

from hvbench.drivers.console import Console, launch
from hvbench.drivers.last_words import VmmFailed, last_words
from hvbench.drivers.qemu_devices import KernelBoot, Machine
from hvbench.errors import HvbenchError, InstanceError
from hvbench.guest import image as guest_image
from hvbench.guest.agent import GuestAgent
from hvbench.host.inventory import PVM_ONLY, kvm_is_pvm_only
from hvbench.host.kvm import AccelVerdict, keep_kvm_verdict, known_kvm_verdict
from hvbench.host.resources import Ledger, Resource

QMP_CONNECT_S = 10.0
PROBE_SECONDS = 25.0
"""How long a stock guest gets to reach its init under KVM before KVM is judged unusable."""


# the KVM probe ----------------------------------------------------------------------------


def kvm_verdict(binary: str, cache: Path | None = None) -> AccelVerdict:
    """Whether KVM can run a stock guest under the QEMU at path ``binary`` here, decided by a
    bounded boot probe of that QEMU and remembered until the host reboots where this user has
    a cache (one with no home directory probes each time)."""
    kept = cache or guest_image.cache_root()
    known = known_kvm_verdict(binary, kept)
    if known is not None:
        return known
    verdict = _probe_kvm(binary, cache)
    keep_kvm_verdict(binary, verdict, kept)
    return verdict


def _probe_kvm(binary: str, cache: Path | None) -> AccelVerdict:
    if not os.path.exists("/dev/kvm"):
        return AccelVerdict("tcg", "no /dev/kvm on this host")
    if not os.access("/dev/kvm", os.R_OK | os.W_OK):
        return AccelVerdict("tcg", "/dev/kvm is not accessible to this user")
    if kvm_is_pvm_only():
        return AccelVerdict("tcg", f"/dev/kvm {PVM_ONLY}")
    img = guest_image.build(cache=cache)
    with _scratch_ledger() as (ledger, workdir):
        machine = Machine(
            type="pc",
            accel="kvm",
            cpu="host",
            vcpus=1,
            memory_mib=256,
            boot=kernel_boot(img, "auto", ""),
            agent_socket=str(workdir / "agent.sock"),
            qmp_socket=str(workdir / "qmp.sock"),
            name="hvbench-kvm-probe",
            binary=binary,
        )
        start = time.monotonic()
        guest = Guest.launch(machine, workdir / "probe", ledger, netns=None)
        try:
            reached = guest.console.wait_for("init", start + PROBE_SECONDS, guest.alive)
        finally:
            guest.kill()
    if reached:
        return AccelVerdict("kvm", f"a stock guest reached init under KVM in {reached:.1f} s")
    why = (
        f"did not reach init in {PROBE_SECONDS:.0f} s"
        if guest.proc.returncode == -9
        else f"made QEMU fail ({guest.last_words()})"
    )
    return AccelVerdict("tcg", f"/dev/kvm is present but a stock guest {why}")


@contextlib.contextmanager
def _scratch_ledger() -> Iterator[tuple[Ledger, Path]]:
    """A ledger and directory of their own for work outside a run (the probe)."""
    with tempfile.TemporaryDirectory(prefix="hvbench-qemu-") as tmp:
        ledger = Ledger(f"qemu-{os.getpid()}-{time.time_ns()}")
        ledger.claim()
        try:
            yield ledger, Path(tmp)
        finally:
            ledger.release_all()


# one QEMU process -------------------------------------------------------------------------


@dataclass
class Guest:
    """A running QEMU process with its console reader and agent connection."""

    machine: Machine
    proc: subprocess.Popen
    process: Resource
    console: Console
    agent: GuestAgent
    started: float
    stderr: Path

    @classmethod
    def launch(cls, machine: Machine, prefix: Path, ledger: Ledger, netns: str | None) -> Guest:
        """Start QEMU (inside ``netns`` if given) and record it in the ledger."""
        proc, process, console, stderr = launch(
            machine.argv(), prefix, ledger, netns, f"{machine.name}: QEMU"
        )
        agent = GuestAgent(machine.agent_socket, machine.name)
        return cls(machine, proc, process, console, agent, console.started, stderr)

    def alive(self) -> bool:
        return self.proc.poll() is None

    def wait_ready(self, deadline: float) -> None:
        """Wait for the agent; raise InstanceError with QEMU's last words if it died."""
        try:
            self.agent.wait_ready(deadline, self.alive)
        except InstanceError as e:
            if not self.alive():
                raise VmmFailed.of(
                    f"{self.machine.name}: QEMU exited",
                    self.proc,
                    stderr=self.stderr,
                    console=self.console.log,
                ) from e
            raise
        self.console.ready()

    def last_words(self) -> str:
        """QEMU's exit status, its stderr (its own errors) and the guest's console."""
        return last_words(self.proc.poll(), stderr=self.stderr, console=self.console.log)

    def kill(self) -> None:
        self.agent.close()
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, 9)
        self.proc.wait()
        self.console.join(5)

    def vcpu_threads(self) -> list[int]:
        """Host thread ids of the vCPUs, from QMP."""
        with self.monitor(time.monotonic() + QMP_CONNECT_S) as qmp:
            cpus = qmp.cmd("query-cpus-fast")
        if not isinstance(cpus, list):
            raise InstanceError(f"{self.machine.name}: query-cpus-fast answered {cpus!r}")
        return [int(c["thread-id"]) for c in cpus if isinstance(c, dict) and "thread-id" in c]

    @contextlib.contextmanager
    def monitor(self, deadline: float) -> Iterator[QEMUMonitorProtocol]:
        """A QMP connection to this QEMU (waiting until ``deadline`` for a QEMU that is still
        making its socket); any QMP failure inside becomes an InstanceError naming the guest."""
        qmp = QEMUMonitorProtocol(self.machine.qmp_socket)
        try:
            while True:
                try:
                    qmp.connect()
                    break
                except Exception:  # the qmp library raises several kinds
                    if time.monotonic() > deadline or not self.alive():
                        raise
                    time.sleep(0.05)
            yield qmp
        except (InstanceError, HvbenchError):
            raise
        except Exception as e:
            raise InstanceError(f"{self.machine.name}: QMP: {type(e).__name__}: {e}") from e
        finally:
            qmp.close()


def kernel_boot(img: guest_image.GuestImage, form: str, append: str) -> KernelBoot:
    """The direct kernel boot of a guest image, its kernel in ``form`` (auto: the uncompressed
    vmlinux where it could be extracted), ``append`` on its command line."""
    if form == "vmlinux" and img.vmlinux is None:
        raise HvbenchError("kernel_form: vmlinux could not be extracted from this kernel; use auto")
    kernel = img.vmlinux if form in ("auto", "vmlinux") and img.vmlinux else img.bzimage
    # a kernel oops ends the guest (panic, then no reboot: QEMU exits) rather than leave it
    # half alive until a workload's timeout: a measurement on such a guest means nothing, and
    # its console's last words say what happened (QEMU 7.2's TCG migration oopsed guests that
    # then hung for the workload's whole timeout, 740 s)
    args = f"console=ttyS0 loglevel=6 panic=-1 oops=panic {append}".strip()
    return KernelBoot(str(kernel), str(img.initrd), args)
