"""Table names are names, names are checked whole, and every impossible position is a
typed error naming what was asked and what exists ("Nothing silently changes").

No Spark session here: the source's offset and option functions are called directly on
a WAL, as the Spark driver calls them.
"""

from __future__ import annotations

import json
import re

import pytest

from pyspark_durable.endpoint import OutputEndpoint, open_namespace, read_steps, write_step
from pyspark_durable.endpoint.config import EndpointConfig
from pyspark_durable.errors import (
    ConfigError,
    CorruptOffset,
    IncarnationMismatch,
    RoutingError,
    StepNotCommitted,
)
from pyspark_durable.log import open_store
from pyspark_durable.spark.options import WalOptions
from pyspark_durable.spark.source import first_step, offset, resume_step
from pyspark_durable.wal import Namespace

NUMERIC_NAMES = ["007", "7", "\u0667", "\u00b2", " 7", "7 "]  # ASCII, Arabic-Indic 7, superscript 2


@pytest.fixture
def ns(make_store) -> Namespace:
    return Namespace(make_store())


@pytest.mark.backends("file", "memory", "kafka-confluent")
def test_names_that_look_like_numbers_are_separate_tables(ns):
    """This tests that "007", "7", an Arabic-Indic 7, "²" and padded "7"s are six tables,
    each read back under its own name, and none of them is table id 7."""
    for step, name in enumerate(NUMERIC_NAMES):
        write_step(ns, "w", step, {name: [{"id": step}]})
    assert sorted(t.name for t in ns.tables.by_id().values()) == sorted(NUMERIC_NAMES)
    assert 7 not in ns.tables.by_id()
    for step, name in enumerate(NUMERIC_NAMES):
        back = read_steps(ns, name)
        assert back.column("id").to_pylist() == [step]
        assert back.column("_table").to_pylist() == [name]
    with pytest.raises(RoutingError, match="unknown table id 7"):
        ns.tables.lookup(7)


@pytest.mark.backends("memory")
def test_an_unknown_table_name_points_at_the_table_meant(ns, tmp_path):
    """This tests that a misspelt table name is answered with the close one, and that a
    table named "a,b" (or with edge spaces) selected as tables='a,b' (which Spark's
    option splits into "a" and "b") is answered with its JSON-list form, which selects
    it."""
    write_step(ns, "w", 0, {"orders": [{"id": 1}], "a,b": [{"id": 2}], " edge": [{"id": 3}]})
    with pytest.raises(RoutingError, match=r"unknown table 'ordres'.*did you mean 'orders'"):
        ns.tables.lookup("ordres")
    parsed = WalOptions.parse({"path": str(tmp_path), "tables": "a,b"}).tables
    assert parsed == ("a", "b")
    with pytest.raises(RoutingError, match=re.escape(
            """did you mean the table 'a,b'? A name with a comma or edge spaces is selected """
            """with the JSON-list form: tables='["a,b"]'""")):
        ns.tables.lookup(parsed[0])
    assert WalOptions.parse({"path": str(tmp_path), "tables": '["a,b"]'}).tables == ("a,b",)
    assert read_steps(ns, "a,b").column("id").to_pylist() == [2]
    with pytest.raises(RoutingError, match=re.escape("""tables='[" edge"]'""")):
        ns.tables.lookup("edge")


@pytest.mark.backends("file")
def test_a_table_created_by_id_is_read_by_id_and_its_name_hints_there(ns):
    """This tests that a table an older version created from the numeric name "7" (stored
    as id 7, named "7") stays readable by its id, and that asking for the name "7" fails
    saying where the table is instead of reading a new, empty one."""
    write_step(ns, "w", 0, {7: [{"id": 1}]})  # what the old code stored for "7"
    assert ns.tables.lookup(7).name == "7"
    assert read_steps(ns, 7).column("_table").to_pylist() == ["7"]
    with pytest.raises(RoutingError, match=r"unknown table '7'; tables: 7; table id 7 is named "
                       r"'7' .*read it by its id, 7 in Python or tables=\[7\] in Spark"):
        ns.tables.lookup("7")
    write_step(ns, "w", 1, {"7": [{"id": 2}]})  # the name "7" is now its own table
    assert read_steps(ns, "7").column("id").to_pylist() == [2]
    assert read_steps(ns, 7).column("id").to_pylist() == [1]


