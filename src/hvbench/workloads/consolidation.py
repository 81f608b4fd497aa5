"""consolidation: sets of real Debian servers on one host, each loaded at a fixed rate by the peer.

The consolidation post (seed 003) ran sets of guests (web, imap, app, db, nfs and one idle)
whose clients, on other machines, sent requests at a throttled rate with a response-time
requirement; since every platform then does the same work, the figure of merit is the host CPU
used for it, split by state (user, system, irq, softirq, guest, ...). Here each instance runs its
role's real server, configured and started in ``prepare`` from a directory of its own:

=====  ==================================================  =========================================
role   server (Debian package)                             its client, on the peer, open loop
=====  ==================================================  =========================================
web    nginx serving a generated docroot of 16 files,      vegeta, GET of each file in turn
       1 to 16 KiB; with an nfs instance in its set,
       f9 .. f16 come from its NFSv4 mount of it
app    nginx + PHP-FPM; each request a PHP page that       vegeta, GET /app.php
       connects over PDO to its set's db and reads 20
       rows
db     PostgreSQL, pgbench's tables at scale 1             pgbench --rate --latency-limit, its
                                                           TPC-B-like transaction, rate x seconds
                                                           of them over up to 4 connections
imap   Dovecot (maildir)                                   hvbench's imap_client: LOGIN, SELECT,
                                                           FETCH, APPEND per session
nfs    the kernel NFS server (nfs-kernel-server's          none: web's requests for f9 .. f16;
       rpc.nfsd and rpc.mountd, NFSv4 only, no rpcbind)    its metric: the server's calls and
       exporting f9 .. f16 to its set's web; guests only   NFSv4 operations in the window
idle   nothing: a booted instance                          none
=====  ==================================================  =========================================

Instances reach each other (app -> db, web -> nfs) and their clients over the run network, so
every request crosses the platform's virtual NIC and switch. Natively the servers run on the host,
each in its instance's network namespace; guests, containers and gVisor sandboxes get them in
their root filesystem (``packages``), guests the NFS modules from the guest kernel
(``guest.kernel.MODULES``).

What runs where: web, app, db, imap and idle run on every platform; nfs only in guests, each with
its own kernel and so its own NFS server. A mix with nfs is refused before anything starts on
native and container (``misfits``: the host's kernel NFS server would be one for all instances,
and this lab's host kernel has no nfsd at all) and on gvisor (its Sentry has none). The default
mix leaves nfs out; a study comparing guests with those on one set adds ``nfs: 1`` to the mix and
gives the others one instance fewer than the set (``instances: [5]``): nfs comes last in a set,
so they run the set without it and their web serves every file from its own disk.

Every client sends at a fixed rate whatever the server does (open loop) and each request's
latency runs from the time it was due, so a server that falls behind shows it in full. A role
meets its SLO when it completed at least ``1 - tolerance`` of the requests due (its achieved rate
is within ``tolerance`` of the target) and its 95th percentile is within ``p95_ms``. The clients
run in the run's clients cgroup: their CPU is measured apart and left out of the platform's host
CPU (host/monitor.py); a client that used most of a core and still missed its rate fails the cell
with that reason rather than reporting the platform as slow.

``sets: auto`` measures the density (SPECvirt's tiles): 1, 2, ... sets up to ``max_sets``, one
cell each, until a role misses its SLO (``missed``), a sample fails or the host's memory cannot
hold the next set (``misfits``); the runner stops the ascent there (``workloads.base.Ascent``)
and the report gives per platform the most sets held and the host CPU at that point.
"""

from __future__ import annotations

import contextlib
import csv
import math
import platform
import re
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, Literal, get_args

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    NonNegativeInt,
    PositiveFloat,
    PositiveInt,
    field_validator,
    model_validator,
)

from hvbench.errors import HvbenchError, InstanceError
from hvbench.host.process import SYSTEM_PATH, which
from hvbench.units import format_size
from hvbench.workloads.base import (
    Ascent,
    ClientPace,
    Context,
    Metric,
    Outcome,
    ParseError,
    RawOutput,
    WorkloadSettings,
)
from hvbench.workloads.common import SMALL_COMMAND_S, ScratchWorkload, keep, run

if TYPE_CHECKING:
    from hvbench.drivers.base import Instance, Kernel
    from hvbench.host.cgroup import Cgroup
    from hvbench.host.resources import Resource

RoleName = Literal["web", "imap", "app", "db", "idle", "nfs"]
ROLES: tuple[RoleName, ...] = get_args(RoleName)
"""The fixed order in which a set's ``mix`` is expanded into instance roles; nfs last, so that a
platform naming one instance fewer than the set (``instances: [5]``) runs the set without it."""
NFS_FILES = range(9, 17)
"""The docroot's files (of f1 .. f16) that web serves from its set's nfs instance, if any."""
QUICK_SECONDS = 5.0
SATURATED = 0.9
"""A client that used this share of a core or more and missed its rate could not keep up."""
LATE_SHARE = 0.5
"""A client whose send lag p95 took more than this share of its role's p95 limit (and more than
one request's interval) did not keep its rate: the miss is the harness's before it is the
platform's (``Consolidation.pace``)."""
START_S = 30.0
"""Generating the docroot, initdb, pgbench -i and the servers' start, for the estimate."""
STOP_S = 120.0
"""How long a role's server may take to stop and undo what it did (unmount, unexport)."""
PATH = f"PATH={SYSTEM_PATH}"


