#!/usr/bin/env python3
"""Rebuilds data/corpus.txt from Debian's bible-kjv-text package (see data/README.md).

    apt-get download bible-kjv-text bible-kjv && for f in *.deb; do dpkg-deb -x $f x; done
    x/usr/bin/bible -p x/usr/lib -f "gen1:1-rev22:21" > all.txt
    python3 data/make_corpus.py all.txt > data/corpus.txt
"""
import re
import sys
import textwrap

BOOKS = {"Ge": "Genesis", "Exo": "Exodus", "Lev": "Leviticus", "Num": "Numbers", "Deu": "Deuteronomy",
         "Josh": "Joshua", "Jdgs": "Judges", "Ruth": "Ruth"}


def main(path):
    chapters, current, verses = [], None, []

    def flush():
        if current and verses:
            chapters.append(f"{BOOKS[current[0]]}, chapter {current[1]}\n\n" + textwrap.fill(" ".join(verses), 78) + "\n\n")

    for line in open(path):
        m = re.match(r"([A-Za-z]+)(\d+):(\d+) (.*)", line.rstrip("\n"))
        if not m:
            continue
        book, chapter = m.group(1), m.group(2)
        if book not in BOOKS:
            break  # the first eight books are enough (about 1 MB)
        if (book, chapter) != current:
            flush()
            current, verses = (book, chapter), []
        verses.append(m.group(4).strip())
    flush()
    sys.stdout.write("".join(chapters))


if __name__ == "__main__":
    main(sys.argv[1])
