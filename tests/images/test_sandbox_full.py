"""The full sandbox image (images/sandbox/Dockerfile) does what GDPval tasks need, inside podman and
as the local runtime `gdpval run` uses (the image unpacked, under bubblewrap with the sandbox's hardening).

One run of the same script, in each, makes documents with the Python libraries, converts a docx to
PDF with LibreOffice, renders a PDF page to PNG with pdftoppm, reads xlsx/pptx/pdf back, and
exercises OCR, fonts, audio and video; each check is then its own test. The image is the one this
tree builds (`images/sandbox/build.sh tag`), which `hack/setup.sh --test` builds and unpacks
(`gdpval runtime build`); a missing image, runtime or podman fails every test here with what to
run, it never skips.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from gdpval.sandbox.local import LocalSandbox
from support.once import once_per_session
from support.sandbox_full import BUILD_IT, image, local_runtime, podman

pytestmark = pytest.mark.slow

CHECKS_TIMEOUT_S = 900

CHECKS = r"""
import json, os, subprocess, sys, time, traceback
out = sys.argv[1] if len(sys.argv) > 1 else "/out"
results = {}

def check(name):
    def wrap(fn):
        start = time.monotonic()
        try:
            results[name] = {"ok": True, "detail": fn()}
        except Exception:
            results[name] = {"ok": False, "detail": traceback.format_exc()[-2000:]}
        results[name]["seconds"] = round(time.monotonic() - start, 2)
        return fn
    return wrap

def run(*cmd, timeout=180):
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    assert proc.returncode == 0, f"{cmd} -> {proc.returncode}: {proc.stdout[-500:]} {proc.stderr[-1500:]}"
    return proc.stdout

TEXT = "Quarterly revenue report"
CJK = "季度收入报告"

@check("identity")
def _():
    home = os.environ["HOME"]
    assert os.getuid() == 1000 and os.getgid() == 1000, (os.getuid(), os.getgid())
    assert os.path.isdir("/workspace/deliverable_files") and os.access("/workspace/deliverable_files", os.W_OK)
    assert os.path.isfile("/opt/gdpval/toolserver.py")
    assert os.access(home, os.W_OK), home
    return {"uid": os.getuid(), "home": home, "python": sys.executable, "version": sys.version.split()[0]}

@check("make_docx")
def _():
    import docx
    d = docx.Document()
    d.add_heading(TEXT, 0)
    d.add_paragraph(f"Revenue grew 12%. {CJK}")
    table = d.add_table(rows=2, cols=2)
    table.cell(0, 0).text, table.cell(0, 1).text = "Region", "Revenue"
    table.cell(1, 0).text, table.cell(1, 1).text = "EMEA", "1,200"
    d.save(f"{out}/report.docx")
    return os.path.getsize(f"{out}/report.docx")

@check("docx_to_pdf_libreoffice")
def _():
    run("soffice", "--headless", "--norestore", "--convert-to", "pdf", "--outdir", out, f"{out}/report.docx", timeout=300)
    import fitz
    doc = fitz.open(f"{out}/report.pdf")
    text = doc[0].get_text()
    assert TEXT in text, text
    assert CJK in text, f"CJK text lost (fonts?): {text!r}"
    fonts = sorted({f[3] for f in doc[0].get_fonts()})
    return {"pages": doc.page_count, "fonts": fonts}

@check("pdf_page_to_png")
def _():
    run("pdftoppm", "-png", "-r", "100", "-f", "1", "-l", "1", f"{out}/report.pdf", f"{out}/page")
    png = f"{out}/page-1.png"
    with open(png, "rb") as f:
        assert f.read(8) == b"\x89PNG\r\n\x1a\n"
    from PIL import Image
    with Image.open(png) as im:
        assert im.width > 500 and im.height > 500, im.size
        return {"size": im.size}

@check("ocr_tesseract")
def _():
    import pytesseract
    from PIL import Image
    text = pytesseract.image_to_string(Image.open(f"{out}/page-1.png"))
    assert "revenue" in text.lower(), text
    return text.strip().splitlines()[0]

@check("xlsx")
def _():
    import openpyxl, pandas as pd
    wb = openpyxl.Workbook()
    ws = wb.active
    ws.append(["Region", "Revenue"])
    ws.append(["EMEA", 1200])
    ws.append(["APAC", 800])
    ws["C1"], ws["C2"] = "Total", "=SUM(B2:B3)"
    wb.save(f"{out}/data.xlsx")
    back = openpyxl.load_workbook(f"{out}/data.xlsx")
    assert back.active["C2"].value == "=SUM(B2:B3)"
    df = pd.read_excel(f"{out}/data.xlsx")
    assert int(df["Revenue"].sum()) == 2000
    # LibreOffice computes the formula when converting, as a grader opening the file would see it.
    run("soffice", "--headless", "--norestore", "--convert-to", "csv", "--outdir", out, f"{out}/data.xlsx", timeout=300)
    assert "2000" in open(f"{out}/data.csv").read()
    return {"rows": len(df)}

