"""An sshd of the suite's own, for the tests that reach a "remote" host over ssh (libvirt's
qemu+ssh://, Ansible's fleets): its host key, the client's key, known_hosts and configuration in
a temporary directory, so nothing is written to root's ~/.ssh or /etc/ssh."""

from __future__ import annotations

import subprocess
from pathlib import Path

from conftest import require

SSHD_CONFIG = """\
ListenAddress {address}
Port {port}
HostKey {dir}/host_key
AuthorizedKeysFile {dir}/id.pub
PermitRootLogin prohibit-password
PasswordAuthentication no
KbdInteractiveAuthentication no
UsePAM no
StrictModes no
PidFile none
"""
SSH_CONFIG = """\
IdentityFile {dir}/id
IdentitiesOnly yes
UserKnownHostsFile {dir}/known_hosts
GlobalKnownHostsFile /dev/null
StrictHostKeyChecking accept-new
ConnectTimeout 5
"""
PRIVATE_RUN = ("sh", "-c", 'mount -t tmpfs sshd /run && mkdir /run/sshd && exec "$@"', "sh")
"""sshd wants /run/sshd: a private, empty /run is made for it (in a mount namespace of its own,
which also hides the host's /run, hvbench's ledgers among it)."""


def keys(d: Path) -> Path:
    """The host key and the client's key in ``d``, and the client's configuration; returns its
    path (``ssh -F``)."""
    require(Path("/usr/sbin/sshd").exists(), "sshd (apt-get install openssh-server)")
    for key in ("host_key", "id"):
        subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", d / key], check=True)
    (d / "ssh_config").write_text(SSH_CONFIG.format(dir=d))
    return d / "ssh_config"


def start(d: Path, name: str, address: str, port: int, prefix: tuple[str, ...] = ()):
    """sshd on ``address:port`` with the keys of ``d`` (``keys``), in its own session (kill its
    group to stop it), logging to ``d/name.log``; ``prefix`` runs it elsewhere (ip netns exec)."""
    config = d / name
    config.write_text(SSHD_CONFIG.format(address=address, port=port, dir=d))
    command = [
        *prefix,
        *("unshare", "--mount", "--propagation", "private", "--"),
        *PRIVATE_RUN,
        *("/usr/sbin/sshd", "-D", "-e", "-f", str(config)),
    ]
    with (d / f"{name}.log").open("wb") as log:
        return subprocess.Popen(
            command, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
        )