class RoleLoad(BaseModel):
    """A role's client and its service level objective."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    rate: PositiveFloat
    """Requests per second the client sends to each instance of the role."""
    p95_ms: PositiveFloat
    """The SLO's latency: 95% of requests within this, counted from when each was due."""
    tolerance: float = 0.02
    """The SLO's rate: at least ``1 - tolerance`` of the requests due completed."""
    quick_rate: PositiveFloat = 2.0
    """The rate under ``--quick`` (low: a TCG guest serves PHP or PostgreSQL slowly)."""


DEFAULT_LOAD: dict[str, RoleLoad] = {
    "web": RoleLoad(rate=50, p95_ms=50, quick_rate=5),
    "app": RoleLoad(rate=10, p95_ms=200),
    "db": RoleLoad(rate=20, p95_ms=100),
    "imap": RoleLoad(rate=5, p95_ms=500),
}
"""The post gives no rates: a few % of a core natively per role, so that four sets stay far
from saturation natively and a large virtualization cost still fits."""


@dataclass(frozen=True)
class Server:
    """How a role's server is started inside an instance and what it needs there."""

    name: str
    port: int
    start: str
    """A POSIX sh script run as ``sh -c start sh DIR ADDRESS DB_ADDRESS``."""
    log: str
    """Its log, relative to DIR: its last lines explain a start that failed."""
    pidfiles: tuple[str, ...]
    """Relative to DIR: the processes ``stop`` ends (TERM, then KILL)."""
    memory: int
    """Bytes it needs in its instance, for refusing a mix the host cannot hold."""
    stop: str = ""
    """A POSIX sh script run after its processes ended, with ``d`` set (unmount, unexport)."""