@check("xls_xlrd")
def _():
    run("soffice", "--headless", "--norestore", "--convert-to", "xls", "--outdir", out, f"{out}/data.xlsx", timeout=300)
    import xlrd
    sheet = xlrd.open_workbook(f"{out}/data.xls").sheet_by_index(0)
    assert sheet.cell_value(1, 0) == "EMEA"
    return sheet.nrows

@check("pptx")
def _():
    from pptx import Presentation
    from pptx.util import Inches
    prs = Presentation()
    slide = prs.slides.add_slide(prs.slide_layouts[1])
    slide.shapes.title.text = TEXT
    slide.placeholders[1].text = "Growth 12%"
    slide.shapes.add_picture(f"{out}/page-1.png", Inches(5), Inches(4), width=Inches(2))
    prs.save(f"{out}/deck.pptx")
    back = Presentation(f"{out}/deck.pptx")
    assert back.slides[0].shapes.title.text == TEXT
    run("soffice", "--headless", "--norestore", "--convert-to", "pdf", "--outdir", out, f"{out}/deck.pptx", timeout=300)
    import fitz
    with fitz.open(f"{out}/deck.pdf") as doc:  # PyMuPDF 1.21 (the paper's) orphans a page whose document is gone
        assert TEXT in doc[0].get_text()
    return len(back.slides)

@check("pdf_libraries")
def _():
    from reportlab.lib.pagesizes import A4
    from reportlab.pdfgen import canvas
    c = canvas.Canvas(f"{out}/made.pdf", pagesize=A4)
    c.drawString(72, 760, TEXT)
    c.showPage(); c.save()
    import fitz, pypdf, pdfplumber
    with fitz.open(f"{out}/made.pdf") as doc:
        assert TEXT in doc[0].get_text()
    assert TEXT in pypdf.PdfReader(f"{out}/made.pdf").pages[0].extract_text()
    with pdfplumber.open(f"{out}/report.pdf") as pdf:
        assert TEXT in pdf.pages[0].extract_text()
    from pdf2image import convert_from_path
    assert convert_from_path(f"{out}/made.pdf", dpi=50)[0].width > 100
    run("gs", "-q", "-dNOPAUSE", "-dBATCH", "-sDEVICE=pdfwrite", f"-sOutputFile={out}/gs.pdf", f"{out}/made.pdf")
    run("qpdf", "--check", f"{out}/gs.pdf")
    return "ok"

@check("fonts")
def _():
    families = run("fc-list", ":", "family")
    wanted = ["DejaVu Sans", "Liberation Serif", "Carlito", "Noto Sans CJK SC", "Noto Serif"]
    missing = [f for f in wanted if f not in families]
    assert not missing, missing
    return len(set(families.splitlines()))

@check("charts_matplotlib")
def _():
    import matplotlib.pyplot as plt
    import numpy as np
    fig, ax = plt.subplots()
    ax.bar(["EMEA", "APAC"], np.array([1200, 800]))
    ax.set_title(CJK)
    fig.savefig(f"{out}/chart.png")
    return os.path.getsize(f"{out}/chart.png")

@check("audio_video")
def _():
    run("ffmpeg", "-v", "error", "-f", "lavfi", "-i", "sine=frequency=440:duration=1", f"{out}/tone.wav")
    run("ffmpeg", "-v", "error", "-f", "lavfi", "-i", "testsrc=duration=1:size=160x120:rate=10",
        "-pix_fmt", "yuv420p", f"{out}/clip.mp4")
    import librosa, soundfile, av
    y, sr = librosa.load(f"{out}/tone.wav", sr=None)
    f0 = float(librosa.yin(y, fmin=200, fmax=800, sr=sr).mean())
    assert abs(f0 - 440) < 10, f0
    assert soundfile.info(f"{out}/tone.wav").duration > 0.9
    with av.open(f"{out}/clip.mp4") as container:
        frames = sum(1 for _ in container.decode(video=0))
    from moviepy.editor import VideoFileClip
    with VideoFileClip(f"{out}/clip.mp4") as clip:
        duration = clip.duration
    from pydub import AudioSegment
    assert len(AudioSegment.from_wav(f"{out}/tone.wav")) >= 990
    return {"f0": round(f0, 1), "frames": frames, "duration": duration}

@check("python_stack")
def _():
    import importlib
    names = ["numpy", "pandas", "scipy", "sklearn", "statsmodels", "sympy", "seaborn", "cv2", "networkx",
             "xlsxwriter", "fpdf", "bs4", "lxml", "markdown", "jinja2", "yaml", "requests", "tabulate"]
    return {n: getattr(importlib.import_module(n), "__version__", "?") for n in names}

