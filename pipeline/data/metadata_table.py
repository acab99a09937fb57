"""An audiofolder's metadata table (`metadata.csv` / `.jsonl` / `.parquet`): read it, find its columns
by name, and turn each row into an item for the sample library.

A row's audio is a file name (resolved by `pipeline.data.paths.PathResolver`), or embedded audio:
`bytes`, the `{"bytes", "path"}` struct that `datasets` writes to Parquet (imported from the bytes;
the path only when there are none), or `{"array", "sampling_rate"}`. A row that cannot be read (a
value no file system takes as a name, a cell of another type) is returned as `{"skip": reason}`;
`pipeline.data.importers` reports it and goes on. Values in reasons are shortened
(`pipeline.errors.shorten`). It deliberately does not decode audio: the sample library does.
"""

from __future__ import annotations

import csv
import io
import json
import re
import unicodedata
from pathlib import Path
from typing import Any, Callable

from pipeline.data.paths import PathResolver
from pipeline.errors import ImportFormatError, PipelineError, shorten
from pipeline.fileio import jsonl_lines, read_text, where_not_utf8

COLUMN_ALIASES = {
    "file": ("file_name", "filename", "file", "audio", "audio_file", "audio_path", "path", "wav", "clip"),
    "target_text": ("target_text", "target", "sentence", "text", "reference", "transcription", "target_sentence",
                    "phrase"),
    "prompt": ("prompt", "question", "topic"),
    "kind": ("kind", "sample_kind"),
    "feedback": ("feedback", "tutor_feedback", "answer", "response", "teacher_feedback", "comments", "comment",
                 "notes", "note"),
    "speaker": ("speaker", "speaker_id", "client_id", "learner", "student", "student_name", "learner_name",
                "speaker_name", "name"),
    "transcript": ("transcript", "transcription", "heard"),
    "scores": ("scores",),
}
"""Accepted column names (compared lower-case, with spaces and `-` read as `_`), in order of preference."""


def unread_columns(rows: list[dict[str, Any]], columns: list[str]) -> list[str]:
    """The columns no role takes (`COLUMN_ALIASES`) that hold something in some row: what an import leaves out."""
    known = {alias for aliases in COLUMN_ALIASES.values() for alias in aliases}
    return [c for c in columns if norm_header(c) not in known and not norm_header(c).startswith("unnamed:")
            and any(cell_text(row.get(c)) for row in rows)]


def rel_path(path: Path, root: Path) -> str:
    """`path` relative to `root` in `/` form for reports, or the whole path when it is not under `root`."""
    try:
        return path.relative_to(root).as_posix()
    except ValueError:
        return str(path)


def norm_header(name: Any) -> str:
    """A column name as compared: without a BOM, stripped, lower case, spaces and `-` as `_`."""
    return str(name).replace("\ufeff", "").strip().lower().replace(" ", "_").replace("-", "_")


def pick_column(columns: list[str], role: str, exclude: tuple[str, ...] = ()) -> str | None:
    """The original column name for `role` (see COLUMN_ALIASES), or None."""
    normalized = {norm_header(c): c for c in columns}
    for alias in COLUMN_ALIASES[role]:
        if alias in normalized and normalized[alias] not in exclude:
            return normalized[alias]
    return None


def row_value(row: dict[str, Any], role: str, exclude: tuple[str, ...] = ()) -> tuple[str, str | None]:
    """First non-empty value among `role`'s column aliases in `row`, and the column it came from.

    Per row, so JSONL rows that name the text differently (`text` in one, `sentence` in another) work.
    """
    normalized = {norm_header(k): k for k in row}
    for alias in COLUMN_ALIASES[role]:
        key = normalized.get(alias)
        if key is not None and key not in exclude:
            value = cell_text(row.get(key))
            if value:
                return value, key
    return "", None


def cell_text(value: Any) -> str:
    """A cell as stripped text; "" for None and pandas' NaN."""
    if value is None:
        return ""
    if isinstance(value, float) and value != value:  # NaN from pandas
        return ""
    return str(value).strip()


