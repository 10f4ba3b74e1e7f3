"""Loading never crashes: arbitrary bytes and YAML-shaped noise give only clean diagnostics."""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tfdeclare.core.diagnostics import Diagnostic
from tfdeclare.core.spec.loader import load_file

GOOD = (
    b"apiVersion: tfdeclare/v1\nkind: TFJob\nmetadata:\n  name: good\nspec:\n"
    b"  command: [python, train.py]\n  replicas:\n    worker: {count: 2, resources: {cpus: 1, mem: 2Gi}}\n"
)
TOKENS = [
    b"a",
    b":",
    b" ",
    b"\n",
    b"  ",
    b"-",
    b"[",
    b"]",
    b"{",
    b"}",
    b",",
    b"&x",
    b"*x",
    b"!!str",
    b"!!python/object",
    b"!t",
    b"'",
    b'"',
    b"|",
    b">",
    b"#",
    b"---",
    b"...",
    b"?",
    b"%YAML 1.2",
    b"\t",
    b"\xff",
    b"\x00",
    b"\xc3\xa9",
    b"1e9",
    b".inf",
    b"0x1f",
    b"<<",
    b"@",
    b"`",
    b"\r\n",
    b"count",
    b"name",
    b"spec",
]


def _clean(diagnostics: tuple[Diagnostic, ...], source: str) -> None:
    for diagnostic in diagnostics:
        assert diagnostic.path == source
        assert diagnostic.line is None or diagnostic.line >= 1
        assert diagnostic.column is None or diagnostic.column >= 1
        assert diagnostic.message and "Traceback" not in diagnostic.message
        diagnostic.format()


@settings(max_examples=500, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.binary(max_size=512))
def test_arbitrary_bytes_never_crash(data: bytes) -> None:
    result = load_file("fuzz.yaml", data)
    _clean(result.diagnostics, "fuzz.yaml")
    assert not (result.jobs and result.has_errors and len(result.jobs) > len(result.named))


@settings(max_examples=500, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.sampled_from(TOKENS), max_size=80))
def test_yaml_shaped_noise_never_crashes(tokens: list[bytes]) -> None:
    result = load_file("noise.yaml", b"".join(tokens))
    _clean(result.diagnostics, "noise.yaml")


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.integers(0, len(GOOD)), st.binary(max_size=8))
def test_corrupting_a_valid_file_never_crashes(position: int, junk: bytes) -> None:
    data = GOOD[:position] + junk + GOOD[position:]
    result = load_file("job.yaml", data)
    _clean(result.diagnostics, "job.yaml")
    assert bool(result.jobs) or result.diagnostics
