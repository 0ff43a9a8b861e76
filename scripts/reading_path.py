"""What a reader meets on each chapter page: the table of the reading-path issue.

    python scripts/reading_path.py [--html _build/html] [--width 1280] [STEM ...]

Opens each chapter of the built site (``make book`` first) in headless Chromium at 1280 px and
prints, per chapter: the words of the reading path (visible prose outside code cells and closed
dropdowns), the ``assert`` and ``glue(`` lines in visible code, the code boxes wider than their
column, the display equations cut at the column's edge, and whether the chapter has a summary.
``tests/test_browser.py`` holds every chapter to the limits in ``LIMITS`` with the same code.
"""

from __future__ import annotations

import argparse
import functools
import http.server
import pathlib
import threading

ROOT = pathlib.Path(__file__).resolve().parent.parent
LIMITS = {"words": 3000, "asserts": 8, "glue": 0, "wide_code": 0, "cut_math": 0}

# Everything is measured on the live page: closed <details> (folded code, "Going deeper"
# dropdowns) render nothing, so innerText and the layout leave them out by themselves.
READING_PATH = r"""
() => {
  const article = document.querySelector("article.bd-article");
  // Inside a closed <details> (folded code, a dropdown) nothing is on the reading path,
  // even where the theme keeps the folded content laid out.
  const shown = (e) => e.getClientRects().length > 0 && !e.closest("details:not([open])")
    && getComputedStyle(e).visibility !== "hidden";
  const cells = [...article.querySelectorAll("div.cell")];
  const inputs = cells.map((c) => c.querySelector("div.cell_input")).filter((i) => i && shown(i));
  const code = inputs.map((i) => i.innerText).join("\n").split("\n");
  const saved = cells.map((c) => c.style.display);
  cells.forEach((c) => (c.style.display = "none"));
  const math = [...article.querySelectorAll("mjx-container, .math")];
  const savedMath = math.map((m) => m.style.display);
  math.forEach((m) => (m.style.display = "none"));
  const prose = article.innerText;
  cells.forEach((c, i) => (c.style.display = saved[i]));
  math.forEach((m, i) => (m.style.display = savedMath[i]));
  const pres = [...article.querySelectorAll("pre")].filter(shown);
  const wide = pres.filter((p) => p.scrollWidth > p.clientWidth + 1);
  const displays = [...article.querySelectorAll("mjx-container[display='true']")].filter(shown);
  const cut = displays.filter((m) => {
    const box = m.parentElement.getBoundingClientRect();
    const own = m.scrollWidth > m.clientWidth + 1;
    const r = m.getBoundingClientRect();
    return own || r.right > article.getBoundingClientRect().right + 1 || r.width > box.width + 1;
  });
  const headings = [...article.querySelectorAll("h2")].map((h) => h.innerText.trim());
  const column = article.getBoundingClientRect().width;
  return {
    words: (prose.match(/[A-Za-z][A-Za-z'\u2019-]*/g) || []).length,
    asserts: code.filter((l) => /^\s*assert\b|assert_close\(/.test(l)).length,
    glue: code.filter((l) => /\bglue\(/.test(l)).length,
    wide_code: wide.length,
    wide_examples: wide.slice(0, 3).map((p) => p.innerText.split("\n").reduce(
      (a, b) => (b.length > a.length ? b : a), "")),
    cut_math: cut.length,
    summary: headings.some((h) => /^summary/i.test(h)),
    column: Math.round(column),
  };
}
"""


def chapters() -> list[str]:
    import yaml

    toc = yaml.safe_load((ROOT / "_toc.yml").read_text())
    files = [c["file"] for part in toc["parts"] for c in part["chapters"]]
    return [pathlib.Path(f).name for f in files if f.startswith("notebooks/")]


def measure(
    html: pathlib.Path, stems: list[str], width: int = 1280
) -> dict[str, dict]:
    """Open each chapter page of the site in ``html`` and return its reading-path facts."""
    from playwright.sync_api import sync_playwright

    from tests.test_browser import (
        FLAGS,
        MATH_READY,
        find_browser,
    )  # one browser set-up

    handler = functools.partial(
        http.server.SimpleHTTPRequestHandler, directory=str(html)
    )
    handler.log_message = lambda *args: None
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    site = f"http://127.0.0.1:{server.server_address[1]}"
    results = {}
    try:
        with sync_playwright() as playwright:
            browser = playwright.chromium.launch(
                executable_path=find_browser(), args=FLAGS, headless=True
            )
            page = browser.new_page(viewport={"width": width, "height": 900})
            for stem in stems:
                page.goto(f"{site}/notebooks/{stem}.html", wait_until="load")
                page.wait_for_function(MATH_READY, timeout=30_000)
                results[stem] = page.evaluate(READING_PATH)
            browser.close()
    finally:
        server.shutdown()
    return results


def main() -> None:
    import sys

    sys.path.insert(0, str(ROOT))
    sys.path.insert(0, str(ROOT / "tests"))
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "stems", nargs="*", help="chapter stems (default: every chapter)"
    )
    parser.add_argument(
        "--html", type=pathlib.Path, default=ROOT / "_build" / "html"
    )
    parser.add_argument("--width", type=int, default=1280)
    parser.add_argument(
        "--examples", action="store_true", help="print the widest code lines"
    )
    args = parser.parse_args()
    facts = measure(args.html, args.stems or chapters(), args.width)
    print(
        "| chapter | reading-path words | visible assert lines | visible glue( lines "
        "| code boxes wider than the column | cut display equations | summary |"
    )
    print("| --- | --- | --- | --- | --- | --- | --- |")
    for stem, f in facts.items():
        flags = [k for k, limit in LIMITS.items() if f[k] > limit]
        flags += [] if f["summary"] else ["summary"]
        print(
            f"| {stem} | {f['words']:,} | {f['asserts']} | {f['glue']} | {f['wide_code']} "
            f"| {f['cut_math']} | {'yes' if f['summary'] else 'no'} |"
            + (f" <- {', '.join(flags)}" if flags else "")
        )
        if args.examples:
            for line in f["wide_examples"]:
                print(f"    {len(line):3} {line}")
    print(
        f"\ncolumn width at {args.width} px: {next(iter(facts.values()))['column']} px"
    )


if __name__ == "__main__":
    main()
