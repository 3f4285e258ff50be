"""The documentation holds together: links resolve, every variable is documented, the
README stays one screen's worth, and every C function is in the C API page.

Fast and process-free: it reads files only.
"""

import os
import re

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
README_LIMIT = 10_500  # bytes

# Where the product reads its settings (tests/ and *_test.go are the tests' own).
SOURCE_DIRS = ("core", "cuda", "capi", "transport", "internal", "csrc", os.path.join("python", "gonccl"))
SOURCE_FILES = ("setup.py",)
SOURCE_EXTS = (".go", ".c", ".h", ".cpp", ".hpp", ".py")
# A GONCCL_* name in quotes that is not an environment variable.
NOT_VARIABLES = {"GONCCL_WITH_CUDA"}  # a preprocessor macro setup.py defines
# Files that name variables to document them (the env page's generator), not to read them.
NOT_READERS = {os.path.join("core", "params_doc.go")}


def markdown_files():
    files = [os.path.join(ROOT, name) for name in ("README.md", "CONTRIBUTING.md", "CHANGELOG.md")]
    for dirpath, _, names in os.walk(os.path.join(ROOT, "docs")):
        files += [os.path.join(dirpath, n) for n in sorted(names) if n.endswith(".md")]
    return files


def without_code(text):
    """text with fenced code blocks and inline code blanked out (links there are not links)."""
    text = re.sub(r"^```.*?^```", "", text, flags=re.M | re.S)
    return re.sub(r"`[^`\n]*`", "``", text)


def slug(heading):
    """The anchor GitHub gives a heading."""
    s = heading.strip().lower().replace("`", "")
    s = re.sub(r"[^\w\- ]", "", s)
    return s.replace(" ", "-")


def anchors(path):
    text = re.sub(r"^```.*?^```", "", open(path).read(), flags=re.M | re.S)
    seen, out = {}, set()
    for m in re.finditer(r"^#{1,6} (.+)$", text, re.M):
        base = slug(m.group(1))
        n = seen.get(base, 0)
        seen[base] = n + 1
        out.add(base if n == 0 else f"{base}-{n}")
    return out


def links(path):
    for m in re.finditer(r"!?\[[^\]]*\]\(([^)\s]+)\)", without_code(open(path).read())):
        target = m.group(1)
        if not re.match(r"^[a-z]+:", target):
            yield target


@pytest.mark.parametrize("path", markdown_files(), ids=lambda p: os.path.relpath(p, ROOT))
def test_relative_links_resolve(path):
    broken = []
    for target in links(path):
        file_part, _, anchor = target.partition("#")
        dest = os.path.normpath(os.path.join(os.path.dirname(path), file_part)) if file_part else path
        if not os.path.exists(dest):
            broken.append(f"{target}: no such file or directory")
        elif anchor and dest.endswith(".md") and anchor not in anchors(dest):
            broken.append(f"{target}: no heading with anchor #{anchor} in {os.path.relpath(dest, ROOT)}")
    assert not broken, f"{os.path.relpath(path, ROOT)} has broken links:\n" + "\n".join(broken)


def test_link_checker_catches_breakage(tmp_path):
    """The checker itself fails on a missing file and a missing anchor."""
    (tmp_path / "a.md").write_text("# Top\n\n## Some `code` heading: yes\n\n[ok](#some-code-heading-yes) "
                                   "[bad](#nowhere) [gone](b.md) `[code](c.md)`\n")
    page = str(tmp_path / "a.md")
    assert {"top", "some-code-heading-yes"} == anchors(page)
    assert list(links(page)) == ["#some-code-heading-yes", "#nowhere", "b.md"]


def variables_read():
    """Every GONCCL_* variable name the product's sources hold in quotes: what they read."""
    names = {}
    paths = [os.path.join(ROOT, f) for f in SOURCE_FILES]
    for d in SOURCE_DIRS:
        for dirpath, _, files in os.walk(os.path.join(ROOT, d)):
            paths += [os.path.join(dirpath, f) for f in files
                      if f.endswith(SOURCE_EXTS) and not f.endswith("_test.go") and not f.startswith("_build_info")]
    for path in paths:
        if os.path.relpath(path, ROOT) in NOT_READERS:
            continue
        for m in re.finditer(r"[\"'](GONCCL_[A-Z0-9_]+)[\"'=]", open(path, errors="replace").read()):
            names.setdefault(m.group(1), os.path.relpath(path, ROOT))
    for name in NOT_VARIABLES:
        names.pop(name, None)
    return names


def test_every_variable_is_documented():
    names = variables_read()
    assert "GONCCL_DEBUG" in names and "GONCCL_LIBRARY" in names, names  # the scan finds Go and Python
    doc = open(os.path.join(ROOT, "docs", "environment.md")).read()
    documented = set(re.findall(r"^\| `(GONCCL_[A-Z0-9_]+)` \|", doc, re.M))
    missing = {n: where for n, where in names.items() if n not in documented}
    assert not missing, (
        f"variables the code reads but docs/environment.md's tables lack (declare them in "
        f"core/params.go, then go test ./core -run TestEnvironmentDoc -update): {missing}")