def sniff_delimiter(header_line: str) -> str:
    """The delimiter of a CSV header line among `,` `;` tab `|` (csv.Sniffer, then the most frequent)."""
    try:
        return csv.Sniffer().sniff(header_line, delimiters=",;\t|").delimiter
    except csv.Error:
        counts = {d: header_line.count(d) for d in DELIMITERS}
        return max(counts, key=counts.get) if max(counts.values()) else ","


LEGACY_CODE_PAGES = ("cp1252", "mac_roman", "cp437", "cp1254", "cp1251")
"""The 8-bit code pages a spreadsheet program writes a CSV in when it is not told to write Unicode, tried in
this order: Windows-1252 (Excel for Windows' "CSV (Comma delimited)" and LibreOffice's "System" character set
on a Western Windows), Mac OS Roman (Excel for Mac's "Comma Separated Values" and Windows Excel's "CSV
(Macintosh)"), code page 437 (Excel's "CSV (MS-DOS)"). Sources: donatstudios.com/CSV-An-Encoding-Nightmare
("it uses your locale's Windows or Mac codepage. Win-1252 and MacRoman respectively"), Microsoft's
`XlFileFormat` (xlCSV, xlCSVMac, xlCSVMSDOS, xlCSVUTF8). ISO-8859-1 (LibreOffice's and Numbers' "Western")
decodes as Windows-1252 for every letter. Then the system code pages of two other Excel locales whose text the
Western ones turn into Western-looking letters rather than refuse: Windows-1254 (Turkish: ş, ğ, ı read as þ, ð, ý)
and Windows-1251 (Cyrillic: "Хорошо" read as "Õîðîøî"). Other code pages (Central European, Greek, East Asian)
read as no Western writing and are refused with the setting that writes UTF-8."""

_MOJIBAKE_WORD = re.compile(r"[\u00c0-\u00ff]{3,}")
"""A word of three or more Latin-1 letters with no ASCII letter: a Cyrillic word read in a Western code page."""
_CYRILLIC_WORD = re.compile(r"[\u0400-\u04ff]+")
"""A run of Cyrillic letters: a word of a Windows-1251 file, or of another code page read as one."""
_TURKISH_ONLY = set("ĞğİıŞş")
"""Turkish letters that Windows-1254 has and Windows-1252 has not (there: Ð ð Ý ý Þ þ)."""
_ICELANDIC_ONLY = set("ÐðÝýÞþ")
"""Windows-1252's letters in Windows-1254's places for `_TURKISH_ONLY`: in a Western file, Icelandic alone."""

TYPOGRAPHY = set("\u201c\u201d\u2018\u2019\u2014\u2013\u2026\u20ac\u00ab\u00bb\u00b0\u00a3\u00a7\u00a9\u00ae\u00b7\u00bf\u00a1\u00a0")
"""Non-ASCII characters that are not letters yet common in a teacher's text: curly quotes, dashes, the ellipsis,
currency, guillemets, the degree sign, inverted marks, a no-break space."""

RESAVE_AS_UTF8 = (
    "save it again as UTF-8: in Excel File > Save As > 'CSV UTF-8 (Comma delimited)'; in LibreOffice Calc File > "
    "Save As > 'Text CSV', tick 'Edit filter settings' and pick the character set 'Unicode (UTF-8)'; in Numbers "
    "File > Export To > CSV, Advanced Options, Text Encoding 'Unicode (UTF-8)' (Google Sheets always writes UTF-8)"
)
"""The fix for a metadata file whose encoding cannot be told: each program's setting that writes UTF-8."""