NGINX = r"""
mkdir -p "$d/www" "$d/tmp"
cat > "$d/nginx.conf" <<EOF
pid $d/nginx.pid;
error_log $d/nginx.log;
worker_processes 1;
events { worker_connections 1024; }
http {
  access_log off;
  default_type application/octet-stream;
  client_body_temp_path $d/tmp/body;
  proxy_temp_path $d/tmp/proxy;
  fastcgi_temp_path $d/tmp/fastcgi;
  uwsgi_temp_path $d/tmp/uwsgi;
  scgi_temp_path $d/tmp/scgi;
  server {
    listen $addr:80;
    root $d/www;
    location ~ \.php\$ {
      include /etc/nginx/fastcgi_params;
      fastcgi_param SCRIPT_FILENAME $d/www\$fastcgi_script_name;
      fastcgi_pass unix:$d/php.sock;
    }
  }
}
EOF
nginx -p "$d" -c "$d/nginx.conf" -e "$d/nginx.log" || exit 1
"""
WEB = (
    r"""
mkdir -p "$d/www"
i=1
while [ $i -le 16 ]; do head -c $((i * 1024)) /dev/urandom > "$d/www/f$i.bin"; i=$((i + 1)); done
if [ -n "$peer" ]; then
  mkdir -p "$d/www/nfs" && busybox modprobe nfsv4 || exit 1
  # a mount tried before its nfsd listens backs off for minutes: wait for the port first
  tries=0
  until timeout 2 bash -c "exec 3<> /dev/tcp/$peer/2049" 2> /dev/null; do
    tries=$((tries + 1))
    [ $tries -gt 300 ] && { echo "no nfsd at $peer" >> "$d/nginx.log"; exit 1; }
    sleep 1
  done
  timeout 300 mount -t nfs4 -o vers=4.2,proto=tcp,retry=4 "$peer:/" "$d/www/nfs" \
    2>> "$d/nginx.log" || { echo "mount of $peer:/ failed" >> "$d/nginx.log"; exit 1; }
  # waits out the server's grace period
  timeout 120 cat "$d/www/nfs/f16.bin" > /dev/null ||
    { echo "no f16.bin on $peer:/" >> "$d/nginx.log"; exit 1; }
fi
"""
    + NGINX
)
APP = (
    r"""
mkdir -p "$d/www"
cat > "$d/www/app.php" <<EOF
<?php
\$db = new PDO('pgsql:host=$peer;dbname=postgres', 'postgres', '',
               [PDO::ATTR_ERRMODE => PDO::ERRMODE_EXCEPTION]);
\$first = random_int(1, 99981);
\$q = \$db->prepare('SELECT aid, abalance FROM pgbench_accounts WHERE aid BETWEEN ? AND ?');
\$q->execute([\$first, \$first + 19]);
echo "<html><body><table>\n";
foreach (\$q as \$row) {
    printf("<tr><td>%d</td><td>%d</td></tr>\n", \$row['aid'], \$row['abalance']);
}
echo "</table></body></html>\n";
EOF
cat > "$d/php-fpm.conf" <<EOF
[global]
pid = $d/php.pid
error_log = $d/php.log
daemonize = yes
[app]
user = www-data
group = www-data
listen = $d/php.sock
listen.mode = 0666
pm = static
pm.max_children = 4
catch_workers_output = yes
EOF
fpm=$(ls /usr/sbin/php-fpm* | sort -V | tail -n 1)
"$fpm" --fpm-config "$d/php-fpm.conf" || exit 1
"""
    + NGINX
)
DB = r"""
bin=$(ls -d /usr/lib/postgresql/*/bin | sort -V | tail -n 1)
mkdir "$d/pg" && chown postgres:postgres "$d/pg" && touch "$d/postgres.log" &&
  chown postgres:postgres "$d/postgres.log" || exit 1
runuser -u postgres -- "$bin/initdb" -N -D "$d/pg" -U postgres -A trust --locale=C -E UTF8 \
  >> "$d/postgres.log" 2>&1 || exit 1
echo "host all all 0.0.0.0/0 trust" >> "$d/pg/pg_hba.conf"
runuser -u postgres -- "$bin/pg_ctl" -D "$d/pg" -l "$d/postgres.log" -w -t 300 \
  -o "-c listen_addresses=$addr -c unix_socket_directories=$d/pg -c shared_buffers=32MB" \
  start > /dev/null || exit 1
"""
IMAP = r"""
mkdir -p "$d/run" "$d/state" "$d/mail" && chown dovecot:dovecot "$d/mail" || exit 1
cat > "$d/dovecot.conf" <<EOF
base_dir = $d/run
state_dir = $d/state
log_path = $d/dovecot.log
protocols = imap
listen = $addr
ssl = no
disable_plaintext_auth = no
auth_mechanisms = plain login
default_internal_user = dovecot
default_login_user = dovenull
first_valid_uid = 1
mail_location = maildir:~/Maildir
passdb {
  driver = static
  args = password=hvbench
}
userdb {
  driver = static
  args = uid=dovecot gid=dovecot home=$d/mail/%u
}
EOF
# its master keeps stderr open: a caller waiting for the end of its output (runc exec) would
# wait for dovecot's
dovecot -c "$d/dovecot.conf" 2>> "$d/dovecot.log" || exit 1
"""
NFS = r"""
mkdir -p "$d/export" /var/lib/nfs/v4recovery || exit 1
for i in $files; do head -c $((i * 1024)) /dev/urandom > "$d/export/f$i.bin"; done
chmod -R a+rX "$d/export"
exec >> "$d/nfs.log" 2>&1
set -x  # the last lines of the log name the step that failed
busybox modprobe nfsd || exit 1
grep -q " /proc/fs/nfsd " /proc/mounts || mount -t nfsd nfsd /proc/fs/nfsd || exit 1
echo 10 > /proc/fs/nfsd/nfsv4gracetime && echo 10 > /proc/fs/nfsd/nfsv4leasetime || exit 1
timeout 60 exportfs -o rw,fsid=0,no_subtree_check,no_root_squash,insecure "*:$d/export" || exit 1
setsid rpc.mountd -F -N 2 -N 3 -u < /dev/null & echo $! > "$d/mountd.pid"
timeout 60 rpc.nfsd -N 3 -U 4 || exit 1
"""
SERVERS: dict[str, Server] = {
    "web": Server(
        "nginx",
        80,
        WEB,
        "nginx.log",
        ("nginx.pid",),
        32 << 20,
        'umount -f -l "$d/www/nfs" 2>/dev/null',
    ),
    "app": Server("nginx+php-fpm", 80, APP, "php.log", ("nginx.pid", "php.pid"), 128 << 20),
    "db": Server("postgres", 5432, DB, "postgres.log", ("pg/postmaster.pid",), 160 << 20),
    "imap": Server("dovecot", 143, IMAP, "dovecot.log", ("run/master.pid",), 48 << 20),
    "nfs": Server(
        "nfsd", 2049, NFS, "nfs.log", ("mountd.pid",), 32 << 20, "rpc.nfsd 0; exportfs -ua"
    ),
}
LISTENING = r"""
tries=0
until ss -Htln "sport = :$port" | grep -q .; do
  tries=$((tries + 1)); [ $tries -gt 300 ] && { echo "not listening on port $port" >&2; exit 1; }
  sleep 0.1
done
for f in $pidfiles; do
  until [ -s "$d/$f" ]; do
    tries=$((tries + 1)); [ $tries -gt 600 ] && { echo "no $f" >&2; exit 1; }
    sleep 0.1
  done
done
"""
STOP = r"""
for f in "$@"; do
  [ -s "$d/$f" ] || continue
  pid=$(head -n 1 "$d/$f"); kill -TERM "$pid" 2>/dev/null || continue
  tries=0
  while kill -0 "$pid" 2>/dev/null && [ $tries -lt 100 ]; do sleep 0.1; tries=$((tries + 1)); done
  kill -KILL "$pid" 2>/dev/null
done
"""


def _default_mix() -> dict[RoleName, int]:
    """One instance of each role but nfs (see ``ConsolidationSettings.mix``)."""
    return {r: 1 for r in ROLES if r != "nfs"}


