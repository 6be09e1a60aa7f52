"""A stress dataset with the real GDPval's shape, generated from a seed.

220 tasks over 9 sectors and 44 occupations (5 tasks each), prompts of 1,058-7,160 characters
(mean about 2,740) written in office text: curly quotes, dashes, ellipses, bullets, currency,
accents, non-breaking spaces, tabs, CRLF, U+2028/U+2029 separators and the odd astral character.
262 reference files spread over 122 tasks (the rest have none; a few have ten or more, up to 17),
named like real uploads: spaces, parentheses, accents, `#`, `%`, `&`, and very long names. Both
dataset revisions: the first (7 columns) and the current one (13 columns: the gold deliverable
columns, `rubric_pretty` and `rubric_json` as a JSON string). Reference files and the gold stand-ins
(docx, xlsx or pdf, whose text carries GOLD_MARK) are small but in real formats (`support.standins`).
Hash folders differ between revisions, as on the hub.

`make_stress_dataset(dest, revision)` writes the Hugging Face layout the project reads:
`data/train-00000-of-00001.parquet` plus `reference_files/<hash>/<name>` and `deliverable_files/<hash>/<name>`.
"""

from __future__ import annotations

import hashlib
import json
import random
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, Literal

import pyarrow as pa
import pyarrow.parquet as pq

from support.cli import SUBMISSION_COLUMNS
from support.standins import standin_bytes

Revision = Literal["first", "current"]

SEED = 2028
TASKS = 220
TASKS_PER_OCCUPATION = 5
REFERENCE_FILES = 262
TASKS_WITH_REFERENCES = 122
MOST_REFERENCES = 17
PROMPT_MIN, PROMPT_MAX, PROMPT_MEAN = 1058, 7160, 2740
PARQUET = "data/train-00000-of-00001.parquet"
HUB = "openai/gdpval"

FIRST_COLUMNS = tuple(SUBMISSION_COLUMNS[:7])  # the official submission layout opens with them
GOLD_COLUMNS = ("deliverable_text", "deliverable_files", "deliverable_file_urls", "deliverable_file_hf_uris")
CURRENT_COLUMNS = (*FIRST_COLUMNS, *GOLD_COLUMNS, "rubric_pretty", "rubric_json")
LIST_COLUMNS = {
    "reference_files",
    "reference_file_urls",
    "reference_file_hf_uris",
    "deliverable_files",
    "deliverable_file_urls",
    "deliverable_file_hf_uris",
}
GOLD_MARK = "GOLD-ANSWER"  # in every gold deliverable_text and gold file's text: it must never reach a submission
GOLD_FORMATS = ("docx", "xlsx", "pdf")

OCCUPATIONS: dict[str, tuple[str, ...]] = {
    "Professional, Scientific, and Technical Services": (
        "Accountants and Auditors",
        "Computer and Information Systems Managers",
        "Lawyers",
        "Project Management Specialists",
        "Software Developers",
    ),
    "Government": (
        "Administrative Services Managers",
        "Child, Family, and School Social Workers",
        "Compliance Officers",
        "First-Line Supervisors of Police and Detectives",
        "Recreation Workers",
    ),
    "Information": (
        "Audio and Video Technicians",
        "Editors",
        "Film and Video Editors",
        "News Analysts, Reporters, and Journalists",
        "Producers and Directors",
    ),
    "Manufacturing": (
        "Buyers and Purchasing Agents",
        "First-Line Supervisors of Production and Operating Workers",
        "Industrial Engineers",
        "Mechanical Engineers",
        "Shipping, Receiving, and Inventory Clerks",
    ),
    "Finance and Insurance": (
        "Customer Service Representatives",
        "Financial and Investment Analysts",
        "Financial Managers",
        "Personal Financial Advisors",
        "Securities, Commodities, and Financial Services Sales Agents",
    ),
    "Health Care and Social Assistance": (
        "First-Line Supervisors of Office and Administrative Support Workers",
        "Medical and Health Services Managers",
        "Medical Secretaries and Administrative Assistants",
        "Nurse Practitioners",
        "Registered Nurses",
    ),
    "Real Estate and Rental and Leasing": (
        "Concierges",
        "Counter and Rental Clerks",
        "Property, Real Estate, and Community Association Managers",
        "Real Estate Brokers",
        "Real Estate Sales Agents",
    ),
    "Retail Trade": (
        "First-Line Supervisors of Retail Sales Workers",
        "General and Operations Managers",
        "Pharmacists",
        "Private Detectives and Investigators",
    ),
    "Wholesale Trade": (
        "First-Line Supervisors of Non-Retail Sales Workers",
        "Order Clerks",
        "Sales Managers",
        "Sales Representatives, Wholesale and Manufacturing, Except Technical and Scientific Products",
        "Sales Representatives, Wholesale and Manufacturing, Technical and Scientific Products",
    ),
}

