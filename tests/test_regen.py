"""The README's quickstart and DO-ADP-family tables and two results tables are exactly what their
commands print (issue 21, done-when 4; issue 26: the DO-ADP family's default runs): each block between
``<!-- regen:NAME -->`` markers is compared, character for character, with ``python -m simulations.regen
--print NAME``, which runs the commands named in the block. ``python -m simulations.regen`` rewrites them
after a change."""

from __future__ import annotations

import pytest

from flwr_strategies.simulations import regen

CHECKED = ("quickstart", "fedmud-defaults", "fedli-lu-ratio", "doadp-readme")


@pytest.mark.parametrize("name", CHECKED)
def test_table_is_what_its_command_prints(name):
    table = regen.TABLES[name]
    written = regen.block((regen.ROOT / table.path).read_text(), name)
    assert written == table.render(), f"{table.path} is out of date: python -m simulations.regen {name}"


def test_every_table_has_its_markers_and_names_its_command():
    for name, table in regen.TABLES.items():
        written = regen.block((regen.ROOT / table.path).read_text(), name)
        assert written.startswith(f"`python -m simulations.regen --print {name}`"), name


def test_check_reports_a_stale_table_and_a_rewrite_fixes_it(tmp_path, monkeypatch, capsys):
    doc = tmp_path / "doc.md"
    doc.write_text("before\n<!-- regen:t -->\nold\n<!-- /regen:t -->\nafter\n")
    monkeypatch.setattr(regen, "ROOT", tmp_path)
    monkeypatch.setattr(regen, "TABLES", {"t": regen.Table("doc.md", lambda: "new\n", "a test table")})
    assert regen.main(["--check"]) == 1 and "out of date: t" in capsys.readouterr().err
    assert doc.read_text() == "before\n<!-- regen:t -->\nold\n<!-- /regen:t -->\nafter\n"  # --check writes nothing
    assert regen.main([]) == 0
    assert doc.read_text() == "before\n<!-- regen:t -->\nnew\n<!-- /regen:t -->\nafter\n"
    assert regen.main(["--check"]) == 0
    with pytest.raises(SystemExit):
        regen.main(["nope"])