def _plausibility(text: str) -> int:
    """How much `text` reads as Western European writing, summed over its non-ASCII characters:
    common typography (`TYPOGRAPHY`) +1, or -1 wedged between two letters ("se–or" is a misread "señor");
    a Latin-1 letter +1, but -1 as a capital after a small letter ("CafŽ", "lÈve"), +1 after a capital ("CAFÉ")
    and 0 as a capital that starts no word ("Ä5") or a letter beyond Latin-1 ("Ž", "œ"); anything else -1 (symbols, box drawing, Greek:
    a wrong code page's marks); and -1 in the middle of a run of three non-ASCII characters (a double-byte
    code page such as Shift-JIS read a byte at a time). A word of 3+ Latin-1 letters and no ASCII one counts -2
    per letter (Cyrillic read as Western); a Cyrillic word +1 per letter when it is cased as words are (lower,
    Capitalised, CAPITALS), else -2 (Greek, KOI8-R or Chinese read as Windows-1251), and -2 wedged into a Latin
    word; a Turkish letter of Windows-1254 +1, an Icelandic one of Windows-1252 in its place 0."""
    score = -2 * sum(len(word) for word in _MOJIBAKE_WORD.findall(text))
    for word in _CYRILLIC_WORD.findall(text):  # written as words are: lower case, Capitalised or in CAPITALS
        cased = word.islower() or word.isupper() or (word[:1].isupper() and word[1:].islower())
        score += len(word) if cased else -2 * len(word)
    for index, char in enumerate(text):
        if ord(char) < 128:
            continue
        before = text[index - 1] if index else ""
        after = text[index + 1] if index + 1 < len(text) else ""
        if "\u0400" <= char <= "\u04ff":  # Cyrillic (scored by its words above): never wedged into a Latin word
            score -= 2 if (before.isascii() and before.isalpha()) or (after.isascii() and after.isalpha()) else 0
        elif char in _TURKISH_ONLY:
            score += 1
        elif char in _ICELANDIC_ONLY:
            continue
        elif before > "\x7f" and after > "\x7f" and not _MOJIBAKE_WORD.fullmatch(before + char + after):
            # inside a run of three: East Asian code pages, not Western words
            score -= 1
        elif char in TYPOGRAPHY:
            score += -1 if before.isalpha() and after.isalpha() else 1
        elif char.isalpha() and ord(char) < 0x250 and unicodedata.category(char).startswith("L"):
            if char.isupper() and before.isalpha() and before.islower():
                score -= 1
            elif char.isupper() and before.isalpha() and before.isupper() and ord(char) <= 0xFF:
                score += 1  # inside a word in capitals: "CAFÉ", "ÉCOLE"
            elif ord(char) > 0xFF or (char.isupper() and not after.isalpha()):
                continue
            else:
                score += 1
        else:
            score -= 1
    return score


def decode_legacy(data: bytes) -> tuple[str, str] | None:
    """`data` (not UTF-8, no byte-order mark) decoded in the `LEGACY_CODE_PAGES` code page whose letters read as
    Western European writing best (`_plausibility`), as (text, code page); None when no code page reads as
    writing (more odd marks than letters: e.g. a Japanese or Chinese Excel's code page).

    Ties go to Mac OS Roman when the lines end with a lone CR (the classic Mac ending that Excel's Mac formats
    write), else to Windows-1252. A library detector (charset-normalizer 3.4.7, tried with `cp_isolation` on
    these code pages) picked the wrong one for 5 of 18 short cells such as "Über gut" and "señor niño", so the
    choice is this short rule on the letters, which picked all 18 right (tests/test_spreadsheet_csv.py).
    """
    order = list(LEGACY_CODE_PAGES)
    if b"\r" in data and b"\r\n" not in data:
        order.remove("mac_roman")
        order.insert(0, "mac_roman")
    best: tuple[int, str, str] | None = None
    for code_page in order:
        try:
            text = data.decode(code_page)
        except UnicodeDecodeError:
            continue
        score = _plausibility(text)
        if best is None or score > best[0]:
            best = (score, text, code_page)
    if best is None or best[0] < 0:
        return None
    return best[1], best[2]


