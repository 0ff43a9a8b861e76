"""The built website driven in headless Chromium (``make site`` builds it first).

Serves _build/html (or $BOOK_HTML_DIR) on localhost, opens every page listed in _toc.yml and
checks what only a browser can: no console errors, no request leaving localhost (MathJax and
Vega are vendored into the build, see book/_ext/vendor_assets.py), math typeset, every Altair
chart drawn with marks and a tooltip on hover, launch/download links, glued numbers, copy
buttons, foldable code, loaded, high-DPI and undistorted figures, charts that fit the column,
search, and that no page of the book is wider than the screen at 390 px (a phone) or 1280 px.
For a human to look at, it saves into _build/screenshots (or $BOOK_SCREENSHOT_DIR) a full-page
screenshot of each chapter, STEM.png (light) and STEM-dark.jpg (dark mode), STEM-tooltip.png
(the viewport with a chart's tooltip showing, for chapters with charts), and phone-width ones
of the first chapter: STEM-phone.png (top of the page) and STEM-phone-chart.png.

Chromium: $CHROMIUM, else chromium / chromium-browser / google-chrome on PATH. With none, every
test here is skipped with a loud message. Playwright drives it; it never downloads a browser.
"""

import functools
import http.server
import json
import os
import pathlib
import re
import shutil
import sys
import threading
import warnings

import pytest
from conftest import (
    BRANCH,
    CHAPTERS,
    OWNER_REPO,
    PAGES,
    ROOT,
    load_script,
    markdown_of,
)

pytestmark = pytest.mark.site
# What a reader meets on a chapter page, and its limits (scripts/reading_path.py prints it).
READING = load_script("reading_path.py")

SITE = pathlib.Path(
    os.environ.get("BOOK_HTML_DIR", ROOT / "_build" / "html")
).resolve()
SHOTS = pathlib.Path(
    os.environ.get("BOOK_SCREENSHOT_DIR", SITE.parent / "screenshots")
)
# Debian's Chromium, offline: no background traffic, no first-run or sync services.
FLAGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
WAIT_MS = 30_000
SHOT_TIMEOUT_MS = 60_000  # full-page screenshots of long pages, see look_at


def find_browser():
    candidates = [os.environ.get("CHROMIUM", "")]
    candidates += [
        shutil.which(n) or ""
        for n in ("chromium", "chromium-browser", "google-chrome")
    ]
    return next((c for c in candidates if c and os.access(c, os.X_OK)), None)


# Runs before any page script: keeps each Altair chart's Vega view on its <div> (el.__vegaView),
# so the tests can find a mark to hover. The chart code itself is untouched.
CAPTURE_VIEWS = """
(() => {
  let wrapped;
  Object.defineProperty(window, "vegaEmbed", {
    configurable: true,
    get() { return wrapped; },
    set(embed) {
      wrapped = function (el, spec, opts) {
        const result = embed(el, spec, opts);
        result.then((r) => {
          const div = typeof el === "string" ? document.querySelector(el) : el;
          div.__vegaView = r.view;
        }).catch(() => {});
        return result;
      };
      Object.assign(wrapped, embed);
    },
  });
})();
"""

# True once every chart <div> holds a drawing or an error (MathJax is awaited separately).
CHARTS_READY = """
() => [...document.querySelectorAll('div[id^="altair-viz-"]')].every(
  (d) => d.__vegaView || d.querySelector(".error"))
"""
MATH_READY = """
async () => {
  if (!document.querySelector(".math")) return true;
  if (!(window.MathJax && MathJax.startup && MathJax.startup.promise)) return false;
  await MathJax.startup.promise;
  return true;
}
"""