# Marks that office text carries between sentences; U+2028 and U+2029 go into every fourth prompt.
LINE_SEPARATOR, PARAGRAPH_SEPARATOR = "\u2028", "\u2029"
_MARKS = (
    "’",
    "‘",
    "“",
    "”",
    "–",
    "—",
    "…",
    "•",
    "€",
    "£",
    "½",
    "°",
    "×",
    "§",
    "™",
    "®",
    "\u00a0",
    "\u202f",
    "\t",
)
_EXTENSIONS = (
    ("pdf", 70),
    ("xlsx", 60),
    ("docx", 40),
    ("png", 20),
    ("pptx", 14),
    ("jpg", 12),
    ("txt", 10),
    ("zip", 8),
    ("wav", 6),
    ("mp3", 5),
    ("mp4", 5),
    ("step", 4),
    ("pages", 4),
    ("psd", 4),
)
_STEMS = (
    "Population",
    "Q3 Budget Review",
    "Résumé – Zoë Müller",
    "Invoice #4471",
    "Margin & Volume Bridge",
    "Client Intake Form",
    "Site Photos (North Wing)",
    "Tenant Roster 2024",
    "Sales Forecast 12% uplift",
    "Café Menu Pricing",
    "Patient Schedule",
    "Purchase Order #PO-0932",
    "Audit Sample (Final)",
    "Inventory Count – Warehouse B",
    "Press Release DRAFT",
    "Interview Recording",
    "Floor Plan Rev. C",
    "Señor Núñez Contract",
    "BOB W2 COMPANY X edit",
    "Bob & Lisa SMITH LTC PREMIUMS PAID 2024",
    "Équipe Planning Août",
    "Loss Run 5-yr",
    "Compliance Checklist v2.1",
    "Store #112 Shrink Report",
    "Déjà Vu Campaign Brief",
    "Rate Card 50% off",
    "Q&A Notes",
    "Policy Memo [internal]",
)
_ROLES = (
    "an experienced analyst",
    "a senior manager",
    "a newly promoted supervisor",
    "the lead consultant",
    "a regional coordinator",
    "an operations specialist",
)
_SENTENCES = (
    "You’ve been asked to review the attached material and prepare a deliverable for the leadership team.",
    "The client’s “must-have” items are listed first—please don’t drop any of them.",
    "Figures are in € and £; convert at 1 € = 0.85 £ where needed, and round to ½ unit.",
    "Deadlines: 10–14 March (draft) and 21 March (final)… no extensions.",
    "• Summarise the key findings\n• Flag anything over 5% variance\n• Recommend next steps",
    "Temperatures must stay between 2 °C and 8 °C; log any excursion × duration.",
    "Use the company’s style guide (§ 4.2) and keep the tone professional—but friendly.",
    "The São Paulo, Zürich and Montréal offices will read this, so avoid jargon.",
    "Note: “TBD” cells mean the data isn’t final yet; treat them as zero for now.",
    "Please keep the ™ and ® marks exactly as they appear in the source documents.",
    "Column A lists the item\tColumn B the amount\tColumn C the owner.",
    "Prepare a one-page memo, a spreadsheet with the calculations, and a short slide deck.",
    "Where the attachment and the email disagree, the attachment wins; explain the difference.",
    "Headcount grew from 1\u202f204 to 1\u202f377 employees; compute the change in %.",
    "Contact: Ms. Renée O’Connor (Finance) — she’s out until Monday.",
    "The table below was pasted from a PDF:\r\nItem  Qty  Price\r\nWidgets  12  €4.50",
    "Section 2:\n\nProvide the analysis in plain English, with numbered headings.",
    "A few customers wrote in Japanese (ご確認ください) and Greek (Ευχαριστώ); quote them verbatim.",
    "Mark completed items with ✓ and open ones with ✗; the dashboard shows 📈 for growth.",
    "Do not include personal data beyond initials (e.g. J.D., M.-L. K.).",
)


