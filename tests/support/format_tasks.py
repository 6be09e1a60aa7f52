"""One scripted GDPval-like task per deliverable format family, each made with the paper's packages in
the full sandbox: the scripted model sends one python_exec that makes the deliverable, reads it back
with another library, and prints DONE; the test then checks the files the run committed.

FAMILIES maps a family to (script, {file name: bytes found in its first 16 bytes}).
"""

from __future__ import annotations

DELIVERABLES = "/workspace/deliverable_files"
DONE = "FORMAT-TASK-DONE"
TITLE = "Quarterly revenue"

_HEAD = f"""
import os, subprocess
os.chdir({DELIVERABLES!r})
TITLE = {TITLE!r}
def soffice(*args):
    subprocess.run(["soffice", "--headless", "--norestore", *args], check=True, capture_output=True, timeout=300)
"""

DOCX = """
import docx, docx2txt, pypandoc
d = docx.Document()
d.add_heading(TITLE, 0)
t = d.add_table(rows=2, cols=2)
t.cell(0, 0).text, t.cell(0, 1).text, t.cell(1, 0).text, t.cell(1, 1).text = "Region", "Revenue", "EMEA", "1,200"
d.save("report.docx")
pypandoc.convert_text(f"# {TITLE}\\n\\nMemo body.", "docx", format="md", outputfile="memo.docx")
assert TITLE in docx2txt.process("report.docx") and "Memo body." in docx2txt.process("memo.docx")
"""

XLSX = """
import openpyxl, pandas as pd
pd.DataFrame({"Region": ["EMEA", "APAC"], "Revenue": [1200, 800]}).to_excel("data.xlsx", index=False, engine="xlsxwriter")
wb = openpyxl.load_workbook("data.xlsx")
wb.active["C1"], wb.active["C2"] = "Total", "=SUM(B2:B3)"
wb.save("data.xlsx")
soffice("--convert-to", "csv", "--outdir", "/tmp", "data.xlsx")
assert "2000" in open("/tmp/data.csv").read()
"""

PPTX = """
from pptx import Presentation
from pptx.chart.data import CategoryChartData
from pptx.enum.chart import XL_CHART_TYPE
from pptx.util import Inches
deck = Presentation()
slide = deck.slides.add_slide(deck.slide_layouts[5])
slide.shapes.title.text = TITLE
data = CategoryChartData()
data.categories = ["EMEA", "APAC"]
data.add_series("Revenue", (1200, 800))
slide.shapes.add_chart(XL_CHART_TYPE.COLUMN_CLUSTERED, Inches(1), Inches(2), Inches(6), Inches(4), data)
deck.save("deck.pptx")
soffice("--convert-to", "pdf", "--outdir", "/tmp", "deck.pptx")
import fitz
with fitz.open("/tmp/deck.pdf") as doc:  # PyMuPDF 1.21 orphans a page whose document is gone
    assert TITLE in doc[0].get_text()
"""

PDF = """
import pdfkit, pdfplumber, weasyprint
html = f"<h1>{TITLE}</h1><table><tr><td>EMEA</td><td>1,200</td></tr></table>"
weasyprint.HTML(string=html).write_pdf("weasy.pdf")
pdfkit.from_string(html, "wkhtml.pdf", options={"quiet": ""})
for name in ("weasy.pdf", "wkhtml.pdf"):
    with pdfplumber.open(name) as pdf:
        assert TITLE in " ".join(pdf.pages[0].extract_text().split()), name  # wkhtmltopdf's spaces read as tabs
"""

IMAGE = """
import qrcode, cv2, numpy as np
from PIL import Image, ImageDraw
from pyzbar.pyzbar import decode
qrcode.make(TITLE).save("qr.png")
assert decode(Image.open("qr.png"))[0].data.decode() == TITLE
im = Image.new("RGB", (320, 200), "white")
ImageDraw.Draw(im).rectangle((40, 40, 280, 160), fill="navy")
im.save("banner.jpg", quality=90)
assert cv2.imread("banner.jpg").shape == (200, 320, 3)
"""