FACTS = """
() => {
  const all = (s, root = document) => [...root.querySelectorAll(s)];
  const charts = all('div[id^="altair-viz-"]').map((div) => {
    const view = div.__vegaView;
    let items = 0, target = null;
    const walk = (mark, ox, oy) => {
      for (const item of mark.items || []) {
        if (mark.marktype === "group") {
          for (const m of item.items || []) walk(m, ox + (item.x || 0), oy + (item.y || 0));
          continue;
        }
        items += 1;
        if (item.tooltip != null && item.x != null && item.y != null
            && (!target || (target.marktype !== "symbol" && mark.marktype === "symbol"))) {
          target = {x: ox + item.x + (item.width || 0) / 2, y: oy + item.y + (item.height || 0) / 2,
                    marktype: mark.marktype};
        }
      }
    };
    if (view) walk(view.scenegraph().root, 0, 0);
    let inked = 0;
    const canvas = div.querySelector("canvas.marks");
    if (canvas) {
      const px = canvas.getContext("2d").getImageData(0, 0, canvas.width, canvas.height).data;
      for (let i = 0; i < px.length; i += 4) {
        if (px[i + 3] > 0 && (px[i] < 240 || px[i + 1] < 240 || px[i + 2] < 240)) inked += 1;
      }
    }
    const svg = div.querySelector("svg.marks");
    if (svg) inked = svg.querySelectorAll("path, line, circle, rect, text").length;
    const error = div.querySelector(".error");
    const box = div.closest(".output") || div.parentElement;
    const fits = box.scrollWidth <= box.clientWidth + 1;
    return {id: div.id, drawn: !!(canvas || svg), items, inked, target, fits,
            error: error ? error.innerText : null,
            origin: view ? view.origin() : null};
  });
  const links = {};
  for (const a of all("a[href]")) links[a.getAttribute("href")] = a.href;
  const code = all("div.cell_input div.highlight");
  return {
    title: document.title,
    math: all(".math").length,
    mjx: all("mjx-container").length,
    mathErrors: all("mjx-merror, [data-mjx-error]").map((e) => e.getAttribute("data-mjx-error")
                                                              || e.textContent),
    charts,
    links,
    glue: all(".pasted-text, .pasted-inline").map((e) => e.textContent.trim()),
    text: document.body.innerText,
    codeCells: code.length,
    copyButtons: code.filter((c) => c.querySelector("button.copybtn")).length,
    folded: all("details.hide").map((d) => d.open),
    images: all("div.cell_output img, article img").map((img) => ({
      src: img.getAttribute("src"), complete: img.complete, natural: img.naturalWidth,
      naturalHeight: img.naturalHeight, shown: img.getBoundingClientRect().width,
      shownHeight: img.getBoundingClientRect().height})),
    overflow: document.documentElement.scrollWidth - window.innerWidth,
  };
}
"""


class QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args):
        pass


@pytest.fixture(scope="session")
def site():
    if not (SITE / "index.html").exists():
        pytest.fail(
            f"no built website at {SITE}: run `make book` (or `make site`, which builds it first)"
            " or point BOOK_HTML_DIR at a jupyter-book _build/html folder"
        )
    server = http.server.ThreadingHTTPServer(
        ("127.0.0.1", 0), functools.partial(QuietHandler, directory=str(SITE))
    )
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


@pytest.fixture(scope="session")
def browser():
    executable = find_browser()
    if executable is None:
        message = (
            "BROWSER TESTS SKIPPED: no Chromium found (set $CHROMIUM, or as root: "
            "apt-get install -y chromium). The website was NOT checked in a browser"
        )
        print(
            f"\n{'!' * 80}\n{message}\n{'!' * 80}",
            file=sys.__stderr__,
            flush=True,
        )
        warnings.warn(message, pytest.PytestWarning, stacklevel=1)
        pytest.skip(message)
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        pytest.fail(
            "playwright is not installed in this environment: pip install -r requirements.txt"
        )
    os.environ["PLAYWRIGHT_SKIP_BROWSER_DOWNLOAD"] = "1"
    with sync_playwright() as playwright:
        chromium = playwright.chromium.launch(
            executable_path=executable, args=FLAGS, headless=True
        )
        yield chromium
        chromium.close()


@pytest.fixture(scope="session")
def shots():
    SHOTS.mkdir(parents=True, exist_ok=True)
    for old in [*SHOTS.glob("*.png"), *SHOTS.glob("*.jpg")]:
        old.unlink()
    return SHOTS


def new_context(browser, site, **options):
    """A fresh context in which any request that leaves the local server is recorded and refused."""
    context = browser.new_context(service_workers="block", **options)
    context.set_default_timeout(10_000)
    context.external = []

    def refuse(route):
        context.external.append(route.request.url)
        route.abort()

    context.route(
        lambda url: not url.startswith(site) and not url.startswith("data:"),
        refuse,
    )
    context.add_init_script(CAPTURE_VIEWS)
    return context


def open_page(context, url):
    page = context.new_page()
    page.problems = []
    page.on(
        "console",
        lambda m: (
            m.type == "error"
            and page.problems.append(f"console: {m.text} ({m.location})")
        ),
    )
    page.on("pageerror", lambda e: page.problems.append(f"uncaught: {e}"))
    page.goto(url, wait_until="load")
    try:
        page.wait_for_function(MATH_READY, timeout=WAIT_MS)
        page.wait_for_function(CHARTS_READY, timeout=WAIT_MS)
    except Exception as error:  # the checks below say what is missing
        page.problems.append(
            f"page not ready after {WAIT_MS} ms (math or charts): {error}"
        )
    return page


