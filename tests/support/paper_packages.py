"""The Python packages of the full sandbox image (images/sandbox/requirements.in: the GDPval paper's
list plus a few of ours; requirements-torch.in: its torch family, the full-torch flavour's) and the
module each is imported as, for the tests that import them all.

IMPORT_SCRIPT runs inside a sandbox (podman or the local runtime): it imports every module in one
interpreter, each in its own try, and prints one JSON object (module -> "ok" or the error's last lines).
"""

from __future__ import annotations

import json
import re

from infra.paths import REPO_ROOT

REQUIREMENTS_IN = REPO_ROOT / "images" / "sandbox" / "requirements.in"
TORCH_REQUIREMENTS_IN = REPO_ROOT / "images" / "sandbox" / "requirements-torch.in"

# Distribution name (PEP 503 form) -> the module a user imports. The test fails when either
# requirements file names a package that is missing here, so a new package comes with its import.
MODULES = {
    "aiohttp": "aiohttp",
    "anytree": "anytree",
    "aspose-words": "aspose.words",
    "av": "av",
    "basemap": "mpl_toolkits.basemap",
    "beautifulsoup4": "bs4",
    "arviz": "arviz",
    "biopython": "Bio",
    "bokeh": "bokeh",
    "cadquery": "cadquery",
    "cadquery-ocp": "OCP",
    "cairosvg": "cairosvg",
    "camelot-py": "camelot",
    "catboost": "catboost",
    "chardet": "chardet",
    "countryinfo": "countryinfo",
    "coverage": "coverage",
    "cryptography": "cryptography",
    "databricks-sql-connector": "databricks.sql",
    "datadog": "datadog",
    "ddtrace": "ddtrace",
    "dlib-bin": "dlib",
    "docx2txt": "docx2txt",
    "einops": "einops",
    "exchange-calendars": "exchange_calendars",
    "faker": "faker",
    "fastapi": "fastapi",
    "ffmpeg-python": "ffmpeg",
    "fiona": "fiona",
    "folium": "folium",
    "fpdf2": "fpdf",
    "fuzzywuzzy": "fuzzywuzzy",
    "gensim": "gensim",
    "geopandas": "geopandas",
    "geopy": "geopy",
    "gradio": "gradio",
    "graphviz": "graphviz",
    "gtts": "gtts",
    "h5py": "h5py",
    "hypercorn": "hypercorn",
    "imageio": "imageio",
    "imbalanced-learn": "imblearn",
    "imblearn": "imblearn",
    "imgkit": "imgkit",
    "jax": "jax",
    "jaxlib": "jaxlib",
    "jinja2": "jinja2",
    "jupyter-client": "jupyter_client",
    "jupyter-core": "jupyter_core",
    "jupyter-server": "jupyter_server",
    "jupyterlab": "jupyterlab",
    "jupyterlab-pygments": "jupyterlab_pygments",
    "jupyterlab-server": "jupyterlab_server",
    "keras": "keras",
    "kerykeion": "kerykeion",
    "librosa": "librosa",
    "lightgbm": "lightgbm",
    "loguru": "loguru",
    "lxml": "lxml",
    "markdown": "markdown",
    "markdownify": "markdownify",
    "matplotlib": "matplotlib",
    "matplotlib-venn": "matplotlib_venn",
    "mizani": "mizani",
    "mne": "mne",
    "moviepy": "moviepy.editor",
    "mtcnn": "mtcnn",
    "mutagen": "mutagen",
    "nashpy": "nashpy",
    "nbclassic": "nbclassic",
    "networkx": "networkx",
    "nltk": "nltk",
    "notebook": "notebook",
    "numba": "numba",
    "numpy": "numpy",
    "numpy-financial": "numpy_financial",
    "odfpy": "odf",
    "opencv-python": "cv2",
    "openpyxl": "openpyxl",
    "pandas": "pandas",
    "pdf2image": "pdf2image",
    "pdfkit": "pdfkit",
    "pdfplumber": "pdfplumber",
    "pdfrw": "pdfrw",
    "pedalboard": "pedalboard",
    "pillow": "PIL.Image",
    "plotly": "plotly",
    "plotnine": "plotnine",
    "pronouncing": "pronouncing",
    "pycountry": "pycountry",
    "pydantic": "pydantic",
    "pydot": "pydot",
    "pydub": "pydub",
    "pydyf": "pydyf",
    "pygraphviz": "pygraphviz",
    "pylog": "pylog",
    "pyloudnorm": "pyloudnorm",
    "pymc": "pymc",
    "pymupdf": "fitz",
    "pyopenssl": "OpenSSL",
    "pypandoc": "pypandoc",
    "pypdf": "pypdf",
    "pypdf2": "PyPDF2",
    "pyprover": "pyprover",
    "pytesseract": "pytesseract",
    "pytest": "pytest",
    "pytest-asyncio": "pytest_asyncio",
    "pytest-cov": "pytest_cov",
    "pytest-json-report": "pytest_jsonreport",
    "pyth3": "pyth",
    "python-dateutil": "dateutil",
    "python-docx": "docx",
    "python-pptx": "pptx",
    "pyttsx3": "pyttsx3",
    "pyxlsb": "pyxlsb",
    "pyyaml": "yaml",
    "pyzbar": "pyzbar.pyzbar",
    "qrcode": "qrcode",
    "rapidfuzz": "rapidfuzz",
    "rarfile": "rarfile",
    "rasterio": "rasterio",
    "rdflib": "rdflib",
    "rdkit": "rdkit.Chem",
    "reportlab": "reportlab.pdfgen.canvas",
    "requests": "requests",
    "scikit-image": "skimage",
    "scikit-learn": "sklearn",
    "scipy": "scipy",
    "seaborn": "seaborn",
    "setuptools": "pkg_resources",
    "shap": "shap",
    "shapely": "shapely.geometry",
    "snowflake-connector-python": "snowflake.connector",
    "soupsieve": "soupsieve",
    "soundfile": "soundfile",
    "spacy": "spacy",
    "srt": "srt",
    "statsmodels": "statsmodels.api",
    "svglib": "svglib.svglib",
    "svgwrite": "svgwrite",
    "sympy": "sympy",
    "tables": "tables",
    "tabula": "tabula",
    "tabulate": "tabulate",
    "textblob": "textblob",
    "torch": "torch",
    "torchaudio": "torchaudio",
    "torchtext": "torchtext",
    "torchvision": "torchvision",
    "tqdm": "tqdm",
    "trimesh": "trimesh",
    "typing-extensions": "typing_extensions",
    "weasyprint": "weasyprint",
    "websockets": "websockets",
    "wordcloud": "wordcloud",
    "xgboost": "xgboost",
    "xlrd": "xlrd",
    "xlsxwriter": "xlsxwriter",
    "xml-python": "xml_python",
}


def canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def listed(text: str) -> list[str]:
    """The distribution names a requirements.in names (options, comments and extras dropped)."""
    names = []
    for line in text.splitlines():
        line = line.split("#", 1)[0].strip()
        if line and not line.startswith("-"):
            names.append(canonical(re.split(r"[\[<>=~!; ]", line, maxsplit=1)[0]))
    return names


# Listed packages that install but cannot import beside the rest of the list, as in the paper's own
# environment (images/sandbox/README.md, "Flavours"): module -> what its import error says. The tests
# expect exactly these errors, so a fix shows up as a failure to update this table.
KNOWN_BROKEN = {
    "torchtext": "undefined symbol",  # 0.18.0, the last release, is built against torch 2.3, not 2.5.1
    "mtcnn": "No module named 'tensorflow'",  # 0.1.1 runs on tensorflow.keras; TensorFlow is not listed
}


IMPORT_SCRIPT = r"""
import importlib, json, sys, traceback, warnings
warnings.simplefilter("ignore")
results = {}
for module in sys.argv[1:]:
    try:
        importlib.import_module(module)
        results[module] = "ok"
    except BaseException:
        results[module] = traceback.format_exc()[-1200:]
print("IMPORTS " + json.dumps(results))
"""


def parse_imports(output: str) -> dict[str, str]:
    """The JSON line IMPORT_SCRIPT printed, from whatever else the imports wrote around it."""
    (line,) = [line for line in output.splitlines() if line.startswith("IMPORTS ")]
    return json.loads(line.removeprefix("IMPORTS "))