def read_spreadsheet_text(metadata: Path) -> str:
    """A CSV as a spreadsheet program saved it, decoded, its lines ending in "\\n": UTF-8 with or without a BOM,
    UTF-16 with a BOM (`pipeline.fileio.read_text`), else an 8-bit code page (`decode_legacy`).

    Raises:
        ImportFormatError: it is in none of these (the message says which setting of each program writes UTF-8).
        OSError: it cannot be read.
    """
    try:
        return read_text(metadata)
    except UnicodeDecodeError as error:
        where = where_not_utf8(metadata, error)
    decoded = decode_legacy(metadata.read_bytes())
    if decoded is None:
        raise ImportFormatError(
            f"`{metadata}` is neither UTF-8 nor UTF-16 nor a Western code page (from {where} its characters make no "
            f"sense in any of them): {RESAVE_AS_UTF8}, then import again."
        )
    return decoded[0].replace("\r\n", "\n").replace("\r", "\n")


DELIMITERS = (",", ";", "\t", "|")
"""The field delimiters a spreadsheet program writes (`sniff_delimiter`)."""


def table_start(text: str) -> tuple[str, str | None]:
    """`text` (a decoded CSV) from its header row on, and the delimiter its first line names, if any.

    What may stand above the header:
    - a line `sep=;` (Excel reads it as the delimiter to use, and a file made for Excel may start with it): it
      names the delimiter;
    - titles with at most one filled cell above the first line with two or more: a table's name, which Numbers
      writes above each table with its CSV export's "Include table names" (support.apple.com, "Export to Excel or
      another file format in Numbers on Mac"), `Table 1;;` as a program pads it to the table's width, a report's
      title, and blank lines between.
    Spreadsheet row numbers are counted from the header, as the program shows them.
    """
    lines = text.split("\n")
    delimiter = None
    first = lines[0].strip().strip('"') if lines else ""
    if len(first) == 5 and first.lower().startswith("sep=") and first[4] in DELIMITERS:
        delimiter, lines = first[4], lines[1:]

    def filled(line: str) -> int:
        return sum(1 for cell in re.split(r"[,;\t|]", line) if cell.strip().strip('"').strip())

    header_at = next((i for i, line in enumerate(lines) if filled(line) >= 2), 0)
    return "\n".join(lines[header_at:]), delimiter


def read_table(metadata: Path) -> tuple[list[dict[str, Any]], list[str], list[dict[str, str]]]:
    """Rows (dicts keyed by the original headers), the headers, and rows that failed to parse."""
    bad: list[dict[str, str]] = []
    suffix = metadata.suffix.lower()
    try:
        if suffix == ".parquet":
            import pandas as pd  # only here: a CSV is read with the standard library's csv (`csv_rows`)

            frame = pd.read_parquet(metadata)
            return frame.to_dict(orient="records"), [str(c) for c in frame.columns], bad
        if suffix == ".jsonl":
            rows, columns = [], []
            for number, line in jsonl_lines(read_text(metadata)):
                try:
                    row = json.loads(line)
                except json.JSONDecodeError as error:
                    bad.append({"file": f"{metadata.name}:{number}", "reason": f"not valid JSON ({error})"})
                    continue
                if not isinstance(row, dict):
                    bad.append({"file": f"{metadata.name}:{number}", "reason": "line is not a JSON object"})
                    continue
                rows.append(row)
                columns.extend(k for k in row if k not in columns)
            return rows, columns, bad
        text, delimiter = table_start(read_spreadsheet_text(metadata))
        return csv_rows(text, delimiter or sniff_delimiter(text.split("\n", 1)[0]), metadata.name)
    except UnicodeDecodeError as error:  # a metadata.jsonl is JSON Lines, which is UTF-8 by definition
        raise ImportFormatError(
            f"`{metadata}` is not UTF-8 text (from {where_not_utf8(metadata, error)}); JSON Lines are UTF-8: save it "
            "as UTF-8 and import again."
        ) from None
    except (ImportFormatError, ImportError):
        raise  # our own sentence; pandas' Parquet engine missing from this Python: not a fault of the file
    except Exception as error:  # pandas/pyarrow parse errors
        fix = ("Check its format." if suffix != ".csv" else
               "Save it again from the spreadsheet program as CSV with the field delimiter `,` (or `;`) and the text "
               "delimiter `\"` (LibreOffice Calc: File > Save As > 'Text CSV' with 'Edit filter settings'), then "
               "import again.")
        raise ImportFormatError(f"`{metadata}` cannot be parsed: {shorten(str(error), 300)}. {fix}") from None
    raise AssertionError("unreachable")  # every format returned above