# Client coordinates of a mark that has a tooltip: the mark's own element when Vega draws SVG,
# else its scenegraph position (offsets of the enclosing groups + the view's origin) on the canvas.
TOOLTIP_TARGET = """
([id, target]) => {
  const div = document.getElementById(id);
  div.scrollIntoView({block: "center"});
  const stroked = (e) =>
    /mark-(line|area|trail|rule)/.test(e.closest("g[class*=mark-]").className.baseVal);
  const hits = [...div.querySelectorAll("svg.marks g[class*=mark-] path")]
    .filter((e) => e.__data__ && e.__data__.tooltip != null)
    .sort((a, b) => stroked(a) - stroked(b));
  if (hits.length && !stroked(hits[0])) {
    const r = hits[0].getBoundingClientRect();
    return [r.left + r.width / 2, r.top + r.height / 2];
  }
  if (hits.length) {  // a point on the stroke itself, halfway along
    const path = hits[0];
    const p = path.getPointAtLength(path.getTotalLength() / 2).matrixTransform(path.getScreenCTM());
    return [p.x, p.y];
  }
  const r = div.querySelector(".marks").getBoundingClientRect();
  const [ox, oy] = div.__vegaView.origin();
  return [r.left + ox + target.x, r.top + oy + target.y];
}
"""


def hover_tooltip(page, chart, screenshot=None):
    """Move the mouse onto a mark that has a tooltip; return the tooltip's text, or None."""
    x, y = page.evaluate(TOOLTIP_TARGET, [chart["id"], chart["target"]])
    page.mouse.move(0, 0)
    for dx, dy in [(0, 0), (5, 5), (-5, -5), (5, -5), (-5, 5), (0, 5), (5, 0)]:
        page.mouse.move(x + dx, y + dy, steps=3)
        try:
            page.wait_for_selector(
                "#vg-tooltip-element.visible", state="visible", timeout=1000
            )
        except Exception:
            continue
        text = page.inner_text("#vg-tooltip-element")
        if screenshot:
            page.screenshot(path=screenshot)
        page.mouse.move(0, 0)
        return text
    return None


@pytest.fixture(scope="session")
def chapter(browser, site, shots):
    """Visit a chapter once (memoized): facts, problems, tooltips and screenshots."""
    context = new_context(
        browser, site, viewport={"width": 1280, "height": 900}
    )
    visited = {}

    def visit(stem):
        if stem not in visited:
            if not (SITE / "notebooks" / f"{stem}.html").exists():
                pytest.fail(
                    f"{stem} is in _toc.yml but {SITE} has no page for it: rebuild the book"
                )
            try:
                visited[stem] = look_at(stem)
            except Exception as error:  # fail each test of this chapter at once, not after timeouts
                visited[stem] = error
        if isinstance(visited[stem], Exception):
            raise visited[stem]
        return visited[stem]

    def look_at(stem):
        before = len(context.external)
        page = open_page(context, f"{site}/notebooks/{stem}.html")
        facts = page.evaluate(FACTS)
        facts["reading_path"] = page.evaluate(READING.READING_PATH)
        facts["problems"] = page.problems
        facts["tooltips"] = {}
        for c in facts["charts"]:
            if c["target"] and c["origin"]:
                shot = (
                    None if facts["tooltips"] else shots / f"{stem}-tooltip.png"
                )
                facts["tooltips"][c["id"]] = hover_tooltip(page, c, shot)
        facts["unfolds"] = None
        if facts["folded"]:
            page.locator("details.hide > summary").first.click()
            facts["unfolds"] = page.locator("details.hide").first.evaluate(
                "d => d.open && d.querySelector('pre') !== null"
                " && d.querySelector('pre').getBoundingClientRect().height > 0"
            )
            page.locator("details.hide > summary").first.click()
        page.locator(".dropdown-launch-buttons button.dropdown-toggle").click()
        facts["launch_visible"] = page.locator(
            ".dropdown-launch-buttons a[href*='colab.research.google.com']"
        ).is_visible()
        page.keyboard.press("Escape")
        facts["download"] = (None, "")
        if href := facts["links"].get(f"../_sources/notebooks/{stem}.ipynb"):
            download = page.request.get(href)
            facts["download"] = (
                download.status,
                download.text() if download.ok else "",
            )
        page.mouse.move(0, 0)
        page.evaluate("window.scrollTo(0, 0)")
        # A full-page shot of a long chapter waits for fonts and every chart; on a loaded
        # 2-core machine that took more than playwright's 10 s default (chapter 5).
        page.screenshot(
            path=shots / f"{stem}.png", full_page=True, timeout=SHOT_TIMEOUT_MS
        )
        page.evaluate(
            "document.documentElement.dataset.theme = 'dark';"
            "document.documentElement.dataset.mode = 'dark'"
        )
        page.wait_for_timeout(200)
        # JPEG: half the time of a PNG for a page-long image; the light PNG is for sharpness
        page.screenshot(
            path=shots / f"{stem}-dark.jpg",
            full_page=True,
            quality=85,
            timeout=SHOT_TIMEOUT_MS,
        )
        facts["external"] = context.external[before:]
        page.close()
        return facts

    yield visit
    context.close()


# ---------------------------------------------------------------- every chapter


