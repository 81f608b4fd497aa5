"""Nested labs for the drivers this host cannot run itself: Xen, and KVM with stock guests.

A lab is an L1 machine booted under QEMU TCG (see PLATFORMS.md) whose root filesystem is the
host's own, read-only over 9p, with a tree of the lab's own layered above it and a tmpfs on top
(overlayfs): hvbench runs in L1 exactly as checked out, with its virtualenv and the host's image
cache, and writes nothing on the host except into the lab's exchange directory, a second 9p share
mounted at ``/lab``. The runs' work directories are on a scratch disk (a tmpfs has neither room
nor direct I/O, and SQLite's WAL fails on 9p).

Two hypervisors (``Hypervisor``): ``XEN``, the hypervisor with its dom0 as L1 (Xen and its tools
from Debian's packages, ``apt-get download`` and ``dpkg-deb -x``: nothing is installed on the
host); and ``KVM``, the Debian kernel as L1 on a CPU with SVM and nested paging (QEMU's TCG
emulates AMD's SVM, not VMX), kvm_amd loaded from the kernel package's modules.

Under two levels of emulation everything is 7-60 times slower than on the host: these are
functional tests of the Xen and KVM paths, never performance figures.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import warnings
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor, wait
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType

import psutil
import pytest

import hvbench
from hvbench.guest import cpio, kernel, userland
from hvbench.guest import image as guest_image
from hvbench.host.process import failed
from hvbench.runner import needs_of
from hvbench.store import Store
from hvbench.study import parse_study

XEN_VERSION = "4.17"
XEN_PACKAGES = (
    f"xen-hypervisor-{XEN_VERSION}-amd64",
    f"xen-utils-{XEN_VERSION}",
    "xen-utils-common",
    "xenstore-utils",
    "libxencall1",
    "libxendevicemodel1",
    "libxenevtchn1",
    "libxenforeignmemory1",
    "libxengnttab1",
    "libxenhypfs1",
    f"libxenmisc{XEN_VERSION}",
    "libxenstore4",
    "libxentoolcore1",
    "libxentoollog1",
    "libyajl2",
    "qemu-system-xen",
    "libvirt-daemon-driver-xen",
)
"""Xen, its tools and their libraries that the host lacks; qemu-system-xen is HVM's device
model and the qdisk backend; libvirt-daemon-driver-xen is libvirtd's libxl driver (the host has
libvirtd itself)."""

INITRD_MODULES = ("virtio_pci", "9pnet_virtio", "9p", "overlay")
"""What L1's first stage needs to assemble its root."""
L1_MODULES = "loop bridge veth tun virtio_blk crc32c_generic ext4"
"""What hvbench needs in L1 under either hypervisor."""
XEN_ARGS = "console=com1 com1=115200,8n1 dom0_mem={mem}M,max:{mem}M loglvl=warning"

FIRST_STAGE = """#!/bin/sh
# the lab's first stage: the host's root read-only, the lab's tree above it, a tmpfs on top,
# and the exchange directory at /lab; then the test's script in that root
export PATH=/bin
mount -t proc proc /proc
mount -t sysfs sys /sys
mount -t devtmpfs dev /dev
modprobe -a virtio_pci 9pnet_virtio 9p overlay
mkdir -p /host /tree /upper /root
opts=trans=virtio,version=9p2000.L,msize=512000
mount -t 9p -o $opts,ro,cache=loose host /host
mount -t 9p -o $opts,ro tree /tree
mount -t tmpfs -o size=70% upper /upper
mkdir -p /upper/u /upper/w
mount -t overlay -o lowerdir=/tree:/host,upperdir=/upper/u,workdir=/upper/w root /root
mkdir -p /root/lab
mount -t 9p -o $opts lab /root/lab
echo "lab: root ready"
exec chroot /root /bin/sh /lab/stage2.sh
"""

SECOND_STAGE = """#!/bin/sh
# the lab's second stage: the hypervisor's setup, then the test's commands, then power off
export PATH={path}/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
export HOME=/root HVBENCH_IMAGE_CACHE={image_cache} PYTHONPATH={pythonpath}
exec > /lab/stage2.log 2>&1
set -x
mount -t proc proc /proc
# L1's heartbeat: its userspace writes its uptime and load every few seconds, so that a silence
# means stuck, not slow (HEARTBEAT_S, _stuck); poweroff ends it. Written beside, then renamed:
# a poweroff between the truncation and the write left the host an empty heartbeat to read
( set +x; while :; do cat /proc/uptime /proc/loadavg > /lab/heartbeat.new
  mv -f /lab/heartbeat.new /lab/heartbeat; sleep {heartbeat}; done ) &
mount -t sysfs sys /sys
mount -t devtmpfs dev /dev
mkdir -p /dev/pts && mount -t devpts devpts /dev/pts
# what udev makes on a real dom0: Xen's block hotplug script locks on "stat /dev/stdin"
ln -s /proc/self/fd /dev/fd
ln -s /proc/self/fd/0 /dev/stdin && ln -s /proc/self/fd/1 /dev/stdout
ln -s /proc/self/fd/2 /dev/stderr
mount -t tmpfs run /run
# L1's logs are its own and start empty, as on a fresh machine: nothing the host or another test
# left in the host's /var/log (a directory a daemon's log needs, say) is seen in L1
mount -t tmpfs log /var/log
# the kernel's module loader: the host's kmod wants binary indexes this kernel's tree lacks
printf '#!/bin/sh\nexec busybox modprobe "$@"\n' > /run/modprobe && chmod +x /run/modprobe
echo /run/modprobe > /proc/sys/kernel/modprobe
busybox modprobe -a {modules} {l1_modules}
# the runs' work directories (data disks included) on a disk of its own, as on a real host: a
# tmpfs has neither room nor direct I/O for loop devices. Nothing else is mounted over the
# host's tree, where the checkout under test may be anywhere (/tmp in CI).
mkdir -p /var/tmp/hvbench
mkfs.ext4 -q -F /dev/vda && mount /dev/vda /var/tmp/hvbench
{setup}
set +x
(
{commands}
) > /lab/output.log 2>&1
echo $? > /lab/exit-code
sync
poweroff -f
"""