def csv_rows(text: str, delimiter: str, name: str) -> tuple[list[dict[str, str]], list[str], list[dict[str, str]]]:
    """A decoded CSV's rows (dicts keyed by the header's names), its header, and its rows that cannot be read.

    Read with the standard library's `csv` (RFC 4180 quoting; a space after a delimiter dropped). One row per
    spreadsheet row after the header, so the caller's row numbers (the header is row 1) are the program's:
    - a row with fewer cells than the header has the rest empty (a spreadsheet leaves trailing empty cells out);
    - a row with more: empty extra cells are dropped (a stray trailing comma); otherwise the row is one of the
      rows that cannot be read, with the reason (a comma inside a cell not in quotes), and stands in the rows
      as an empty row (passed over), so one bad row costs one row, never the columns of the others;
    - the header's empty trailing cells are dropped; an empty name is `Unnamed: N` and a repeated one `NAME.1`.

    Raises:
        ImportFormatError: the file has no header (empty), or a header and no row; `csv.Error` as that error.
    """
    try:
        records = list(csv.reader(io.StringIO(text), delimiter=delimiter, skipinitialspace=True))
    except csv.Error as error:
        raise ImportFormatError(f"`{name}` cannot be parsed as CSV ({error}); save it again from the spreadsheet "
                                "program as CSV, then import again.") from None
    start = next((i for i, cells in enumerate(records) if any(c.strip() for c in cells)), None)
    if start is None:
        raise ImportFormatError(f"`{name}` is empty: write a header row (e.g. file_name,sentence,feedback) and one "
                                "row per clip, then import again.")
    header = list(records[start])
    while header and not header[-1].strip():
        header.pop()
    columns: list[str] = []
    for index, cell in enumerate(header):
        column = cell.strip() or f"Unnamed: {index}"
        while column in columns:
            column += ".1"
        columns.append(column)
    rows, bad = [], []
    for number, cells in enumerate(records[start + 1:], start=2):
        if any(c.strip() for c in cells[len(columns):]):
            bad.append({"file": f"{name}:{number}", "reason": (
                f"row {number} has {len(cells)} cells where the header has {len(columns)}: a `{delimiter}` inside a "
                "cell that is not in quotes? Put that cell in quotes (a spreadsheet program does it when it saves), "
                "or remove the extra cell")})
            rows.append(dict.fromkeys(columns, ""))
            continue
        cells = cells[:len(columns)]
        rows.append(dict(zip(columns, cells + [""] * (len(columns) - len(cells)))))
    if not any(any(c.strip() for c in row.values()) for row in rows) and not bad:
        raise ImportFormatError(f"`{name}` has its header ({', '.join(columns)}) but no rows: add one row per clip, "
                                "then import again.")
    return rows, columns, bad


def _audio_cell(row: dict[str, Any]) -> tuple[Any, str | None]:
    """The row's audio and its column: a file name (text), embedded audio (`bytes`), or a struct
    such as `datasets`' Audio feature in Parquet (`{"bytes", "path"}`) or its decoded form
    (`{"array", "sampling_rate"}`); ("", None) when every audio column is empty. Embedded audio
    comes first: a row with both a `file_name` and an `audio` struct holding bytes needs no file."""
    normalized = {norm_header(k): k for k in row}
    first: tuple[Any, str | None] = ("", None)
    for alias in COLUMN_ALIASES["file"]:
        key = normalized.get(alias)
        if key is None:
            continue
        value = row.get(key)
        if isinstance(value, (bytes, bytearray)) and value:
            return value, key
        if isinstance(value, dict) and value:
            embedded = value.get("bytes") or value.get("array") is not None
            if embedded:
                return value, key
            first = first if first[1] else (value, key)
        elif cell_text(value) and first[1] is None:
            first = (cell_text(value), key)
    return first