@pytest.mark.parametrize("stem", CHAPTERS)
def test_no_console_errors(chapter, stem):
    assert chapter(stem)["problems"] == []


@pytest.mark.parametrize("stem", CHAPTERS)
def test_the_reading_path_teaches(chapter, stem):
    """At 1280 px: at most 3,000 words of visible prose, evidence (asserts, glue) out of the
    way, every code box and display equation inside the column, and a summary."""
    facts = chapter(stem)["reading_path"]
    over = {
        name: facts[name]
        for name, limit in READING.LIMITS.items()
        if facts[name] > limit
    }
    assert not over, (
        f"{stem} over the reading-path limits {READING.LIMITS}: {over}"
        f" (widest code lines: {facts['wide_examples']})"
    )
    assert facts["summary"], f"{stem} has no '## Summary' section"


@pytest.mark.parametrize("stem", CHAPTERS)
def test_nothing_is_fetched_from_outside(chapter, stem):
    external = chapter(stem)["external"]
    assert external == [], (
        f"requests that would fail offline (vendor them): {external}"
    )


@pytest.mark.parametrize("stem", CHAPTERS)
def test_math_is_typeset(chapter, stem):
    facts = chapter(stem)
    assert facts["math"] > 0, "no math on the page"
    assert facts["mjx"] >= facts["math"], (
        f"{facts['mjx']} of {facts['math']} formulas typeset"
    )
    assert facts["mathErrors"] == [], f"TeX errors: {facts['mathErrors']}"


def altair_charts_in_html(stem):
    return len(
        re.findall(
            r'<div id="altair-viz-',
            (SITE / "notebooks" / f"{stem}.html").read_text(),
        )
    )


@pytest.mark.parametrize("stem", CHAPTERS)
def test_every_altair_chart_is_drawn_with_marks(chapter, stem):
    charts = chapter(stem)["charts"]
    assert len(charts) == altair_charts_in_html(stem)
    for c in charts:
        assert c["error"] is None, f"{c['id']}: {c['error']}"
        assert c["drawn"] and c["items"] > 0 and c["inked"] > 100, c
        assert c["fits"], (
            f"{c['id']} is wider than the text column: part of it is scrolled away"
        )


@pytest.mark.parametrize("stem", CHAPTERS)
def test_chart_tooltips_appear_on_hover(chapter, stem):
    facts = chapter(stem)
    for chart_id, text in facts["tooltips"].items():
        assert text, (
            f"{chart_id}: no tooltip appeared on hovering a mark that has one"
        )


def test_at_least_one_chart_shows_a_tooltip(chapter):
    shown = [
        text
        for stem in CHAPTERS
        for text in chapter(stem)["tooltips"].values()
        if text
    ]
    assert shown, "no chart in the book showed a tooltip on hover"


@pytest.mark.parametrize("stem", CHAPTERS)
def test_launch_and_download_links(chapter, stem, site):
    facts = chapter(stem)
    path = f"notebooks/{stem}.ipynb"
    expected = [
        f"https://colab.research.google.com/github/{OWNER_REPO}/blob/{BRANCH}/{path}",
        f"https://mybinder.org/v2/gh/{OWNER_REPO}/{BRANCH}?urlpath=lab/tree/{path}",
        f"https://github.com/{OWNER_REPO}",
    ]
    for href in expected:
        assert href in facts["links"].values(), f"no link to {href}"
    assert any(
        f"github.com/{OWNER_REPO}/issues/new" in h
        for h in facts["links"].values()
    )
    assert facts["launch_visible"], (
        "the launch menu does not open to show Colab"
    )
    status, body = facts["download"]
    assert status is not None, (
        f"no download link to ../_sources/notebooks/{stem}.ipynb"
    )
    assert status == 200, f"download link answers HTTP {status}"
    notebook = json.loads(
        body
    )  # test_site.py compares it with the repository's notebook
    assert notebook == json.loads((SITE / "_sources" / path).read_text())
    assert notebook["cells"], "the downloaded notebook is empty"


@pytest.mark.parametrize("stem", CHAPTERS)
def test_glued_values_are_shown(chapter, stem):
    facts = chapter(stem)
    # the notebook this build was made from (test_site.py checks it is the repository's)
    notebook = json.loads(
        (SITE / "_sources" / "notebooks" / f"{stem}.ipynb").read_text()
    )
    roles = re.findall(r"\{glue(?::text)?\}`", markdown_of(notebook))
    assert len(facts["glue"]) >= len(roles), (
        f"{len(roles)} glue roles, {len(facts['glue'])} shown"
    )
    assert all(facts["glue"]), f"empty glued values: {facts['glue']}"
    missing = re.search(
        r"glue.{0,40}not found|not found.{0,40}glue", facts["text"], re.I
    )
    assert missing is None, missing