def make_stress_dataset(dest: Path, revision: Revision = "current", seed: int = SEED) -> Path:
    """Write the dataset folder (parquet and every reference file) under `dest`; returns `dest`."""
    rows = stress_rows(revision, seed)
    (dest / "data").mkdir(parents=True, exist_ok=True)
    pq.write_table(stress_table(rows, revision), dest / PARQUET)
    for row in rows:
        for path in row["reference_files"]:
            _write(dest / path, standin_bytes(Path(path).name))
        for path in row.get("deliverable_files", []):
            _write(dest / path, gold_bytes(Path(path).name))
    return dest


def gold_bytes(name: str) -> bytes:
    """An expert's deliverable stand-in: a real file of `name`'s format whose text says GOLD_MARK."""
    return standin_bytes(f"{GOLD_MARK} {name}")


def _write(target: Path, data: bytes) -> None:
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_bytes(data)


def stress_table(rows: list[dict[str, Any]], revision: Revision) -> pa.Table:
    columns = FIRST_COLUMNS if revision == "first" else CURRENT_COLUMNS
    strings = pa.list_(pa.field("element", pa.string()))
    schema = pa.schema([pa.field(c, strings if c in LIST_COLUMNS else pa.string()) for c in columns])
    features = {
        c: ({"feature": {"dtype": "string", "_type": "Value"}, "_type": "Sequence"} if c in LIST_COLUMNS else {"dtype": "string", "_type": "Value"})
        for c in columns
    }
    schema = schema.with_metadata({"huggingface": json.dumps({"info": {"features": features}})})
    return pa.Table.from_pylist([{c: row[c] for c in columns} for row in rows], schema=schema)


def stress_rows(revision: Revision = "current", seed: int = SEED) -> list[dict[str, Any]]:
    """Every row of the revision's parquet, in order (pure: no files)."""
    rng = random.Random(seed)
    slots = [(sector, occupation) for sector, occupations in OCCUPATIONS.items() for occupation in occupations for _ in range(TASKS_PER_OCCUPATION)]
    task_ids = [str(uuid.UUID(int=rng.getrandbits(128), version=4)) for _ in slots]
    lengths = prompt_lengths(rng)
    counts = reference_counts(rng)
    names = reference_names(rng, sum(counts))
    rows = []
    for index, ((sector, occupation), task_id) in enumerate(zip(slots, task_ids, strict=True)):
        refs = [names.pop() for _ in range(counts[index])]
        paths = [f"reference_files/{_hash(revision, task_id, name, k)}/{name}" for k, name in enumerate(refs)]
        row: dict[str, Any] = {
            "task_id": task_id,
            "sector": sector,
            "occupation": occupation,
            "prompt": prompt(rng, occupation, refs, lengths[index], separators=index % 4 == 0),
            **_uris("reference_files", paths),
        }
        rows.append(row | gold_columns(row, index, seed) if revision == "current" else row)
    return rows


