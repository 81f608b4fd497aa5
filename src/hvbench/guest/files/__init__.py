"""Files shipped into every guest, by their path inside the guest."""

EXEC_WRAPPER = "/usr/lib/hvbench/exec"
DISK_LIST = "/usr/lib/hvbench/disks"
SWITCH_ROOT = "/usr/lib/hvbench/switch-root"
"""The initramfs's ``rdinit=`` for the root-filesystem form: mounts the root disk, switches."""

GUEST_FILES = {
    "/etc/inittab": "inittab",
    "/etc/hvbench/rc": "rc",
    "/etc/hvbench/rc-late": "rc-late",
    "/etc/qemu/qemu-ga.conf": "qemu-ga.conf",
    EXEC_WRAPPER: "exec",
    DISK_LIST: "disks",
    SWITCH_ROOT: "switch-root",
}
"""Guest path -> file name in this package."""
