"""Serve MathJax, Vega and ONNX Runtime Web from the website itself, not from a CDN.

The npm packages pinned in tests/browser/package.json (installed with
``npm ci --prefix tests/browser``) are copied into ``_static/vendor/`` of the HTML build, and
the CDN addresses that Altair writes into every chart's output (``cdn.jsdelivr.net/npm/vega@6``
and friends) are rewritten to those copies, page by page. The notebooks keep the CDN
addresses, so charts still work in Jupyter and Colab. MathJax comes from ``mathjax_path`` in
_config.yml, which points at ``vendor/mathjax/tex-mml-chtml.js``.

ONNX Runtime Web runs the Shakespeare chapter's model in the reader's browser (the panel
``[data-play]`` in that chapter, ``_static/play/play.js``): only its WebAssembly build is copied
(``RUNTIME``), and only the page that holds a panel gets play.js and play.css, with the size of
what its first run downloads (``data-play-bytes``: the runtime and the model). The script loads
nothing heavy before the reader presses Run.

It also drops repeated inline ``<script>`` blocks: under jupyter-book 1, sphinx-thebe registers
its configuration script twice, and the second ``const THEBE_JS_URL`` is a SyntaxError in the
console of every page.

Missing packages or a major-version mismatch between a chart and the vendored library is a
Sphinx warning, so the ``-W`` build fails instead of shipping a page whose charts stay blank.
"""

import json
import pathlib
import re
import shutil

from sphinx.util import logging

logger = logging.getLogger(__name__)

ROOT = pathlib.Path(__file__).resolve().parents[2]
NODE_MODULES = ROOT / "tests" / "browser" / "node_modules"
INSTALL = "npm ci --prefix tests/browser"

# Vega bundles: the CDN name Altair uses -> (npm package, file inside it).
VEGA = {
    "vega": ("vega", "build/vega.min.js"),
    "vega-lib": ("vega", "build/vega.min.js"),  # legacy alias in Altair's require.js paths
    "vega-lite": ("vega-lite", "build/vega-lite.min.js"),
    "vega-embed": ("vega-embed", "build/vega-embed.min.js"),
}
# MathJax: the combined TeX+MathML -> CommonHTML bundle and what it loads on demand
# (fonts, TeX extensions for \require and autoload, the menu, accessibility, speech rules).
MATHJAX = [
    "tex-mml-chtml.js",
    "output/chtml",
    "input/tex",
    "input/mml",
    "ui",
    "a11y",
    "adaptors",
    "sre",
]
# ONNX Runtime Web: the WebAssembly-only build, its module and its binary (the one build for
# SIMD, with or without threads).
RUNTIME = [
    "dist/ort.wasm.min.js",
    "dist/ort-wasm-simd-threaded.mjs",
    "dist/ort-wasm-simd-threaded.wasm",
]
PLAY = ROOT / "book" / "_static" / "play"
PLAY_MODEL = ["shakespeare_gpt.json", "shakespeare_gpt.onnx"]
PANEL = re.compile(r"<div([^>]*\sdata-play[\s>])")
VENDORED = ("mathjax", "vega", "vega-lite", "vega-embed", "onnxruntime-web")
CDN = re.compile(
    r"https://cdn\.jsdelivr\.net/npm/(vega-lib|vega-lite|vega-embed|vega)(?:@([\w.\-]+))?\?noext"
)


def package_version(name):
    return json.loads((NODE_MODULES / name / "package.json").read_text())["version"]


def missing_packages():
    return [
        name
        for name in VENDORED
        if not (NODE_MODULES / name / "package.json").exists()
    ]


def rewrite_cdn_urls(app, pagename, templatename, context, doctree):
    body = context.get("body")
    if not body or "cdn.jsdelivr.net/npm/vega" not in body:
        return

    def local(match):
        name, wanted = match.group(1), match.group(2)
        package, file = VEGA[name]
        if wanted and NODE_MODULES.exists():
            have = package_version(package)
            if wanted.split(".")[0] != have.split(".")[0]:
                logger.warning(
                    f"{pagename}: a chart asks for {name}@{wanted} but the vendored {package} "
                    f"is {have}; update tests/browser/package.json to Altair's versions",
                    location=pagename,
                )
        return context["pathto"](f"_static/vendor/{package}/{pathlib.PurePath(file).name}", 1)

    context["body"] = CDN.sub(local, body)


def play_download_bytes():
    """What the panel's first run fetches: the runtime's files and the model's."""
    runtime = NODE_MODULES / "onnxruntime-web"
    files = [runtime / f for f in RUNTIME if f.startswith("dist/")]
    files += [PLAY / f for f in PLAY_MODEL]
    return sum(f.stat().st_size for f in files if f.exists())


def add_play_panel(app, pagename, templatename, context, doctree):
    """On a page with a ``[data-play]`` panel: its script, its style and its download size."""
    body = context.get("body")
    if not body or "data-play" not in body or not PANEL.search(body):
        return
    missing = [f for f in PLAY_MODEL if not (PLAY / f).exists()]
    if missing:
        logger.warning(
            f"{pagename}: the play panel's model is missing ({', '.join(missing)}): run "
            "`python scripts/export_shakespeare_onnx.py`",
            location=pagename,
        )
    app.add_css_file("play/play.css")
    app.add_js_file("play/play.js", loading_method="defer")
    size = play_download_bytes()
    context["body"] = PANEL.sub(
        lambda m: f'<div data-play-bytes="{size}"{m.group(1)}', body, count=1
    )


def drop_repeated_scripts(app, pagename, templatename, context, doctree):
    seen, unique = set(), []
    for script in context.get("script_files", []):
        attributes = getattr(script, "attributes", {}) or {}
        # the same inline script comes once with filename None and once with ""
        key = (getattr(script, "filename", str(script)) or "", tuple(sorted(attributes.items())))
        if key not in seen:
            seen.add(key)
            unique.append(script)
    context["script_files"] = unique


def copy_assets(app, exception):
    if exception is not None or app.builder.format != "html":
        return
    missing = missing_packages()
    if missing:
        logger.warning(
            f"vendored web assets missing ({', '.join(missing)}): run `{INSTALL}`; "
            "math and charts on this build will not render"
        )
        return
    target = pathlib.Path(app.outdir) / "_static" / "vendor"
    for package, file in set(VEGA.values()):
        destination = target / package / pathlib.PurePath(file).name
        destination.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(NODE_MODULES / package / file, destination)
    source = NODE_MODULES / "mathjax" / "es5"
    for item in MATHJAX:
        destination = target / "mathjax" / item
        if (source / item).is_dir():
            shutil.copytree(source / item, destination, dirs_exist_ok=True)
        else:
            destination.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source / item, destination)
    runtime = NODE_MODULES / "onnxruntime-web"
    for file in RUNTIME:
        destination = target / "onnxruntime-web" / pathlib.PurePath(file).name
        destination.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(runtime / file, destination)
    versions = {name: package_version(name) for name in VENDORED}
    (target / "versions.json").write_text(json.dumps(versions, indent=1) + "\n")


def setup(app):
    app.connect("html-page-context", rewrite_cdn_urls)
    app.connect("html-page-context", add_play_panel)
    app.connect("html-page-context", drop_repeated_scripts, priority=900)  # after the others
    app.connect("build-finished", copy_assets)
    return {"version": "1.0", "parallel_read_safe": True, "parallel_write_safe": True}