XEN_SETUP = """\
mount -t xenfs xenfs /proc/xen
mkdir -p /run/xen /run/xenstored /var/lib/xen /var/log/xen
oxenstored --no-fork --pid-file /run/xenstored.pid > /lab/xenstored.log 2>&1 &
tries=0
until [ -S /run/xenstored/socket ] || [ $tries -gt 300 ]; do sleep 0.2; tries=$((tries + 1)); done
xen-init-dom0
xenconsoled --pid-file=/run/xenconsoled.pid
echo "lab: toolstack ready"
"""
KVM_SETUP = """\
# QEMU's TCG gives L1 AMD's SVM with nested paging: kvm_amd, whose /dev/kvm runs stock guests
dmesg | grep -iE 'kvm|svm' | tail -5
test -c /dev/kvm && echo "lab: /dev/kvm ready"
"""


@dataclass(frozen=True)
class Hypervisor:
    """What one kind of lab boots and sets up in L1."""

    name: str
    packages: tuple[str, ...]
    """Debian packages unpacked into the lab's tree (layered over the host's root)."""
    modules: str
    """Kernel modules L1 loads for the hypervisor."""
    setup: str
    """Shell commands that make L1 ready (a toolstack, a check)."""
    cpu: str
    path: str = ""
    """Directories before the usual PATH in L1."""


XEN = Hypervisor(
    "xen",
    XEN_PACKAGES,
    "xenfs xen-evtchn xen-gntdev xen-gntalloc xen-privcmd xen-blkback xen-netback",
    XEN_SETUP,
    # plain "max" crashes a PV dom0 with a page fault in create_bounce_frame (PLATFORMS.md);
    # with XSAVE (and so AVX and protection keys), guest processes die of SIGSEGV now and then
    "max,-smap,-smep,-pku,-xsave",
    f"/usr/lib/xen-{XEN_VERSION}/bin:",
)
KVM = Hypervisor("kvm", (), "kvm_amd vhost_net", KVM_SETUP, "EPYC,+svm,+npt")


LIBVIRT_SETUP = """\
# the directories a packaged libvirtd's service makes: the host's root has them only after a test
# ran a libvirtd there, and L1's /run and /var/log are its own
mkdir -p /run/lock /var/lib/libvirt /var/log/libvirt /var/cache/libvirt
# libvirt 9 wants a CPU model that decodes the host's CPU, and each of its models needs VME or
# SEP, which these nested CPUs lack (QEMU's TCG has no VME, Xen hides SEP); one of the lab's own,
# in L1's overlay only
cat > /usr/share/libvirt/cpu_map/x86_hvbench-lab.xml <<'XML'
<cpus><model name='hvbench-lab'><decode host='on' guest='on'/><feature name='fpu'/></model>
</cpus>
XML
sed -i "s|<include filename='x86_486.xml'/>|<include filename='x86_hvbench-lab.xml'/>&|" \\
    /usr/share/libvirt/cpu_map/index.xml
"""


def libvirtd(uri: str) -> str:
    """Shell commands that start libvirtd in L1 (without systemd; it stops with L1) and wait
    until it answers at ``uri``: for the tests and studies that use libvirt."""
    return f"""\
libvirtd -d
tries=0
until virsh -c {uri} version > /dev/null 2>&1 || [ $tries -gt 100 ]; do
    sleep 0.3; tries=$((tries + 1))
done
"""


LIBVIRTD_XEN = (
    LIBVIRT_SETUP
    + """\
# the host's QEMU driver, seen through dom0's root, wants a user the host lacks; a dom0 needs none
rm /usr/lib/x86_64-linux-gnu/libvirt/connection-driver/libvirt_driver_qemu.so
"""
    + libvirtd("xen:///system")
)
"""libvirtd with its libxl driver (xen:///system) in dom0."""

