"""CSV files as spreadsheet programs write them (issue 44 #2): one fixture per program and setting, written byte
for byte the way that program writes it, each read into the same three rows; the kind that failed before
(Excel's default "CSV (Comma delimited)", an 8-bit code page: refused as "not UTF-8") imported end to end; a
file in no readable encoding refused with the setting that fixes it, the library untouched.

Sources for how each program writes (each fixture names its own):
- [MS-FMT] Microsoft, XlFileFormat enumeration (learn.microsoft.com/en-us/office/vba/api/Excel.XlFileFormat):
  xlCSV, xlCSVMac, xlCSVMSDOS, xlCSVWindows, xlCSVUTF8, xlUnicodeText.
- [DONAT] donatstudios.com/CSV-An-Encoding-Nightmare: "saving as Comma Separated Values (.csv) it uses your
  locale's Windows or Mac codepage. Win-1252 and MacRoman"; "CSV UTF-8 (Comma delimited)" keeps a BOM.
- [HILTON] hilton.org.uk/blog/csv-excel: "Excel saves UTF-8 CSV with a byte order mark (BOM)".
- [HERONG] herongyang.com/Unicode/Excel-Save-File-in-Unicode-Text-txt.html: "Unicode Text (*.txt)" is
  "UTF-16 ... Little-Endian with BOM", tab-separated, rows ending 0D 00 0A 00 (CRLF).
- [SCHAEF] mschaef.com/cr-lf: Excel keeps a line break inside a cell as LF only, inside quotes, whatever ends
  the rows.
- [STRATA] strata.uga.edu/8370/rtips/textFiles.html: Excel for Mac's CSV choices ("CSV UTF-8", "Comma Separated
  Values", "Windows Comma Separated", "MS-DOS Comma Separated") differ in line endings and encodings; the classic
  Mac ending is CR.
- [LO-CSV] LibreOffice Help, "CSV Filter Options" (help.libreoffice.org, text/shared/guide/csv_params): token 1
  field separator (44 `,`), token 2 text delimiter (34 `"`), token 3 character set ("0 (System)" by default:
  Windows-1252 on a Western Windows, UTF-8 elsewhere), token 7 "quote all text cells" (false by default).
- [GSHEETS] uniVocity/univocity-parsers issue #530: "Google Sheets that are exported as CSV, do not contain a
  trailing line break. Also, Google Sheets are exported in a "Windows format"" (CRLF); UTF-8 without a BOM
  (enlyze/S7-Project-Explorer issue #4: Google Sheets reads UTF-8 without one, and writes it).
- [NUMBERS] khiav223577.github.io/blog/2018/07/11 (Numbers on a Mac writes UTF-8 by default); its export's Advanced
  Options offer the other text encodings (Western (Mac OS Roman), Windows Latin 1). Numbers' line ending is not
  documented in any source found: LF, a macOS text file's, is used. Its CSV export's "Include table names" writes
  the table's name on a line above the table (support.apple.com, "Export to Excel or another file format in
  Numbers on Mac"; Laravel-Excel issue #1003 shows the "Table 1" line).
- [SEP] A file made for Excel may start with `sep=;`, the line Excel reads as the delimiter to use (and then hides).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

import pytest

from pipeline.data.metadata_table import decode_legacy, read_table
from pipeline.errors import ImportFormatError

EXPECTED = [
    {"file_name": "a.wav", "sentence": "Yes, please.", "feedback": 'She said "très bien".'},
    {"file_name": "b.wav", "sentence": "Café au lait", "feedback": "Line one\nline two"},
]
"""What every fixture holds: a cell with the delimiter, one with quotes, one with a line break, accents."""


def _csv(delimiter: str = ",", eol: str = "\r\n", quote_all: bool = False, trailing: bool = True,
         decimal_comma: bool = False) -> str:
    """The table as the programs write it: RFC 4180 quoting (a cell with the delimiter, a quote or a line break
    in quotes, quotes doubled) or every text cell quoted (`quote_all`: LibreOffice's choice), a line break inside a
    cell as LF [SCHAEF], rows ended by `eol`; `decimal_comma` adds a number column written `3,5` (the locales whose
    list separator is `;`)."""
    rows = [["file_name", "sentence", "feedback"], *[[r["file_name"], r["sentence"], r["feedback"]] for r in EXPECTED]]
    if decimal_comma:
        rows = [rows[0] + ["score"], rows[1] + ["3,5"], rows[2] + ["4"]]

    def cell(value: str, number: bool) -> str:
        needs = any(c in value for c in (delimiter, '"', "\n", "\r"))
        return f'"{value.replace(chr(34), chr(34) * 2)}"' if needs or (quote_all and not number) else value

    lines = [delimiter.join(cell(v, i == 3 and n > 0) for i, v in enumerate(row)) for n, row in enumerate(rows)]
    return eol.join(lines) + (eol if trailing else "")


@dataclass(frozen=True)
class Fixture:
    program: str
    setting: str
    data: bytes
    source: str


BOM8, BOM16LE = b"\xef\xbb\xbf", b"\xff\xfe"
FIXTURES = [
    Fixture("Excel for Windows", "CSV UTF-8 (Comma delimited)", BOM8 + _csv().encode("utf-8"), "[MS-FMT] [HILTON] [SCHAEF]"),
    Fixture("Excel for Windows", "CSV (Comma delimited), the default CSV", _csv().encode("cp1252"), "[MS-FMT] [DONAT]"),
    Fixture("Excel for Windows", "CSV (Comma delimited) in a ;-locale (de, fr, ...)",
            _csv(";", decimal_comma=True).encode("cp1252"), "[DONAT]; `;` is the list separator where `,` is the decimal sign"),
    Fixture("Excel for Windows", "CSV (Macintosh)", _csv(eol="\r").encode("mac_roman"), "[MS-FMT] xlCSVMac [DONAT] [STRATA]"),
    Fixture("Excel for Windows", "CSV (MS-DOS)", _csv().encode("cp437"), "[MS-FMT] xlCSVMSDOS (the OEM code page, 437)"),
    Fixture("Excel for Windows", "Unicode Text", BOM16LE + _csv("\t").encode("utf-16-le"), "[HERONG]"),
    Fixture("Excel for Mac", "CSV UTF-8 (Comma delimited)", BOM8 + _csv().encode("utf-8"), "[STRATA] [DONAT] [HILTON]"),
    Fixture("Excel for Mac", "Comma Separated Values", _csv(eol="\r").encode("mac_roman"), "[DONAT] [STRATA]"),
    Fixture("Excel for Mac", "Windows Comma Separated", _csv().encode("cp1252"), "[STRATA] [MS-FMT] xlCSVWindows"),
    Fixture("Excel for Mac", "UTF-16 Unicode Text", BOM16LE + _csv("\t").encode("utf-16-le"), "[STRATA] [HERONG]"),
    Fixture("LibreOffice Calc", "defaults on Linux and macOS (System = UTF-8)", _csv(eol="\n").encode("utf-8"), "[LO-CSV]"),
    Fixture("LibreOffice Calc", "defaults on Windows (System = Windows-1252)", _csv().encode("cp1252"), "[LO-CSV]"),
    Fixture("LibreOffice Calc", "Quote all text cells", _csv(eol="\n", quote_all=True).encode("utf-8"), "[LO-CSV] token 7"),
    Fixture("LibreOffice Calc", "field delimiter ; (a ;-locale)", _csv(";", eol="\n", decimal_comma=True).encode("utf-8"),
            "[LO-CSV] token 1 = 59"),
    Fixture("LibreOffice Calc", "character set Western Europe (ISO-8859-1)", _csv(eol="\n").encode("latin-1"),
            "[LO-CSV] token 3"),
    Fixture("Google Sheets", "File > Download > Comma-separated values", _csv(trailing=False).encode("utf-8"), "[GSHEETS]"),
    Fixture("Numbers", "Export To > CSV, Unicode (UTF-8)", _csv(eol="\n").encode("utf-8"), "[NUMBERS]"),
    Fixture("Numbers", "Export To > CSV, Western (Mac OS Roman)", _csv(eol="\n").encode("mac_roman"), "[NUMBERS]"),
    Fixture("Numbers", "Export To > CSV, Windows Latin 1", _csv(eol="\n").encode("cp1252"), "[NUMBERS]"),
    Fixture("Numbers", "Export To > CSV, Include table names", ("Table 1\n" + _csv(eol="\n")).encode("utf-8"), "[NUMBERS]"),
    Fixture("A file made for Excel", "a `sep=;` first line", ("sep=;\r\n" + _csv(";")).encode("utf-8"), "[SEP]"),
    Fixture("A file made for Excel", "a `sep=,` first line, Windows-1252",
            ("sep=,\r\n" + _csv()).encode("cp1252"), "[SEP] [DONAT]"),
]


@pytest.mark.parametrize("fixture", FIXTURES, ids=[f"{f.program} | {f.setting}" for f in FIXTURES])
def test_every_spreadsheet_program_s_csv_reads_into_the_same_rows(tmp_path, fixture):
    path = tmp_path / "metadata.csv"
    path.write_bytes(fixture.data)
    rows, columns, bad = read_table(path)
    assert not bad and columns[:3] == ["file_name", "sentence", "feedback"], (fixture.source, columns)
    assert [{k: row[k] for k in ("file_name", "sentence", "feedback")} for row in rows] == EXPECTED, fixture.source


SHORT_CELLS = ["a.wav,Café au lait,Très bien\r\n", "a.wav,naïve,Über gut\r\n", "x,Ærøskøbing façade,déjà vu\n",
               "a,Yes please — “quoted” €5\n", "a,é\n", "a,Ça va? Où est la gare?\n", "a,señor niño\n", "a,Straße groß\n",
               "x,l'élève a été très sérieux\n", "CAFÉ K AE F EY\n", "a,ÉCOLE,NAÏVE\n"]


@pytest.mark.parametrize("code_page", ["cp1252", "mac_roman"])
@pytest.mark.parametrize("text", SHORT_CELLS)
def test_the_code_page_of_a_short_cell_is_told_from_its_letters(text, code_page):
    """The cases a library detector (charset-normalizer 3.4.7) got wrong 5 times in 18: "Über" from a Mac read as
    "†ber", "señor" as "se–or", "é" alone as "Ž"."""
    assert decode_legacy(text.encode(code_page)) == (text, code_page)


def test_the_kind_that_failed_imports_end_to_end(tmp_path):
    """Excel's default CSV (Windows-1252) with an accent was refused ("not UTF-8 text ... save it as CSV UTF-8")
    for two rounds; now its samples arrive with their accents."""
    from pipeline.data.importers import import_folder
    from pipeline.data.samples import SampleLibrary
    from tests.test_importers import write_audio

    source = tmp_path / "clips"
    for name, freq in (("a.wav", 300), ("b.wav", 330)):
        write_audio(source / name, freq)
    (source / "metadata.csv").write_bytes(FIXTURES[1].data)
    report = import_folder(tmp_path / "ws", source)
    assert len(report.imported) == 2, report.skipped
    texts = sorted((s.target_text, s.feedback) for s in SampleLibrary(tmp_path / "ws").list())
    assert texts == sorted((r["sentence"], r["feedback"]) for r in EXPECTED)


def test_a_file_in_no_readable_encoding_says_which_setting_to_change_and_changes_nothing(tmp_path):
    """Excel for Windows in Japanese writes "CSV (Comma delimited)" in Shift-JIS (its system code page [DONAT]):
    no Western code page reads it, so the import says which setting of each program writes UTF-8."""
    from pipeline.data.importers import import_folder
    from pipeline.data.samples import SampleLibrary
    from tests.test_importers import write_audio

    source = tmp_path / "clips"
    write_audio(source / "a.wav", 300)
    (source / "metadata.csv").write_bytes("file_name,sentence\r\na.wav,日本語の文です。こんにちは世界\r\n".encode("shift_jis"))
    ws = tmp_path / "ws"
    before = SampleLibrary(ws).list()
    with pytest.raises(ImportFormatError) as refused:
        import_folder(ws, source)
    message = str(refused.value)
    assert "CSV UTF-8 (Comma delimited)" in message and "Unicode (UTF-8)" in message and "line 2" in message
    assert "codec" not in message and message.count(". ") <= 1, message
    assert SampleLibrary(ws).list() == before


def test_a_common_voice_tsv_saved_again_from_excel_in_its_code_page_imports(tmp_path):
    """A Common Voice TSV edited in Excel and saved as "Text (Tab delimited)" is in the system code page [DONAT]
    ([MS-FMT] xlText): it raised a bare UnicodeDecodeError; now its sentences arrive with their accents."""
    from pipeline.data.importers import import_folder
    from pipeline.data.samples import SampleLibrary
    from tests.test_importers import write_audio

    source = tmp_path / "cv"
    write_audio(source / "clips" / "one.wav", 300)
    (source / "train.tsv").write_bytes("client_id\tpath\tsentence\r\nspk\tone.wav\tOù est la gare ?\r\n".encode("cp1252"))
    report = import_folder(tmp_path / "ws", source)
    assert report.format == "commonvoice" and len(report.imported) == 1, report.skipped
    assert [s.target_text for s in SampleLibrary(tmp_path / "ws").list()] == ["Où est la gare ?"]


def test_rows_left_empty_are_not_reported_as_skipped(tmp_path):
    """Excel writes a row whose cells were only formatted (a border, a colour) as `,,`: it is no sample, and not
    a skipped one either; a row with something in it and no file is still reported, under its spreadsheet row."""
    from pipeline.data.importers import import_folder
    from tests.test_importers import write_audio

    source = tmp_path / "clips"
    write_audio(source / "a.wav", 300)
    (source / "metadata.csv").write_bytes(b"Table 1\nfile_name,sentence,feedback,,\r\na.wav,Yes please,ok,,\r\n"
                                          b",,,,\r\n,Hello there,,,\r\n,,,,\r\n")
    report = import_folder(tmp_path / "ws", source)
    assert len(report.imported) == 1
    assert report.skipped == [{"file": "metadata.csv:4", "reason": "empty `file_name`"}]


def _import(tmp_path, data: bytes, clips=("a.wav", "b.wav", "c.wav"), **kwargs):
    from pipeline.data.importers import import_folder
    from tests.test_importers import write_audio

    source = tmp_path / "clips"
    for index, name in enumerate(clips):
        write_audio(source / name, 300 + 30 * index)
    (source / "metadata.csv").write_bytes(data)
    return import_folder(tmp_path / "ws", source, **kwargs)


@pytest.mark.parametrize("data, imported, reported", [
    # a stray trailing comma on one row: its empty extra cell is dropped, nothing shifts
    (b"file_name,sentence,feedback\na.wav,hello there,good,\nb.wav,a b,ok\nc.wav,c d,fine\n", 3, []),
    # an unquoted comma inside one sentence: that row alone is reported, under its spreadsheet row
    (b"file_name,sentence,feedback\na.wav,Hello, world,good\nb.wav,a b,ok\nc.wav,c d,fine\n", 2, ["metadata.csv:2"]),
    # rows of every length: a short row has its last cells empty, a long one is reported
    (b"file_name,sentence,feedback\na.wav,hi there,good,extra,stuff\nb.wav,only two\nc.wav\n", 1,
     ["metadata.csv:2", "c.wav"]),  # c.wav: no sentence (said as such)
])
def test_one_bad_row_costs_one_row_never_the_columns_of_the_others(tmp_path, data, imported, reported):
    """A new user's finding: one row with an extra cell made the reader take the first column as an index for every
    row (every sentence read as a file name: nothing imported), and rows of other lengths vanished unreported."""
    report = _import(tmp_path, data)
    assert len(report.imported) == imported, report.skipped
    assert [s["file"] for s in report.skipped] == reported, report.skipped
    if reported and "Hello, world" in data.decode():
        assert "has 4 cells where the header has 3" in report.skipped[0]["reason"]
        assert "quotes" in report.skipped[0]["reason"]


@pytest.mark.parametrize("data, words", [
    (b"", "is empty: write a header row"),
    (b"\r\n\r\n", "is empty: write a header row"),
    (b"file_name,sentence,feedback\r\n", "has its header (file_name, sentence, feedback) but no rows"),
])
def test_an_empty_csv_or_one_with_no_rows_says_so(tmp_path, data, words):
    with pytest.raises(ImportFormatError, match=re.escape(words)):
        _import(tmp_path, data)


def test_a_shared_studio_imports_no_file_outside_its_workspace(tmp_path):
    """A new user's finding: in a shared studio a metadata.csv inside the workspace could name `/abs/x.wav` or
    `../../x.wav` and import it, although a typed folder outside the workspace is refused."""
    from tests.test_importers import write_audio

    outside = tmp_path / "elsewhere" / "secret.wav"
    write_audio(outside, 440)
    data = (f"file_name,sentence\na.wav,inside\n{outside},absolute\n../elsewhere/secret.wav,climbing out\n").encode()
    confined = _import(tmp_path, data, clips=("a.wav",), confine_to=tmp_path / "clips")
    assert len(confined.imported) == 1 and len(confined.skipped) == 2, confined.skipped
    assert all("outside the workspace" in s["reason"] for s in confined.skipped)
    free = _import(tmp_path / "desk", data.replace(b"../elsewhere", b"../../elsewhere"), clips=("a.wav",))
    assert len(free.imported) == 2, free.skipped  # on one's own computer a CSV may name any file (one is a duplicate)


@pytest.mark.parametrize("text, code_page", [
    ('c0.wav,We call it bear,"Хорошо, но звук TH"\n', "cp1251"),   # Excel in Russian: was read as "Õîðîøî"
    ("a,Добрий день, Київ\n", "cp1251"),                             # Ukrainian
    ("a,Güzel. Şu sesi düzelt: ğ ı\n", "cp1254"),                    # Excel in Turkish: was read as "Þu ... ð ý"
    ("a,Çok güzel, teşekkürler\n", "cp1254"),
])
def test_excels_cyrillic_and_turkish_code_pages_read_as_written(text, code_page):
    """A new user's finding: a Russian or Turkish Excel's CSV imported as Western-looking gibberish, unwarned."""
    assert decode_legacy(text.encode(code_page)) == (text, code_page)


@pytest.mark.parametrize("text, code_page", [
    ("a,Καλημέρα κόσμε\n", "cp1253"), ("a,Привет\n", "koi8_r"), ("a,中文句子你好世界\n", "gbk"),
    ("a,Zażółć gęślą jaźń\n", "cp1250"),
])
def test_other_code_pages_are_refused_rather_than_misread(text, code_page):
    assert decode_legacy(text.encode(code_page)) is None


def test_columns_the_import_does_not_read_are_named_and_common_names_are_read(tmp_path):
    """A new user's finding: feedback in a `comments` column and learners in `name` were dropped without a word."""
    from pipeline.data.samples import SampleLibrary

    report = _import(tmp_path, b"file_name,Target Sentence,comments,name,mood\na.wav,Hello there,Good,Kate,happy\n",
                     clips=("a.wav",))
    (sample,) = SampleLibrary(tmp_path / "ws").list()
    assert (sample.target_text, sample.feedback, sample.speaker) == ("Hello there", "Good", "Kate")
    assert len(report.notes) == 1 and "`mood` was not read" in report.notes[0], report.notes
    assert report.to_dict()["notes"] == report.notes


def test_a_metadata_file_named_in_capitals_is_read_and_a_spreadsheet_file_is_named(tmp_path):
    """A new user's finding: `Metadata.CSV` (as Windows may name it) and `metadata.xlsx` were passed over, and the
    import then spoke of missing `.txt` files."""
    from pipeline.data.importers import import_folder
    from tests.test_importers import write_audio

    source = tmp_path / "clips"
    write_audio(source / "a.wav", 300)
    (source / "Metadata.CSV").write_bytes(b"file_name,sentence\na.wav,Hello there\n")
    assert len(import_folder(tmp_path / "ws", source).imported) == 1
    (source / "Metadata.CSV").rename(source / "metadata.xlsx")
    with pytest.raises(ImportFormatError, match=r"`metadata.xlsx` is a spreadsheet program's own file.*CSV UTF-8"):
        import_folder(tmp_path / "ws2", source)


@pytest.mark.parametrize("above", ["Table 1;;\n", "Table 1;;\n\n", "Class 3 - week 2\n\n", "\n\n", '"Table 1",,\n'])
def test_titles_and_blank_lines_above_the_header_are_passed_over(tmp_path, above):
    """A new user's finding: only Numbers' plain `Table 1` line was passed over; `Table 1;;`, a report title or a
    blank line after it made the title the header ("Rename that column")."""
    delimiter = ";" if ";" in above else ","
    rows, columns, bad = _read(tmp_path, (above + f"file_name{delimiter}sentence\na.wav{delimiter}Hello\n").encode())
    assert columns == ["file_name", "sentence"] and rows == [{"file_name": "a.wav", "sentence": "Hello"}] and not bad


def _read(tmp_path, data: bytes):
    path = tmp_path / "metadata.csv"
    path.write_bytes(data)
    return read_table(path)