@pytest.mark.parametrize("stem", CHAPTERS)
def test_code_has_copy_buttons_and_hidden_code_unfolds(chapter, stem):
    facts = chapter(stem)
    assert facts["codeCells"] > 0
    assert facts["copyButtons"] == facts["codeCells"], (
        "code cells without a copy button"
    )
    assert facts["folded"], "no folded (hidden) code on the page"
    assert not any(facts["folded"]), "hidden code is open when the page loads"
    assert facts["unfolds"], "clicking a folded cell does not show its code"


@pytest.mark.parametrize("stem", CHAPTERS)
def test_figures_load_and_are_high_dpi(chapter, stem):
    for img in chapter(stem)["images"]:
        assert img["complete"] and img["natural"] > 0, (
            f"broken image {img['src']}"
        )
        if (
            img["src"].endswith(".png")
            and img["shown"] > 0
            and "_images/" in img["src"]
        ):
            ratio = img["natural"] / img["shown"]
            assert ratio >= 1.5, (
                f"{img['src']} is {ratio:.2f}x: blurry on high-DPI screens"
            )
        assert not distorted(img), (
            f"{img['src']} is squashed or stretched: {img}"
        )


def distorted(img):
    """Whether an image is shown at another aspect ratio than its pixels' (by over 2%)."""
    if not (
        img["shown"] > 0 and img["natural"] > 0 and img["naturalHeight"] > 0
    ):
        return False
    aspect = img["naturalHeight"] / img["natural"]
    return abs(img["shownHeight"] / img["shown"] - aspect) > 0.02 * aspect


@pytest.mark.parametrize("stem", CHAPTERS)
def test_screenshots_are_saved(chapter, stem, shots):
    chapter(stem)
    for name in (f"{stem}.png", f"{stem}-dark.jpg"):
        assert (shots / name).stat().st_size > 10_000, name


# ---------------------------------------------------------------- the rest of the site


@pytest.mark.parametrize(
    "page", [p for p in PAGES if not p.startswith("notebooks/")]
)
def test_other_pages_load_cleanly(browser, site, page):
    context = new_context(
        browser, site, viewport={"width": 1280, "height": 900}
    )
    tab = open_page(context, f"{site}/{page}.html")
    facts = tab.evaluate(FACTS)
    context.close()
    assert tab.problems == []
    assert context.external == []
    assert facts["mjx"] >= facts["math"] and facts["mathErrors"] == []


def test_the_site_root_opens_the_first_page(browser, site):
    context = new_context(browser, site)
    page = context.new_page()
    page.goto(f"{site}/")
    page.wait_for_url(f"{site}/{PAGES[0]}.html", timeout=WAIT_MS)
    context.close()


def test_phone_width_screenshot(browser, site, shots):
    stem = CHAPTERS[0]
    context = new_context(
        browser,
        site,
        viewport={"width": 390, "height": 844},
        device_scale_factor=2,
        is_mobile=True,
        has_touch=True,
    )
    page = open_page(context, f"{site}/notebooks/{stem}.html")
    facts = page.evaluate(FACTS)
    page.screenshot(path=shots / f"{stem}-phone.png")
    if facts[
        "charts"
    ]:  # and one of the first chart, the widest kind of content
        page.evaluate(
            "document.querySelector('div[id^=\"altair-viz-\"]').scrollIntoView({block: 'center'})"
        )
        page.screenshot(path=shots / f"{stem}-phone-chart.png")
    context.close()
    assert page.problems == []
    assert facts["overflow"] <= 1, (
        f"the page scrolls sideways by {facts['overflow']} px on a phone"
    )
    assert all(c["fits"] for c in facts["charts"]), (
        "a chart is wider than a phone's screen"
    )


# Elements that stick out past the right edge of the screen, and no box of theirs scrolls them
# back into it: what makes the page scroll sideways (for the failure message).
WIDENERS = """
(width) => {
  const out = [];
  for (const e of document.querySelectorAll("body *")) {
    const r = e.getBoundingClientRect();
    if (r.width === 0 || r.right <= width + 1) continue;
    if (e.closest(".skip-link, .bd-sidebar-primary, .bd-sidebar-secondary")) continue;
    let clipped = false;
    for (let p = e.parentElement; p && !clipped; p = p.parentElement) {
      clipped = ["auto", "scroll", "hidden", "clip"].includes(getComputedStyle(p).overflowX)
        && p.getBoundingClientRect().right <= width + 1;
    }
    if (!clipped) out.push(`${e.tagName.toLowerCase()}.${e.classList[0] || ""} to ${
      Math.round(r.right)} px: ${(e.textContent || "").trim().slice(0, 60)}`);
  }
  return out.slice(0, 5);
}
"""
# Figures (cell outputs) whose box reaches past the text column: cut off, or scrolled inside.
WIDER_THAN_THE_COLUMN = """
() => {
  const column = document.querySelector("article.bd-article");
  if (!column) return [];
  const right = column.getBoundingClientRect().right;
  return [...column.querySelectorAll("div.cell_output img")]
    .filter((img) => img.getBoundingClientRect().right > right + 1)
    .map((img) => `${img.getAttribute("src")}: ${
      Math.round(img.getBoundingClientRect().width)} px`);
}
"""
SCREENS = {
    390: {
        "viewport": {"width": 390, "height": 844},
        "device_scale_factor": 2,
        "is_mobile": True,
        "has_touch": True,
    },
    1280: {"viewport": {"width": 1280, "height": 900}},
}


