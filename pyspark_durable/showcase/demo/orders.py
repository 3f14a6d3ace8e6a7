"""What the demo's job is about: the orders it generates, one JSON file per
micro-batch, and the namespace they go to (in a folder, or on the local broker).
Both sides use it: the parent generates and inspects, the child writes and reads."""

from __future__ import annotations

import json
import random
from pathlib import Path

TABLES = {0: "orders_eu", 1: "orders_us", 2: "orders_apac"}
PRODUCTS = ["kettle", "lamp", "chair", "desk", "mug", "plant"]
NAMESPACE = "shop"


def generate(in_dir: Path, files: int, rows: int, seed: int = 7) -> int:
    """Write ``files`` JSON files of ``rows`` orders each; return the number of rows."""
    rng = random.Random(seed)
    in_dir.mkdir(parents=True, exist_ok=True)
    order_id = 0
    for f in range(files):
        lines = []
        for _ in range(rows):
            region = rng.randrange(3)
            lines.append(json.dumps({
                "order_id": order_id, "region": region, "table": TABLES[region],
                "customer": f"c{rng.randrange(1000):04d}", "product": rng.choice(PRODUCTS),
                "amount": round(rng.uniform(1, 500), 2),
            }))
            order_id += 1
        tmp = in_dir / f".{f:05d}.tmp"
        tmp.write_text("\n".join(lines))
        tmp.rename(in_dir / f"{f:05d}.json")  # whole files only, as Spark's file source wants
    return order_id



def wal_config(wal: Path, kafka: dict[str, str] | None) -> dict:
    """The demo's namespace as an endpoint config: in the folder, or on the broker."""
    if kafka:
        return {"backend": "kafka", "namespace": NAMESPACE, "options": kafka}
    return {"backend": "file", "namespace": NAMESPACE, "options": {"path": str(wal)}}