def gold_columns(row: dict[str, Any], index: int, seed: int = SEED) -> dict[str, Any]:
    """The current revision's columns for one first-revision row: one gold stand-in file (docx, xlsx or pdf
    by `index`), its text and URIs, and a rubric drawn from the seed and the task."""
    task_id, kind = row["task_id"], GOLD_FORMATS[index % len(GOLD_FORMATS)]
    gold = [f"deliverable_files/{_hash('current', task_id, 'gold', 0)}/{row['occupation'][:40]} – final.{kind}"]
    files = _uris("deliverable_files", gold, "deliverable_file")
    return {"deliverable_text": f"{GOLD_MARK} for {task_id}", **files, **rubric(random.Random(f"{seed}/{task_id}"))}


def with_standin_gold(dataset: Path) -> Path:
    """Rewrite a first-revision dataset folder (the shared 12-task sample) as the current revision, with
    stand-in gold files and rubrics: what the demo's scripted judge needs. Its references stay as they are."""
    rows = [row | gold_columns(row, index) for index, row in enumerate(pq.read_table(dataset / PARQUET).to_pylist())]
    pq.write_table(stress_table(rows, "current"), dataset / PARQUET)
    for row in rows:
        for path in row["deliverable_files"]:
            _write(dataset / path, gold_bytes(Path(path).name))
    return dataset


def _uris(column: str, paths: list[str], stem: str = "reference_file") -> dict[str, list[str]]:
    return {
        column: paths,
        f"{stem}_urls": [f"https://huggingface.co/datasets/{HUB}/resolve/main/{p}" for p in paths],
        f"{stem}_hf_uris": [f"hf://datasets/{HUB}@main/{p}" for p in paths],
    }


def _hash(revision: str, task_id: str, name: str, index: int) -> str:
    return hashlib.md5(f"{revision}/{task_id}/{index}/{name}".encode()).hexdigest()