@pytest.mark.backends("file")
@pytest.mark.parametrize("table", ["", None, True, -1, 1 << 64, 1.5])
def test_a_table_that_is_neither_name_nor_id_is_a_typed_error(ns, table):
    """This tests that an empty, missing, boolean, negative, too large or float table is a
    RoutingError naming it, never a table."""
    with pytest.raises(RoutingError, match="is not a"):
        write_step(ns, "w", 0, {table: [{"id": 1}]})
    assert ns.steps() == range(0, 0)


@pytest.mark.parametrize("name", ["ns\n", "ns\r\n", "\nns", "n\u0667", "a b", ""])
def test_namespace_names_are_checked_whole(tmp_path, name):
    """This tests that a namespace name with a trailing newline (or any other character
    outside letters, digits, '_' and '-') is refused, creating nothing."""
    with pytest.raises(ConfigError, match=re.escape(f"namespace name {name!r} is invalid")):
        open_store("file", name, path=str(tmp_path))
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("value, tables", [
    ("a, b", ("a", "b")),
    ('["a,b", " c ", 7, "007"]', ("a,b", " c ", 7, "007")),
    (' ["[x]"]', ("[x]",)),
])
def test_tables_option_selects_any_name(tmp_path, value, tables):
    """This tests that the tables option's comma list gives names and its JSON list gives
    names exactly as written (commas, spaces, brackets) and integers as table ids."""
    assert WalOptions.parse({"path": str(tmp_path), "tables": value}).tables == tables


@pytest.mark.parametrize("value, message", [
    ("[a, b", "starts with '\\[' but is not a JSON list"),
    ("[]", "is not a non-empty JSON list"),
    ('{"a": 1}', None),  # not a list, not bracketed: the comma form's one name
    ("[true]", "True is neither a table name"),
    ("[1.5]", "1.5 is neither a table name"),
    ("[-1]", "-1 is neither a table name"),
    ('[""]', "'' is neither a table name"),
    ("[[\"a\"]]", "\\['a'\\] is neither a table name"),
])
def test_malformed_tables_option_is_a_typed_error(tmp_path, value, message):
    """This tests that a malformed JSON tables option is a ConfigError naming the option
    and the bad item, never a silently different selection."""
    if message is None:
        assert WalOptions.parse({"path": str(tmp_path), "tables": value}).tables == (value,)
        return
    with pytest.raises(ConfigError, match=f"option tables=.*{message}"):
        WalOptions.parse({"path": str(tmp_path), "tables": value})


def test_endpoint_config_strings_are_names_and_decimal_regions(tmp_path):
    """This tests that an endpoint config's comma strings read tables as names (an id is an
    integer in a list) and regions only as ASCII decimals (an Arabic-Indic 7 is refused,
    not region 7)."""
    cfg = EndpointConfig.from_mapping({"tables": "7, 007", "regions": "0, 7"})
    assert (cfg.tables, cfg.regions) == (("7", "007"), (0, 7))
    assert EndpointConfig.from_mapping({"tables": [7, "7"]}).tables == (7, "7")
    with pytest.raises(ConfigError, match="regions: '\u0667' is not a region id"):
        EndpointConfig.from_mapping({"regions": "\u0667"})


# -- positions -------------------------------------------------------------------------


@pytest.fixture
def three(tmp_path):
    """A file WAL with steps [1, 3): three steps written, the first expired."""
    config = {"backend": "file", "namespace": "pos", "options": {"path": str(tmp_path / "w")}}
    ns = open_namespace(config)
    for step in range(3):
        write_step(ns, "w", step, {"t": [{"id": step}]})
    ns.expire(1)
    yield ns, {"path": str(tmp_path / "w"), "namespace": "pos"}
    ns.close()


