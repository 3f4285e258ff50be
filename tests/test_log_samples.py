"""Every sample log line in the docs has the form of gonccl's real lines: a 2-rank run
at GONCCL_DEBUG=TRACE gives the real ones (each checked against the one line format
docs/troubleshooting.md describes), and each sample in a code block of README.md or
docs/ must have that format too; a sample whose message starts as a real line's does
(the init summary, an operation's TRACE line) must also read as that line does, up to
numbers, names and addresses.
"""

from __future__ import annotations

import os
import re

import pytest

from _harness import run_ranks, worker_argv

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

LEVELS = "WARN|INFO|TRACE|ERROR"
SUBSYSTEMS = "INIT|COLL|NET|SHM|ENV|TUNING"
LINE = re.compile(rf"^\d{{4}}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{{6}}Z \S+:\d+:\d+(?: \[\d+\])? GONCCL ({LEVELS}) "
                  rf"({SUBSYSTEMS}) (\S.*)$")
# What marks a line of a code block as a sample log line: gonccl's name next to a level.
SAMPLE = re.compile(rf"GONCCL[ .](?:{LEVELS}|DEBUG|{SUBSYSTEMS})\b|^(?:{LEVELS}|DEBUG) \.\.\. GONCCL")


def doc_samples() -> list[tuple[str, int, str]]:
    """(file, line number, line) of each sample log line in a code block of the user docs."""
    files = [os.path.join(ROOT, "README.md")]
    for dirpath, _, names in os.walk(os.path.join(ROOT, "docs")):
        files += [os.path.join(dirpath, n) for n in sorted(names) if n.endswith(".md")]
    out = []
    for path in files:
        in_code = False
        for i, line in enumerate(open(path).read().splitlines(), 1):
            if line.startswith("```"):
                in_code = not in_code
            elif in_code and SAMPLE.search(line):
                out.append((os.path.relpath(path, ROOT), i, line))
    return out


def key(msg: str) -> str:
    """A message's first three words, digits blurred: what pairs a sample with a real line."""
    return re.sub(r"\d+", "#", " ".join(msg.split()[:3]))


def template(msg: str) -> re.Pattern:
    """A real message as a pattern: words with digits, addresses and names in parentheses
    or after host/interface may differ; the rest must read the same."""
    parts = []
    words = msg.split(" ")
    for i, w in enumerate(words):
        prev = words[i - 1] if i else ""
        if re.search(r"\d", w) or prev in ("host", "interface"):
            parts.append(r"\S+")
        else:
            parts.append(re.escape(w))
    return re.compile(" ".join(parts))


@pytest.fixture(scope="module")
def real_lines(tmp_path_factory):
    run = run_ranks(lambda r: worker_argv("first_error_worker.py", "debug_file"), 2, timeout=90,
                    env={"GONCCL_DEBUG": "TRACE"}, cwd=str(tmp_path_factory.mktemp("logs")))
    assert not run.timed_out and all(p.returncode == 0 for p in run.procs), run.describe()
    lines = [ln for p in run.procs for ln in p.stderr.splitlines() if " GONCCL " in ln]
    assert lines, run.describe()
    return lines


def test_real_lines_have_the_documented_format(real_lines):
    for line in real_lines:
        assert LINE.match(line), line
    trace = [ln for ln in real_lines if " GONCCL TRACE COLL all_reduce #" in ln]
    assert trace, "GONCCL_DEBUG=TRACE's per-operation lines say TRACE:\n" + "\n".join(real_lines[:20])
    for line in trace:
        took = re.search(r'"took": "([\d.]+)(ns|µs|ms|s)"', line)
        assert took, f"a duration says its unit: {line}"


def test_doc_samples_match_a_real_run(real_lines):
    samples = doc_samples()
    assert samples, "no sample log lines found in the docs"
    real = {}
    for line in real_lines:
        m = LINE.match(line)
        if m:  # test_real_lines_have_the_documented_format reports the others
            real.setdefault((m.group(1), m.group(2), key(m.group(3))), m.group(3))
    bad = []
    for path, n, line in samples:
        m = LINE.match(line)
        if not m:
            bad.append(f"{path}:{n}: not gonccl's line format: {line}")
            continue
        twin = real.get((m.group(1), m.group(2), key(m.group(3))))
        if twin is not None and not template(twin).fullmatch(m.group(3)):
            bad.append(f"{path}:{n}: reads otherwise than a real run's line:\n  doc:  {m.group(3)}\n  real: {twin}")
    assert not bad, "\n".join(bad)
    assert any(" GONCCL TRACE " in line for _, _, line in samples), "the docs show a TRACE line"