@pytest.fixture(scope="session")
def screen(browser, site):
    """One browser context per screen width, shared by every page's width check."""
    contexts = {}

    def context(width):
        if width not in contexts:
            contexts[width] = new_context(browser, site, **SCREENS[width])
        return contexts[width]

    yield context
    for context_ in contexts.values():
        context_.close()


@pytest.mark.parametrize("width", sorted(SCREENS))
@pytest.mark.parametrize("page", PAGES)
def test_no_page_is_wider_than_the_screen(screen, site, page, width):
    tab = open_page(screen(width), f"{site}/{page}.html")
    document = tab.evaluate("document.documentElement.scrollWidth")
    wideners = tab.evaluate(WIDENERS, width) if document > width else []
    images = tab.evaluate(FACTS)["images"]
    cut = tab.evaluate(WIDER_THAN_THE_COLUMN)
    tab.close()
    assert document <= width, (
        f"{page} lays out {document} px wide on a {width} px screen: it scrolls sideways; "
        f"what sticks out: {wideners}"
    )
    squashed = [img["src"] for img in images if distorted(img)]
    assert not squashed, (
        f"{page} at {width} px: figures shown squashed or stretched: {squashed}"
    )
    assert not cut, (
        f"{page} at {width} px: figures wider than the column: {cut}"
    )


def test_search_finds_chapter_text(browser, site):
    stem = CHAPTERS[0]
    html = (SITE / "notebooks" / f"{stem}.html").read_text()
    word = max(re.findall(r"<h1>([^<]+)", html)[0].split(), key=len).lower()
    context = new_context(
        browser, site, viewport={"width": 1280, "height": 900}
    )
    page = open_page(context, f"{site}/search.html?q={word}")
    page.wait_for_selector("#search-results ul.search li", timeout=WAIT_MS)
    hrefs = page.eval_on_selector_all(
        "#search-results ul.search li a", "as => as.map(a => a.href)"
    )
    context.close()
    assert any(f"notebooks/{stem}.html" in h for h in hrefs), (
        f"searching {word!r} gave {hrefs}"
    )


def test_citations_link_both_ways(browser, site):
    cited = [
        s
        for s in CHAPTERS
        if "bibliography.html#"
        in (SITE / "notebooks" / f"{s}.html").read_text()
    ]
    assert cited, "no chapter cites the bibliography"
    stem = cited[0]
    context = new_context(
        browser, site, viewport={"width": 1280, "height": 900}
    )
    page = open_page(context, f"{site}/notebooks/{stem}.html")
    page.locator("a[href*='bibliography.html#']").first.click()
    page.wait_for_url("**/bibliography.html#*")
    entry = page.url.split("#")[1]
    back = page.locator(f"[id='{entry}'] .cited-in a[href*='{stem}.html#']")
    assert back.count() == 1, (
        f"bibliography entry #{entry} does not link back to {stem}"
    )
    back.click()
    page.wait_for_url(f"**/{stem}.html#*")
    anchor = page.url.split("#")[1]
    assert (
        page.locator(
            f"[id='{anchor}'] a[href*='bibliography.html#{entry}']"
        ).count()
        >= 1
    )
    context.close()


# At 390 px: each Altair chart's width against its column and its smallest text as shown (the
# font size times the SVG's scale); prose tables against their box; display equations and
# DataFrames wider than their box, and whether that box shows edge shadows (custom.css).
PHONE_READABILITY = """
() => {
  const article = document.querySelector("article.bd-article") || document.body;
  const charts = [...article.querySelectorAll(".vega-embed svg.marks")].map((svg) => {
    const shown = svg.getBoundingClientRect().width;
    const box = svg.viewBox && svg.viewBox.baseVal;
    const scale = box && box.width ? shown / box.width : 1;
    let smallest = Infinity;
    for (const text of svg.querySelectorAll("text")) {
      if (text.textContent.trim()) {
        smallest = Math.min(smallest, parseFloat(getComputedStyle(text).fontSize) * scale);
      }
    }
    const column = (svg.closest(".cell_output") || article).clientWidth;
    return {fill: shown / column, smallest};
  });
  const tables = [...article.querySelectorAll("table:not(.dataframe)")]
    .filter((t) => !t.closest(".cell_output"))
    .map((t) => ({width: t.scrollWidth, box: t.parentElement.clientWidth,
                  text: t.innerText.slice(0, 40)}));
  const scrolled = [...article.querySelectorAll(
      'mjx-container[display="true"], div.output.text_html, div.pst-scrollable-table-container')]
    .filter((e) => e.scrollWidth > e.clientWidth + 1)
    .map((e) => ({kind: e.tagName.toLowerCase(), scrolls: getComputedStyle(e).overflowX === "auto",
                  cue: getComputedStyle(e).backgroundImage.includes("gradient"),
                  text: e.textContent.trim().slice(0, 40)}));
  return {charts, tables, scrolled};
}
"""


