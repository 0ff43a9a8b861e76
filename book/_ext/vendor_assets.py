"""Serve MathJax and Vega from the website itself, not from a CDN.

The npm packages pinned in tests/browser/package.json (installed with
``npm ci --prefix tests/browser``) are copied into ``_static/vendor/`` of the HTML build, and
the CDN addresses that Altair writes into every chart's output (``cdn.jsdelivr.net/npm/vega@6``
and friends) are rewritten to those copies, page by page. The notebooks keep the CDN
addresses, so charts still work in Jupyter and Colab. MathJax comes from ``mathjax_path`` in
_config.yml, which points at ``vendor/mathjax/tex-mml-chtml.js``.

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
CDN = re.compile(
    r"https://cdn\.jsdelivr\.net/npm/(vega-lib|vega-lite|vega-embed|vega)(?:@([\w.\-]+))?\?noext"
)


def package_version(name):
    return json.loads((NODE_MODULES / name / "package.json").read_text())["version"]


def missing_packages():
    return [
        name
        for name in ("mathjax", "vega", "vega-lite", "vega-embed")
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
    versions = {
        name: package_version(name) for name in ("mathjax", "vega", "vega-lite", "vega-embed")
    }
    (target / "versions.json").write_text(json.dumps(versions, indent=1) + "\n")


def setup(app):
    app.connect("html-page-context", rewrite_cdn_urls)
    app.connect("html-page-context", drop_repeated_scripts, priority=900)  # after the others
    app.connect("build-finished", copy_assets)
    return {"version": "1.0", "parallel_read_safe": True, "parallel_write_safe": True}