class ConsolidationSettings(WorkloadSettings):
    name: Literal["consolidation"]
    mix: dict[RoleName, NonNegativeInt] = Field(default_factory=_default_mix)
    """Instances of each role in one set: one of each but nfs, which needs the kernel NFS server
    of a guest (``Consolidation.misfits``); ``nfs: 1`` adds it where every platform is a guest."""
    sets: PositiveInt | Literal["auto"] = 4
    """Sets run at once (the post's 4): every cell runs sets × the set's size instances, unless
    the platform names its own counts. ``auto``: the density, SPECvirt's tiles: 1, 2, ... sets
    until a role misses its SLO, the host's memory cannot hold the next set, or ``max_sets``."""
    max_sets: PositiveInt = 8
    """The upper bound of ``sets: auto``, so that a small host or a test stays bounded."""
    ascents: PositiveInt = 3
    """How many times ``sets: auto`` climbs, each climb one repetition of its cells (the
    study's ``repetitions`` do not apply to them): the density is reported as their spread."""
    seconds: PositiveFloat = 300.0
    """Measured wall time of every client."""
    load: dict[Literal["web", "imap", "app", "db"], RoleLoad] = Field(default_factory=dict)
    """Per role, its client's rate and its SLO; what is not given is DEFAULT_LOAD's."""

    @field_validator("sets", mode="before")
    @classmethod
    def _sets_or_auto(cls, value: Any) -> Any:
        if isinstance(value, str) and value != "auto":
            raise ValueError("a number of sets or auto")
        return value

    @model_validator(mode="before")
    @classmethod
    def _load_over_defaults(cls, data: Any) -> Any:
        """A role's ``load`` names only what differs from DEFAULT_LOAD (``{db: {rate: 50}}``);
        every role's load is kept, so that the cell's stored settings hold each SLO its verdict
        sets the p95 against."""
        if isinstance(data, dict) and isinstance(data.get("load", {}), dict):
            load: dict[str, Any] = {role: d.model_dump() for role, d in DEFAULT_LOAD.items()}
            for role, given in data.get("load", {}).items():
                mine = role in DEFAULT_LOAD and isinstance(given, dict)
                load[role] = {**load[role], **given} if mine else given
            data = {**data, "load": load}
        return data

    @model_validator(mode="after")
    def _valid_mix(self) -> ConsolidationSettings:
        if not any(self.mix.values()):
            raise ValueError("mix: at least one role with a count above 0 (e.g. {web: 1})")
        if self.mix.get("app") and not self.mix.get("db"):
            raise ValueError("mix: app queries the db of its set; add db: 1 to the mix")
        if self.mix.get("nfs") and not self.mix.get("web"):
            raise ValueError("mix: nfs serves part of web's docroot; add web: 1 to the mix")
        for bound in ("max_sets", "ascents"):
            if self.sets != "auto" and bound in self.model_fields_set:
                raise ValueError(f"{bound} is for sets: auto; give sets: auto or drop {bound}")
        return self

    def quick(self) -> ConsolidationSettings:
        """One set of servers, however many the study names; ``sets: auto`` keeps its ascent
        (climbing is what it measures), climbed once, each step in the quick window."""
        update = {"ascents": 1} if self.sets == "auto" else {"sets": 1}
        return self.model_copy(update=update)

    def instance_count(self) -> int | None:
        return None if self.sets == "auto" else self.sets * len(self.set_roles())

    def ascent(self) -> Ascent | None:
        if self.sets != "auto":
            return None
        size = len(self.set_roles())
        return Ascent("sets", [k * size for k in range(1, self.max_sets + 1)], self.ascents)

    def set_roles(self) -> list[str]:
        """One set's roles, in the order of ROLES."""
        return [r for r in ROLES for _ in range(self.mix.get(r, 0))]

    def roles(self, count: int) -> list[str]:
        """The roles of ``count`` instances: whole sets, one after the other."""
        one = self.set_roles()
        return [one[i % len(one)] for i in range(count)]

    def role_load(self, role: str) -> RoleLoad:
        return (DEFAULT_LOAD | self.load)[role]

    def label(self) -> str:
        mix = ",".join(f"{r}:{self.mix[r]}" for r in ROLES if self.mix.get(r))
        rates = ",".join(f"{r}={self.role_load(r).rate:g}/s" for r in ROLES if r in DEFAULT_LOAD)
        sets = f"auto≤{self.max_sets}" if self.sets == "auto" else self.sets
        return f"consolidation {sets}×[{mix}] {rates}"


# --- the clients' results ---------------------------------------------------------------


@dataclass(frozen=True)
class Requests:
    """What a client saw: each due request's latency from its due time (None: failed or
    skipped), and the first error a failed one gave."""

    latencies: list[float | None]
    error: str = ""
    sent_late: list[float] = field(default_factory=list)
    """Of each request sent, how long after it was due the client sent it (seconds): the
    client's own lag, where the tool logs when it sent (vegeta); empty where it does not."""


def vegeta_requests(text: str, rate: float) -> Requests:
    """Requests from ``vegeta encode --to csv``. Request ``seq`` was due ``seq / rate`` after
    the first (vegeta's constant pacer); its latency is counted from then, not from when vegeta
    sent it. A status other than 2xx or an error is a failed request."""
    rows = [r for r in csv.reader(text.splitlines()) if r]
    if not rows:
        raise ParseError("vegeta recorded no request")
    try:
        parsed = [(int(r[0]), int(r[1]), int(r[2]), r[5], int(r[8])) for r in rows]
    except (ValueError, IndexError):
        raise ParseError(f"vegeta CSV row not understood: {','.join(rows[0])[:120]}") from None
    start = min(ts - seq * 1e9 / rate for ts, _, _, _, seq in parsed)
    latencies: list[float | None] = [None] * (max(p[4] for p in parsed) + 1)
    error = ""
    late = [(ts - (start + seq * 1e9 / rate)) / 1e9 for ts, _, _, _, seq in parsed]
    for ts, code, latency, err, seq in parsed:
        if 200 <= code < 300 and not err:
            latencies[seq] = (ts + latency - (start + seq * 1e9 / rate)) / 1e9
        elif not error:
            error = err or f"HTTP status {code}"
    return Requests(latencies, error, late)


def pgbench_split(due: int) -> tuple[int, int]:
    """Connections and transactions per connection for exactly ``due`` transactions, up to 4
    connections. A count rather than ``--time``: pgbench's clock runs while it connects, and a
    server slow to accept connections (PostgreSQL forking backends in a TCG guest) would see
    fewer transactions due, none in a short window, and none counted against it."""
    due = max(1, due)
    clients = next(k for k in (4, 3, 2, 1) if due % k == 0)
    return clients, due // clients