LIBVIRTD_KVM = (
    LIBVIRT_SETUP
    + """\
# libvirt's QEMU driver, its domains run as root (L1's /etc is an overlay: the host's is untouched)
if ! grep -q '^libvirt-qemu:' /etc/passwd; then
    echo 'libvirt-qemu:x:64055:64055::/var/lib/libvirt:/usr/sbin/nologin' >> /etc/passwd
    echo 'libvirt-qemu:x:64055:' >> /etc/group
fi
# no private /dev per domain: libvirt's copy of this devtmpfs has no pty for QEMU's serial console
# ("Failed to create PTY"); L1 is the lab's own, so a domain shares its /dev
printf 'user = "root"\\ngroup = "root"\\nnamespaces = []\\n' > /etc/libvirt/qemu.conf
virtlogd -d
"""
    + libvirtd("qemu:///system")
)
"""libvirtd with its QEMU driver (qemu:///system, domain type kvm) in the KVM lab's L1."""


MORE_RUN = """\
# one more run in this boot, if its study is there: its output and store in /lab
more_run() {{
    [ -f "/lab/$1.yaml" ] || return 0
    start=$(date +%s)
    {hvbench} run "/lab/$1.yaml" --quick --no-report --db "sqlite:////var/tmp/hvbench/$1.db" \\
        > "/lab/$1.log" 2>&1
    echo "$1-exit: $?"
    echo "$1-seconds: $(($(date +%s) - start))"
    cp "/var/tmp/hvbench/$1.db" "/lab/$1.db"
}}
"""
"""A lab's shell function for one more run in its boot, ``more_run NAME``, on the study a test
put at ``exchange/NAME.yaml`` (none there: no run); ``LabRun.more`` reads what it left."""

CONSOLIDATION_PEER = """\
# consolidation's clients run on the peer (L1) in a cgroup v2 of the run's; vegeta is the
# virtualenv's
mount -t cgroup2 cgroup2 /sys/fs/cgroup
export PATH="$(dirname {hvbench}):$PATH"
"""
"""What L1 needs before a run with consolidation, whose peer it is."""


def lab_cache(hv: Hypervisor) -> Path:
    return guest_image.cache_root() / f"{hv.name}lab"


@dataclass(frozen=True)
class LabFiles:
    """What a lab boots: the hypervisor (Xen's; None for KVM, whose L1 is the kernel itself),
    L1's kernel and first stage, the lab's tree, and the image cache L1 reads (its path taken
    here, once: a test may point the variable that names it elsewhere for a while)."""

    hypervisor: Hypervisor
    xen: Path | None
    kernel: Path
    initrd: Path
    tree: Path
    image_cache: Path


