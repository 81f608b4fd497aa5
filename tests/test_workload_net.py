"""net iperf3 / iperf / latency: parsers against real output (incl. iperf3's error JSON and
tools killed half-way) and quick runs on native against the run's peer."""

from __future__ import annotations

from pathlib import Path

import pytest
from polling import wait_for
from workload_env import native_instances, run_workload

from hvbench.errors import InstanceError, StudyError
from hvbench.host.network import PEER_ADDRESS
from hvbench.study import parse_study
from hvbench.workloads import net as net_module
from hvbench.workloads import workload_class
from hvbench.workloads.base import Context, ParseError
from hvbench.workloads.iperf import Iperf, IperfSettings, parse_iperf_csv
from hvbench.workloads.iperf3 import Iperf3, Iperf3Settings, parse_iperf3_json
from hvbench.workloads.latency import Latency, LatencySettings, parse_sockperf

FIX = Path(__file__).parent / "fixtures"


def by_name(metrics):
    return {m.name: m for m in metrics}


def test_iperf3_out_and_in():
    out = by_name(parse_iperf3_json((FIX / "iperf3/out.json").read_text(), "out"))
    assert out["net.iperf3.outbound_gbps"].value == pytest.approx(19.9349826073145)
    assert out["net.iperf3.outbound_retransmits"].value == 2
    assert out["net.iperf3.outbound_sender_cpu_pct"].value == pytest.approx(58.23011697494162)
    assert out["net.iperf3.outbound_receiver_cpu_pct"].value == pytest.approx(41.336515966107854)
    inbound = by_name(parse_iperf3_json((FIX / "iperf3/in.json").read_text(), "in"))
    assert inbound["net.iperf3.inbound_gbps"].value == pytest.approx(16.704887397378078)
    # with --reverse the peer ("remote") sends
    assert inbound["net.iperf3.inbound_sender_cpu_pct"].value == pytest.approx(55.58532779652736)