@pytest.mark.parametrize("start, end, error, message", [
    (4, None, StepNotCommitted, r"start step 4 is not committed yet; committed steps are \[1, 3\)"),
    (None, 5, StepNotCommitted, r"end step 5 is past the committed steps; committed steps are "
                                r"\[1, 3\)"),
    (2, 1, ConfigError, r"start 2 is after end 1: .*committed steps are \[1, 3\)"),
    (-1, None, ConfigError, "start -1 is not an integer >= 0"),
    ("1", None, ConfigError, "start '1' is not an integer >= 0"),
    (0, None, Exception, r"step 0 was expired; available steps are \[1, 3\)"),
])
def test_read_steps_impossible_ranges_name_what_exists(three, start, end, error, message):
    """This tests that read_steps of a start or end past the committed steps, a start after
    the end, a negative or string step, or an expired one is a typed error naming the
    committed range."""
    ns, _ = three
    with pytest.raises(error, match=message) as info:
        read_steps(ns, "t", start=start, end=end)
    assert info.type.__module__ == "pyspark_durable.errors"


@pytest.mark.parametrize("step, message", [(-1, "writer step -1 is not an integer >= 0"),
                                           ("3", "writer step '3' is not an integer >= 0")])
def test_output_endpoint_refuses_impossible_writer_steps(three, step, message):
    """This tests that starting writer step -1 or "3" is a ConfigError naming the step, not
    a claim that the step was expired, nor a TypeError."""
    ns, _ = three
    out = OutputEndpoint(ns, "w2", "t")
    with pytest.raises(ConfigError, match=message):
        out.start_step(step)
    with pytest.raises(ConfigError, match=f"expire step {step!r} is not an integer >= 0"):
        out.expire_step(step)


@pytest.mark.parametrize("lose", ["true", "false"])
@pytest.mark.parametrize("found, message", [
    ("garbage", r"offset 'garbage' is not an object"),
    ([3], r"offset \[3\] is not an object"),
    ({}, r"names step None, not a step number >= 0"),
    ({"step": "abc"}, r"names step 'abc', not a step number >= 0"),
    ({"step": -1}, r"names step -1, not a step number >= 0"),
    ({"step": 1.5}, r"names step 1.5, not a step number >= 0"),
    ({"step": True}, r"names step True, not a step number >= 0"),
    ({"step": 2, "namespace": "other"}, r"\(step 2\) is of namespace 'other', not of 'pos'"),
    ({"step": 2, "incarnation": 5}, r"names incarnation 5, not an id"),
])
def test_a_damaged_checkpoint_offset_is_corruption_whatever_failondataloss(three, lose, found,
                                                                          message):
    """This tests that a checkpoint offset that is not JSON of this source, names a
    negative, non-integer step or another namespace is CorruptOffset naming it and the
    WAL's steps, with failOnDataLoss=false too: no guessed position re-delivers a step."""
    ns, opts = three
    parsed = WalOptions.parse({**opts, "failOnDataLoss": lose})
    with pytest.raises(CorruptOffset, match=message + r".*the WAL has steps \[1, 3\)"):
        resume_step(ns, parsed, found)


def test_a_checkpoint_past_the_end_names_the_wal_going_back(three):
    """This tests that a checkpoint offset past the WAL's end is a data-loss error naming
    the step, the WAL's steps and the cause (the WAL went back), and that with
    failOnDataLoss=false reading goes on at the WAL's end, not its start."""
    ns, opts = three
    ahead = {**offset(ns, 0), "step": 9}
    with pytest.raises(IncarnationMismatch, match=r"step 9, past the WAL's last step 2 \(steps "
                       r"\[1, 3\) in incarnation .*went back"):
        resume_step(ns, WalOptions.parse(opts), ahead)
    assert resume_step(ns, WalOptions.parse({**opts, "failOnDataLoss": "false"}), ahead) == 3
    assert resume_step(ns, WalOptions.parse(opts), {**ahead, "step": 2}) == 2
    old = {"step": 2, "incarnation": ns.info.incarnation}  # an offset written before namespaces
    assert resume_step(ns, WalOptions.parse(opts), old) == 2


