"""Where things live: the project root, the database, local clones of sources."""

from __future__ import annotations

import os
import re
import tomllib
from dataclasses import dataclass, field
from pathlib import Path


@dataclass
class Config:
    """Paths and per-source settings for one kb project."""

    root: Path
    db_path: Path
    clones: dict[str, str] = field(default_factory=dict)
    clone_cache: Path | None = None

    @property
    def evidence_dir(self) -> Path:
        """Where evidence records are written and read."""
        return self.root / "evidence"

    @property
    def verifiers_dir(self) -> Path | None:
        """The verifier package handed to the registry.

        $KB_VERIFIERS, else the project's own `verifiers/`, else the default set
        that ships beside the kb package in a source checkout; None if none exists.
        """
        env = os.environ.get("KB_VERIFIERS")
        if env:
            return Path(env).resolve()
        for cand in (self.root / "verifiers", Path(__file__).resolve().parents[1] / "verifiers"):
            if (cand / "__init__.py").is_file():
                return cand
        return None

    @property
    def site_url(self) -> str | None:
        """Where the exported site is published (ends in '/'), for links from STATUS.md; None if not configured.

        $KB_SITE_URL, else `site_url` under `[tool.kb]` in the project's pyproject.toml (committed, so every
        checkout renders the same STATUS.md). Only an https:// URL is accepted (ConfigError otherwise).
        """
        url, where = os.environ.get("KB_SITE_URL"), "KB_SITE_URL"
        if url is None:
            py = self.root / "pyproject.toml"
            try:
                text = py.read_text(encoding="utf-8") if py.is_file() else ""
                url = tomllib.loads(text).get("tool", {}).get("kb", {}).get("site_url")
            except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
                raise ConfigError(f"pyproject.toml:1: cannot be read for [tool.kb] site_url ({exc})") from None
            where = f"pyproject.toml:{_line(text, _SITE_URL_KEY)}: [tool.kb] site_url"
        if url in (None, ""):
            return None
        if not isinstance(url, str) or not re.fullmatch(r"https://[^\s\"'<>`\\]+", url):
            raise ConfigError(f"{where}: must be an https:// URL, got {url!r}")
        return url if url.endswith("/") else url + "/"


CORPUS_PARTS = ("claims", "sources")
# What `kb init` copies, and what a built wheel carries under kb/_corpus (setup.py): the corpus and what
# reading, checking and publishing it needs. tests/ and bench/ are the project's, not the corpus's.
CORPUS_TREE = ("claims", "sources", "evidence", "verifiers", "site", "docs")
CORPUS_FILES = ("STATUS.md", "STATUS.json", "PROVENANCE.md", "README.md", "LICENSE", "LICENSE-CORPUS.md")


def _is_corpus(path: Path) -> bool:
    return all((path / part).is_dir() for part in CORPUS_PARTS)


def packaged_corpus() -> Path | None:
    """The corpus that came with this kb: kb/_corpus in a wheel, else the source checkout kb runs from."""
    here = Path(__file__).resolve().parent
    for cand in (here / "_corpus", here.parent):
        if _is_corpus(cand):
            return cand
    return None


class ConfigError(ValueError):
    """kb.local.toml cannot be used; the message names the file, line and field."""


class NoCorpus(ConfigError):
    """No project root: not inside a corpus, and no --root / KB_ROOT; the message says what to do."""


NO_CORPUS = ("no kb corpus here: {where} has no claims/ and sources/ folder (nor has any folder above it). "
             "Run kb inside a corpus, point --root or KB_ROOT at one, or make one with `kb init DIR` "
             "(copies the corpus that comes with kb), then `cd DIR`")


def find_root(start: Path | None = None) -> Path:
    """The project root: $KB_ROOT, else the nearest folder above `start` (the current folder) with claims/ and sources/.

    Raises NoCorpus with guidance when there is none: kb never falls back to its own install folder, so
    no command writes an index or an export into site-packages.
    """
    env = os.environ.get("KB_ROOT")
    if env:
        return Path(env).resolve()
    here = (start or Path.cwd()).resolve()
    for cand in (here, *here.parents):
        if _is_corpus(cand):
            return cand
    raise NoCorpus(NO_CORPUS.format(where=here))