def test_readme_is_one_screen():
    size = os.path.getsize(os.path.join(ROOT, "README.md"))
    assert size <= README_LIMIT, f"README.md is {size} bytes, over {README_LIMIT}: move detail into docs/"


def test_c_api_page_lists_every_exported_function():
    exported = set()
    for name in os.listdir(os.path.join(ROOT, "capi")):
        if name.endswith(".go") and not name.endswith("_test.go"):
            exported |= set(re.findall(r"^//export (\w+)", open(os.path.join(ROOT, "capi", name)).read(), re.M))
    assert len(exported) > 40, exported
    page = open(os.path.join(ROOT, "docs", "c-api.md")).read()
    missing = sorted(f for f in exported if not re.search(rf"`{f}\b", page))
    assert not missing, f"docs/c-api.md does not document: {missing}"


def test_user_docs_speak_of_the_product():
    """No tracker issue numbers in the user's pages."""
    offenders = []
    for path in markdown_files():
        rel = os.path.relpath(path, ROOT)
        if rel.startswith(os.path.join("docs", "development")) or rel in ("CONTRIBUTING.md", "CHANGELOG.md"):
            continue
        for n, line in enumerate(open(path), 1):
            if re.search(r"\bissue \d+|\.ci/run|device tool", line, re.I):
                offenders.append(f"{rel}:{n}: {line.strip()[:100]}")
    assert not offenders, "\n".join(offenders)


# Pages a user reads: the README and docs/ outside docs/development, and the bench's page.
def user_pages():
    out = []
    for path in markdown_files():
        rel = os.path.relpath(path, ROOT)
        if rel.startswith(os.path.join("docs", "development")) or rel in ("CONTRIBUTING.md", "CHANGELOG.md"):
            continue
        out.append(path)
    return out + [os.path.join(ROOT, "bench", "README.md")]


# Words of how the product was built, not of what it does: a course it came from, goals
# and whether they were met, what came "after that run", build times.
BUILD_WORDS = re.compile(
    r"\blecture\b|\|\s*(wanted|met|goal)\s*\||\bwe aimed\b|\bafter that run\b|\bbuild at \d|"
    r"\bhas met only\b|\bhave met only\b|\bwhen the tool was written\b", re.I)


def test_user_docs_have_no_words_of_the_build():
    """User pages, the bench's --help and pyproject speak of the product: what it does,
    how fast, dated, on what machine, at which version."""
    texts = [(os.path.relpath(p, ROOT), open(p).read()) for p in user_pages()]
    for rel in ("pyproject.toml",) + tuple(
            os.path.join("python", "gonccl", "bench", f) for f in sorted(os.listdir(os.path.join(ROOT, "python", "gonccl", "bench")))
            if f.endswith(".py")):
        texts.append((rel, open(os.path.join(ROOT, rel)).read()))
    offenders = [f"{rel}:{n}: {line.strip()[:100]}" for rel, text in texts
                 for n, line in enumerate(text.splitlines(), 1) if BUILD_WORDS.search(line)]
    assert not offenders, "\n".join(offenders)


def test_build_word_check_catches_them():
    for bad in ("the lecture's model", "| target | wanted | measured | met |", "the 1.5x we aimed for",
                "came after that run", "TCP build at 02:08"):
        assert BUILD_WORDS.search(bad), bad
    for good in ("measured on 2026-11-28 at 92d7fdc", "| measure | gonccl / Gloo |", "a lecturer"):
        assert not BUILD_WORDS.search(good), good


def torch_range():
    """(lowest, highest) supported torch minor release, from pyproject's dependency."""
    text = open(os.path.join(ROOT, "pyproject.toml")).read()
    m = re.search(r'"torch>=2\.(\d+),<2\.(\d+)"', text)
    assert m, "pyproject.toml's dependencies must bound torch on both sides: torch>=2.A,<2.B"
    return int(m.group(1)), int(m.group(2)) - 1


def test_supported_torch_agrees_everywhere():
    """pyproject's bounds, the releases csrc is compiled against, and every page that
    states the supported range say the same."""
    lo, hi = torch_range()
    compat = open(os.path.join(ROOT, "scripts", "csrc_compat.py")).read()
    supported = re.search(r"^SUPPORTED = \[(.*)\]", compat, re.M).group(1)
    assert re.findall(r'"2\.(\d+)\.0"', supported) == [str(v) for v in range(lo, hi + 1)], supported
    stated = {"README.md": r"torch 2\.(\d+) to 2\.(\d+)", os.path.join("docs", "install.md"): r"torch 2\.(\d+) through 2\.(\d+)"}
    for rel, pattern in stated.items():
        found = re.findall(pattern, open(os.path.join(ROOT, rel)).read())
        assert found and all((int(a), int(b)) == (lo, hi) for a, b in found), (rel, found, (lo, hi))


