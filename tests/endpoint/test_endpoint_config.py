"""Endpoint factory and YAML configs: every example in conf/ loads and works."""

from __future__ import annotations

import uuid

import pytest
import yaml

from pyspark_durable.endpoint import (
    EndpointConfig,
    input_endpoint,
    load_config,
    output_endpoint,
)
from pyspark_durable.errors import ConfigError
from tests.helpers import ROOT

CONF = ROOT / "conf"


# the kafka example asks for the broker by name, so its mark is set here: unmarked, it
# ran in the quick lane (which starts no broker) and started one
@pytest.mark.parametrize("name", ["file", "memory", pytest.param("kafka", marks=pytest.mark.kafka)])
def test_conf_examples_build_working_endpoints(name, tmp_path, request):
    """This tests that each conf/ example, pointed at a test location, writes and reads a step."""
    data = yaml.safe_load((CONF / f"{name}.yaml").read_text())
    data["namespace"] = f"cfg{uuid.uuid4().hex[:8]}"
    if name == "file":
        data["options"]["path"] = str(tmp_path / "wal")
    if name == "kafka":
        data["options"]["bootstrap_servers"] = request.getfixturevalue("kafka_broker")
    path = tmp_path / "endpoint.yaml"
    path.write_text(yaml.safe_dump({**data, "writer_id": "w1", "table": "t"}))
    cfg = load_config(path)
    assert cfg.backend == name
    out = output_endpoint(cfg)
    out.start_step(0)
    import pyarrow as pa
    out.push_buffer(pa.table({"x": [1, 2, 3]}))
    assert out.commit_step() == 0
    got = []

    class Consumer:
        def push(self, batch):
            got.extend(v for b in batch.batches for v in b.column("x").to_pylist())

        def eoi(self):
            got.append("eoi")

    inp = input_endpoint({k: v for k, v in data.items()})
    inp.read(0, Consumer())
    assert got == [1, 2, 3, "eoi"]


def test_unknown_backend_and_keys_are_listed(tmp_path):
    """This tests that an unknown backend or config key names the valid ones."""
    with pytest.raises(ConfigError, match="unknown log backend 'redis'; valid: file, kafka, memory"):
        input_endpoint({"backend": "redis", "namespace": "x"})
    with pytest.raises(ConfigError, match="unknown endpoint config keys \\['nmespace'\\]"):
        EndpointConfig.from_mapping({"nmespace": "x"})
    bad = tmp_path / "bad.yaml"
    bad.write_text("- just\n- a list\n")
    with pytest.raises(ConfigError, match="is not a mapping"):
        load_config(bad)
    with pytest.raises(ConfigError, match="needs writer_id"):
        output_endpoint({"backend": "memory", "namespace": "x"})


@pytest.mark.parametrize("backend", ["file", "memory", "kafka"])
@pytest.mark.parametrize("key", ["namespace", "backend"])
def test_namespace_or_backend_inside_options_is_a_config_error(tmp_path, backend, key):
    """A config that repeats ``namespace`` (or ``backend``) inside ``options``, as a
    Spark user writes it among .option(...) calls, is told where it belongs (it was a
    TypeError from deep inside the factory), and nothing is created."""
    options = {"path": str(tmp_path / "wal")} if backend == "file" else \
        {"bootstrap_servers": "127.0.0.1:9"} if backend == "kafka" else {}
    with pytest.raises(ConfigError, match=rf"\['{key}'\] given among the {backend} backend "
                       "options: backend and namespace are set once, next to the options"):
        input_endpoint({"backend": backend, "namespace": "x", "options": {**options, key: "y"}})
    assert not (tmp_path / "wal").exists()