def pgbench_requests(log: str) -> Requests:
    """Requests from pgbench's per-transaction log (``--log`` with ``--rate``): ``client
    transaction time script epoch usec lag``; time is "skipped" for a transaction that
    --latency-limit dropped for starting too late. Latency from its due time = time + lag."""
    latencies: list[float | None] = []
    skipped = 0
    for line in log.splitlines():
        fields = line.split()
        if len(fields) < 7:
            continue
        if fields[2] == "skipped" or fields[2] == "failed":
            latencies.append(None)
            skipped += 1
            continue
        try:
            latencies.append((int(fields[2]) + int(fields[6])) / 1e6)
        except ValueError:
            raise ParseError(f"pgbench log line not understood: {line[:120]}") from None
    if not latencies:
        raise ParseError("pgbench logged no transaction (was it run with --rate and --log?)")
    return Requests(latencies, f"{skipped} transactions skipped (late)" if skipped else "")


def imap_requests(text: str) -> Requests:
    """Requests from imap_client's lines: ``seq latency_s`` or ``seq - error``."""
    latencies: list[float | None] = []
    error = ""
    for line in text.splitlines():
        m = re.fullmatch(r"(\d+) (?:([0-9.]+)|- (.*))", line.strip())
        if not m:
            continue
        if m.group(2) is not None:
            latencies.append(float(m.group(2)))
        else:
            latencies.append(None)
            error = error or m.group(3)
    if not latencies:
        raise ParseError("imap_client printed no request")
    return Requests(latencies, error)


NFSD_STATS = "/proc/net/rpc/nfsd"


def nfsd_counts(text: str) -> tuple[int, int]:
    """The kernel NFS server's RPC calls (``rpc`` line) and NFSv4 operations (``proc4ops``: its
    count of operations, then one counter each) so far, from /proc/net/rpc/nfsd."""
    lines = {ln.split()[0]: ln.split()[1:] for ln in text.splitlines() if ln.split()}
    try:
        return int(lines["rpc"][0]), sum(map(int, lines["proc4ops"][1:]))
    except (KeyError, IndexError, ValueError):
        raise ParseError(f"{NFSD_STATS} has no rpc or proc4ops line: {text[:120]!r}") from None


def nfs_metrics(before: str, after: str) -> list[Metric]:
    """What the nfs role's server did between two reads of its statistics: web's requests for
    the files it serves, and the NFS client's own traffic (lease renewals)."""
    (calls0, ops0), (calls1, ops1) = nfsd_counts(before), nfsd_counts(after)
    return [
        Metric("consolidation.nfs.calls", calls1 - calls0, "count", False),
        Metric("consolidation.nfs.ops", ops1 - ops0, "count", False),
    ]


def rate_held(got: Requests, load: RoleLoad) -> bool:
    """The SLO's rate: at least 1 - tolerance of the requests due completed."""
    done = sum(x is not None for x in got.latencies)
    return done >= (1 - load.tolerance) * len(got.latencies)


def client_saturated(got: Requests, load: RoleLoad, client_cores: float) -> bool:
    """A miss that is the client's: it used SATURATED of a core or more and missed its rate."""
    return client_cores >= SATURATED and not rate_held(got, load)


def percentile(ordered: list[float], q: float) -> float:
    """Nearest-rank percentile of a sorted list (q in 0..1)."""
    return ordered[max(0, math.ceil(q * len(ordered)) - 1)]


def role_metrics(
    role: str, got: Requests, seconds: float, load: RoleLoad, client_cores: float
) -> list[Metric]:
    """A role's requests, achieved rate, latency percentiles and SLO verdict."""
    ok = sorted(x for x in got.latencies if x is not None)
    due = len(got.latencies)
    if not ok:
        raise ParseError(f"none of {due} requests completed: {got.error or 'no error given'}")
    p50, p95, p99 = (percentile(ok, q) * 1000 for q in (0.50, 0.95, 0.99))
    held = rate_held(got, load)
    stem = f"consolidation.{role}"
    metrics = [
        Metric(f"{stem}.requests", len(ok), "count", True),
        Metric(f"{stem}.failed", due - len(ok), "count", False),
        # the clients send at a fixed rate: the achieved one only checks that the work was done
        # (``work_shortfall``); the headline is the latency the role's SLO limits
        Metric(f"{stem}.achieved_per_s", len(ok) / seconds, "requests/s", True),
        Metric(f"{stem}.latency_p50_ms", p50, "ms", False),
        Metric(f"{stem}.latency_p95_ms", p95, "ms", False, headline=True),
        Metric(f"{stem}.latency_p99_ms", p99, "ms", False),
        Metric(f"{stem}.slo_met", float(held and p95 <= load.p95_ms), "0/1", True),
        Metric(f"{stem}.client_cpu_pct", 100 * client_cores, "%", False),
    ]
    if got.sent_late:
        lag = 1000 * percentile(sorted(got.sent_late), 0.95)
        metrics.append(Metric(f"{stem}.send_lag_p95_ms", lag, "ms", False))
    return metrics


# --- the workload ------------------------------------------------------------------------


def _vegeta() -> str:
    """The HTTP clients' program, or a clear error saying how to get it."""
    vegeta = which("vegeta")
    if vegeta is None:
        raise HvbenchError(
            "consolidation: vegeta is missing (./setup.sh --with-consolidation builds it)"
        )
    return vegeta


