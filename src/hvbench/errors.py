"""Errors that end in one clear line for the user, never a traceback."""


class HvbenchError(Exception):
    """An error whose message is meant for the user as it is; exit code 2 unless said otherwise."""

    exit_code = 2


class StudyError(HvbenchError):
    """A study file that cannot be run: the message names file, line, field, expected and found."""


class ToolMissing(HvbenchError):
    """A program hvbench needs is not on this host; the message says how to install it."""


class InstanceError(Exception):
    """An instance failed (crashed, hung, answered garbage). Fails the current cell, not the run."""


class StartFailed(InstanceError):
    """Some of a group of instances started together did not become ready (all are stopped)."""

    def __init__(self, message: str, failed: int) -> None:
        super().__init__(message)
        self.failed = failed


class CommandTimeout(InstanceError):
    """A command inside an instance ran past its timeout and was stopped."""