@pytest.mark.parametrize("starting, expect", [("earliest", 1), ("latest", 3), ("3", 3),
                                              ("2", 2)])
def test_starting_step_within_the_wal(three, starting, expect):
    """This tests that startingStep earliest, latest or a committed or next step starts
    there."""
    ns, opts = three
    assert first_step(ns, WalOptions.parse({**opts, "startingStep": starting})) == expect


def test_starting_step_past_the_end_names_the_real_cause(three):
    """This tests that startingStep past the next step is StepNotCommitted naming the option,
    the committed steps and the furthest start, not a restored WAL."""
    ns, opts = three
    with pytest.raises(StepNotCommitted, match=r"option startingStep=4 is past the committed "
                       r"steps \[1, 3\): a read starts at most at the next step, 3"):
        first_step(ns, WalOptions.parse({**opts, "startingStep": "4"}))


@pytest.mark.parametrize("value, message", [("-1", "must be >= 0"),
                                            ("abc", "is not an integer"),
                                            ("1.5", "is not an integer"),
                                            ("\u0667", "is not an integer"),
                                            ("1_0", "is not an integer")])
@pytest.mark.parametrize("option", ["startingStep", "endingStep", "regions"])
def test_step_options_that_are_no_step_are_typed_errors(tmp_path, option, value, message):
    """This tests that a negative or non-integer startingStep, endingStep or region is a
    ConfigError naming the option and its value (an Arabic-Indic 7 is not step 7)."""
    with pytest.raises(ConfigError, match=f"option {option}='{value}' {message}"):
        WalOptions.parse({"path": str(tmp_path), option: value})


def test_cli_tail_reads_a_table_by_name_or_by_explicit_id(tmp_path, capsys):
    """This tests that `durablewal tail --table 7` reads the table named "7" and
    `--table-id 7` the table with id 7 (an older version's numeric name), and that
    `--table 7` without such a table fails pointing at the id."""
    from pyspark_durable.cli import main

    ns = open_namespace({"backend": "file", "namespace": "cli",
                         "options": {"path": str(tmp_path)}})
    write_step(ns, "w", 0, {7: [{"id": 1}]})
    ns.close()
    base = ["tail", str(tmp_path), "--namespace", "cli", "--json"]
    assert main([*base, "--table-id", "7"]) == 0
    assert json.loads(capsys.readouterr().out)["rows"][0]["id"] == 1
    assert main([*base, "--table", "7"]) == 2
    assert "table id 7 is named '7'" in capsys.readouterr().err
    ns = open_namespace({"backend": "file", "namespace": "cli",
                         "options": {"path": str(tmp_path)}})
    write_step(ns, "w", 1, {"7": [{"id": 2}]})
    ns.close()
    assert main([*base, "--table", "7"]) == 0
    assert json.loads(capsys.readouterr().out)["rows"][0]["id"] == 2


@pytest.mark.parametrize("name", ["retentionSteps", "retentionMs"])
@pytest.mark.parametrize("value", ["0", "-3"])
def test_a_retention_limit_of_zero_is_refused_not_taken_as_unlimited(tmp_path, name, value):
    """This tests that a Spark retention option of 0 (or below), which many tools read as
    "no limit" and which would expire every step at the next clean, is a ConfigError that
    says how to keep every step, while 1 and up are taken as given."""
    with pytest.raises(ConfigError, match=rf"{name}=.* would expire every step: 0 is not "
                                          rf"'no limit'; leave {name} out to keep every step"):
        WalOptions.parse({"path": str(tmp_path), name: value})
    opts = WalOptions.parse({"path": str(tmp_path), name: "1"})
    assert (opts.retention_steps if name == "retentionSteps" else opts.retention_ms) == 1