@dataclass
class RoleServer:
    """A role's server in one instance, and its client's cgroup and files on the peer."""

    role: str
    address: str
    cgroup: Cgroup | None
    peer_dir: Path | None
    peer: str = ""
    """The address of the set's instance it depends on: app's db, web's nfs (if any)."""
    made: list[Resource] = field(default_factory=list)
    """What the run's ledger removes if cleanup never comes (a killed run): the peer's files
    and, where the instance's processes are the host's (native), its servers."""
    unmounted: threading.Event | None = None
    """web with an nfs peer: set when its cleanup has unmounted the peer's export."""


class Consolidation(ScratchWorkload[ConsolidationSettings]):
    """Each instance's directory holds its servers' configuration, data and logs, in the
    instance's scratch root: a native run's is the run's own directory, which goes with the run
    (also by ``hvbench cleanup`` after SIGKILL), not the host's /tmp."""

    name: ClassVar[str] = "consolidation"
    settings_model = ConsolidationSettings
    needs_userland: ClassVar[bool] = True

    def __init__(self, settings: ConsolidationSettings) -> None:
        super().__init__(settings)
        self._running: dict[str, RoleServer] = {}
        """Per instance name."""
        self._mounts: dict[str, list[threading.Event]] = {}
        """Per nfs instance's address, its webs' ``RoleServer.unmounted``: its cleanup stops the
        server only after they unmounted it, since a guest's umount of an NFSv4 mount whose
        server is gone hangs for minutes (the client's last calls retried)."""

    def tools(self) -> list[str]:
        return []

    def packages(self) -> list[str]:
        nfs = ["nfs-kernel-server"] if self.settings.mix.get("nfs") else []
        return ["nginx", "php-fpm", "php-pgsql", "postgresql", "dovecot-imapd", *nfs]

    def seconds(self, quick: bool) -> float:
        return min(self.settings.seconds, QUICK_SECONDS) if quick else self.settings.seconds

    def rate(self, role: str, quick: bool) -> float:
        load = self.settings.role_load(role)
        return min(load.rate, load.quick_rate) if quick else load.rate

    def role(self, instance: Instance, count: int) -> str:
        return self.settings.roles(count)[instance.index]

    def misfits(
        self, count: int, instance_memory: int, host_memory: int, kernel: Kernel = "guest"
    ) -> list[str]:
        """Servers that cannot fit: nfs anywhere but in a guest of its own (``_no_nfsd``); on
        the host (native), all of them together; in a guest or container, the largest one in
        its memory."""
        roles = [r for r in self.settings.roles(count) if r in SERVERS]
        if kernel != "guest" and "nfs" in roles:
            return [
                f"{self.settings.label()}: the nfs role runs the kernel NFS server, "
                f"{self._no_nfsd(kernel)}; run nfs in guests, or leave it out of the mix"
            ]
        if not instance_memory:
            need = sum(SERVERS[r].memory for r in roles)
            if need > host_memory:
                return [
                    f"{self.settings.label()}: the servers of {count} instances need "
                    f"{format_size(need)}, the host has {format_size(host_memory)}; lower sets"
                ]
            return []
        big = max(roles, key=lambda r: SERVERS[r].memory, default=None)
        if big and SERVERS[big].memory > instance_memory:
            return [
                f"{self.settings.label()}: its {big} server needs "
                f"{format_size(SERVERS[big].memory)}, an instance has "
                f"{format_size(instance_memory)}; give the platform more memory"
            ]
        return []

    @staticmethod
    def _no_nfsd(kernel: Kernel) -> str:
        """Why instances on ``kernel`` cannot each serve NFS."""
        if kernel == "sentry":
            return "which gVisor's kernel (the Sentry) does not have"
        release = platform.release()
        if (
            "nfsd" in Path("/proc/filesystems").read_text().split()
            or Path(f"/lib/modules/{release}/kernel/fs/nfsd").is_dir()
        ):
            return (
                "which is the host's, one for every instance sharing its kernel (native, "
                "container): they cannot each have one"
            )
        return f"and this host's kernel ({release}) has no nfsd"

    def _peer_of(self, instance: Instance, ctx: Context, role: str) -> str:
        """The address of the instance's set's first ``role`` instance ("" if it has none)."""
        size, count = len(self.settings.set_roles()), ctx.instance_count
        first = instance.index - instance.index % size
        roles = self.settings.roles(count)
        for index in range(first, min(first + size, count)):
            if roles[index] == role:
                return ctx.network.address(index)
        return ""

    def prepare(self, instance: Instance, ctx: Context) -> None:
        role = self.role(instance, ctx.instance_count)
        address = instance.address
        if address is None:
            raise InstanceError(f"{instance.name}: role {role}: no address on the run's network")
        if role == "idle":
            self._running[instance.name] = RoleServer(role, address, None, None)
            return
        if role in ("web", "app"):
            _vegeta()  # before any server starts
        super().prepare(instance, ctx)
        d = self.scratch(instance)
        peer = self._peer_of(instance, ctx, {"app": "db", "web": "nfs"}.get(role, ""))
        if role == "app" and not peer:
            raise HvbenchError(
                f"consolidation: instance {instance.index} (app) has no db in its set"
            )
        running = RoleServer(role, address, None, None, peer)
        if role == "web" and peer:
            running.unmounted = threading.Event()
            self._mounts.setdefault(peer, []).append(running.unmounted)
        self._running[instance.name] = running
        server = SERVERS[role]
        pidfiles, files = " ".join(server.pidfiles), " ".join(map(str, NFS_FILES))
        script = (f"{PATH}\nd=$1 addr=$2 peer=$3 port={server.port} pidfiles='{pidfiles}' "
                  f"files='{files}'\n{server.start}{LISTENING}")  # fmt: skip
        run(instance, ["chmod", "755", d], timeout=SMALL_COMMAND_S)
        started = instance.exec(["sh", "-c", script, "sh", d, address, peer], 600)
        if not started.ok:
            tail = (
                instance.exec(["tail", "-n", "5", f"{d}/{server.log}"], SMALL_COMMAND_S)
                .text()
                .strip()
            )
            said = " | ".join(tail.splitlines()) or started.describe_failure()
            raise InstanceError(
                f"{instance.name}: role {role}: {server.name} did not start: {said}"
            )
        network = ctx.network
        if not instance.ends_its_processes:
            for pidfile in server.pidfiles:
                pid = int(Path(d, pidfile).read_text().split()[0])
                running.made.append(network.ledger.add_process(pid))
        if role == "nfs":  # no client: web's requests are its load
            return
        peer_dir = Path(tempfile.mkdtemp(prefix=f"hvbench-{network.run_id}-{instance.name}-"))
        running.made.append(network.ledger.add("path", str(peer_dir)))
        running.peer_dir = peer_dir
        running.cgroup = network.clients().child(instance.name)
        if role == "db":
            # tables, rows and primary keys; no vacuum, which takes a TCG guest minutes
            init = ["pgbench", "-i", "-I", "dtgp", "-q", "-s", "1", "-h", address,
                    "-U", "postgres", "postgres"]  # fmt: skip
            self._client(instance, ctx, init, 600)

    def _client(
        self, instance: Instance, ctx: Context, argv: list[str], timeout: float
    ) -> tuple[str, float]:
        """Run a client on the peer in its cgroup; its stdout and the CPU (core-seconds) it
        used. A client that exits with an error fails the cell naming role and tool."""
        running = self._running[instance.name]
        cgroup = running.cgroup
        if cgroup is None:
            raise InstanceError(f"{instance.name}: role {running.role} has no client on the peer")
        before = cgroup.cpu_seconds()
        result = ctx.network.peer_run(cgroup.argv(argv), timeout)
        after = cgroup.cpu_seconds()
        out = result.stdout.decode(errors="replace")
        if result.returncode != 0:
            err = result.stderr.decode(errors="replace").strip().splitlines()[-3:]
            raise InstanceError(
                f"{instance.name}: role {running.role}: client {Path(argv[0]).name} failed "
                f"(exit {result.returncode}): {' | '.join(err) or '(no output)'}"
            )
        return out, sum(after.values()) - sum(before.values())

    def _load(
        self, instance: Instance, ctx: Context
    ) -> tuple[Requests, float, list[str], list[RawOutput]]:
        """Drive the role's server for the measured seconds; what its client saw, its CPU
        (core-seconds), its command and its raw output."""
        running = self._running[instance.name]
        role, addr, peer = running.role, running.address, running.peer_dir
        if peer is None:
            raise InstanceError(f"{instance.name}: role {role} has no client on the peer")
        seconds, rate = self.seconds(ctx.quick), self.rate(role, ctx.quick)
        timeout = self.timeout(ctx.quick)
        if role in ("web", "app"):
            vegeta = _vegeta()
            nfs = NFS_FILES if running.peer else ()
            files = [f"/nfs/f{i}.bin" if i in nfs else f"/f{i}.bin" for i in range(1, 17)]
            paths = ["/app.php"] if role == "app" else files
            (peer / "targets").write_text("".join(f"GET http://{addr}{p}\n" for p in paths))
            argv = [vegeta, "attack", f"-rate={rate:g}/1s", f"-duration={seconds:g}s",
                    "-timeout=30s", "-max-body=0", f"-targets={peer}/targets",
                    f"-output={peer}/results"]  # fmt: skip
            ctx.barrier()
            _, cpu = self._client(instance, ctx, argv, timeout)
            text, _ = self._client(instance, ctx, [vegeta, "encode", "--to", "csv",
                                                   f"{peer}/results"], timeout)  # fmt: skip
            return vegeta_requests(text, rate), cpu, argv, [keep("vegeta", argv, text)]
        if role == "db":
            load = self.settings.role_load(role)
            clients, each = pgbench_split(round(rate * seconds))
            argv = ["pgbench", "-n", "-c", str(clients), "-j", "1", f"--rate={rate:g}",
                    f"--latency-limit={load.p95_ms:g}", f"--transactions={each}",
                    "--log", f"--log-prefix={peer}/pgbench", "-h", addr, "-U", "postgres",
                    "postgres"]  # fmt: skip
            ctx.barrier()
            out, cpu = self._client(instance, ctx, argv, timeout)
            log = "".join(p.read_text() for p in sorted(peer.glob("pgbench.*")))
            raw = [keep("pgbench", argv, out), keep("pgbench --log", argv, log)]
            try:
                return pgbench_requests(log), cpu, argv, raw
            except ParseError as e:
                said = [ln.strip() for ln in out.splitlines() if "transactions" in ln]
                raise ParseError(f"{e}; pgbench: {' | '.join(said) or '(no summary)'}") from None
        argv = [sys.executable, "-m", "hvbench.workloads.imap_client", addr, f"{rate:g}",
                f"{seconds:g}"]  # fmt: skip
        ctx.barrier()
        out, cpu = self._client(instance, ctx, argv, timeout)
        return imap_requests(out), cpu, argv, [keep("imap_client", argv, out)]

    def measure(self, instance: Instance, ctx: Context) -> Outcome:
        running = self._running[instance.name]
        seconds = self.seconds(ctx.quick)
        if running.role == "idle":
            ctx.barrier()
            time.sleep(seconds)
            return Outcome()
        if running.role == "nfs":
            ctx.barrier()  # after it: web's mount in its prepare is not the window's work
            t0 = time.monotonic()
            before = run(instance, ["cat", NFSD_STATS], SMALL_COMMAND_S).text()
            time.sleep(max(0.0, seconds - (time.monotonic() - t0)))
            after = run(instance, ["cat", NFSD_STATS], SMALL_COMMAND_S).text()
            argv = ["cat", NFSD_STATS]
            raw = [keep("nfsd stats before", argv, before), keep("nfsd stats after", argv, after)]
            return Outcome(metrics=nfs_metrics(before, after), raw=raw)
        t0 = time.monotonic()
        got, cpu, argv, raw = self._load(instance, ctx)
        cores = cpu / max(1e-6, time.monotonic() - t0)
        load = self.settings.role_load(running.role)
        rate = self.rate(running.role, ctx.quick)
        server = SERVERS[running.role]
        try:
            metrics = role_metrics(running.role, got, seconds, load, cores)
        except ParseError as e:
            raise InstanceError(
                f"{instance.name}: role {running.role}: client {Path(argv[0]).name} could not "
                f"reach {server.name} at {running.address}: {e}"
            ) from None
        if client_saturated(got, load, cores):
            raise InstanceError(
                f"{instance.name}: role {running.role}: its client {Path(argv[0]).name} could "
                f"not hold {rate:g}/s: it used {cores:.2f} of a core (saturated), so the miss "
                f"is the client's, not the platform's; lower the rate or the sets"
            )
        return Outcome(metrics=metrics, raw=raw)

    def missed(self, outcomes: list[Outcome]) -> str | None:
        """The first role whose SLO was missed, with its p95 and the requests it failed."""
        for index, outcome in enumerate(outcomes):
            got = {m.name: m.value for m in outcome.metrics if m.value is not None}
            for name, value in got.items():
                if name.endswith(".slo_met") and value == 0:
                    stem = name.removesuffix(".slo_met")
                    role = stem.split(".")[-1]
                    limit = self.settings.role_load(role).p95_ms
                    return (
                        f"instance {index} ({role}) missed its SLO: p95 "
                        f"{got[f'{stem}.latency_p95_ms']:.0f} ms (limit {limit:g}), "
                        f"{got[f'{stem}.failed']:.0f} of "
                        f"{got[f'{stem}.failed'] + got[f'{stem}.requests']:.0f} requests failed"
                    )
        return None

    def pace(self, outcomes: list[Outcome]) -> ClientPace | None:
        """Whether the clients that log when they sent (vegeta: web and app) sent on time: one
        whose send lag p95 took more than LATE_SHARE of its role's p95 limit, and more than one
        request's interval at its rate, did not keep its rate, and a miss there is the
        harness's (its CPU, where the clients run) before the platform's. With the clients'
        CPU, the largest share of a core one used."""
        late, lags, cpu = [], [], []
        for index, outcome in enumerate(outcomes):
            got = {m.name: m.value for m in outcome.metrics}
            for name, lag in got.items():
                if not name.endswith(".send_lag_p95_ms") or lag is None:
                    continue
                stem = name.removesuffix(".send_lag_p95_ms")
                role = stem.split(".")[-1]
                limit = self.settings.role_load(role).p95_ms
                lags.append(lag)
                rate = got.get(f"{stem}.achieved_per_s") or 0.0
                if lag > LATE_SHARE * limit and (rate <= 0 or lag > 1000 / rate):
                    late.append(
                        f"instance {index} ({role}) sent {lag:.0f} ms late (p95; limit {limit:g})"
                    )
            cpu += [v for n, v in got.items() if n.endswith(".client_cpu_pct") and v is not None]
        if not lags:
            return None
        used = f"; clients at most {max(cpu):.0f}% of a core" if cpu else ""
        if late:
            return ClientPace(False, f"clients fell behind: {', '.join(late)}{used}")
        return ClientPace(
            True, f"clients on schedule: send lag p95 at most {max(lags):.1f} ms{used}"
        )

    def cleanup(self, instance: Instance, ctx: Context) -> None:
        running = self._running.pop(instance.name, None)
        if running and running.role in SERVERS and instance.name in self._scratch:
            d = self.scratch(instance)
            server = SERVERS[running.role]
            script = f"{STOP}{server.stop}\ntrue\n"
            stop = ["env", f"d={d}", PATH, "sh", "-c", script, "sh", *server.pidfiles]
            if running.role == "nfs":
                for unmounted in self._mounts.pop(running.address, []):
                    unmounted.wait(STOP_S + 30)
            with contextlib.suppress(InstanceError):  # a dead instance has no server left
                instance.exec(stop, STOP_S)
        if running and running.unmounted:
            running.unmounted.set()
        for res in running.made if running else []:
            ctx.network.ledger.release(res)
        super().cleanup(instance, ctx)

    def estimate_seconds(self, quick: bool) -> float:
        return self.seconds(quick) + START_S

    def fixed_time_seconds(self, quick: bool) -> float:
        return self.seconds(quick)
