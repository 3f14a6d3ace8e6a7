"""Endpoint configuration and the factory that builds endpoints by backend name.

A config is a mapping (or a YAML file, see ``conf/``)::

    backend: file            # file | kafka | memory
    namespace: orders
    namespace_id: 0          # u8, fixed when the namespace is created
    options:                 # passed to the backend's LogStore
      path: /data/wal
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pyspark_durable.config_files import read_config_text
from pyspark_durable.endpoint.namespaces import checkpoint_named, namespaces_held, namespaces_or_none
from pyspark_durable.errors import ConfigError, DurableWalError, LogNotFound, UnknownNamespace
from pyspark_durable.log import LogStore, open_store, resolved_backend
from pyspark_durable.log.base import is_decimal
from pyspark_durable.wal import DEFAULT_TABLE, Namespace

KEYS = ("backend", "namespace", "namespace_id", "options", "writer_id", "reader_id", "table",
        "region", "payload_format", "tables", "regions")


@dataclass(frozen=True)
class EndpointConfig:
    backend: str = "file"
    namespace: str = "default"
    namespace_id: int | None = 0  # None: the stored id (reads), 0 for a new namespace
    options: Mapping[str, Any] = field(default_factory=dict)
    writer_id: str | None = None
    reader_id: str | None = None
    table: int | str = DEFAULT_TABLE
    region: int = 0
    payload_format: str = "arrow"
    tables: tuple[int | str, ...] | None = None
    regions: tuple[int, ...] | None = None

    def __post_init__(self) -> None:
        """A file WAL whose path is an ``s3://`` URL is an S3 WAL (``backend`` says so
        from here on); a URL of a scheme the WAL cannot store to is refused by name."""
        object.__setattr__(self, "backend", resolved_backend(self.backend, self.options))

    @staticmethod
    def from_mapping(config: Mapping[str, Any]) -> EndpointConfig:
        unknown = sorted(set(config) - set(KEYS))
        if unknown:
            raise ConfigError(f"unknown endpoint config keys {unknown}; valid: {', '.join(KEYS)}")
        values = dict(config)
        for key in ("tables", "regions"):
            if values.get(key) is not None:
                values[key] = _listed(key, values[key])
        if values.get("regions") is not None:
            for region in values["regions"]:
                if isinstance(region, bool) or not isinstance(region, int) or region < 0:
                    raise ConfigError(f"regions: {region!r} is not a region id (an integer >= 0)")
        if not isinstance(values.get("options", {}), Mapping):
            raise ConfigError(f"options must be a mapping, not {type(values['options']).__name__}")
        return EndpointConfig(**values)


def _listed(key: str, value: Any) -> tuple:
    """A list, or a comma-separated string (``"0,1"``: never a set of characters).

    In a string, ``tables`` are names (``"7"`` is the table named 7; a table id is an
    integer in a list) and ``regions`` are ASCII decimal numbers.
    """
    if isinstance(value, str):
        items = [v.strip() for v in value.split(",") if v.strip()]
        return tuple(int(v) if key == "regions" and is_decimal(v) else v for v in items)
    if not isinstance(value, list | tuple | set | frozenset):
        raise ConfigError(f"{key} must be a list or a comma-separated string, not "
                          f"{type(value).__name__}")
    return tuple(value)


def load_config(path: str | Path) -> EndpointConfig:
    """Load an endpoint config from a YAML file."""
    import yaml

    text = read_config_text(path, "endpoint config")
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise ConfigError(f"cannot load endpoint config {path}: {exc}") from exc
    if not isinstance(data, Mapping):
        raise ConfigError(f"endpoint config {path} is not a mapping")
    return EndpointConfig.from_mapping(data)


def _config(config: EndpointConfig | Mapping[str, Any]) -> EndpointConfig:
    return config if isinstance(config, EndpointConfig) else EndpointConfig.from_mapping(config)


def open_namespace(config: EndpointConfig | Mapping[str, Any], create: bool = True) -> Namespace:
    """Open a namespace. Without ``create`` nothing is created, and a name that is no
    namespace of the WAL (:func:`is_wal_namespace`: missing, a stray folder, a Spark
    checkpoint) is :class:`~pyspark_durable.errors.UnknownNamespace` naming the
    namespaces there are and where. A Spark checkpoint is refused before anything of it
    is opened, and to a writer too (a :class:`~pyspark_durable.errors.ConfigError`: the
    file log would write into Spark's folders); any other name is judged only when
    opening it failed, so that opening a namespace costs no listing of the WAL."""
    cfg = _config(config)
    store = open_store(cfg.backend, cfg.namespace, **dict(cfg.options))
    try:
        if checkpoint_named(cfg.backend, cfg.options, cfg.namespace):
            if not create:
                raise _unknown(cfg, store)
            raise ConfigError(
                f"{store.location()}: {cfg.namespace!r} there is a Spark checkpoint (its "
                "metadata file beside offsets and commits), not a WAL namespace: a writer "
                "would mix the WAL's files with Spark's; give the WAL a path of its own, "
                "or another namespace", namespace=cfg.namespace)
        try:
            return Namespace(store, cfg.namespace_id, create=create)
        except LogNotFound:
            if create:
                raise
            try:
                names = namespaces_held(cfg.backend, cfg.options)
            except LogNotFound as root:  # the WAL's root is missing: the store names it
                raise UnknownNamespace(cfg.namespace, [], store.location(),
                                       root_missing=str(root)) from None
            if cfg.namespace in names:
                raise  # a namespace, with another problem (empty), named by the WAL
            raise UnknownNamespace(cfg.namespace, names, store.location()) from None
    except BaseException:
        store.close()
        raise


def _unknown(cfg: EndpointConfig, store: LogStore) -> UnknownNamespace:
    return UnknownNamespace(cfg.namespace, namespaces_or_none(cfg.backend, cfg.options),
                            store.location())


# -- which namespaces a WAL holds, creating nothing -----------------------------------
# Opening a Namespace with ``create`` appends its ``ns`` record when it is missing, and a
# store may make folders or topics as it opens logs. A tool that only looks (the
# ``durablewal`` CLI) must do neither: a typo in a namespace's name would leave a new,
# empty namespace behind. So it opens only a namespace the WAL holds (the rule is in
# :mod:`pyspark_durable.endpoint.namespaces`), and then with the id it was created with.


def wal_namespaces(config: EndpointConfig | Mapping[str, Any]) -> list[str]:
    """The namespaces the WAL where ``config`` points holds (its namespace aside): the
    names its backend lists that hold a commits log, less Spark checkpoints kept in a
    file WAL's root. A root that does not exist is :class:`LogNotFound`."""
    cfg = _config(config)
    return namespaces_held(cfg.backend, cfg.options)


def is_wal_namespace(config: EndpointConfig | Mapping[str, Any]) -> bool:
    """Whether ``config``'s namespace is one the WAL holds (see :func:`wal_namespaces`)."""
    cfg = _config(config)
    return cfg.namespace in namespaces_or_none(cfg.backend, cfg.options)


def open_existing_store(config: EndpointConfig | Mapping[str, Any],
                        names: list[str] | None = None) -> LogStore:
    """The store of a namespace the WAL holds (see :func:`wal_namespaces`).

    Does not replay the commits log, so that a checker can report a damaged one.
    ``names`` (what :func:`wal_namespaces` gave) saves listing again when the caller has
    it. Any other name is :class:`UnknownNamespace`.
    """
    cfg = _config(config)
    if names is None:
        names = wal_namespaces(cfg)
    if cfg.namespace not in names:
        raise UnknownNamespace(cfg.namespace, names)
    return open_store(cfg.backend, cfg.namespace, **dict(cfg.options))


def open_existing_namespace(config: EndpointConfig | Mapping[str, Any],
                            names: list[str] | None = None) -> Namespace:
    """A :class:`Namespace` over an existing namespace (see :func:`open_existing_store`),
    opened with its own id; its state is recovered once."""
    store = open_existing_store(config, names)
    try:
        return Namespace(store, None, create=False)  # an empty one is LogNotFound, named
    except DurableWalError:
        store.close()
        raise


def input_endpoint(config: EndpointConfig | Mapping[str, Any]):  # -> DurableInputEndpoint
    from pyspark_durable.endpoint.endpoints import DurableInputEndpoint

    cfg = _config(config)
    ns = open_namespace(cfg)
    tables = None if cfg.tables is None else {ns.tables.lookup(t).table_id for t in cfg.tables}
    regions = None if cfg.regions is None else set(cfg.regions)
    return DurableInputEndpoint(ns, cfg.reader_id, tables, regions)


def output_endpoint(config: EndpointConfig | Mapping[str, Any]):  # -> OutputEndpoint
    from pyspark_durable.endpoint.endpoints import OutputEndpoint

    cfg = _config(config)
    if not cfg.writer_id:
        raise ConfigError("an output endpoint config needs writer_id")
    return OutputEndpoint(open_namespace(cfg), cfg.writer_id, cfg.table, cfg.region,
                          cfg.payload_format)