def test_iperf3_error_json_and_killed():
    with pytest.raises(ParseError, match="iperf3: unable to connect to server: Connection refused"):
        parse_iperf3_json((FIX / "iperf3/refused.json").read_text(), "out")
    with pytest.raises(ParseError, match="no JSON"):
        parse_iperf3_json((FIX / "iperf3/killed.json").read_text(), "out")
    text = (FIX / "iperf3/out.json").read_text()
    with pytest.raises(ParseError, match="cut short"):
        parse_iperf3_json(text[: len(text) // 2], "out")


def test_iperf2_csv():
    m = parse_iperf_csv((FIX / "iperf/out.csv").read_text(), "out", 5)
    assert m.name == "net.iperf.outbound_gbps"
    assert m.value == pytest.approx(
        (22554456940 + 22521976898 + 14517706582 + 14431015097 + 14393270419) / 1e9
    )
    inbound = parse_iperf_csv((FIX / "iperf/in.csv").read_text(), "in", 5)
    assert inbound.value == pytest.approx(
        (7150234845 + 4445250158 + 13471381803 + 3299179952 + 5127214758) / 1e9
    )
    with pytest.raises(ParseError, match="expected 4"):
        parse_iperf_csv((FIX / "iperf/out.csv").read_text(), "out", 4)
    refused = (FIX / "iperf/refused.csv").read_text() + (FIX / "iperf/refused.err").read_text()
    with pytest.raises(ParseError, match="Connection refused"):
        parse_iperf_csv(refused, "out", 1)
    with pytest.raises(ParseError, match="no CSV"):
        parse_iperf_csv((FIX / "iperf/killed.csv").read_text(), "out", 5)


def test_sockperf():
    m = by_name(parse_sockperf((FIX / "sockperf/pp.txt").read_text()))
    assert m["net.latency.rtt_p50_us"].value == 13.510
    assert m["net.latency.rtt_p99_us"].value == 21.071
    assert m["net.latency.rtt_mean_us"].value == 20.638
    for bad in ("refused.txt", "killed.txt"):
        with pytest.raises(ParseError, match="summary"):
            parse_sockperf((FIX / "sockperf" / bad).read_text())


STUDY = """name: net
platforms:
  native: {driver: native}
workloads:
  - WORKLOAD
"""


@pytest.mark.parametrize(
    ("workload", "found"),
    [
        ("{name: net, tool: netperf}", "netperf"),
        ("{name: net, seconds: -5}", "seconds"),
        ("{name: net, window: big}", "window"),
        ("{name: net, directions: [up]}", "up"),
        ("{name: disk, size: lots}", "size"),
        ("{name: net, tool: latency, parallel: 5}", "parallel"),
    ],
)
def test_bad_settings_are_one_line(workload, found):
    with pytest.raises(StudyError, match=found) as e:
        parse_study(STUDY.replace("WORKLOAD", workload), "s.yaml")
    assert "\n" not in str(e.value) and str(e.value).startswith("s.yaml:5:")


def test_defaults_are_the_papers():
    assert workload_class("net", None) is Iperf3
    s = parse_study(STUDY.replace("WORKLOAD", "{name: net}"), "s.yaml").workloads[0]
    assert (s.parallel, s.window, s.seconds, s.directions) == (5, 256 << 10, 900, ["in", "out"])
    assert workload_class("net", "latency") is Latency


@pytest.fixture(scope="module")
def native_pair():
    with native_instances(2) as env:
        yield env


@pytest.mark.parametrize(
    ("workload", "metrics"),
    [
        (
            Iperf3(Iperf3Settings(name="net")),
            ["net.iperf3.inbound_gbps", "net.iperf3.outbound_gbps"],
        ),
        (
            Iperf(IperfSettings(name="net", tool="iperf", parallel=2)),
            ["net.iperf.inbound_gbps", "net.iperf.outbound_gbps"],
        ),
        (Latency(LatencySettings(name="net", tool="latency")), ["net.latency.rtt_p99_us"]),
    ],
    ids=["iperf3", "iperf", "latency"],
)
def test_quick_run_on_two_native_instances(native_pair, workload, metrics):
    """Two instances at once: each has its own server on the peer, and both finish."""
    instances, network = native_pair
    outcomes = run_workload(workload, instances, network)
    for outcome in outcomes:
        got = by_name(outcome.metrics)
        assert all(got[name].value > 0 for name in metrics)
    assert not workload._servers
    roots = {i.scratch_root for i in instances}  # the instances' own, until they stop
    live = [r for r in network.ledger.live if r.kind in ("process", "path") and r.name not in roots]
    assert live == []


def test_bad_iperf3_seconds_are_refused_as_iperf3_would_misread_them():
    """iperf3 reads --time as a whole number: 0.5 s would run until the cell's timeout."""
    with pytest.raises(StudyError, match="expected whole seconds, as iperf3 reads --time") as e:
        parse_study(STUDY.replace("WORKLOAD", "{name: net, seconds: 0.5}"), "s.yaml")
    assert "\n" not in str(e.value)
    iperf2 = "{name: net, tool: iperf, seconds: 0.5}"
    assert parse_study(STUDY.replace("WORKLOAD", iperf2), "s.yaml").workloads[0].seconds == 0.5


def test_the_next_iperf3_client_waits_for_its_server_to_listen_again(native_pair, monkeypatch):
    """iperf3's server opens a new listener after each test, and refuses a client that comes
    before it: the next direction starts once the server's log says it listens again, and a
    server still taken by a test is one line naming it."""
    instances, network = native_pair
    instance = instances[0]
    workload = Iperf3(Iperf3Settings(name="net"))
    workload.prepare(instance, Context(network=network, quick=True, instance_count=1))
    try:
        workload._wait_for_next_test(instance)  # listening for the first test
        port = workload.port(instance)
        client = f"iperf3 -c {PEER_ADDRESS} -p {port} -t 60 > /dev/null 2>&1 & echo $!"
        pid = instance.spawn(client, timeout=60).text().strip()
        log = workload.server_log(instance)
        wait_for(lambda: "Accepted connection" in log.read_text(), 30, "the server takes the test")
        monkeypatch.setattr(net_module, "SERVER_READY_S", 1.0)
        with pytest.raises(InstanceError, match="took no new test within 1 s"):
            workload._wait_for_next_test(instance)
        instance.exec(["kill", pid], timeout=60)
        monkeypatch.setattr(net_module, "SERVER_READY_S", 30.0)
        workload._wait_for_next_test(instance)
        assert log.read_text().count("Server listening on ") == 2
    finally:
        workload.cleanup(instance, Context(network=network, quick=True, instance_count=1))
