"""Draw a perfguard report as GitHub shows it in a PR comment, as a PNG (for the README).

    .venv/bin/python tools/comment_picture.py reports/perfguard.md docs/img/pr-comment.png \
        --mermaid node_modules/mermaid/dist/mermaid.min.js

Renders the Markdown with cmarkgfm (GitHub's cmark), the mermaid charts with mermaid.js when
given, and takes the screenshot with headless Chromium (Debian's `chromium`).
"""

from __future__ import annotations

import argparse
import html
import re
import subprocess
import tempfile
from pathlib import Path

import cmarkgfm
from cmarkgfm.cmark import Options

STYLE = """
body { font: 14px -apple-system, "Segoe UI", "DejaVu Sans", sans-serif; color: #1f2328;
       background: #fff; margin: 16px; width: 940px; }
.box { border: 1px solid #d1d9e0; border-radius: 6px; }
.head { background: #f6f8fa; border-bottom: 1px solid #d1d9e0; padding: 8px 16px;
        border-radius: 6px 6px 0 0; color: #59636e; }
.head b { color: #1f2328; }
.body { padding: 8px 16px; }
table { border-collapse: collapse; margin: 8px 0; display: block; overflow: auto; }
th, td { border: 1px solid #d1d9e0; padding: 4px 10px; font-size: 13px; }
th { background: #f6f8fa; }
code { background: #eff1f3; border-radius: 4px; padding: 1px 4px; font-size: 12px; }
blockquote { border-left: 4px solid #d1d9e0; margin: 0; padding: 0 12px; color: #59636e; }
h2, h3 { border-bottom: 1px solid #d1d9e0; padding-bottom: 4px; }
pre.mermaid { background: #fff; }
"""


def page(markdown: str, mermaid: Path | None) -> str:
    body = cmarkgfm.github_flavored_markdown_to_html(markdown, options=Options.CMARK_OPT_UNSAFE)
    body = re.sub(
        r'<pre lang="mermaid"><code>(.*?)</code></pre>|'
        r'<pre><code class="language-mermaid">(.*?)</code></pre>',
        lambda m: f'<pre class="mermaid">{m.group(1) or m.group(2)}</pre>',
        body,
        flags=re.S,
    )
    script = (
        f'<script src="{mermaid.resolve().as_uri()}"></script>'
        "<script>mermaid.initialize({startOnLoad: true, theme: 'default'});</script>"
        if mermaid
        else ""
    )
    return (
        f"<!doctype html><html><head><meta charset='utf-8'><style>{STYLE}</style></head><body>"
        "<div class='box'><div class='head'><b>github-actions</b> <span>bot</span> commented"
        f"</div><div class='body'>{body}</div></div>{script}</body></html>"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("report", type=Path)
    parser.add_argument("png", type=Path)
    parser.add_argument("--mermaid", type=Path, help="mermaid.min.js, to draw the charts")
    parser.add_argument("--height", type=int, default=1500)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        doc = Path(tmp) / "comment.html"
        doc.write_text(page(args.report.read_text(encoding="utf-8"), args.mermaid))
        subprocess.run(
            [
                "chromium", "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
                "--disable-background-networking", "--disable-component-update",
                "--no-first-run", "--disable-sync", f"--user-data-dir={tmp}/profile",
                "--allow-file-access-from-files", "--virtual-time-budget=8000",
                f"--window-size=980,{args.height}", f"--screenshot={args.png.resolve()}",
                doc.as_uri(),
            ],
            check=True,
            capture_output=True,
        )  # fmt: skip
    print(f"wrote {args.png} ({html.escape(str(args.report))})")


if __name__ == "__main__":
    main()
