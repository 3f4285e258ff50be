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