@pytest.mark.parametrize("page", PAGES)
def test_on_a_phone_charts_are_readable_and_nothing_wide_hides(
    screen, site, page
):
    """Issue 30's phone goals: charts fill >= 90% of the column with text >= 9 px; prose tables
    reflow into the column; what is wider (equations, DataFrames) scrolls in a box with a cue."""
    tab = open_page(screen(390), f"{site}/{page}.html")
    facts = tab.evaluate(PHONE_READABILITY)
    tab.close()
    small = [c for c in facts["charts"] if c["fill"] < 0.9 or c["smallest"] < 9]
    assert not small, (
        f"{page} at 390 px: charts too narrow or text under 9 px: {small}"
    )
    hidden = [t for t in facts["tables"] if t["width"] > t["box"] + 1]
    assert not hidden, (
        f"{page} at 390 px: prose tables wider than the column: {hidden}"
    )
    uncued = [e for e in facts["scrolled"] if not (e["scrolls"] and e["cue"])]
    assert not uncued, (
        f"{page} at 390 px: wide content without a scroll cue: {uncued}"
    )


# ---------------------------------------------------------------- the play panel (chapter 12)
# The chapter's page runs the shipped GPT in the browser (book/_static/play/play.js, ONNX
# Runtime Web vendored by book/_ext/vendor_assets.py). At temperature 0 it must write what
# PyTorch's greedy decoding writes, past the 64-character context (the crop of GPT.generate).

PLAY_STEM = "12_shakespeare_gpt"
PLAY_PROMPT = "Romeo.\nBut soft, what light through yonder window breaks"
PLAY_LENGTH = 300  # the panel's default length
# Loading included. Measured on a quiet 2-core machine: about 70 per second (the book's target
# is 50, its goal 200 after loading); the test holds a floor with room for a busy machine, a
# timing test being no benchmark, and prints the rate it measured.
PLAY_MIN_CHARS_PER_SECOND = 25
PLAY_MAX_BYTES = 20_000_000
PLAY_DONE = """
() => ["done", "error"].includes(document.querySelector("[data-play]").dataset.playState)
"""
# What the page has fetched so far: [address, bytes].
RESOURCES = """
() => performance.getEntriesByType("resource").map(
  (e) => [e.name, e.encodedBodySize || e.transferSize || e.decodedBodySize || 0])
"""
HEAVY = re.compile(r"/onnxruntime-web/|\.onnx$|\.wasm$")
# Everything the first run fetches: the runtime and the model with its vocabulary.
PLAY_FILES = re.compile(r"/onnxruntime-web/|/_static/play/shakespeare_gpt\.")


@pytest.fixture(scope="session")
def greedy_continuation():
    """PyTorch's greedy continuation of PLAY_PROMPT by the shipped weights."""
    pytest.importorskip("torch")
    from helpers.tasks.shakespeare import pretrained

    model, tokenizer = pretrained()
    prompt = tokenizer.encode(PLAY_PROMPT)[None]
    tokens = model.generate(prompt, PLAY_LENGTH, greedy=True)
    return tokenizer.decode(tokens[0, prompt.shape[1] :])


def run_the_panel(page, prompt, temperature, length):
    """Fill the panel, press Run, wait for the last character; the seconds it took."""
    page.fill("[data-play-prompt]", prompt)
    page.fill("[data-play-temperature]", str(temperature))
    page.fill("[data-play-length]", str(length))
    start = page.evaluate("performance.now()")
    page.click("[data-play-run]")
    page.wait_for_function(PLAY_DONE, timeout=180_000, polling=50)
    panel = page.locator("[data-play]")
    state = panel.get_attribute("data-play-state")
    assert state == "done", page.inner_text("[data-play-status]")
    return {
        "seconds": float(panel.get_attribute("data-play-seconds")),
        "writing": float(panel.get_attribute("data-play-writing-seconds")),
        "waited": (page.evaluate("performance.now()") - start) / 1000,
    }


