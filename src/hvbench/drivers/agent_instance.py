"""Instances reached through qemu-guest-agent (qemu, uml, libvirt): one exec path for all.

The agent talks over a serial channel, never the NIC under test. A guest whose agent stops
answering is stopped rather than reused, so that the next cell gets a fresh one.
"""

from __future__ import annotations

import time
from abc import abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass
from typing import ClassVar

from hvbench.drivers.base import Instance
from hvbench.errors import CommandTimeout, InstanceError
from hvbench.guest.agent import AgentSilent, GuestAgent
from hvbench.host.process import ExecResult

DEATH_GRACE_S = 2.0


@dataclass
class AgentInstance(Instance):
    vmm: ClassVar[str] = "the guest"
    """What runs the guest, as error messages name it (QEMU, UML, the domain)."""

    @abstractmethod
    def agent_channel(self) -> GuestAgent | None:
        """The guest's agent connection, or None before the guest started."""

    @abstractmethod
    def kill(self) -> None:
        """Stop the guest now."""

    @abstractmethod
    def last_words(self) -> str:
        """How the VMM ended and what it said last (``last_words``), for "died" errors."""

    def exec(self, argv: Sequence[str], timeout: float, stdin: bytes | None = None) -> ExecResult:
        agent = self.agent_channel()
        if agent is None or not self.alive():
            raise InstanceError(
                f"{self.name}: {self.vmm} is not running any more ({self.last_words()})"
            )
        try:
            return agent.exec(argv, timeout, stdin)
        except AgentSilent as e:
            self.kill()
            raise CommandTimeout(f"{self.name}: the guest hangs ({e}); {self.vmm} stopped") from e
        except CommandTimeout:
            raise
        except InstanceError as e:
            if self._dies_within(DEATH_GRACE_S):
                raise InstanceError(
                    f"{self.name}: {self.vmm} died during {argv[0]} ({self.last_words()})"
                ) from e
            raise

    def _dies_within(self, seconds: float) -> bool:
        """A VMM that was killed closes the agent's channel a moment before it can be seen to
        have exited: look again for a short while before blaming the channel."""
        deadline = time.monotonic() + seconds
        while self.alive():
            if time.monotonic() >= deadline:
                return False
            time.sleep(0.05)
        return True
