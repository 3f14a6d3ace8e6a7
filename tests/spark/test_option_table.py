"""The options table (spark/option_table.py) is the one place options are written:
docs/options.md's table, the parsed defaults and the accepted names all come from it."""

from __future__ import annotations

import dataclasses

import pytest

from pyspark_durable.errors import ConfigError
from pyspark_durable.spark.option_table import OPTION_TABLE, OPTIONS, markdown
from pyspark_durable.spark.options import WalOptions
from tests.helpers import ROOT

OPTIONS_PAGE = ROOT / "docs" / "options.md"


def test_docs_options_table_is_the_option_table():
    """This tests that docs/options.md's options table is exactly the one the option table
    renders, so a new option or a changed default cannot be documented differently."""
    text = OPTIONS_PAGE.read_text()
    start = text.index("| option | default | meaning |")
    end = text.index("\n\n", start)
    assert text[start : end + 1] == markdown(), (
        "docs/options.md's options table differs from pyspark_durable/spark/option_table.py: "
        "regenerate it with `python -m pyspark_durable.spark.option_table`"
    )


def test_parsed_and_dataclass_defaults_are_the_table_defaults():
    """This tests that parsing no options gives every field the table's default, and
    that WalOptions' own field defaults are the same values."""
    parsed = WalOptions.parse({"path": "/nowhere"})
    own = {f.name: f.default for f in dataclasses.fields(WalOptions) if f.default is not dataclasses.MISSING}
    with_field = [o for o in OPTION_TABLE if o.field]
    assert len(with_field) >= 30
    for opt in with_field:
        assert getattr(parsed, opt.field) == opt.default, opt.name
        if opt.field in own:
            assert own[opt.field] == opt.default, opt.name


@pytest.mark.parametrize("opt", [o for o in OPTION_TABLE if not o.passthrough], ids=lambda o: o.name)
def test_every_table_option_is_accepted_and_near_misses_are_named(opt):
    """This tests that each option of the table is accepted by the parser in any
    case, and that a misspelling of it is refused naming it."""
    value = {
        "backend": "file",
        "payloadFormat": "arrow",
        "startingStep": "earliest",
        "maxTriggerDelay": "2s",
        "paths": '["/nowhere"]',
        "tables": "a",
        "entryMaxBytes": "2048",
        "metadataColumns": "_step",
    }.get(opt.name, "1")
    if opt.field and isinstance(opt.default, bool):
        value = "true"
    options = {"path": "/nowhere", opt.name.upper(): value}
    if opt.name == "maxTriggerDelay":
        options["minRowsPerTrigger"] = "1"
    if opt.name == "holdRetention":
        options["readerId"] = "r"
    WalOptions.parse(options)
    if len(opt.name) > 5 and opt.name[:-1] not in OPTIONS:  # `paths` -> `path` is valid
        with pytest.raises(ConfigError, match=f"did you mean '{opt.name}'"):
            WalOptions.parse({"path": "/nowhere", opt.name[:-1]: value})
    assert opt.name in OPTIONS


@pytest.mark.parametrize("opt", [o for o in OPTION_TABLE if o.minimum is not None], ids=lambda o: o.name)
def test_each_options_minimum_is_taken_and_one_below_is_refused_naming_it(opt):
    """This tests that an option with a minimum in the table takes that minimum and
    refuses one less with a ConfigError naming the option, the value and the limit."""
    at, below = str(opt.minimum), str(opt.minimum - 1)
    taken = getattr(WalOptions.parse({"path": "/nowhere", opt.name: at}), opt.field)
    assert taken in (opt.minimum, at, (opt.minimum,)), (opt.name, taken)
    limit = rf"must be >= {opt.minimum}|would expire every step"
    with pytest.raises(ConfigError, match=rf"option {opt.name}='{below}' ({limit})"):
        WalOptions.parse({"path": "/nowhere", opt.name: below})
