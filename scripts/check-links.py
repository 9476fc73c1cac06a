#!/usr/bin/env python3
"""Checks the links of Markdown files: every relative link must name a file
of this repository, and a `#fragment` a heading of the page it points at
(as mdBook and GitHub make anchors). Links with a scheme (https:, mailto:)
are not followed. Usage: check-links.py FILE.md... ; exits 1 on a broken one."""

import os
import re
import sys

LINK = re.compile(r"\[(?:[^\]\[]|\[[^\]]*\])*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")
HEADING = re.compile(r"^(#{1,6})\s+(.*?)\s*#*\s*$")


def anchor(heading):
    """The anchor of a heading: lower case, punctuation but - and _ dropped,
    spaces as -."""
    # Emphasis marks go; an underscore inside a word (Q4_1) stays.
    text = re.sub(r"`|\*\*|\*|(?<!\w)_+(?=\w)|(?<=\w)_+(?!\w)", "", heading)
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", text)
    text = text.strip().lower()
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def outside_fences(text):
    """The text with fenced code blocks blanked out."""
    return re.sub(r"^```.*?^```", "", text, flags=re.S | re.M)


def outside_code(text):
    """The text with fenced code blocks and inline code blanked out."""
    return re.sub(r"`[^`\n]*`", "``", outside_fences(text))


def anchors(path, cache={}):
    if path not in cache:
        found = set()
        with open(path, encoding="utf-8") as f:
            # Inline code stays: its text is part of the anchor
            # ("`n` choices" is #n-choices on GitHub and in mdBook).
            for line in outside_fences(f.read()).splitlines():
                m = HEADING.match(line)
                if m:
                    found.add(anchor(m.group(2)))
        cache[path] = found
    return cache[path]


def main(files):
    broken = []
    for source in files:
        with open(source, encoding="utf-8") as f:
            text = outside_code(f.read())
        for target in LINK.findall(text):
            if re.match(r"^[a-z][a-z0-9+.-]*:", target):
                continue
            path, _, fragment = target.partition("#")
            resolved = (
                os.path.normpath(os.path.join(os.path.dirname(source), path))
                if path
                else source
            )
            if not os.path.exists(resolved):
                broken.append(f"{source}: {target}: no file {resolved}")
            elif fragment and resolved.endswith(".md") and fragment not in anchors(resolved):
                broken.append(f"{source}: {target}: no heading #{fragment} in {resolved}")
    for line in broken:
        print(line, file=sys.stderr)
    if broken:
        print(f"check-links: {len(broken)} broken link(s)", file=sys.stderr)
        return 1
    print(f"check-links: every link of {len(files)} files resolves")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
