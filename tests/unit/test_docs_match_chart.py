"""The docs say what the chart ships: its alerts, its CRDs, and the CRDs' short names.

The alerts come from `helm/vigil/files/alerts.yaml` (the rule file the
PrometheusRule is rendered from) and the CRDs from `helm/vigil/files/crds/`.
The README's Alerts row, the chart README's alert list and count, and
docs/alerts.md's count must match exactly those alerts; the
chart README's opening must name exactly those CRD kinds. No short name may be
one another well-known project registers for its own CRDs (Argo Workflows'
`wf`, Tekton's, Flux's, Kueue's), and the docs use none of the retired ones.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[2]
CHART = ROOT / "helm" / "vigil"
NUMBERS = {8: "eight", 9: "nine", 10: "ten", 11: "eleven", 12: "twelve", 13: "thirteen", 14: "fourteen"}
#: Short names other widely installed operators register (Argo Workflows and Events, Tekton, Flux,
#: Kueue, cert-manager, Knative): `kubectl get NAME` must not be ambiguous next to them.
TAKEN_SHORT_NAMES = {
    "wf", "cwf", "wftmpl", "cwft", "wfeb", "wfts", "wftr", "wfat", "eb", "es", "sensor",  # Argo
    "pr", "prs", "tr", "trs", "task", "pipeline", "ct",  # Tekton
    "ks", "hr", "gitrepo", "helmrepo", "hc", "ocirepo", "bucket",  # Flux
    "lq", "cq", "wl", "rf", "wpc",  # Kueue
    "cert", "certs", "cr", "crs", "ksvc", "kcfg", "rt", "route",  # cert-manager, Knative
}
RETIRED_SHORT_NAMES = ("wf", "wfd")


def shipped_alerts() -> list[str]:
    rules = yaml.safe_load((CHART / "files" / "alerts.yaml").read_text())
    return [rule["alert"] for group in rules["groups"] for rule in group["rules"] if "alert" in rule]


def shipped_crds() -> list[dict[str, Any]]:
    return [yaml.safe_load(path.read_text()) for path in sorted((CHART / "files" / "crds").glob("*.yaml"))]


def names_in(text: str) -> set[str]:
    return set(re.findall(r"\b[A-Z][A-Za-z]+\b", text))


def test_the_readme_alerts_row_lists_every_shipped_alert() -> None:
    row = next(line for line in (ROOT / "README.md").read_text().splitlines() if line.startswith("| **Alerts**"))
    listed = re.search(r"a PrometheusRule \(([^)]*)\)", row)
    assert listed is not None, row
    assert sorted(names_in(listed.group(1))) == sorted(shipped_alerts())


def test_the_chart_readme_lists_and_counts_every_shipped_alert() -> None:
    text = (CHART / "README.md").read_text()
    listed = re.search(r"The alerts — (.*?) — are written once", text, re.S)
    assert listed is not None
    assert sorted(names_in(listed.group(1))) == sorted(shipped_alerts())
    counts = re.findall(r"Vigil's (\w+) alerts", text)
    assert counts == [NUMBERS[len(shipped_alerts())]]


def test_the_alerts_page_counts_every_shipped_alert() -> None:
    """(Its runbook sections, one per alert, are test_alerts.py's.)"""
    text = (ROOT / "docs" / "alerts.md").read_text()
    assert f"Vigil ships {NUMBERS[len(shipped_alerts())]} Prometheus alerts" in text


def test_the_chart_readme_names_every_shipped_crd() -> None:
    opening = (CHART / "README.md").read_text().split("\n\n")[1]
    listed = re.search(r"the `vigil\.dev` CRDs \(([^)]*)\)", opening)
    assert listed is not None, opening
    kinds = {crd["spec"]["names"]["kind"] for crd in shipped_crds()}
    assert names_in(listed.group(1)) == kinds


def test_no_short_name_is_another_projects() -> None:
    short = {name for crd in shipped_crds() for name in crd["spec"]["names"].get("shortNames", [])}
    assert short, "the CRDs declare short names"
    assert short.isdisjoint(TAKEN_SHORT_NAMES)


def test_the_docs_use_no_retired_short_name() -> None:
    texts = [ROOT / "README.md", CHART / "README.md", ROOT / "scripts" / "demo.sh", *(ROOT / "docs").glob("*.md"),
             *(ROOT / "manifests" / "examples").glob("*.yaml")]  # fmt: skip
    for path in texts:
        for retired in RETIRED_SHORT_NAMES:
            pattern = rf"kubectl (?:-n \S+ )?get (?:\S+,)?{retired}\b|\(`{retired}`\)"
            found = re.search(pattern, path.read_text())
            assert found is None, f"{path.relative_to(ROOT)} still uses `{retired}`: {found.group(0) if found else ''}"
