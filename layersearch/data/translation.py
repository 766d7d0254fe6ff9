"""German->English translation prompts from the message catalogues that django ships.

Source: every ``locale/de/LC_MESSAGES/*.mo`` file in the django wheel (``pip install
django``), read with the standard library's :mod:`gettext` (django itself is not imported).
A catalogue maps an English message to its German translation; pairs are kept when the
English side is a plain phrase of at least :data:`MIN_WORDS` words (no ``%(name)s`` or
``{}`` placeholders, markup or line breaks), about 140 in django 5.2. The set
depends on the installed django version, and is fixed for one version.

Format, 5-shot as for WMT16 De-En::

    Translate German to English.

    German: ...
    English: ...        (5 examples)

    German: <query>
    English:
"""

from __future__ import annotations

import gettext
from functools import lru_cache
from pathlib import Path

from layersearch.data._common import Prompt, package_dir, pick, rng_for

DOMAIN = "translation"
SHOTS = 5
LANGUAGE = "de"
MIN_WORDS = 4
INSTRUCTION = "Translate German to English."


def catalogue_files(django_dir: Path, language: str = LANGUAGE) -> list[Path]:
    """The .mo catalogues of ``language`` in django and its contrib apps, in a fixed order."""
    folder = f"locale/{language}/LC_MESSAGES/*.mo"  # two shallow globs: "**" walks all of django
    return sorted([*django_dir.glob(f"conf/{folder}"), *django_dir.glob(f"contrib/*/{folder}")])


def _plain(english: str) -> bool:
    """Whether a message is an ordinary phrase (no placeholders, markup or line breaks)."""
    return (
        len(english.split()) >= MIN_WORDS
        and not any(mark in english for mark in ("%", "{", "<", "\n", "\t"))
    )


@lru_cache(maxsize=4)
def read_pairs(files: tuple[str, ...]) -> tuple[tuple[str, str], ...]:
    """(German, English) pairs of plain messages from the given catalogues, sorted by English."""
    found: dict[str, str] = {}
    for file in files:
        with open(file, "rb") as handle:
            # gettext keeps the parsed messages in _catalog (stable since Python 2); it has
            # no public way to list them, and parsing .mo by hand would repeat its code.
            catalogue = gettext.GNUTranslations(handle)._catalog  # type: ignore[attr-defined]  # private: not in typeshed
        for key, german in catalogue.items():
            if isinstance(key, tuple):  # a plural form: (message, index)
                continue
            english = key.split("\x04")[-1]  # drop a message context ("ctxt\x04message")
            if german and german != english and _plain(english):
                found.setdefault(english, " ".join(german.split()))
    return tuple((found[english], english) for english in sorted(found))


def prompts(n: int, seed: int, split: str | None = None) -> tuple[Prompt, ...]:
    """``n`` 5-shot translation prompts; each ends with ``English:`` for the model to fill."""
    files = catalogue_files(package_dir("django", "django", DOMAIN))
    pairs = read_pairs(tuple(str(f) for f in files))
    chosen = pick(
        len(pairs), n, SHOTS, rng_for(DOMAIN, seed), f"{DOMAIN} has {len(pairs)} sentence pairs",
        item_id=lambda i: f"{DOMAIN}/{i}", split=split,
    )
    out = []
    for query, examples in chosen:
        blocks = [INSTRUCTION]
        blocks += [f"German: {pairs[i][0]}\nEnglish: {pairs[i][1]}" for i in examples]
        blocks.append(f"German: {pairs[query][0]}\nEnglish:")
        out.append(Prompt(DOMAIN, f"{DOMAIN}/{query}", "\n\n".join(blocks)))
    return tuple(out)