_SITE_URL_KEY = r"^[ \t]*site_url[ \t]*="


class ConfigError(ValueError):
    """kb.local.toml cannot be used; the message names the file, line and field."""


def _line(text: str, pattern: str) -> int:
    m = re.search(pattern, text, flags=re.MULTILINE)
    return text.count("\n", 0, m.start()) + 1 if m else 1


def _read_local(path: Path) -> dict:
    if path.is_symlink() or not path.is_file():
        raise ConfigError(f"{path.name}:1: is not a regular file")
    if path.stat().st_size > 1 << 20:
        raise ConfigError(f"{path.name}:1: is larger than 1 MiB; not a kb configuration")
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError as exc:
        raise ConfigError(f"{path.name}:1: is not UTF-8 text ({exc.reason})") from None
    except OSError as exc:
        raise ConfigError(f"{path.name}:1: cannot be read ({exc.strerror})") from None
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        line = getattr(exc, "lineno", None) or (int(m[1]) if (m := re.search(r"line (\d+)", str(exc))) else 1)
        raise ConfigError(f"{path.name}:{line}: not valid TOML ({str(exc).split(' (at')[0]})") from None
    except RecursionError:
        raise ConfigError(f"{path.name}:1: nests too deeply to read") from None
    clones = data.get("clones", {})
    if not isinstance(clones, dict):
        line = _line(text, r"^\s*(clones\b|\[clones)")
        raise ConfigError(f"{path.name}:{line}: [clones] must be a table of source id = path")
    for key, value in clones.items():
        if not isinstance(value, str) or not value:
            line = _line(text, r"^\s*[\"']?" + re.escape(str(key)) + r"[\"']?\s*=")
            raise ConfigError(f"{path.name}:{line}: [clones] {key}: the clone must be a path (a non-empty string)")
    if "clone_cache" in data and not isinstance(data["clone_cache"], str):
        line = _line(text, r"^\s*clone_cache\s*=")
        raise ConfigError(f"{path.name}:{line}: clone_cache must be a path (a string)")
    return data


def load_config(root: Path | None = None, db: str | None = None) -> Config:
    """Read `kb.local.toml` (ignored by git) and the environment.

    `[clones]` maps a source id to a local clone or bare git directory; the
    environment variable KB_CLONE_<ID> (upper case, '-' as '_') overrides it.
    """
    root = root or find_root()
    db_path = Path(db or os.environ.get("KB_DB") or root / ".kb" / "kb.db")
    clones: dict[str, str] = {}
    cache = None
    local = root / "kb.local.toml"
    if local.exists():
        data = _read_local(local)
        clones.update({k: str(v) for k, v in data.get("clones", {}).items()})
        if "clone_cache" in data:
            cache = Path(data["clone_cache"])
    for key, val in os.environ.items():
        if key.startswith("KB_CLONE_"):
            clones[key[len("KB_CLONE_"):].lower().replace("_", "-")] = val
    cache = Path(os.environ.get("KB_CLONE_CACHE", cache or root / ".kb" / "clones"))
    return Config(root=root, db_path=db_path, clones=clones, clone_cache=cache)


GITIGNORE = ".kb/\nkb.local.toml\n_site/\n__pycache__/\n"


def copy_corpus(source: Path, dest: Path) -> list[str]:
    """Copy a corpus (CORPUS_TREE folders and CORPUS_FILES) from `source` into the folder `dest`; the names copied.

    Caches and in-flight journals stay behind: what is copied is the committed corpus, which the copy then
    re-derives into its own `.kb/` index on first use.
    """
    import shutil

    done = []
    skip = shutil.ignore_patterns("__pycache__", "*.pyc", ".inflight-*")
    for name in CORPUS_TREE:
        if (source / name).is_dir():
            shutil.copytree(source / name, dest / name, ignore=skip)
            done.append(f"{name}/")
    for name in CORPUS_FILES:
        if (source / name).is_file():
            shutil.copy2(source / name, dest / name)
            done.append(name)
    (dest / ".gitignore").write_text(GITIGNORE)
    return done