def _run(argv: list[str], cwd: Path | None = None) -> None:
    proc = subprocess.run(argv, cwd=cwd, capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        raise RuntimeError(failed(" ".join(argv[:3]), proc))


def _versions(hv: Hypervisor, kern: kernel.Kernel) -> str:
    """The candidate versions of the packages and the kernel: an update makes a new lab."""
    out = subprocess.run(
        ["apt-cache", "policy", *hv.packages], capture_output=True, text=True, check=True
    ).stdout
    return hashlib.sha256((out + kern.release + FIRST_STAGE).encode()).hexdigest()[:12]


def prepare(hv: Hypervisor) -> LabFiles:
    """Download and unpack the hypervisor's packages and write L1's first stage, once per
    version."""
    kern = kernel.fetch("amd64", guest_image.cache_root() / "kernels")
    root = lab_cache(hv) / _versions(hv, kern)
    xen = root / "xen.elf" if hv is XEN else None
    files = LabFiles(
        hv, xen, kern.bzimage, root / "first-stage.cpio", root / "tree", guest_image.cache_root()
    )
    with guest_image.locked(lab_cache(hv)):
        if (root / ".complete").exists():
            return files
        shutil.rmtree(root, ignore_errors=True)
        root.mkdir(parents=True)
        files.tree.mkdir()
        with tempfile.TemporaryDirectory(dir=root) as tmp:
            os.chmod(tmp, 0o755)  # apt's download sandbox user must be able to write there
            if hv.packages:
                _run(["apt-get", "download", *hv.packages], cwd=Path(tmp))
            for deb in sorted(Path(tmp).glob("*.deb")):
                _run(["dpkg-deb", "-x", str(deb), str(files.tree)])
        # L1 runs this kernel, whose modules the host's root lacks: /lib is /usr/lib there
        modules = files.tree / "usr" / "lib" / "modules"
        modules.mkdir(parents=True, exist_ok=True)
        (modules / kern.release).symlink_to(kern.modules_dir)
        if xen:
            packed = next((files.tree / "boot").glob(f"xen-{XEN_VERSION}-amd64.gz"))
            xen.write_bytes(
                subprocess.run(["gzip", "-dc", str(packed)], capture_output=True, check=True).stdout
            )
        _write_first_stage(kern, files.initrd)
        (root / ".complete").write_text("")
    return files


def _write_first_stage(kern: kernel.Kernel, out: Path) -> None:
    entries: dict[str, cpio.Entry] = {}
    add = functools.partial(cpio.add, entries)

    for d in ("/dev", "/proc", "/sys"):
        add(cpio.directory(d))
    add(cpio.chardev("/dev/console", 5, 1))
    add(cpio.regular("/bin/busybox", Path("/bin/busybox").read_bytes(), executable=True))
    for applet in ("sh", "mount", "mkdir", "modprobe", "chroot", "echo"):
        add(cpio.symlink(f"/bin/{applet}", "busybox"))
    add(cpio.regular("/init", FIRST_STAGE.encode(), executable=True))
    modules = Path("/lib/modules") / kern.release
    for rel in kernel.module_closure(kern, INITRD_MODULES):
        add(cpio.regular(str(modules / rel), (kern.modules_dir / rel).read_bytes()))
    add(cpio.regular(str(modules / "modules.dep"), (kern.modules_dir / "modules.dep").read_bytes()))
    with out.open("wb") as f:
        cpio.write(f, entries)


@dataclass
class LabResult:
    exit_code: int | None
    """The test commands' exit status; None if L1 never got to write it."""
    output: str
    console: str
    seconds: float
    stuck: str | None = None
    """Why L1 was taken for stuck (its kernel's panic, its soft-lockup line held for a minute, or
    no word from it for ``SILENT_FOR``), when the boot was ended for that rather than waited
    out."""
    load: float = 0.0
    """The host's highest 1-minute load average during the boot. L1's deadlines (a guest's boot,
    the KVM probe's 25 s) are missed when the host's CPUs have more to run than the lab: seen
    with the load at 12-25 on 2 CPUs, a failure of the host's load, not of the code."""
    ended: int | None = None
    """L1's QEMU's exit status where it ended by itself: L1 powered off, or reset (-no-reboot
    ends QEMU then); None where it was killed (stuck, out of time, the session's end)."""

    def unfinished(self) -> str:
        """Why L1 did not write its commands' exit status, for a message."""
        if self.stuck:
            return self.stuck
        if self.ended is not None:
            return (
                f"L1's QEMU ended by itself (status {self.ended}) before L1's commands did: "
                "L1 reset (a triple fault, or a panic: its console's end says which)"
            )
        return "the lab's time ran out"

    def last_cell(self) -> str:
        """The last cell hvbench in L1 said it finished, without its outcome: how far a boot
        set aside got, the next cell being where it stuck (``SILENT_FOR``)."""
        done = [ln.partition(": ")[0] for ln in self.output.splitlines() if ln.startswith("rep ")]
        return done[-1] if done else "none"

    def why(self, exchange: Path) -> str:
        """Where the boot's console, logs and stores are, how far it got and the host's load,
        for a message."""
        return (
            f"the boot's files: {exchange}; the last cell done: {self.last_cell()}; "
            f"host load up to {self.load:.1f} on {CPUS} CPUs"
        )


CPUS = os.cpu_count() or 1


STUCK = re.compile(rb"soft lockup - CPU#\d+ stuck for (\d+)s![^\r\n]*")
STUCK_FOR = 60
"""Seconds of a soft lockup after which L1 is taken for lost. Nested SVM as QEMU's TCG emulates
it now and then leaves an L2 vCPU's thread spinning in L1's kernel for good (seen once in CI:
stuck from 190 s to the boot's limit); a shorter lockup can be host load pausing TCG's threads."""


HEARTBEAT_S = 5
"""Seconds between L1's heartbeats: its userspace writes its uptime and load to
``/lab/heartbeat`` (``SECOND_STAGE``) whatever hvbench in it is doing, so that a silence means
L1 is stuck, not that it is slow."""

SILENT_FOR = 120
"""Seconds without a heartbeat after which L1 is taken for stuck: 24 heartbeats missed. Before
the heartbeats, a stuck boot was waited out for six minutes of silence from L1's console and
files, about ten minutes a stuck boot in all (7 of 12 boots on 2026-11-29: docs/labs.md)."""

BOOT_SILENT_FOR = 360
"""Seconds without a write from L1 (its console, a log in the exchange directory, its scratch
disk) after which it is taken for stuck before its first heartbeat, while its kernel and first
stage boot: a minute or less, even for Xen's dom0."""


PANIC = re.compile(rb"Kernel panic - not syncing: [^\r\n]*")
"""L1's kernel gave up, and spins in its panic loop until the boot's limit. Seen in the KVM
lab on 2026-11-26, as libvirt-kvm's domain booted: the thread of its vCPU in L1 took
general protection faults until its stack overflowed ("TASK stack guard page was hit" in
exc_general_protection, all registers zero), then "corrupted stack end detected inside
scheduler"."""


def _stuck(exchange: Path) -> str | None:
    """The console's kernel panic, its soft-lockup line once a lockup has lasted ``STUCK_FOR``
    seconds, no heartbeat for ``SILENT_FOR`` seconds (with what the last one said), or, before
    the first heartbeat, a silence of ``BOOT_SILENT_FOR`` seconds."""
    console = exchange / "console.log"
    text = console.read_bytes()
    if panic := PANIC.search(text):
        return panic.group(0).decode(errors="replace")
    for match in STUCK.finditer(text):
        if int(match.group(1)) >= STUCK_FOR:
            return match.group(0).decode(errors="replace")
    heartbeat = exchange / "heartbeat"
    if heartbeat.exists():
        if time.time() - heartbeat.stat().st_mtime > SILENT_FOR:
            return f"no heartbeat from L1 for {SILENT_FOR} s ({_last_beat(heartbeat)})"
        return None
    written = (console, exchange / "var-tmp.raw", *exchange.glob("*.log"))
    last = max(p.stat().st_mtime for p in written if p.exists())
    if time.time() - last > BOOT_SILENT_FOR:
        return f"no word from L1 for {BOOT_SILENT_FOR} s, before its first heartbeat"
    return None


def _last_beat(heartbeat: Path) -> str:
    """What L1's last heartbeat said: its uptime and load (/proc/uptime, /proc/loadavg)."""
    fields = heartbeat.read_text(errors="replace").split()
    try:
        return f"the last: L1 up {float(fields[0]):.0f} s, load {float(fields[2]):.2f}"
    except (IndexError, ValueError):
        return "the last heartbeat unreadable"


@dataclass
class CpuTrace:
    """L1's QEMU's CPU time, sampled while the boot is watched: over a silence, a QEMU that
    spun (a vCPU looping in L1's kernel, or in an L2 guest) is told from one that waited."""

    pid: int
    samples: list[tuple[float, float]] = field(default_factory=list)
    """(monotonic seconds, CPU seconds) pairs."""

    def sample(self) -> None:
        with contextlib.suppress(psutil.Error):
            times = psutil.Process(self.pid).cpu_times()
            self.samples.append((time.monotonic(), times.user + times.system))

    def over(self, seconds: float, cpus: int) -> str:
        """The QEMU's CPU time over the last ``seconds`` and whether it spun or waited."""
        if len(self.samples) < 2:
            return "L1's QEMU's CPU time not sampled"
        end = self.samples[-1]
        start = next(s for s in self.samples if s[0] >= end[0] - seconds)
        span, used = end[0] - start[0], end[1] - start[1]
        spun = span > 0 and used >= 0.5 * cpus * span
        return f"L1's QEMU used {used:.0f} CPU-s in the last {span:.0f} s on {cpus} vCPU(s): " + (
            "spinning" if spun else "waiting"
        )


L1_CPUS = 1
"""L1's vCPUs. One, so that the other tests keep the host's other CPU while a lab boots beside
them (``Labs``). With two, L1 took both, TCG's vCPU threads waiting for each other (at an equal
share an L2 guest's kernel was still booting after 90 s, against 20 alone), and the labs beside
the other tests made the suite 45 minutes (2026-11-28, CPUs 95% busy for the labs' 27 minutes).
With one, the KVM lab's boot took 10 minutes alone against 8, on one CPU. A lab that runs alone
(``bench/lab_study.py``, the Xen lab's opt-in consolidation) takes two."""

L1_AUTOGROUP_NICE = -5
"""The nice value of L1's autogroup (its own, as it is a session of its own): ahead of the other
tests (pytest's, a guest's), so that its one vCPU is not starved by a test's two."""


SALVAGED = re.compile(r".+\.(log|db|db-wal|xml|json)")
"""What is copied off L1's scratch disk after a boot: logs (the guests' consoles among them),
stores, domain XML and reports; not the guests' disks."""
SALVAGED_MAX = 64 << 20


def _debugfs(scratch: Path, request: str) -> str:
    return subprocess.run(
        ["debugfs", "-R", request, str(scratch)], capture_output=True, text=True, check=False
    ).stdout


def _salvage(scratch: Path, into: Path) -> None:
    """Copy the logs and stores on L1's scratch disk (the runs' work directories, the stores
    written there) into ``into``: what a failed boot left for reading after the fact, read
    with e2fsprogs rather than mounted. L1 was killed, not shut down: the journal is replayed
    first. A disk L1 never formatted yields nothing."""
    subprocess.run(
        ["e2fsck", "-p", "-E", "journal_only", str(scratch)], capture_output=True, check=False
    )
    pending = [""]
    while pending:
        directory = pending.pop()
        for line in _debugfs(scratch, f'ls -p "{directory or "/"}"').splitlines():
            fields = line.split("/")  # /inode/mode/uid/gid/name/size/
            if len(fields) != 8 or fields[5] in (".", "..", "lost+found"):
                continue
            mode, name, size = fields[2], fields[5], fields[6]
            path = f"{directory}/{name}"
            if mode.startswith("04"):
                pending.append(path)
            elif SALVAGED.fullmatch(name) and size.isdigit() and int(size) <= SALVAGED_MAX:
                out = into / path.lstrip("/")
                out.parent.mkdir(parents=True, exist_ok=True)
                _debugfs(scratch, f'dump "{path}" "{out}"')


def run(
    files: LabFiles,
    exchange: Path,
    commands: str,
    timeout: float,
    memory_mib: int = 2560,
    scratch_size: int = 4 << 30,
    stop: threading.Event | None = None,
    cpus: int = L1_CPUS,
) -> LabResult:
    """Boot the lab, run ``commands`` (shell) in L1 with /lab = ``exchange``, power off (or
    kill L1 once ``stop`` is set: the session ended). The console, the logs and, in
    ``scratch/``, what L1 left on its scratch disk stay in ``exchange``."""
    hv = files.hypervisor
    exchange.mkdir(parents=True, exist_ok=True)
    (exchange / "stage2.sh").write_text(
        SECOND_STAGE.format(
            path=hv.path,
            modules=hv.modules,
            l1_modules=L1_MODULES,
            image_cache=files.image_cache,
            # the checkout under test, wherever the virtualenv's hvbench was installed from
            pythonpath=Path(hvbench.__file__).resolve().parents[1],
            setup=hv.setup,
            commands=commands,
            heartbeat=HEARTBEAT_S,
        )
    )
    for stale in ("exit-code", "output.log", "heartbeat"):
        (exchange / stale).unlink(missing_ok=True)
    shutil.rmtree(exchange / "scratch", ignore_errors=True)
    scratch = exchange / "var-tmp.raw"
    with scratch.open("wb") as f:
        f.truncate(scratch_size)
    share = "security_model=none,multidevs=remap"
    if files.xen:  # Xen boots dom0's kernel and first stage as its modules
        boot = ["-kernel", str(files.xen), "-append", XEN_ARGS.format(mem=memory_mib // 2),
                "-initrd", f"{files.kernel} console=hvc0 quiet,{files.initrd}"]  # fmt: skip
    else:
        boot = ["-kernel", str(files.kernel), "-append", "console=ttyS0 quiet",
                "-initrd", str(files.initrd)]  # fmt: skip
    # setpriv: L1's QEMU is killed when pytest goes, also where no ``finally`` runs (SIGTERM,
    # SIGKILL). The system's QEMU 7.2: 10.0 (backports) emulates nested SVM no better, as in 2
    # of 3 KVM-lab boots under it (2026-11-26) an L2 guest died or hung during iperf3.
    argv = [
        "setpriv", "--pdeathsig", "KILL",
        "qemu-system-x86_64",
        "-accel", "tcg,thread=multi",
        "-cpu", hv.cpu,
        "-smp", str(cpus),
        "-m", str(memory_mib),
        "-nographic", "-no-reboot",
        *boot,
        "-virtfs", f"local,path=/,mount_tag=host,readonly=on,{share}",
        "-virtfs", f"local,path={files.tree},mount_tag=tree,readonly=on,{share}",
        "-virtfs", f"local,path={exchange},mount_tag=lab,{share}",
        "-drive", f"file={scratch},format=raw,if=virtio,cache=unsafe",
    ]  # fmt: skip
    started = time.monotonic()
    console = exchange / "console.log"
    with console.open("wb") as log:
        proc = subprocess.Popen(
            argv, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
            start_new_session=True,
        )  # fmt: skip
        # L1 ahead of the session's other tests that run beside it (Labs)
        with contextlib.suppress(OSError):
            Path(f"/proc/{proc.pid}/autogroup").write_text(str(L1_AUTOGROUP_NICE))
        stuck, load, cpu = None, os.getloadavg()[0], CpuTrace(proc.pid)
        try:
            while stuck is None and time.monotonic() - started < timeout:
                if stop and stop.is_set():
                    break
                with contextlib.suppress(subprocess.TimeoutExpired):
                    proc.wait(min(10, max(0.1, timeout - (time.monotonic() - started))))
                    break
                cpu.sample()
                stuck, load = _stuck(exchange), max(load, os.getloadavg()[0])
            if stuck and stuck.startswith("no heartbeat"):
                stuck = f"{stuck}; {cpu.over(SILENT_FOR, cpus)}"
        finally:  # also on Ctrl-C: the lab's QEMU and its scratch disk go with the test
            ended = proc.poll()
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, 9)
            proc.wait()
            _salvage(scratch, exchange / "scratch")
            scratch.unlink()
    code_file = exchange / "exit-code"
    output = exchange / "output.log"
    return LabResult(
        int(code_file.read_text()) if code_file.exists() else None,
        output.read_text(errors="replace") if output.exists() else "",
        console.read_text(errors="replace"),
        time.monotonic() - started,
        stuck,
        load,
        ended,
    )


HVBENCH = Path(sys.executable).parent / "hvbench"
"""The virtualenv's command, the same path in L1 (its root is the host's)."""


@dataclass
class LabRun:
    """What one boot of the lab left: its output, the exchange directory with the store it
    wrote (``results.db``), and the run it made there."""

    result: LabResult
    exchange: Path
    run_id: str
    set_aside: list[str] = field(default_factory=list)
    """Why each boot before this one was set aside (L1 booted again)."""

    @property
    def db(self) -> str:
        return f"sqlite:///{self.exchange / 'results.db'}"

    def store(self) -> Store:
        return Store(self.db)

    def count(self, what: str) -> int:
        """A count the lab's commands printed after the run ("loops: 0")."""
        for line in self.result.output.splitlines():
            if line.startswith(f"{what}: "):
                return int(line.split(": ", 1)[1])
        raise AssertionError(f"the lab printed no {what!r} count:\n{self.result.output[-3000:]}")

    def more(self, name: str) -> tuple[Store, str]:
        """The store and run id of one more run in the lab's boot (``MORE_RUN``), which must
        have passed."""
        log = self.exchange / f"{name}.log"
        assert self.count(f"{name}-exit") == 0, log.read_text()[-3000:]
        print(f"lab: {name} took {self.count(f'{name}-seconds')} s")
        run_id = next(ln.split()[1] for ln in log.read_text().splitlines() if ln.startswith("run "))
        return Store(f"sqlite:///{self.exchange / name}.db"), run_id

    def report(self) -> subprocess.CompletedProcess:
        """The host's ``hvbench report`` of the lab's run, in Markdown."""
        return subprocess.run(
            [str(HVBENCH), "report", self.run_id, "--db", self.db, "--format", "md"],
            capture_output=True, text=True, check=False,
        )  # fmt: skip


def build_images(study: str, name: str) -> None:
    """The guest image a study needs, and its root filesystem if it needs one, built here
    where it takes seconds (minutes for a root filesystem not yet cached) rather than in L1,
    which finds them in the shared cache."""
    needs = needs_of(parse_study(study, name))
    image = guest_image.build(needs.tools)
    if needs.userland:
        userland.build(needs.tools, image, needs.packages)


FAULT = re.compile(
    rb"(Kernel panic - not syncing|BUG:|Oops:|general protection fault|KVM internal error"
    rb"|KVM: entry failed)[^\r\n]*"
)
"""A kernel's word that it faulted (L1's, or an L2 guest's on its console), or QEMU's that KVM
failed to run its guest. None appears in a boot where all went well."""
FAILED_RUN = re.compile(r"^(\S+)-exit:? ([1-9]\d*)$", re.MULTILINE)
"""A run in the lab's commands that failed: its ``<name>-exit <status>`` line."""
GUEST_LOST = re.compile(
    r"the guest hangs \(|(?:died during \S+|the domain exited) \((?:exit status 0;"
    r"|.*shutting down, reason=shutdown\))|MicroVMStoppedWithError",
    re.DOTALL,
)
"""A failed sample's error where an L2 guest was lost without a word on its console: it stopped
answering (hvbench stops a guest whose agent is silent past the command's time), or it ended
itself, at boot or in the middle of a command: QEMU (run with -no-reboot) exited 0, or libvirt's
log of the domain says the guest shut it down, or Firecracker stopped the microVM on an error of
its vCPU's run (``MicroVMStoppedWithError``; two guests in the opt-in run of 2026-11-29, one as it
booted, one as it copied kernbench's tree, their consoles without a fault). hvbench stops a guest
by killing QEMU or destroying its domain, and a stock kernel's panic is on its console (``FAULT``):
what ends a guest silently is a reset, as a triple fault makes. Seen in the KVM lab: libvirt-kvm's
guest reset during iperf3 (1 of 10 sessions, 2026-11-27); in CI on 2026-11-28, pc-kvm's guest
silent during iperf3, then libvirt-kvm's reset twice as it booted, in the same boot of L1, while
the microVMs' twelve cells around them passed."""


def _fault(exchange: Path) -> str | None:
    """The first fault (``FAULT``) on L1's console or on an L2 guest's (among the logs copied
    off the scratch disk), and where."""
    for log in (exchange / "console.log", *sorted((exchange / "scratch").rglob("*.log"))):
        if log.exists() and (found := FAULT.search(log.read_bytes())):
            return f"{found.group(0).decode(errors='replace')} ({log.relative_to(exchange)})"
    return None


def _guest_lost(exchange: Path) -> str | None:
    """The first failed sample (in the stores the lab's runs left in ``exchange``, or on L1's
    scratch disk where L1 did not get to copy them) whose guest was lost (``GUEST_LOST``), with
    its cell."""
    for db in (*sorted(exchange.glob("*.db")), *sorted((exchange / "scratch").glob("*.db"))):
        store = Store(f"sqlite:///{db}")
        for run in store.runs():
            cells = {c.id: c for c in store.cells(run.id)}
            for sample in store.samples(run.id):
                if sample.error and GUEST_LOST.search(sample.error):
                    cell = cells[sample.cell_id]
                    where = db.relative_to(exchange)
                    return f"{cell.platform}'s guest lost in {cell.workload_name} ({where})"
    return None


def _emulation_failed(exchange: Path, result: LabResult) -> str | None:
    """Why a boot is taken for a failure of the nested emulation (TCG's SVM), not of the code
    under test: L1 stuck (``_stuck``), or a run that failed in a boot where a kernel or KVM
    faulted (``_fault``) or a guest was lost (``_guest_lost``). A run that failed
    otherwise is hvbench's failure, which no second boot may hide; one with a fault fails
    again in the second boot if it is hvbench's."""
    if result.stuck:
        return f"L1 stuck ({result.stuck})"
    if result.exit_code is None and result.ended is not None:
        return result.unfinished()
    failed = [name for name, _ in FAILED_RUN.findall(result.output)]
    if failed and (fault := _fault(exchange) or _guest_lost(exchange)):
        return f"{', '.join(failed)} failed where the emulation faulted: {fault}"
    return None


BOOTS = 3
"""Boots of L1 for one lab run, where the nested emulation fails. Two were not enough in CI on
2026-11-28, with the host's load under 2: the KVM lab's first boot went silent after
libvirt-kvm's cells, its second locked up as microvm-auto's guest booted. A stuck boot is ended
within about two minutes of its last heartbeat."""


def _set_aside(exchange: Path, name: str) -> Path:
    """Move what a boot left in ``exchange`` (all but the studies, the second stage and the
    boots set aside before) to ``exchange/name``, for the next boot's to take its place."""
    aside = exchange / name
    aside.mkdir()
    for path in exchange.iterdir():
        if path.suffix not in (".yaml", ".sh") and not path.name.startswith("boot-"):
            path.rename(aside / path.name)
    return aside


@dataclass(frozen=True)
class Boot:
    """What a lab's module asks of its one boot (its ``lab_boot()``): L1's hypervisor, the
    study at /lab/study.yaml and the commands that run it (``{hvbench}`` is the command), the
    other studies those may run (``more_run NAME``), the time all boots have, L1's size."""

    hypervisor: Hypervisor
    study: str
    commands: str
    timeout: float
    more: dict[str, str] = field(default_factory=dict)
    memory_mib: int = 2560
    scratch_size: int = 4 << 30
    cpus: int = L1_CPUS


def made_ready(boot: Boot, exchange: Path) -> LabFiles:
    """The boot's studies written into ``exchange``, the images they need built here
    (``build_images``) and L1's files (``prepare``)."""
    for name, study in {"study": boot.study, **boot.more}.items():
        (exchange / f"{name}.yaml").write_text(study)
        build_images(study, f"{boot.hypervisor.name}-lab-{name}.yaml")
    return prepare(boot.hypervisor)


def run_study(
    boot: Boot, files: LabFiles, exchange: Path, stop: threading.Event | None = None
) -> LabRun:
    """One boot of the lab (``made_ready`` first), booted again, up to ``BOOTS`` in all, where
    the nested emulation failed (``_emulation_failed``). Fails unless L1 finished and hvbench
    started a run."""
    script, left, set_aside = boot.commands.format(hvbench=HVBENCH), boot.timeout, []
    for number in range(1, BOOTS + 1):
        result = run(
            files, exchange, script, left, boot.memory_mib, boot.scratch_size,
            stop=stop, cpus=boot.cpus,
        )  # fmt: skip
        left -= result.seconds
        why = _emulation_failed(exchange, result)
        if not why or number == BOOTS or left <= 0 or (stop and stop.is_set()):
            break
        aside = _set_aside(exchange, f"boot-{number}")
        set_aside.append(
            f"{boot.hypervisor.name} lab: {why} after {result.seconds:.0f} s; booted again "
            f"({result.why(aside)})"
        )
    assert result.exit_code is not None, (
        f"L1 did not finish ({result.unfinished()}; {result.why(exchange)}):\n"
        f"{result.console[-3000:]}"
    )
    run_id = next(
        (ln.split()[1] for ln in result.output.splitlines() if ln.startswith("run ")), None
    )
    assert run_id, (
        f"hvbench did not start a run in L1 ({result.why(exchange)}):\n{result.output[-3000:]}"
    )
    return LabRun(result, exchange, run_id, set_aside)


OUTCOMES = (Exception, pytest.skip.Exception, pytest.fail.Exception)
"""What a lab module's ``lab_boot()`` or the build of its files may raise: its tests'
outcome, raised again in its fixture."""


class Labs:
    """The session's nested labs, booted one after another in a thread of their own from the
    session's start (conftest.py), while its other tests run, L1 ahead of them
    (``L1_AUTOGROUP_NICE``). Each lab module's fixture waits for its own (``booted``). What
    depends on the environment, which a test may change for a while, is read before any test
    runs (``made_ready``); the boots themselves read none of it."""

    def __init__(self) -> None:
        self.stop = threading.Event()
        """Set as the session ends: a boot still running is killed."""
        self._pool = ThreadPoolExecutor(1, thread_name_prefix="lab")
        self._boots: dict[str, Future[LabRun] | BaseException] = {}

    def start(self, module: ModuleType, exchange: Path) -> None:
        """The boot that ``module`` asks for (its ``lab_boot()``), made ready here and booted in
        the background; a skip or a failure on the way is its tests' outcome."""
        ask: Callable[[], Boot] = module.lab_boot
        try:
            files = made_ready(boot := ask(), exchange)
        except OUTCOMES as e:
            self._boots[module.__name__] = e
        else:
            self._boots[module.__name__] = self._pool.submit(
                run_study, boot, files, exchange, self.stop
            )

    def booted(self, module: str) -> LabRun:
        """The lab of ``module``, once booted; each boot set aside before it said as a warning,
        which pytest's summary shows also when the tests pass: it costs CI minutes."""
        boot = self._boots[module]
        if isinstance(boot, BaseException):
            raise boot
        lab = boot.result()
        for why in lab.set_aside:
            warnings.warn(why, stacklevel=2)
        print(f"{module}: {lab.result.seconds:.0f} s, host load up to {lab.result.load:.1f}")
        return lab

    def finished(self) -> None:
        """Wait until every boot has ended, whatever its outcome (its tests say it)."""
        futures = [b for b in self._boots.values() if isinstance(b, Future)]
        wait(futures)

    def close(self) -> None:
        """End the boots: the one running is killed (its files kept), the others never start."""
        self.stop.set()
        self._pool.shutdown(wait=True, cancel_futures=True)
