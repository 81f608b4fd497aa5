"""A fixed-rate IMAP client for the consolidation workload's imap role (Debian has no imaptest).

Open loop: request k is due at ``start + k / rate`` whatever became of the earlier ones, and
runs on a worker thread of its own (a pool large enough that a slow server makes requests wait
for it, not for the client); its latency runs from the time it was due, so a server that falls
behind shows it in full (no coordinated omission). One request is one mail session as a mail
client makes it: connect, LOGIN, SELECT INBOX, FETCH the newest message, APPEND a new one,
LOGOUT. Run on the peer as ``python -m hvbench.workloads.imap_client HOST RATE SECONDS``; prints
one line per request, ``seq latency_s`` or ``seq - error``, in the order they were due.
"""

from __future__ import annotations

import argparse
import imaplib
import sys
import time
from concurrent.futures import Future, ThreadPoolExecutor

USER = "hvbench"
PASSWORD = "hvbench"
WORKERS = 32
"""Sessions in flight at most: far above rate × latency while a server keeps up."""
TIMEOUT_S = 10.0
MESSAGE = (
    b"From: client@hvbench.invalid\r\nTo: hvbench@hvbench.invalid\r\nSubject: consolidation\r\n"
    b"\r\n" + b"A line of a mail body that a consolidation test delivers.\r\n" * 40
)
"""About 2.5 KiB: a short mail."""


def session(host: str) -> None:
    """One mail session; raises on any error the server reports."""
    with imaplib.IMAP4(host, timeout=TIMEOUT_S) as imap:
        imap.login(USER, PASSWORD)
        status, data = imap.select("INBOX")
        if status != "OK":
            raise imaplib.IMAP4.error(f"SELECT INBOX: {data!r}")
        count = int(data[0] or 0)
        if count:
            imap.fetch(str(count), "(RFC822)")
        imap.append("INBOX", "", imaplib.Time2Internaldate(time.time()), MESSAGE)
        imap.logout()


def attack(host: str, rate: float, seconds: float) -> list[tuple[int, float | None, str]]:
    """Run the sessions due in ``seconds`` at ``rate`` per second; (seq, latency, error) each."""
    due = int(rate * seconds)
    start = time.monotonic()

    def timed(k: int) -> tuple[int, float | None, str]:
        try:
            session(host)
        except (OSError, imaplib.IMAP4.error) as e:
            return k, None, f"{type(e).__name__}: {e}".replace("\n", " ")
        return k, time.monotonic() - (start + k / rate), ""

    futures: list[Future] = []
    with ThreadPoolExecutor(WORKERS) as pool:
        for k in range(due):
            pause = start + k / rate - time.monotonic()
            if pause > 0:
                time.sleep(pause)
            futures.append(pool.submit(timed, k))
    return [f.result() for f in futures]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("host")
    parser.add_argument("rate", type=float)
    parser.add_argument("seconds", type=float)
    args = parser.parse_args(argv)
    for k, latency, error in attack(args.host, args.rate, args.seconds):
        print(f"{k} {latency:.6f}" if latency is not None else f"{k} - {error}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
