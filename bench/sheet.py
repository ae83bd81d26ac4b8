"""The review sheet at 2,000 pairs (or --pairs N): file size, time until interactive,
time to filter. Above 2,000 pairs the sheet embeds the texts of the pairs that need a
review only (40% of these synthetic pairs).

Baseline, measured in the same run: a static page holding the same texts, every pair
rendered eagerly, no script (what a naive report would be).

    python bench/sheet.py [--pairs 2000] [--tokens 256]
"""

from __future__ import annotations

import argparse
import html
import shutil
import tempfile
import time
from pathlib import Path

import pandas as pd
from _common import save
from playwright.sync_api import sync_playwright
from triage_scale import generate

from quantcheck import compare_runs

ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking",
        "--disable-component-update", "--no-first-run"]


def static_baseline(report: Path) -> Path:
    pairs = pd.read_csv(report / "pairs.csv", keep_default_na=False)
    body = "".join(f"<article><h3>{html.escape(str(r.prompt_id))}</h3><pre>"
                   f"{html.escape(str(r.a_text))}</pre><pre>{html.escape(str(r.b_text))}</pre>"
                   "</article>" for r in pairs.itertuples())
    path = report / "baseline.html"
    path.write_text(f"<!doctype html><html><body>{body}</body></html>", encoding="utf-8")
    return path


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--pairs", type=int, default=2000)
    parser.add_argument("--tokens", type=int, default=256)
    parser.add_argument("--tries", type=int, default=3)
    args = parser.parse_args()
    root = Path(tempfile.mkdtemp(prefix="qc-sheet-"))
    try:
        generate(root / "runs", args.pairs, 1, args.tokens, 5)
        started = time.perf_counter()
        compare_runs(root / "runs" / "a", root / "runs" / "b", root / "report")
        compare_s = time.perf_counter() - started
        sheet = root / "report" / "index.html"
        sheet_bytes = sheet.stat().st_size
        baseline = static_baseline(root / "report")
        with sync_playwright() as playwright:
            browser = playwright.chromium.launch(executable_path="/usr/bin/chromium", args=ARGS)
            ready, filtered, loaded = [], [], []
            for _ in range(args.tries):
                page = browser.new_page()
                started = time.perf_counter()
                page.goto(sheet.as_uri())
                page.wait_for_selector("body[data-ready=true]")
                ready.append(time.perf_counter() - started)
                started = time.perf_counter()
                page.select_option("#f-class", "review")
                page.locator("article.pair").first.wait_for()
                filtered.append(time.perf_counter() - started)
                page.close()
                page = browser.new_page()
                started = time.perf_counter()
                page.goto(baseline.as_uri(), wait_until="load")
                loaded.append(time.perf_counter() - started)
                page.close()
            browser.close()
    finally:
        shutil.rmtree(root, ignore_errors=True)
    figures = {"pairs": args.pairs, "tokens_per_text": args.tokens,
               "sheet_bytes": sheet_bytes,
               "compare_and_render_s": compare_s,
               "sheet_interactive_s": min(ready), "filter_s": min(filtered),
               "baseline_static_load_s": min(loaded),
               "ratio_sheet_over_baseline": min(ready) / min(loaded)}
    print(figures)
    print(f"saved {save('sheet' if args.pairs == 2000 else f'sheet_{args.pairs}', figures)}")


if __name__ == "__main__":
    main()
