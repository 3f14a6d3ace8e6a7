"""Child process: a WAL writer and reader on the confluent client (librdkafka) take steps
while the broker's client-metrics subscription (KIP-714) makes them push telemetry.
A child, so that librdkafka killing the process (an assert, a signal) is seen by the
test as this process's exit, not as the test dying.

Usage: python telemetry_child.py CONFIG_JSON PHASES. ``CONFIG_JSON`` is the endpoint
config (with ``client_id`` and ``debug=telemetry``: librdkafka's telemetry lines are
what is counted). In each of the ``PHASES`` phases the child writes a step and reads it
back, again and again, until a producer and a consumer each pushed ``PUSHES`` times
while it wrote (from its first step on), under a subscription received in that phase,
then prints ``PHASE <json>``: per client,
the matched metric count librdkafka parsed and its pushes. Between phases it waits
for a line on stdin (the test changed the subscription). At the end it prints
``DONE <json>`` with the acknowledged steps and exits 0.
"""

from __future__ import annotations

import json
import logging
import re
import sys
import time

from pyspark_durable.endpoint import open_namespace, read_steps, write_step
from tests.helpers import hashed_payload

PUSHES = 3  # pushes per client and phase: at least 3 push intervals
MIN_STEPS = 3  # per phase, whatever the pushes
MAX_STEPS = 400  # per phase: a subscription never received fails the phase, not hangs
WRITER = "telemetry-writer"
ROWS = 5
LINE = re.compile(r"\[[^\]#]*#(?P<client>(?:producer|consumer)-\d+)\] \[thrd:[^\]]*\]: (?P<text>.*)")


def rows(writer_step: int) -> list[dict]:
    base = writer_step * ROWS
    return [{"id": i, "payload": hashed_payload(i)} for i in range(base, base + ROWS)]


class Telemetry(logging.Handler):
    """librdkafka's telemetry debug lines, per client: the subscription it parsed last,
    how many of its metrics it matched, and its successful pushes since."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.subscription: dict[str, int] = {}
        self.matched: dict[str, int] = {}
        self.pushes: dict[str, int] = {}
        self.since: dict[str, int] = {}  # pushes before the phase's first step
        self.stale: set[tuple[str, int]] = set()  # (client, subscription) of past phases
        self.failed: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        found = LINE.search(record.getMessage())
        if found is None:
            return
        client, text = found["client"], found["text"]
        if text.startswith("Parsing: subscription id "):
            self.subscription[client] = int(text.rsplit(" ", 1)[1])
            self.matched.pop(client, None)
            self.pushes[client] = self.since[client] = 0
        elif text.startswith("Matched metrics: ") and client in self.subscription:
            self.matched[client] = int(text.rsplit(" ", 1)[1])
        elif text == "PushTelemetryRequest succeeded" and client in self.matched:
            self.pushes[client] += 1
        elif "PushTelemetryRequest failed" in text or "GetTelemetrySubscriptions failed" in text:
            self.failed.append(f"{client}: {text}")

    def current(self) -> dict[str, dict]:
        return {c: {"subscription": s, "matched": self.matched.get(c),
                    "pushes": self.pushes[c] - self.since.get(c, 0)}
                for c, s in self.subscription.items()
                if (c, s) not in self.stale and c in self.matched}

    def done(self) -> bool:
        kinds = {c.split("-")[0] for c, v in self.current().items() if v["pushes"] >= PUSHES}
        return kinds == {"producer", "consumer"}

    def mark(self) -> None:
        """Count pushes from now on."""
        self.since = dict(self.pushes)

    def next_phase(self) -> None:
        self.stale |= set(self.subscription.items())


def main() -> None:
    config, phases = json.loads(sys.argv[1]), int(sys.argv[2])
    telemetry = Telemetry()
    rd = logging.getLogger("pyspark_durable.log.kafka.librdkafka")
    rd.setLevel(logging.DEBUG)
    rd.propagate = False
    rd.addHandler(telemetry)
    ns = open_namespace(config)
    acked: dict[int, int] = {}
    ws = 0
    try:
        for phase in range(phases):
            started, first = time.monotonic(), ws
            while ws - first < MIN_STEPS or not telemetry.done():
                assert ws - first < MAX_STEPS, \
                    f"phase {phase}: no pushes after {MAX_STEPS} steps: {telemetry.current()}"
                step = write_step(ns, WRITER, ws, {"events": rows(ws)})
                table = read_steps(ns, "events", step, step + 1).select(["id", "payload"])
                assert table.to_pylist() == rows(ws), f"step {step} read back {table}"
                acked[ws] = step
                ws += 1
                if ws - first == 1:
                    telemetry.mark()
            print("PHASE", json.dumps({"clients": telemetry.current(), "steps": ws - first,
                                       "seconds": round(time.monotonic() - started, 1),
                                       "failed": telemetry.failed}), flush=True)
            if phase + 1 < phases:
                telemetry.next_phase()
                assert sys.stdin.readline().strip() == "changed"
    finally:
        ns.close()
    print("DONE", json.dumps({"acked": acked}), flush=True)


if __name__ == "__main__":
    main()