def version_samples():
    """Every `python -m gonccl --version` sample output in the README and docs/."""
    out = []
    for path in markdown_files():
        for m in re.finditer(r"^```\n(gonccl \d.*?)^```", open(path).read(), re.M | re.S):
            out.append((os.path.relpath(path, ROOT), m.group(1).splitlines()))
    return out


def test_version_samples_match_a_real_run(capsys):
    """The samples read as `python -m gonccl --version` prints here (in this process),
    the library's path aside, for the torch the development environment pins."""
    samples = version_samples()
    assert len(samples) >= 2, samples  # README and docs/install.md
    gonccl_main = pytest.importorskip("gonccl.__main__")
    import torch

    gonccl_main.main([])
    real = capsys.readouterr().out.splitlines()
    pinned = re.search(r'TORCH_VERSION="\$\{GONCCL_TORCH_VERSION:-([\d.]+)\}"',
                       open(os.path.join(ROOT, "scripts", "python-env.sh")).read()).group(1)
    for rel, lines in samples:
        assert len(lines) == len(real), (rel, lines, real)
        for want, got in zip(lines, real):
            if want.startswith("library: "):
                assert got.startswith("library: ") and got.endswith(want.rsplit("/", 1)[1]), (rel, want, got)
            elif want.startswith("torch ") and torch.__version__.split("+")[0] != pinned:
                continue  # another torch than the pinned one: its version cannot match
            elif want.startswith("CUDA support: ") and not torch.version.cuda:
                continue  # a CPU build of torch: the sample shows the CUDA one
            else:
                assert want == got, (rel, want, got)


# Statements the code contradicts: (what the code does, where it says so, a phrase no
# user page may hold while it does).
CONTRADICTIONS = [
    ("windows take CUDA tensors", (os.path.join("csrc", "window.cpp"), r"is_cuda\(\)"),
     r"CUDA tensors are refused with a `?ValueError"),
    ("a timeout's message contains ' Timed out ' (torch's tests look for it)", (os.path.join("core", "errors.go"), r'"Timed out after'),
     r"timeout error starts `Timed out`"),
    ("GONCCL_DEBUG takes WARN, INFO or TRACE, nothing else", (os.path.join("internal", "config", "log.go"), r'Levels = \[\]string\{"WARN", "INFO", "TRACE"\}'),
     r"GONCCL_DEBUG=VERSION|`VERSION`"),
]


@pytest.mark.parametrize("fact,code,phrase", CONTRADICTIONS, ids=[c[0] for c in CONTRADICTIONS])
def test_docs_do_not_contradict_the_code(fact, code, phrase):
    path, pattern = code
    assert re.search(pattern, open(os.path.join(ROOT, path)).read()), f"{path} no longer says: {fact}"
    offenders = [f"{os.path.relpath(p, ROOT)}:{n}: {line.strip()[:120]}" for p in user_pages()
                 for n, line in enumerate(open(p), 1) if re.search(phrase, line)]
    assert not offenders, f"pages contradict the code ({fact}):\n" + "\n".join(offenders)


def test_device_paths_are_all_named():
    """Where the docs list the paths CUDA tensors take, they name all three."""
    text = open(os.path.join(ROOT, "docs", "pytorch.md")).read()
    intro = text[: text.index("Supported, on CPU and CUDA tensors")]
    for path in ("device path", "same-GPU path", "staged"):
        assert path in intro, f"docs/pytorch.md's opening does not name the {path}"


def test_no_sentence_left_unfinished():
    """A paragraph ends with a full stop, a colon or a closing mark, not mid-sentence."""
    offenders = []
    for path in user_pages():
        text = re.sub(r"^```.*?^```", "\u00a7", open(path).read(), flags=re.M | re.S)  # a code block: §
        paras = [p.strip() for p in re.split(r"\n\s*\n", text)]
        for para, after in zip(paras, paras[1:] + [""]):
            if not para or para[0] in "#|-*!<>0123456789[`\u00a7" or after == "\u00a7":
                continue  # a heading, table, list, code, or a sentence that a code block continues
            if not re.search(r"[.:!?)`*\]]$", para):
                offenders.append(f"{os.path.relpath(path, ROOT)}: ...{para[-80:]!r}")
    assert not offenders, "\n".join(offenders)


def test_install_says_how_long_the_build_takes_and_how_to_watch_it():
    """pip shows nothing of a build that takes minutes: the README and the install page
    say how long, and that -v shows its steps (which setup.py prints)."""
    for page in ("README.md", os.path.join("docs", "install.md")):
        text = open(os.path.join(ROOT, page)).read()
        assert re.search(r"\d+(\.\d+)? minutes on a 2-core machine on \d{4}-\d\d-\d\d", text), page
        assert "pip install -v" in text.replace("\n", " "), page
    setup = open(os.path.join(ROOT, "setup.py")).read()
    assert "step 1 of 2" in setup and "step 2 of 2" in setup