def metadata_row_item(row: dict[str, Any], number: int, metadata: Path, root: Path, resolver: PathResolver,
                      file_col: str) -> dict[str, Any]:
    """One metadata row -> an item for `SampleLibrary.add_many`, or `{"skip": reason, "file": label}`.

    Raises ValueError/TypeError/OSError/PipelineError for a row that cannot be read (the caller
    skips it with the reason)."""
    from pipeline.conversation.feedback import feedback_from_scores

    where = rel_path(metadata, root)
    cell, column = _audio_cell(row)
    if not cell:
        return {"skip": f"empty `{file_col}`", "file": f"{where}:{number}"}
    audio: Any
    name = ""
    if isinstance(cell, dict):  # datasets' Audio feature: the audio embedded, or a path, or both
        embedded, array = cell.get("bytes"), cell.get("array")
        name = cell_text(cell.get("path")) if isinstance(cell.get("path"), str) else ""
        if isinstance(embedded, (bytes, bytearray)) and embedded:
            audio = bytes(embedded)
        elif array is not None and cell.get("sampling_rate"):
            audio = (cell["sampling_rate"], array)
        elif name:
            audio = None
        else:
            return {"skip": f"the `{column}` cell holds neither audio bytes nor a file path ({shorten(cell)})",
                    "file": f"{where}:{number}"}
        if audio is not None:
            label = f"{where}:{number}" + (f" ({shorten(Path(name).name, 60)})" if name else "")
            stem = Path(name.replace("\\", "/")).stem[:80] if name else None
            return _metadata_item(row, audio, label, f"{metadata}:{number}", stem or None, feedback_from_scores)
    elif isinstance(cell, (bytes, bytearray)):
        return _metadata_item(row, bytes(cell), f"{where}:{number}", f"{metadata}:{number}", None,
                              feedback_from_scores)
    else:
        name = cell
    try:
        path = resolver.resolve(name)
    except ValueError as error:
        return {"skip": f"`{column}` in row {number} is not a file name: {error}", "file": f"{where}:{number}"}
    if path is None:
        return {"skip": f"audio file not found (named in {where} row {number}; `{column}` is relative to the "
                        "metadata file's folder)", "file": rel_path(metadata.parent / name, root)}
    sample_id = Path(rel_path(path, metadata.parent)).with_suffix("").as_posix()
    return _metadata_item(row, path, rel_path(path, root), str(path), sample_id, feedback_from_scores)


def _metadata_item(row: dict[str, Any], audio: Any, label: str, source: str, sample_id: str | None,
                   feedback_from_scores: Callable) -> dict[str, Any]:
    """The item of a metadata row whose audio is found (a path, bytes or (rate, samples)), or `{"skip"}`."""
    prompt, _ = row_value(row, "prompt")
    kind, _ = row_value(row, "kind")
    # With a prompt, a `transcription` column is what was said, not a sentence to read.
    target, target_key = row_value(row, "target_text", exclude=_keys(row, "transcription") if prompt else ())
    feedback, _ = row_value(row, "feedback")
    speaker, _ = row_value(row, "speaker")
    transcript, _ = row_value(row, "transcript", exclude=(target_key,) if target_key else ())
    scores = None
    raw_scores = next((row[k] for k in row if norm_header(k) == "scores"), None)
    if isinstance(raw_scores, dict) or cell_text(raw_scores):
        try:
            scores = raw_scores if isinstance(raw_scores, dict) else json.loads(cell_text(raw_scores))
        except json.JSONDecodeError:
            return {"skip": "the `scores` cell is not valid JSON", "file": label}
        if not isinstance(scores, dict):
            scores = None
        elif not feedback and target:
            try:
                feedback = feedback_from_scores(target, scores)
            except PipelineError as error:
                return {"skip": str(error), "file": label}
    return dict(
        audio=audio, file=label, target_text=target, feedback=feedback,
        speaker=speaker or None, transcript=transcript or None,
        scores=scores, source=source, sample_id=sample_id,
        prompt=prompt or None, kind=kind or None,
    )


def _keys(row: dict[str, Any], alias: str) -> tuple[str, ...]:
    """The keys of `row` that normalize to `alias`."""
    return tuple(k for k in row if norm_header(k) == alias)
