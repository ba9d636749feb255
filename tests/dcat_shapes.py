"""Validate a DCAT catalogue against the DCAT-AP 2.1.1 shapes of ``tests/shapes/`` with pySHACL (RDFS inference
over the vocabularies' subclass axioms)."""

from __future__ import annotations

from pathlib import Path

SHAPES = Path(__file__).parent / "shapes"


def shacl_results(catalog: Path, base: str = "https://portal.example/releases/catalog.jsonld") -> dict[str, list[str]]:
    """``{"Violation": [...], "Warning": [...]}``: one line per result (focus node, path, message)."""
    import rdflib
    from pyshacl import validate
    from rdflib.namespace import SH

    data = rdflib.Graph().parse(str(catalog), format="json-ld", publicID=base)
    shapes = rdflib.Graph().parse(str(SHAPES / "dcat-ap-2.1.1.ttl"), format="turtle")
    vocab = rdflib.Graph().parse(str(SHAPES / "vocabularies.ttl"), format="turtle")
    _, report, _ = validate(data, shacl_graph=shapes, ont_graph=vocab, inference="rdfs", advanced=True)
    out: dict[str, list[str]] = {"Violation": [], "Warning": []}
    for result in report.subjects(rdflib.RDF.type, SH.ValidationResult):
        severity = str(report.value(result, SH.resultSeverity)).rsplit("#", 1)[1]
        out.setdefault(severity, []).append(f"{report.value(result, SH.focusNode)} "
                                            f"{report.value(result, SH.resultPath)}: "
                                            f"{report.value(result, SH.resultMessage)}")
    return out
