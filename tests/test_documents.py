"""A baseline or price table that is missing, unreadable or malformed: one error rule (bench.documents)."""
import pytest

from mltb_core.analysis.compare import load_baseline
from mltb_core.bench.documents import read_document
from mltb_core.llm.prices import PriceTableError, load_price_table


@pytest.mark.parametrize("content, words", [
    (None, "does not exist"),
    ("dir", "cannot be read"),
    (b"\xff\xfe{}", "is not UTF-8 text"),
    (b"{not json", "is not JSON"),
])
def test_a_bad_baseline_file_names_itself_and_the_problem(tmp_path, content, words):
    path = tmp_path / "base.json"
    if content == "dir":
        path.mkdir()
    elif content is not None:
        path.write_bytes(content)
    with pytest.raises(ValueError, match=words) as info:
        load_baseline(path)
    assert str(info.value).startswith(f"baseline file {path} ")


def test_a_price_table_that_is_not_utf8_raises_the_price_table_error(tmp_path):
    path = tmp_path / "prices.toml"
    path.write_bytes(b'[models."m"]\ninput = 1.0 # \xff\n')
    with pytest.raises(PriceTableError, match="price table .*prices.toml is not UTF-8 text"):
        load_price_table(path)


def test_the_parsed_document_comes_back_as_it_is(tmp_path):
    (tmp_path / "a.toml").write_text('x = 1\n[t]\ny = "z"\n', encoding="utf-8")
    (tmp_path / "a.json").write_text('{"x": [1, 2]}', encoding="utf-8")
    assert read_document(tmp_path / "a.toml", "table", "toml") == {"x": 1, "t": {"y": "z"}}
    assert read_document(tmp_path / "a.json", "file", "json") == {"x": [1, 2]}