@pytest.mark.parametrize("width", [1280, 390])
def test_the_play_panel_writes_pytorchs_greedy_text(
    browser, site, shots, width, greedy_continuation
):
    context = new_context(browser, site, **SCREENS[width])
    page = open_page(context, f"{site}/notebooks/{PLAY_STEM}.html")
    panel = page.locator("[data-play]")
    assert panel.count() == 1, "the chapter page has no play panel"
    loaded_with_the_page = [
        url for url, _ in page.evaluate(RESOURCES) if HEAVY.search(url)
    ]
    assert loaded_with_the_page == [], (
        "the runtime or the model loaded before Run"
    )
    stated = int(panel.get_attribute("data-play-bytes"))
    assert 1_000_000 < stated < PLAY_MAX_BYTES
    assert f"{stated / 1e6:.1f} MB" in page.inner_text("[data-play-status]")
    panel.scroll_into_view_if_needed()

    timing = run_the_panel(page, PLAY_PROMPT, 0, PLAY_LENGTH)
    output = page.locator("[data-play-output]").text_content()
    bars = page.locator("[data-play] .play-bar")
    fetched = sum(
        size for url, size in page.evaluate(RESOURCES) if PLAY_FILES.search(url)
    )
    downloaded = int(panel.get_attribute("data-play-downloaded"))
    overflow = page.evaluate(
        "document.documentElement.scrollWidth - window.innerWidth"
    )
    panel.screenshot(path=shots / f"{PLAY_STEM}-play-{width}.png")
    page.evaluate(
        "document.documentElement.dataset.theme = 'dark';"
        "document.documentElement.dataset.mode = 'dark'"
    )
    page.wait_for_timeout(200)
    panel.screenshot(path=shots / f"{PLAY_STEM}-play-{width}-dark.png")
    bar_count, picked = bars.count(), page.locator(".play-picked").count()
    rate, after_loading = (
        PLAY_LENGTH / timing["seconds"],
        PLAY_LENGTH / timing["writing"],
    )
    print(
        f"\nplay panel at {width} px: {rate:.0f} characters per second loading included "
        f"({timing['seconds']:.2f} s), {after_loading:.0f} after loading; "
        f"downloaded {downloaded / 1e6:.2f} MB"
    )
    context.close()
    assert output == greedy_continuation, (
        "the browser's greedy text is not PyTorch's (new weights? run "
        "`python scripts/export_shakespeare_onnx.py`, then `make book`)"
    )
    assert page.problems == [] and context.external == []
    assert bar_count == 10 and picked == 1
    assert downloaded == fetched <= stated + 10_000, (
        downloaded,
        fetched,
        stated,
    )
    assert fetched < PLAY_MAX_BYTES
    assert overflow <= 1, f"the page scrolls sideways by {overflow} px"
    assert rate >= PLAY_MIN_CHARS_PER_SECOND, (
        f"{rate:.0f} characters per second, loading included"
    )


def test_the_play_panel_samples_and_stops(browser, site):
    """At temperature 1 it writes `length` characters of the vocabulary; Run again reuses the
    loaded model (nothing fetched twice); Stop ends a long run early."""
    import json as json_

    vocabulary = set(
        json_.loads(
            (SITE / "_static" / "play" / "shakespeare_gpt.json").read_text()
        )["vocabulary"]
    )
    context = new_context(browser, site, **SCREENS[1280])
    page = open_page(context, f"{site}/notebooks/{PLAY_STEM}.html")
    run_the_panel(page, "JULIET.\n", 1, 80)
    first = page.locator("[data-play-output]").text_content()
    fetched = len(page.evaluate(RESOURCES))
    run_the_panel(page, "JULIET.\n", 0.5, 40)
    second = page.locator("[data-play-output]").text_content()
    refetched = len(page.evaluate(RESOURCES)) - fetched
    page.fill("[data-play-length]", "2000")
    page.click("[data-play-run]")
    page.wait_for_function(
        "() => document.querySelector('[data-play-output]').textContent.length > 10"
    )
    page.click("[data-play-run]")  # Stop
    page.wait_for_function(PLAY_DONE)
    stopped = len(page.locator("[data-play-output]").text_content())
    page.fill("[data-play-prompt]", "To be or not to be \u00e6")
    page.click("[data-play-run]")
    refused = page.inner_text("[data-play-status]")
    context.close()
    assert len(first) == 80 and set(first) <= vocabulary
    assert len(second) == 40 and set(second) <= vocabulary
    assert refetched == 0
    assert 10 < stopped < 2000
    assert "\u00e6" in refused and "Not in the model" in refused
    assert page.problems == [] and context.external == []


def test_the_play_panel_says_so_without_webassembly(browser, site):
    context = new_context(browser, site, **SCREENS[390])
    context.add_init_script("delete window.WebAssembly")
    page = open_page(context, f"{site}/notebooks/{PLAY_STEM}.html")
    status = page.inner_text("[data-play-status]")
    disabled = page.locator("[data-play-run]").is_disabled()
    context.close()
    assert "WebAssembly" in status and disabled
    assert page.problems == [] and context.external == []