AUDIO = """
import numpy as np, pedalboard, pyloudnorm, soundfile, srt, datetime
rate = 44100
tone = (0.3 * np.sin(2 * np.pi * 440 * np.arange(rate) / rate)).astype(np.float32)
board = pedalboard.Pedalboard([pedalboard.Reverb(room_size=0.3), pedalboard.Gain(gain_db=-3)])
soundfile.write("tone.wav", board(tone, rate), rate)
data, sr = soundfile.read("tone.wav")
loudness = pyloudnorm.Meter(sr).integrated_loudness(data)
assert -40 < loudness < 0, loudness
cue = srt.Subtitle(1, datetime.timedelta(0), datetime.timedelta(seconds=1), TITLE)
open("tone.srt", "w").write(srt.compose([cue]))
"""

VIDEO = """
import av
from moviepy.editor import ColorClip
ColorClip((160, 120), color=(0, 0, 128), duration=1).write_videofile("clip.mp4", fps=10, codec="libx264", audio=False, logger=None)
with av.open("clip.mp4") as container:
    frames = sum(1 for _ in container.decode(video=0))
assert frames >= 9, frames
"""

CAD = """
import cadquery as cq
part = cq.Workplane("XY").box(40, 20, 10).faces(">Z").workplane().hole(6)
cq.exporters.export(part, "bracket.step")
back = cq.importers.importStep("bracket.step")
assert abs(back.val().Volume() - (40 * 20 * 10 - 3.14159 * 9 * 10)) < 5, back.val().Volume()
"""

GEODATA = """
import geopandas as gpd, fiona, rasterio, numpy as np
from shapely.geometry import Point
from rasterio.transform import from_origin
sites = gpd.GeoDataFrame({"name": ["A", "B"]}, geometry=[Point(2.35, 48.85), Point(13.4, 52.52)], crs="EPSG:4326")
sites.to_file("sites.geojson", driver="GeoJSON")
assert len(gpd.read_file("sites.geojson")) == 2
with rasterio.open("grid.tif", "w", driver="GTiff", width=4, height=4, count=1, dtype="uint8",
                   crs="EPSG:4326", transform=from_origin(0, 4, 1, 1)) as dst:
    dst.write(np.arange(16, dtype="uint8").reshape(1, 4, 4))
with rasterio.open("grid.tif") as src:
    assert int(src.read(1).sum()) == 120
"""

CHARTS = """
import matplotlib.pyplot as plt, plotly.graph_objects as go
fig = go.Figure(go.Bar(x=["EMEA", "APAC"], y=[1200, 800]), layout_title_text=TITLE)
fig.write_html("chart.html", include_plotlyjs=True)
fig, ax = plt.subplots()
ax.bar(["EMEA", "APAC"], [1200, 800])
ax.set_title(TITLE)
fig.savefig("chart.png")
"""

PNG = b"\x89PNG\r\n\x1a\n"
ZIP = b"PK\x03\x04"
PDF_MAGIC = b"%PDF-"

_FAMILIES = {
    "docx": (DOCX, {"report.docx": ZIP, "memo.docx": ZIP}),
    "xlsx": (XLSX, {"data.xlsx": ZIP}),
    "pptx": (PPTX, {"deck.pptx": ZIP}),
    "pdf": (PDF, {"weasy.pdf": PDF_MAGIC, "wkhtml.pdf": PDF_MAGIC}),
    "image": (IMAGE, {"qr.png": PNG, "banner.jpg": b"\xff\xd8\xff"}),
    "audio": (AUDIO, {"tone.wav": b"RIFF", "tone.srt": b"1\n"}),
    "video": (VIDEO, {"clip.mp4": b"ftyp"}),
    "cad": (CAD, {"bracket.step": b"ISO-10303-21;"}),
    "geodata": (GEODATA, {"sites.geojson": b"{", "grid.tif": b"II*\x00"}),
    "charts": (CHARTS, {"chart.html": b"<html", "chart.png": PNG}),
}

FAMILIES = {name: (_HEAD + body + f"\nprint({DONE!r})\n", files) for name, (body, files) in _FAMILIES.items()}
