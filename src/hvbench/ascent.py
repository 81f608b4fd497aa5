"""The density ascents of a run (consolidation's ``sets: auto``): which steps to measure, and
where each climb stopped and why. The runner only drives them: it asks ``reaches`` before a
cell and tells ``climbed`` each sample.

An ascent is planned as every other count, one cell per step; it is climbed ``Ascent.climb_count``
times, climb k being its cells' repetition k, so that a bad window ends one climb rather than
the density. A climb skips the steps at or past the first one it did not hold, or that the
host's memory cannot hold. Where a climb stops, it keeps what the host and the clients were
doing at that step: the host's CPU (the clients' apart) from the sample's reading, the host's
memory in use with the step's instances still up, and whether the clients kept their rate
(``Workload.pace``): a stop whose clients fell behind is the harness's (``harness``), not the
platform's. The record is the store's ``AscentRecord``, written as the run goes, so that a
resumed run skips what its climbs stopped at too.
"""

from __future__ import annotations

import psutil

from hvbench.plan import misfits_at, this_host
from hvbench.store import SampleRecord, Store
from hvbench.store.ascent import AscentRecord, AscentStop, read_ascents, write_ascents
from hvbench.study import Cell, Study
from hvbench.workloads.base import ClientPace


class Ascents:
    """A run's ascents, as its climbs go."""

    def __init__(self, study: Study, store: Store, run_id: str) -> None:
        self.study = study
        self.store = store
        self.run_id = run_id
        self.records = read_ascents(store, run_id)

    @staticmethod
    def resumed(store: Store, run_id: str) -> None:
        """Before a run resumes: a climb stopped by a failed sample climbs on from that step,
        measured again as failed samples are."""
        records = read_ascents(store, run_id)
        for record in records.values():
            record.stops = {k: s for k, s in record.stops.items() if s.by != "failed"}
        write_ascents(store, run_id, records)

    def repetitions(self, cell: Cell) -> int | None:
        """The repetitions of an ascent's cell (its climbs); None where it does not ascend."""
        ascent = self.study.workloads[cell.workload_index].ascent()
        return None if ascent is None else ascent.climb_count

    def _record(self, cell: Cell) -> AscentRecord | None:
        """The cell's ascent, made at its first step; None where its workload does not ascend."""
        settings = self.study.workloads[cell.workload_index]
        ascent = settings.ascent()
        if ascent is None:
            return None
        key = f"{cell.platform}|{cell.workload}"
        if key not in self.records:
            self.records[key] = AscentRecord(
                cell.platform,
                cell.workload,
                settings.name,
                ascent.unit,
                ascent.counts,
                ascent.climb_count,
            )
        return self.records[key]

    def reaches(self, cell: Cell, repetition: int) -> bool:
        """Whether this climb reaches the cell, to measure it: not at or past where the climb
        stopped, nor a step this host's memory cannot hold (that stops the climb there)."""
        record = self._record(cell)
        if record is None:
            return True
        stop = record.stops.get(repetition)
        if stop is not None and cell.instances >= stop.count:
            return False
        misfits = misfits_at(self.study, cell.platform, cell.instances, this_host())
        if misfits:
            self._stop(record, repetition, AscentStop(cell.instances, "memory", misfits[0]))
        return not misfits

    def climbed(
        self,
        cell: Cell,
        record: SampleRecord,
        missed: str | None,
        pace: ClientPace | None,
    ) -> None:
        """Note a step of a climb: held, or where the climb stops (a failed sample, an SLO
        missed: by the platform, or by the harness where the clients fell behind), with the
        host's CPU and memory there. Called while the step's instances are still up."""
        ascent = self._record(cell)
        if ascent is None:
            return
        climb = record.repetition
        if missed is None:
            ascent.held[climb] = sorted({*ascent.held.get(climb, []), cell.instances})
            write_ascents(self.store, self.run_id, self.records)
            return
        by = "failed" if record.status != "ok" else "harness" if pace and not pace.kept else "slo"
        h = record.host_cpu
        share = (lambda seconds: seconds / (h.wall_s * h.cores)) if h and h.wall_s > 0 else None
        own = h.instances_s if h else []
        memory = psutil.virtual_memory()
        stop = AscentStop(
            cell.instances,
            by,
            missed,
            host_busy=share(h.busy_s) if h and share else None,
            clients=share(sum(h.clients_s.values())) if h and share and h.clients_s else None,
            instances=share(sum(own)) if share and own and None not in own else None,
            memory_used=1 - memory.available / memory.total,
            clients_kept=pace.line if pace else None,
        )
        self._stop(ascent, climb, stop)

    def _stop(self, ascent: AscentRecord, climb: int, stop: AscentStop) -> None:
        """End a climb at ``stop`` (a lower step than one it already stopped at only)."""
        known = ascent.stops.get(climb)
        if known is None or stop.count < known.count:
            ascent.stops[climb] = stop
        write_ascents(self.store, self.run_id, self.records)