def prompt_lengths(rng: random.Random) -> list[int]:
    """220 lengths from PROMPT_MIN to PROMPT_MAX, long-tailed like the real prompts, mean exactly PROMPT_MEAN."""
    raw = [rng.lognormvariate(0, 0.45) for _ in range(TASKS - 2)]
    target = PROMPT_MEAN * TASKS - PROMPT_MIN - PROMPT_MAX  # what the other 218 must sum to
    scale = (target - PROMPT_MIN * len(raw)) / sum(raw)
    interior = [min(PROMPT_MAX - 1, PROMPT_MIN + 1 + round(scale * v)) for v in raw]
    middle = sorted(range(len(interior)), key=interior.__getitem__)[len(interior) // 2]
    interior[middle] += target - sum(interior)  # what rounding and clipping moved
    lengths = [PROMPT_MIN, PROMPT_MAX, *interior]
    rng.shuffle(lengths)
    return lengths


def reference_counts(rng: random.Random) -> list[int]:
    """Files per task: 98 tasks with none, a handful with ten or more (up to 17), most with 1-3."""
    with_refs = [MOST_REFERENCES, 15, 12, 11, 10] + [3] * 10 + [2] * 60 + [1] * 47
    assert len(with_refs) == TASKS_WITH_REFERENCES and sum(with_refs) == REFERENCE_FILES
    counts = with_refs + [0] * (TASKS - TASKS_WITH_REFERENCES)
    rng.shuffle(counts)
    return counts


def reference_names(rng: random.Random, count: int) -> list[str]:
    """File names as people upload them; one very long name, and some repeated across tasks."""
    extensions = [ext for ext, weight in _EXTENSIONS for _ in range(weight)]
    names = []
    for i in range(count):
        stem = rng.choice(_STEMS)
        variant = rng.random()
        if variant < 0.2:
            stem = f"{stem} ({rng.randint(1, 9)})"
        elif variant < 0.3:
            stem = f"{stem} {rng.randint(1, 99)}% final"
        elif variant < 0.35:
            stem = f"{stem} #{rng.randint(1, 999)} & appendix"
        ext = rng.choice(extensions)
        if i % 50 == 7:  # long, but within the 255 bytes of a file name on disk
            stem = (stem + " – " + " ".join(rng.choice(_STEMS) for _ in range(12)))[:180].rstrip()
        names.append(f"{stem}.{ext.upper() if variant > 0.97 else ext}")
    rng.shuffle(names)
    return names


def prompt(rng: random.Random, occupation: str, refs: list[str], length: int, separators: bool) -> str:
    """Office text of exactly `length` characters naming the task's reference files."""
    role = rng.choice(_ROLES)
    parts = [f"You are {role} working as one of the {occupation}.\n\n"]
    if separators:  # as pasted from a word processor: soft line and paragraph breaks
        parts.append(f"Background:{LINE_SEPARATOR}read everything first.{PARAGRAPH_SEPARATOR}")
    if refs:
        parts.append(f"The attached files are ‘{'’, ‘'.join(refs)}’.\n\n")
    size = sum(map(len, parts))
    for sentence in _sentences(rng):
        if size >= length:
            break
        piece = sentence + rng.choice((" ", " ", "\n", "\n\n", " " + rng.choice(_MARKS) + " "))
        parts.append(piece)
        size += len(piece)
    text = "".join(parts)[:length]
    return text[:-1] + "." if text[-1].isspace() else text


def _sentences(rng: random.Random) -> Iterator[str]:
    while True:
        yield rng.choice(_SENTENCES)


def rubric(rng: random.Random) -> dict[str, str]:
    """rubric_pretty as text and rubric_json as a JSON string of the real item shape."""
    items = []
    for k in range(rng.randint(3, 12)):
        items.append(
            {
                "score": rng.choice([1, 1, 2, 3, 5]),
                "criterion": f"The deliverable {rng.choice(_SENTENCES)[:80].lower()}",
                "required": rng.random() < 0.3,
                "rubric_item_id": str(uuid.UUID(int=rng.getrandbits(128), version=4)),
                "author_type": rng.choice(["expert", "reviewer"]),
                "tags": rng.sample(["format", "accuracy", "completeness", "tone", "calculation"], 2),
                "read_only": False,
                "form_content": None if k % 3 else "Does the memo fit on one page?",
            }
        )
    pretty = "\n".join(f"[{item['score']} pts] {item['criterion']}" for item in items)
    return {"rubric_pretty": pretty, "rubric_json": json.dumps(items, ensure_ascii=False)}


def _names(row: dict[str, Any]) -> list[str]:
    return [Path(path).name for path in row["reference_files"]]


# What makes the dataset awkward, each a test over a row: a covering selection holds at least one row of each.
AWKWARD: dict[str, Callable[[dict[str, Any]], bool]] = {
    "line separators in the prompt": lambda row: LINE_SEPARATOR in row["prompt"],
    "no reference file": lambda row: not row["reference_files"],
    f"{MOST_REFERENCES} reference files": lambda row: len(row["reference_files"]) == MOST_REFERENCES,
    "the shortest prompt": lambda row: len(row["prompt"]) == PROMPT_MIN,
    "the longest prompt": lambda row: len(row["prompt"]) == PROMPT_MAX,
    **{f"{char!r} in a file name": (lambda row, char=char: any(char in name for name in _names(row))) for char in " #%&("},
    "a name past ASCII": lambda row: any(not name.isascii() for name in _names(row)),
    "a name of 180 characters": lambda row: any(len(name) >= 180 for name in _names(row)),
    "an upper-case extension": lambda row: any(name.rsplit(".", 1)[-1].isupper() for name in _names(row)),
    **{f"a {kind} gold": (lambda row, kind=kind: any(p.endswith(kind) for p in row.get("deliverable_files", []))) for kind in GOLD_FORMATS},
    **{f"sector {sector}": (lambda row, sector=sector: row["sector"] == sector) for sector in OCCUPATIONS},
}


def covering_tasks(rows: list[dict[str, Any]], count: int) -> list[str]:
    """`count` task ids in dataset order that hold every AWKWARD case (the first row of each), then the first others:
    a run shorter than the whole dataset that still meets everything the whole would."""
    chosen = {next(i for i, row in enumerate(rows) if awkward(row)) for awkward in AWKWARD.values()}
    chosen |= set(sorted(set(range(len(rows))) - chosen)[: max(count - len(chosen), 0)])
    return [rows[i]["task_id"] for i in sorted(chosen)]