@check("bytecode")
def _():
    # Every module comes with its bytecode, hash-based and unchecked (pyc flags 0b01): no import compiles.
    import importlib, importlib.util, sysconfig
    site = sysconfig.get_paths()["purelib"]
    flags = {}
    for name in ["pandas", "openpyxl", "docx", "pptx", "matplotlib.pyplot", "reportlab.pdfgen.canvas", "PIL.Image", "fitz"]:
        module = importlib.import_module(name)
        assert module.__file__.startswith(site), (name, module.__file__)
        with open(importlib.util.cache_from_source(module.__file__), "rb") as pyc:
            flags[name] = int.from_bytes(pyc.read(8)[4:], "little")
    assert set(flags.values()) == {1}, flags
    return flags

@check("toolserver_starts")
def _():
    proc = subprocess.Popen([sys.executable, "/opt/gdpval/toolserver.py", "--listen", "127.0.0.1:7000", "--workspace", "/workspace"],
                            env={**os.environ, "GDPVAL_SANDBOX_TOKEN": "t" * 32}, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    import urllib.request
    try:
        for _ in range(50):
            try:
                urllib.request.urlopen("http://127.0.0.1:7000/healthz", timeout=1).read()
                return "healthz ok"
            except OSError:
                time.sleep(0.2)
        raise AssertionError(proc.stdout.read1(4000) if proc.poll() is not None else "no answer on /healthz")
    finally:
        proc.kill()

with open(f"{out}/results.json", "w") as f:
    json.dump(results, f, indent=1, default=str)
"""

NAMES = [
    "bytecode",
    "identity",
    "make_docx",
    "docx_to_pdf_libreoffice",
    "pdf_page_to_png",
    "ocr_tesseract",
    "xlsx",
    "xls_xlrd",
    "pptx",
    "pdf_libraries",
    "fonts",
    "charts_matplotlib",
    "audio_video",
    "python_stack",
    "toolserver_starts",
]


def in_podman(tmp: Path) -> dict:
    base = podman()
    ref = image()
    if subprocess.run([*base, "image", "exists", ref]).returncode != 0:
        pytest.fail(f"the full sandbox image {ref} is not built: {BUILD_IT}")
    out = tmp / "out"
    out.mkdir()
    out.chmod(0o777)  # the image's uid 1000 writes here
    (out / "checks.py").write_text(CHECKS)
    proc = subprocess.run(
        # No network: the sandbox must do all of this offline. Explicit, modest rlimits: the ones
        # podman picks by itself are refused on this VM (no CAP_SYS_RESOURCE).
        [
            *base,
            "run",
            "--rm",
            "--network=none",
            "--ulimit",
            "nofile=16384:16384",
            "--ulimit",
            "nproc=16384:16384",
            "-v",
            f"{out}:/out",
            ref,
            "python3",
            "/out/checks.py",
        ],
        capture_output=True,
        text=True,
        timeout=CHECKS_TIMEOUT_S,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return json.loads((out / "results.json").read_text())


def in_local_runtime(tmp: Path) -> dict:
    """The same script through the tool server of a hardened local sandbox over the unpacked image."""
    with LocalSandbox(tmp / "workspace", {}, isolation="bwrap", system=local_runtime()) as box:
        workspace = box.host_workspace  # a disk or tmpfs made at start: what goes in it comes after
        (workspace / "deliverable_files").mkdir(exist_ok=True)
        (workspace / "out").mkdir()
        (workspace / "checks.py").write_text(CHECKS)
        if box.owner is not None:  # a root runner's sandbox runs as its own host uid: what we made here must be its
            for path in ("deliverable_files", "out", "checks.py"):
                os.chown(workspace / path, *box.owner)
        done = box.client().call("bash", {"command": "python3 checks.py /workspace/out"}, CHECKS_TIMEOUT_S)
        assert done.exit_code == 0 and not done.timed_out, done.output[-3000:]
        return json.loads((workspace / "out" / "results.json").read_text())


WHERE = {"podman": in_podman, "local": in_local_runtime}


@pytest.fixture(scope="module", params=sorted(WHERE))
def results(request, tmp_path_factory) -> dict:
    def compute() -> dict:
        data = WHERE[request.param](tmp_path_factory.mktemp(f"sandbox-full-{request.param}"))
        print(f"\n{request.param}: " + ", ".join(f"{k} {v['seconds']}s" for k, v in data.items()))
        return data

    return once_per_session(request.config, tmp_path_factory, f"sandbox-full-checks-{request.param}", compute)


def test_checks_cover_everything(results) -> None:
    assert sorted(results) == sorted(NAMES)


@pytest.mark.parametrize("name", NAMES)
def test_inside_full_sandbox(results, name: str) -> None:
    result = results[name]
    assert result["ok"], result["detail"]
