"""The plan report: checks, facts, the memory estimate and suggestions; its exit code and its rendering.

Exit code (:data:`ares_cli.errors.EXIT_WONT_FIT` and the stage codes, mapped here once): a failed check
exits with its own code (the smallest when several failed: 2 usage before 3 input before 4 integrity);
with every check passed, 5 when the estimate does not fit, else 0.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ares_cli.errors import EXIT_OK, EXIT_WONT_FIT
from ares_cli.planning.memory import GIB
from ares_cli.planning.target import Estimate, Target
from ares_cli.stages.checklist import CheckResult

STATUS_STYLE = {"ok": "green", "warn": "yellow", "fail": "red", "skipped": "dim"}


@dataclass
class PlanReport:
    stage: str
    target: Target
    checks: list[CheckResult]
    facts: dict[str, Any] = field(default_factory=dict)  # batch arithmetic, data tables, backend
    estimate: Estimate | None = None
    suggestions: list = field(default_factory=list)  # Suggestion

    @property
    def exit_code(self) -> int:
        failed = [c.exit_code for c in self.checks if c.status == "fail"]
        if failed:
            return min(failed)
        if self.estimate is not None and not self.estimate.fits:
            return EXIT_WONT_FIT
        return EXIT_OK

    @property
    def verdict(self) -> str:
        code = self.exit_code
        if code == EXIT_OK:
            return "ready: every check passed and the estimate fits"
        if code == EXIT_WONT_FIT:
            return "will not fit: " + "; ".join(self.estimate.reasons)
        return f"will not start: {sum(c.status == 'fail' for c in self.checks)} check(s) failed"

    def failures(self) -> list[str]:
        """One line per failed check (``check: detail``, each problem on its own line), or the reasons the
        estimate does not fit; empty when the plan is ready."""
        lines = []
        for c in self.checks:
            if c.status == "fail":
                lines.append(f"plan {self.stage}: {c.name}: {c.detail}")
                lines += [f"plan {self.stage}: {c.name}: {p}" for p in c.problems]
        if not lines and self.exit_code == EXIT_WONT_FIT:
            lines = [f"plan {self.stage}: will not fit: {r}" for r in self.estimate.reasons]
        return lines

    def to_json(self) -> dict[str, Any]:
        return {
            "stage": self.stage, "exit_code": self.exit_code, "verdict": self.verdict,
            "target": {"gpus_per_node": self.target.gpus_per_node, "nodes": self.target.nodes,
                       "gpu_memory_bytes": self.target.gpu_memory, "gpu_memory_source": self.target.memory_source,
                       "throughput_tokens_per_s_per_gpu": self.target.throughput,
                       "throughput_source": self.target.throughput_source},
            "checks": [c.to_json() for c in self.checks], "facts": self.facts,
            "estimate": self.estimate.to_json() if self.estimate is not None else None,
            "suggestions": [s.to_json() for s in self.suggestions],
        }  # fmt: skip


def render(report: PlanReport, console) -> None:
    """Rich tables: checks, facts, the estimate's terms, suggestions, and the verdict (text from files and
    configs is escaped: a ``[...]`` in it is printed, never read as markup)."""
    from rich.markup import escape
    from rich.table import Table

    checks = Table(
        title=f"ares plan {report.stage}: checks ({report.target.describe()})", title_justify="left"
    )
    for col in ("check", "status", "detail"):
        checks.add_column(col, overflow="fold")
    for c in report.checks:
        detail = "\n".join([c.detail, *c.problems]) if c.problems else c.detail
        checks.add_row(escape(c.name), f"[{STATUS_STYLE[c.status]}]{c.status}[/]", escape(detail))
    console.print(checks)
    for name, value in report.facts.items():
        if isinstance(value, list) and value and isinstance(value[0], dict):
            table = Table(title=name, title_justify="left")
            for col in value[0]:
                table.add_column(col, justify="right" if isinstance(value[0][col], (int, float)) else "left")
            for row in value:
                table.add_row(*[escape(str(v)) for v in row.values()])
            console.print(table)
        elif isinstance(value, dict):
            console.print(f"[bold]{name}[/]: " + escape(", ".join(f"{k} {v}" for k, v in value.items())))
        else:
            console.print(f"[bold]{name}[/]: {escape(str(value))}")
    est = report.estimate
    if est is not None:
        _render_estimate(est, console)
    if report.suggestions:
        table = Table(title="suggestions (each with its new estimate)", title_justify="left")
        for col in ("change", "fits", "need GiB", "budget GiB"):
            table.add_column(col)
        for s in report.suggestions:
            j = s.to_json()
            table.add_row(
                j["change"], "yes" if j["fits"] else "no", f"{j['need_gib']:.1f}", f"{j['budget_gib']:.1f}"
            )
        console.print(table)
    style = "green" if report.exit_code == EXIT_OK else "red"
    console.print(f"[{style}]{escape(report.verdict)}[/] (exit {report.exit_code})")


def _render_estimate(est: Estimate, console) -> None:
    from rich.markup import escape
    from rich.table import Table

    table = Table(title=f"memory per GPU: {est.need / GIB:.2f} GiB of {est.budget / GIB:.2f} GiB ({est.budget_how})",
                  title_justify="left")  # fmt: skip
    for col in ("term", "GiB", "basis", "how"):
        table.add_column(col, overflow="fold")
    for t in est.terms:
        table.add_row(escape(t.name), f"{t.bytes / GIB:.2f}", t.basis, escape(t.how))
    console.print(table)
    if est.engine_terms:
        engine = Table(title=f"vLLM engine: {est.engine_budget / GIB:.2f} GiB share", title_justify="left")
        for col in ("term", "GiB", "basis", "how"):
            engine.add_column(col, overflow="fold")
        for t in est.engine_terms:
            engine.add_row(escape(t.name), f"{t.bytes / GIB:.2f}", t.basis, escape(t.how))
        console.print(engine)
    for note in est.notes:
        console.print(f"  {escape(note)}")
    if est.tokens_per_step is not None:
        time = f"; ~{est.seconds_per_step:.1f} s per step" if est.seconds_per_step is not None else \
            " (pass --throughput for a time per step)"  # fmt: skip
        console.print(f"  tokens per step: {est.tokens_per_step:,} ({escape(est.tokens_how)}){time}")
